# Ours, not the paper's: AO-GPT on little data, as finding scarce trained it (docs/training.md#little-data-a-prefix-
# the-best-checkpoint-input-masking). The quick start's network on the first 50,000 characters of tiny Shakespeare for
# 4,000 iterations (about 82 epochs), keeping the checkpoint of its best left-to-right reading on the first half of
# val.bin (best.pt). Your own prefix: --train_tokens (0: all of train.bin); your own length: --max_iters and
# --lr_decay_iters together.
# python data/shakespeare_char/prepare.py && python train.py config/train_shakespeare_char_scarce.py
import os

exec(open(os.path.join(os.path.dirname(__file__), 'train_shakespeare_char.py')).read())

out_dir = 'out-shakespeare-char-scarce'
train_tokens = 50_000
keep_best = 'l2r'  # read best.pt with: python eval_ppl.py --init_from=out-shakespeare-char-scarce/best.pt --half=report
max_iters = 4000
lr_decay_iters = 4000
# finding orders' FIM mix, and the regularizers finding scarce's sweep chose for it and for the GPT alike (dropout 0.1
# or 0.3, each alone, with weight decay 0.5, or with input masking 0.15; the lowest selection reading at its best)
order_mix = 'l2r:0.1,fim:0.4,random:0.5'
dropout = 0.1
weight_decay = 0.5
