# The encoder-only masked diffusion model at AO-GPT small's size, with its data, tokens and schedule,
# so the two architectures compare at equal parameters (less the target-position embedding) and tokens.
# torchrun --standalone --nproc_per_node=8 train.py config/train_mdm_small.py
import os

exec(open(os.path.join(os.path.dirname(__file__), 'train_ao_gpt_small.py')).read())

out_dir = 'out-mdm-small'
wandb_run_name = 'mdm-small'
architecture = 'encoder'  # trained on the NELBO of random masks: order and random_ratio do not apply
