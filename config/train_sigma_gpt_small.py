# The paper's sigma-GPT baseline at GPT-2 small size: the target-position embedding is added to the
# input of a plain nanoGPT (LayerNorm, no QK-norm, head tied to wte), trained on uniformly random
# orders only: the authors' sigma-GPT model has a left-to-right and a random mode, no mixing of the two.
# The AO-GPT small recipe otherwise (same data, batch and schedule): their repository publishes no
# sigma-GPT training recipe, only checkpoints at 1,000,000 (small) and 740,000 (medium) iterations.
# torchrun --standalone --nproc_per_node=8 train.py config/train_sigma_gpt_small.py
import os

exec(open(os.path.join(os.path.dirname(__file__), 'train_ao_gpt_small.py')).read())

out_dir = 'out-sigma-gpt-small'
wandb_run_name = 'sigma-gpt-small'
target_injection = 'add'
order = 'random'
# the authors evaluate sigma-GPT's raw weights: with decay 0 the "EMA" that train.py evaluates and
# saves is the raw weights, exactly
ema_decay = 0.0
