# Order ablation (the paper's Figure 2a): AO-GPT small trained on a single fixed order,
# one uniformly random order, drawn once from the seed, for every sequence (or an explicit one:
# --order_file=path, a permutation of 0..1023 in a .pt, .npy or .txt file).
# The schedule and batch are those of train_order_l2r.py.
# torchrun --standalone --nproc_per_node=8 train.py config/train_order_fixed_random.py
import os

exec(open(os.path.join(os.path.dirname(__file__), 'train_order_l2r.py')).read())

out_dir = 'out-order-fixed-random'
wandb_run_name = 'order-fixed-random'
order = 'fixed_random'
