# Order ablation (the paper's Figure 2a): AO-GPT small trained on a single fixed order,
# one fixed order, random within consecutive blocks of 16 positions, the blocks
# left to right.
# The schedule and batch are those of train_order_l2r.py.
# torchrun --standalone --nproc_per_node=8 train.py config/train_order_block_random.py
import os

exec(open(os.path.join(os.path.dirname(__file__), 'train_order_l2r.py')).read())

out_dir = 'out-order-block-random'
wandb_run_name = 'order-block-random'
order = 'block_random'
order_block = 16
