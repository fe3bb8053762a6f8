# The autoregressive baseline: the same model and recipe as AO-GPT small, trained left-to-right only.
# torchrun --standalone --nproc_per_node=8 train.py config/train_gpt_small.py
import os

exec(open(os.path.join(os.path.dirname(__file__), 'train_ao_gpt_small.py')).read())

out_dir = 'out-gpt-small'
wandb_run_name = 'gpt-small'
order = 'l2r'
