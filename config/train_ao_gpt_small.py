# AO-GPT small (GPT-2 small sized, ~124M parameters + adaLN) on OpenWebText: the authors' recipe.
# python data/openwebtext/prepare.py
# torchrun --standalone --nproc_per_node=8 train.py config/train_ao_gpt_small.py

out_dir = 'out-ao-gpt-small'
eval_interval = 2000
eval_iters = 100
log_interval = 10

wandb_log = False  # --wandb_log=True to log to wandb
wandb_project = 'ao-gpt'
wandb_run_name = 'ao-gpt-small'

dataset = 'openwebtext'
block_size = 1024
batch_size = 16
gradient_accumulation_steps = 64  # 16 * 1024 * 64 = 1,048,576 tokens per iteration (their "bs1M")

n_layer = 12
n_head = 12
n_embd = 768
cond_dim = 128
dropout = 0.0  # attention dropout is always 0, as in the authors' model

order = 'mixed'  # 90% uniformly random orders, 10% left-to-right
random_ratio = 0.9

learning_rate = 6e-4
min_lr = 6e-5
weight_decay = 0.05  # their config file; their released runs are named wd_0.03 (docs/evaluation.md)
beta1 = 0.9
beta2 = 0.95
warmup_iters = 2000  # lr * it / warmup_iters
max_iters = 500000  # their released small checkpoint is the snapshot at 250k: mid-cosine
lr_decay_iters = 500000
ema_decay = 0.9999
