# AO-GPT medium (GPT-2 medium sized, ~350M parameters + adaLN) on OpenWebText.
# torchrun --standalone --nproc_per_node=8 train.py config/train_ao_gpt_medium.py
import os

exec(open(os.path.join(os.path.dirname(__file__), 'train_ao_gpt_small.py')).read())

out_dir = 'out-ao-gpt-medium'
wandb_run_name = 'ao-gpt-medium'
n_layer = 24
n_head = 16
n_embd = 1024
batch_size = 8
gradient_accumulation_steps = 64  # still 524,288 tokens per iteration
learning_rate = 3e-4
min_lr = 3e-5
