# A small character-level AO-GPT on tiny Shakespeare that trains in a few minutes on a laptop CPU.
# python data/shakespeare_char/prepare.py && python train.py config/train_shakespeare_char.py

out_dir = 'out-shakespeare-char'
eval_interval = 500
eval_iters = 20
log_interval = 100

dataset = 'shakespeare_char'
gradient_accumulation_steps = 1
batch_size = 32
block_size = 64

n_layer = 4
n_head = 4
n_embd = 128
cond_dim = 64

learning_rate = 2e-3
max_iters = 3000
lr_decay_iters = 3000
min_lr = 2e-4
warmup_iters = 100
weight_decay = 0.05
ema_decay = 0.99  # a short run: average over the last ~100 iterations

device = 'cpu'
dtype = 'float32'
compile = False
