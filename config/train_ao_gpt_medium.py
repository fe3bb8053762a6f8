# AO-GPT medium (GPT-2 medium sized, ~350M parameters + adaLN) on OpenWebText: the authors' recipe.
# torchrun --standalone --nproc_per_node=8 train.py config/train_ao_gpt_medium.py
# GPUs with less memory: --batch_size=8 --gradient_accumulation_steps=128 is the same recipe.
import os

exec(open(os.path.join(os.path.dirname(__file__), 'train_ao_gpt_small.py')).read())

out_dir = 'out-ao-gpt-medium'
wandb_run_name = 'ao-gpt-medium'
n_layer = 24
n_head = 16
n_embd = 1024
learning_rate = 3e-4  # min_lr stays 6e-5, 1,048,576 tokens per iteration, 500k iterations
# their released medium checkpoint is the snapshot at 460k iterations
