# A small character-level AO-GPT on tiny Shakespeare that trains in under 10 minutes on 2 CPU cores.
# python data/shakespeare_char/prepare.py && python train.py config/train_shakespeare_char.py

out_dir = 'out-shakespeare-char'
eval_interval = 1000
eval_iters = 20
log_interval = 100

dataset = 'shakespeare_char'
gradient_accumulation_steps = 1
batch_size = 16
block_size = 64

n_layer = 4
n_head = 4
n_embd = 128
cond_dim = 64

# a high learning rate gets the model past the early plateau where it ignores the target position
learning_rate = 5e-3
min_lr = 5e-4
warmup_iters = 100
max_iters = 4000
lr_decay_iters = 4000
weight_decay = 0.05
ema_decay = 0.99  # a short run: average over the last ~100 iterations

device = 'cpu'
dtype = 'float32'
compile = False
