# The sigma-GPT baseline (the target position added to the input of a plain nanoGPT) at the CPU
# default's size, data and orders: the other side of the paper's adaLN comparison.
# python data/shakespeare_char/prepare.py && python train.py config/train_sigma_gpt_shakespeare_char.py
import os

exec(open(os.path.join(os.path.dirname(__file__), 'train_shakespeare_char.py')).read())

out_dir = 'out-sigma-gpt-shakespeare-char'
target_injection = 'add'
# the quick start's rate and rotary positions, the settings findings.py's sweep chose for sigma-GPT
# (docs/findings-cpu/results.md; seed 1337, 2,000 iterations: val 2.26 in its own objective, against
# 2.48 with the learned table; at 1e-2 with the learned table it never left the unigram entropy)
learning_rate = 3e-3
min_lr = 3e-4
