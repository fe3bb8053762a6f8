# AO-GPT from OpenAI's GPT-2 (small) on tiny Shakespeare in GPT-2 BPE, as nanoGPT's finetune_shakespeare.py starts
# from GPT-2: the converted model reads left to right as GPT-2 does (checkpoints.gpt2_checkpoint; sigma-GPT's
# recipe, the target-position embedding from zero) and trains at once on the FIM mix.
# Sized for one GPU (1,000 iterations of 8 x 512 tokens); not yet run with GPT-2's real weights (docs/training.md).
# python data/shakespeare/prepare.py && python train.py config/finetune_shakespeare.py
# (offline: --init_from=<a folder GPT-2 was saved to with transformers' save_pretrained>)

init_from = 'gpt2'
out_dir = 'out-shakespeare-gpt2'
eval_interval = 100
eval_iters = 20
eval_gaps = 'span:4,span:16'
log_interval = 10

dataset = 'shakespeare'
gradient_accumulation_steps = 1
batch_size = 8
block_size = 512  # at most GPT-2's 1,024 positions less the start slot
dropout = 0.1  # GPT-2's; the 300k tokens of the play are read 14 times

# the FIM mix from the first iteration: in the finding adapt (docs/training.md) it kept the any-order loss and the
# gaps closer to a model trained on it from scratch than stages from the FIM GPT did, on both corpora
order = 'mixed'
order_mix = 'l2r:0.1,fim:0.4,random:0.5'

learning_rate = 1e-4
min_lr = 1e-5
warmup_iters = 100
max_iters = 1000
lr_decay_iters = 1000
weight_decay = 0.1
ema_decay = 0.99
