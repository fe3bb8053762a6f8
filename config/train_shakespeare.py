# A small AO-GPT on tiny Shakespeare in GPT-2 BPE: the CPU-sized checkpoint with the paper's tokenizer
# (lm-evaluation-harness table in docs/evaluation.md). About 40 minutes on 2 CPU cores (39 on 2026-11-25).
# python data/shakespeare/prepare.py && python train.py config/train_shakespeare.py

out_dir = 'out-shakespeare'
eval_interval = 500
eval_iters = 20
log_interval = 50

dataset = 'shakespeare'
gradient_accumulation_steps = 1
batch_size = 8
block_size = 128

n_layer = 4
n_head = 4
n_embd = 128
cond_dim = 64

# the char recipe's settings (open gates, its high learning rate: a shorter plateau; docs/training.md)
gate_init = 1.0
learning_rate = 1e-2
min_lr = 1e-3
warmup_iters = 100
max_iters = 2000
lr_decay_iters = 2000
weight_decay = 0.05
ema_decay = 0.99

device = 'cpu'
dtype = 'float32'
compile = False
