# The encoder-only masked diffusion model (MDM) at the CPU default's size, data and iterations: the
# other column of the paper's comparison. AO-GPT's blocks with full attention and a [MASK] token.
# python data/shakespeare_char/prepare.py && python train.py config/train_mdm_shakespeare_char.py
import os

exec(open(os.path.join(os.path.dirname(__file__), 'train_shakespeare_char.py')).read())

out_dir = 'out-mdm-shakespeare-char'
architecture = 'encoder'  # trained on the NELBO of random masks: random_ratio does not apply
