# Order ablation (the paper's Figure 2a): AO-GPT small trained on a single fixed order,
# the identity order (left to right) for every sequence.
# The authors' ablation schedule: 20k iterations at 524,288 tokens per iteration, with the cosine of the
# full 500k-iteration run (so the learning rate stays near its peak).
# torchrun --standalone --nproc_per_node=8 train.py config/train_order_l2r.py
import os

exec(open(os.path.join(os.path.dirname(__file__), 'train_ao_gpt_small.py')).read())

out_dir = 'out-order-l2r'
wandb_run_name = 'order-l2r'
order = 'l2r'
batch_size = 32
gradient_accumulation_steps = 16  # 32 * 1024 * 16 = 524,288 tokens per iteration
max_iters = 20000
lr_decay_iters = 500000
eval_interval = 1000
