# The sigma-GPT baseline (the target position added to the input of a plain nanoGPT) at the CPU
# default's size, data and orders: the other side of the paper's adaLN comparison.
# python data/shakespeare_char/prepare.py && python train.py config/train_sigma_gpt_shakespeare_char.py
import os

exec(open(os.path.join(os.path.dirname(__file__), 'train_shakespeare_char.py')).read())

out_dir = 'out-sigma-gpt-shakespeare-char'
target_injection = 'add'
# the quick start's rate, 3e-3, is also the one findings.py's sweep chose for sigma-GPT with learned positions
# (docs/findings-cpu/results.md; seed 1337, 2,000 iterations: at 1e-2 it never left the unigram entropy, any-order
# 3.33; at 3e-3 it ended at 2.47); its positions are the quick start's rotary ones
learning_rate = 3e-3
min_lr = 3e-4
