# AO-GPT small without left-to-right mixing: every sequence in a uniformly random order, the plain
# any-order (masked diffusion) objective (the authors' "NoCL" run).
# torchrun --standalone --nproc_per_node=8 train.py config/train_ao_gpt_small_nocl.py
import os

exec(open(os.path.join(os.path.dirname(__file__), 'train_ao_gpt_small.py')).read())

out_dir = 'out-ao-gpt-small-nocl'
wandb_run_name = 'ao-gpt-small-nocl'
random_ratio = 1.0
weight_decay = 0.03  # their NoCL config file says 0.03
