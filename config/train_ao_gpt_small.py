# AO-GPT small (GPT-2 small sized, ~124M parameters + adaLN) on OpenWebText, as in the paper.
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
gradient_accumulation_steps = 32  # 16 * 1024 * 32 = 524,288 tokens per iteration

n_layer = 12
n_head = 12
n_embd = 768
cond_dim = 128

order = 'mixed'  # 90% uniformly random orders, 10% left-to-right
random_ratio = 0.9

learning_rate = 6e-4
min_lr = 6e-5
weight_decay = 0.05
beta1 = 0.9
beta2 = 0.95
warmup_iters = 2500
max_iters = 400000
lr_decay_iters = 400000
ema_decay = 0.9999
