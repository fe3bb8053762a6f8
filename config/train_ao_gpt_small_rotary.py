# AO-GPT small with rotary positions, queries at the target position (ours, not the authors': model.py's
# position_encoding). Everything else is the authors' small recipe; findings.py's gpu preset compares the two.
# torchrun --standalone --nproc_per_node=8 train.py config/train_ao_gpt_small_rotary.py
import os

exec(open(os.path.join(os.path.dirname(__file__), 'train_ao_gpt_small.py')).read())

out_dir = 'out-ao-gpt-small-rotary'
wandb_run_name = 'ao-gpt-small-rotary'
position_encoding = 'rotary'
