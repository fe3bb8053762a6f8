"""
The kinds of model the findings compare and the presets that findings.py runs them at (model, data, sweep grid,
seeds, sizes, and each finding's own settings), as data. Each finding's arms, thresholds and the text of its claims
are in its own module of this package.
"""
import os
from dataclasses import dataclass

SEEDS = (1337, 1, 2, 3, 4)  # train.py's default first, then the README's other quick-start seeds
SWEEP_SEED = 7  # the seed of a finding's own sweep (fim, scarce): none of SEEDS, so its runs are never reported seeds
MIX = dict(order='mixed', random_ratio=0.9)  # the paper's 10% left-to-right


@dataclass
class Kind:
    """A kind of model the findings compare: its train.py flags and the objective it is chosen by
    (weights of metrics.jsonl's losses: the mix it trains on)."""
    label: str
    flags: dict
    objective: dict
    adaln: bool = True  # it has adaLN gates, so the sweep tries gate_init


KINDS = {
    'l2r': Kind('left-to-right GPT', dict(order='l2r'), {'val_l2r': 1.0}),
    'mixed': Kind('AO-GPT, 10% left to right', MIX, {'val_ao': 0.9, 'val_l2r': 0.1}),
    'random': Kind('AO-GPT, random orders only (NoCL)', dict(order='random'), {'val_ao': 1.0}),
    'sigma': Kind('sigma-GPT, 10% left to right', MIX | dict(target_injection='add'), {'val_ao': 0.9, 'val_l2r': 0.1},
                  adaln=False),
    'encoder': Kind('encoder MDM', dict(architecture='encoder'), {'val_ao': 1.0}),
}


PRESETS = {
    # the quick start's model and data, 2,000 iterations a run; gate_init kept at the quick start's 1.0 so that
    # the 45 runs and the evaluations: 248.5 wall minutes on 2 cores (README.md)
    'cpu': dict(
        config='config/train_shakespeare_char.py', dataset='shakespeare_char',
        train=dict(max_iters=2000, lr_decay_iters=2000, eval_interval=250, log_interval=250),
        grid=dict(learning_rate=(3e-3, 1e-2), gate_init=(1.0,), position_encoding=('learned', 'rotary')),
        long=dict(block_size=256, batch_size=4),  # finding long: 4 x 256 tokens an iteration, as 16 x 64
        # finding length: each block and its flags, the tokens of an iteration kept (the first: the preset's own runs)
        lengths=((64, {}), (256, dict(block_size=256, batch_size=4)), (1024, dict(block_size=1024, batch_size=1))),
        context=dict(chunks=16, per_share=2),  # finding length's losses by context: val chunks, the encoder's
        # forwards per tenth of the block known
        seeds=3, workers=2, threads=1,
        fixed_orders=[dict(seed=s) for s in (11, 12, 13)],  # order=fixed_random draws its order from the seed
        eval=dict(ensemble=16, max_chunks=100),
        infill=dict(spans=(1, 4, 16, 64), ensemble=4, max_chunks=100),  # eval_ppl.py --gaps=span:L on the val chunks
        # finding orders: every run records its gap NLLs in training (so the finding trains its own runs, all on one
        # machine); its samples (one setting, the model's own distribution); the longer pair (the paper's mix and the
        # GPT at `longer` times the iterations, on the first `longer_seeds` seeds); the second corpus: its arms
        # again on other text at the settings chosen on the play, every seed (what the finding recommends must hold
        # there too)
        orders=dict(train=dict(eval_gaps='span:4,span:16'), gen=dict(steps='16,64', num_samples=32, batch_size=32),
                    longer=4, longer_seeds=2, second=dict(dataset='wikitext2_char', arms=('gpt', 'paper', 'fim-mix'))),
        # finding adapt: the adaptations' learning rates (min_lr a tenth) swept on the first seed, the kinds' grid and
        # lower (a model that starts trained may want less); the larger size (about 4x the parameters): its tag in the
        # run names, its flags, seeds and arms, at the rates chosen here
        adapt=dict(grid=(3e-4, 1e-3, 3e-3, 1e-2), larger=dict(tag='w256', train=dict(n_embd=256), seeds=2,
                                                        arms=('gpt', 'fim-mix', 'half-staged'))),
        # finding streams: its arms on finding orders' second corpus (two streams at the same iterations, named before
        # the runs rather than the winner after them)
        streams=dict(second_arms=('gpt', 'fim-mix', 'two')),
        # finding scarce: the same iterations on prefixes of the train split ((corpus, characters, arms), the main
        # one first: the sweep runs there), about 80 and 20 epochs (the paper's mix on the main prefix only, for the
        # budget); the gaps read in training (spans); the ladders of its sweep, the learning rate with the
        # regularizers (the grid, with the step below and above it: sweep.Ladders); each best checkpoint's ensembles
        scarce=dict(train=dict(max_iters=4000, lr_decay_iters=4000, eval_interval=250),
                    prefixes=(('', 50_000, ('gpt', 'fim-mix', 'paper', 'encoder')),
                              ('', 200_000, ('gpt', 'fim-mix')), ('wikitext2_char', 50_000, ('gpt', 'fim-mix'))),
                    spans=(1, 4, 16), ladders=dict(learning_rate=(1e-3, 3e-3, 1e-2, 3e-2),
                                                   dropout=(0.0, 0.1, 0.3, 0.5), weight_decay=(0.0, 0.05, 0.5, 1.0)),
                    eval=dict(ensemble=16, max_chunks=100)),
        # finding fim: its arms (the FIM GPT at 0.9 left out first, for the budget), its regimes ({name: their
        # train.py flags, eval: their own evaluation settings, best: it stops early}; a name without '-'), the
        # ladders of its sweep (the grid, with the step below and above it); its evaluations: spans on chunks of `block` (the FIM GPT's 4 tokens
        # left free in 64), a range of lengths on chunks of range_block (and room for the range's 15 more); a
        # regime's `line`: single lines of up to that many characters too, read in the first line_chunks chunks (53
        # of the report half's first 2,000 chunks of 45 characters of Python hold a whole line of 1 to 16)
        fim=dict(arms=('gpt', 'fim50', 'ao-fim-mix', 'ao-l2r-fim'),
                 regimes={'play': {}, 'python': dict(train=dict(dataset='python_char'),
                                                     eval=dict(line=16, line_chunks=2000)),
                          # finding scarce's regime: tiny Shakespeare's first 50k characters for 4,000 iterations
                          'little': dict(train=dict(train_tokens=50_000, max_iters=4000, lr_decay_iters=4000),
                                         best=True)},
                 ladders=dict(learning_rate=(1e-3, 3e-3, 1e-2, 3e-2), dropout=(None, 0.0, 0.1, 0.2)),
                 eval=dict(spans=(4, 16), block=60, range=(1, 16), range_block=45, max_chunks=100)),
        gen=dict(steps='8,16,64', temperature='1.0,0.9,0.7', top_p='1.0,0.95,0.95', pair_settings=True,
                 top_p_mode='authors', num_samples=32, batch_size=32),
        scorer='l2r',  # the l2r kind's first run
        timing=dict(steps=(4, 8, 16, 32, 64), lengths=(16, 32, 64), batch_size=16, repeats=5)),
    # GPT-2 small's recipe, shortened: 2,000 iterations of 131,072 tokens (262M tokens a run)
    'gpu': dict(
        config='config/train_ao_gpt_small.py', dataset='openwebtext',
        train=dict(max_iters=2000, lr_decay_iters=2000, warmup_iters=200, gradient_accumulation_steps=8,
                   eval_interval=200, eval_iters=20, ema_decay=0.999),
        grid=dict(learning_rate=(6e-4, 1.2e-3), gate_init=(0.0, 1.0), position_encoding=('learned', 'rotary')),
        seeds=3, workers=1, threads=0,
        fixed_orders=[dict(order_file=os.path.join('config', 'orders', f'authors_order{i}.txt')) for i in (1, 2, 3)],
        eval=dict(ensemble=64, max_chunks=32),
        infill=dict(spans=(1, 4, 16, 64), ensemble=8, max_chunks=32),
        gen=dict(steps='64,128,256,512,1024', temperature='1.0,0.9,0.7', top_p='1.0,0.95,0.95', pair_settings=True,
                 top_p_mode='authors', num_samples=64, batch_size=32),
        scorer='gpt2-large',
        timing=dict(steps=(64, 128, 256, 512, 1024), lengths=(128, 256, 512, 1024), batch_size=32, repeats=3)),
    # everything end to end at toy size, for the tests
    'smoke': dict(
        config='config/train_shakespeare_char.py', dataset='shakespeare_char',
        train=dict(n_layer=2, n_head=2, n_embd=32, cond_dim=16, block_size=32, batch_size=4, max_iters=30,
                   lr_decay_iters=30, warmup_iters=5, eval_interval=10, eval_iters=2, log_interval=10, order_block=8),
        grid=dict(learning_rate=(1e-2,), gate_init=(1.0,), position_encoding=('learned', 'rotary')),
        long=dict(block_size=64, batch_size=2),
        lengths=((32, {}), (64, dict(block_size=64, batch_size=2))),
        context=dict(chunks=2, per_share=1),
        seeds=2, workers=2, threads=1,
        fixed_orders=[dict(seed=s) for s in (11, 12)],
        eval=dict(ensemble=4, max_chunks=4, mc_samples=4),
        infill=dict(spans=(1, 4, 32), ensemble=2, max_chunks=4, mc_samples=4),
        orders=dict(train=dict(eval_gaps='span:4'), gen=dict(steps='4,32', num_samples=4, batch_size=4), longer=2,
                    longer_seeds=2),
        adapt=dict(grid=(1e-2,), larger=dict(tag='w64', train=dict(n_embd=64), seeds=2,
                                             arms=('gpt', 'fim-mix', 'half-staged'))),
        streams=dict(second_arms=()),
        scarce=dict(train=dict(max_iters=30, lr_decay_iters=30, eval_interval=10),
                    prefixes=(('', 2_000, ('gpt', 'fim-mix', 'paper', 'encoder')),),
                    spans=(1, 4), ladders=dict(learning_rate=(None, 1e-2, None), dropout=(None, 0.1, None),
                                               weight_decay=(None, 0.05, 0.5, 1.0)),
                    eval=dict(ensemble=4, max_chunks=4, mc_samples=4)),
        fim=dict(arms=('gpt', 'fim50', 'ao-fim-mix'),  # one AO-GPT arm: the other's code is the same
                 regimes={'play': {}, 'lines': dict(train=dict(batch_size=2, train_tokens=2000), best=True,
                                                    eval=dict(line=10, range_block=20, max_chunks=8))},
                 ladders=dict(learning_rate=(None, 1e-2, None), dropout=(None, 0.0, 0.1)),
                 eval=dict(spans=(4,), block=28, range=(1, 4), range_block=25, max_chunks=4)),
        gen=dict(steps='4,32', temperature='1.0,0.7', top_p='1.0,0.95', pair_settings=True, num_samples=4,
                 batch_size=4),
        scorer='l2r',
        timing=dict(steps=(4, 32), lengths=(8, 32), batch_size=2, repeats=2)),
}
