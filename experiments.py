"""
What findings.py runs and claims, as data: the findings and their titles, the kinds of model they compare,
the presets (model, data, sweep grid, seeds, sizes) and the text of every claim, with the thresholds the
claims quote. findings.py plans the runs, measures and judges; the words it judges are here.
"""
import os
from dataclasses import dataclass

SEEDS = (1337, 1, 2, 3, 4)  # train.py's default first, then the README's other quick-start seeds
FINDINGS = {'1': 'Any-order training converges slower than left-to-right (Fig. 1)',
            '2': 'Language has a left-to-right bias (Fig. 2a)',
            '3': 'A little left-to-right goes a long way (Fig. 2b)',
            '4': 'Context-order ensembles lower the perplexity, towards the encoder (Figs. 3, 5)',
            '6': 'Generation: time and sample quality (Fig. 4, Table 2)',
            '8': 'AdaLN against additive injection; EMA against raw weights',
            'plateau': "(Ours) Queries at the target position remove AO-GPT's plateau",
            'long': '(Ours) Queries at the target position at longer blocks',
            'length': '(Ours) AO-GPT with target queries against the encoder as blocks grow',
            'infill': '(Ours) Infilling: AO-GPT reads both sides of a gap',
            'orders': '(Ours) The any-order tax: which training orders make AO-GPT worth picking',
            'adapt': '(Ours) AO-GPT from a GPT: left to right first, any order after',
            'streams': '(Ours) Two streams: keys and values that carry no target, against the single stream'}
ALIASES = {'5': '4', '7': '6'}
MIX = dict(order='mixed', random_ratio=0.9)  # the paper's 10% left-to-right
FLOOR = 0.01  # nats: the practical floor of an effect (1% in perplexity)
TAX = 0.1  # nats: finding orders' goal for the left-to-right loss, at most this far above the GPT's
AO_COST = 0.05  # nats: finding orders' goal for the any-order loss, at most this far above the paper's mix
STUCK = 0.05  # nats: a final loss this close to the unigram entropy (or above) means the run did not learn
SAME = 0.1  # nats: "comparable" sample quality, log gen PPLs within 10%
PLATEAU = 0.1  # nats: a run has left the plateau at the first evaluation this far below the unigram entropy
POSITIONS = ('learned', 'rotary', 'rotary_plain')  # the plateau finding's settings (model.py)
LONG_POSITIONS = ('learned', 'rotary')
# finding length: AO-GPT's query settings at the longer blocks ('rotary' and our query-only variants, model.py)
QUERY_POSITIONS = ('rotary', 'rotary_half_heads', 'rotary_upper_layers')


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
FINDING_KINDS = {'1': ['l2r', 'random'], '2': ['l2r'], '3': ['mixed', 'random'], '4': ['mixed', 'encoder'],
                 '6': ['mixed', 'encoder', 'l2r'], '8': ['mixed', 'sigma'], 'plateau': ['mixed'], 'long': ['mixed'],
                 'length': ['mixed', 'encoder', 'l2r'], 'infill': ['mixed', 'encoder', 'l2r'],
                 'orders': ['mixed', 'encoder', 'l2r'], 'adapt': ['mixed', 'l2r'], 'streams': ['mixed', 'l2r']}
# findings a preset runs only if it has this entry
NEEDS = {'long': 'long', 'length': 'lengths', 'orders': 'orders', 'adapt': 'adapt', 'streams': 'streams'}
# finding orders: models trained on distributions over orders (train.py's order settings), every AO-GPT arm at the
# mixed kind's chosen settings, the GPT and the encoder at their own: {arm: (label, kind)}, the GPT first (its first
# run scores the samples); order_arms gives the flags
ORDER_ARMS = {'gpt': ('left-to-right GPT', 'l2r'),
              'paper': ("AO-GPT, the paper's mix: 10% left to right", 'mixed'),
              'l2r50': ('AO-GPT, 50% left to right', 'mixed'),
              'curriculum': ("AO-GPT, the paper's mix after a curriculum from all left to right", 'mixed'),
              'fim-mix': ('AO-GPT, 10% left to right, 40% FIM, 50% random', 'mixed'),
              'fim-gpt': ('FIM GPT: 50% left to right, 50% FIM', 'mixed'),
              'encoder': ('encoder MDM', 'encoder')}
FIM_MIX, FIM_GPT = 'l2r:0.1,fim:0.4,random:0.5', 'l2r:0.5,fim:0.5'  # finding orders' FIM mix and FIM GPT (--order_mix)


def order_arms(max_iters):
    """finding orders' order flags of each arm, over its kind's: the curriculum takes the first half of training."""
    return {'gpt': {}, 'paper': {}, 'l2r50': dict(random_ratio=0.5),
            'curriculum': dict(order_curriculum=max_iters // 2),
            'fim-mix': dict(order_mix=FIM_MIX), 'fim-gpt': dict(order_mix=FIM_GPT), 'encoder': {}}


# finding adapt: a left-to-right GPT trained for part of the budget, then AO-GPT from its checkpoint for the rest,
# against finding orders' GPT and FIM mix trained for the whole budget (its runs): {arm: (label, kind)}, the GPT first
ADAPT_ARMS = {'gpt': ORDER_ARMS['gpt'], 'fim-mix': ORDER_ARMS['fim-mix'],
              'half-staged': ('GPT for half the budget, then AO-GPT, orders staged from the FIM GPT to the FIM mix',
                              'mixed'),
              'half-plain': ('GPT for half the budget, then AO-GPT on the FIM mix', 'mixed'),
              'cheap': ('GPT for 3/4 of the budget, then AO-GPT, orders staged from the FIM GPT to the FIM mix',
                        'mixed')}
# the adaptations: {arm: (its parent, staged orders)}; the parents: {parent: the GPT's share of the budget}
ADAPTATIONS = {'half-staged': ('half', True), 'half-plain': ('half', False), 'cheap': ('3q', True)}
ADAPT_PARENTS = {'half': 1 / 2, '3q': 3 / 4}
# train.py draws an iteration's batch from (seed, iteration): an adaptation draws from its seed plus this, so that
# it reads new batches, not its parent's first ones again
ADAPT_DRAWS = 1000


# finding streams: the single stream is finding orders' FIM mix (the recipe it recommends; its runs), against two
# streams at its iterations and at half of them (about its training compute: a two-stream step does both streams'
# work), the target in the rotary queries only, and finding orders' GPT: {arm: (label, kind)}, the GPT first; every
# AO-GPT arm at the mixed kind's chosen settings with the FIM mix's orders; stream_arms gives the flags
STREAM_ARMS = {'gpt': ORDER_ARMS['gpt'], 'fim-mix': ('AO-GPT, one stream (the FIM mix)', 'mixed'),
               'two': ('two streams (the FIM mix, the same iterations)', 'mixed'),
               'two-half': ("two streams (the FIM mix, half the iterations: about the single stream's training "
                            'compute)', 'mixed'),
               'queries': ('the target in the rotary queries only (the FIM mix)', 'mixed')}
STREAM_GAIN = 0.05  # nats: finding streams' goal, two streams at least this far below the single stream
STREAM_SPANS = (4, 16)  # finding streams: the gaps (tokens) its goal names


def stream_arms(max_iters):
    """finding streams' flags of each arm, over finding orders' FIM mix's (the GPT: over its own)."""
    half = dict(max_iters=max_iters // 2, lr_decay_iters=max_iters // 2)
    return {'gpt': {}, 'fim-mix': {}, 'two': dict(target_injection='two_stream'),
            'two-half': dict(target_injection='two_stream') | half,
            'queries': dict(target_injection='queries', position_encoding='rotary')}


def adapt_stages(iters):
    """--order_stages of a staged adaptation of `iters` iterations: the FIM GPT for the first third, moving linearly
    to the FIM mix over the second, the FIM mix for the last."""
    third = iters // 3
    return f'{FIM_GPT}@0/{FIM_GPT}@{third}/{FIM_MIX}@{2 * third}'


PRESETS = {
    # the quick start's model and data, 2,000 iterations a run; gate_init kept at the quick start's 1.0 so that
    # the 45 runs and the evaluations fit about 2 hours on 2 cores
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
        gen=dict(steps='4,32', temperature='1.0,0.7', top_p='1.0,0.95', pair_settings=True, num_samples=4,
                 batch_size=4),
        scorer='l2r',
        timing=dict(steps=(4, 32), lengths=(8, 32), batch_size=2, repeats=2)),
}


# -----------------------------------------------------------------------------
# the claims, as the results and the README print them; {names} are filled in by the finding that judges them
AT_PLATEAU = ('Runs of the other settings that end at the unigram entropy are the plateau measured here, so they '
              'are compared as they are; the claim is not judged only if a rotary run did not learn.')
CLAIMS = {
    '1': 'Trained on the same tokens, the any-order model ends with a higher loss in its own (random) orders than the '
         'left-to-right model in its one order.',
    '2 l2r': 'A model trained in the left-to-right order reaches a lower loss than models trained in fixed random '
             'orders (the mean over those orders).',
    '2 block': 'Block-wise random orders (left to right between blocks) are easier than fully random ones (the mean '
               'over the fixed random orders).',
    '3 l2r': 'Training 10% of the sequences left to right lowers the left-to-right loss below that of a model '
             'trained in random orders only (NoCL).',
    '3 ao': '... and lowers the any-order loss too (the paper: it improves both).',
    '3 cost': "(Ours, weaker) ... the any-order loss is at least not worse than NoCL's by more than the floor "
              '({floor} nats): holds if the interval of its excess lies below the floor.',
    '4 ensemble': 'Averaging AO-GPT over context orders lowers its perplexity: ensemble={top} against ensemble=1, on '
                  'the same chunks.',
    '4 premise': "The paper's premise: with one order (ensemble=1) AO-GPT's perplexity is above the encoder's NELBO "
                 'bound (effect: log AO-GPT ppl minus log bound, in nats).',
    '6 time': 'With its KV cache AO-GPT generates faster than the encoder (a full forward per step) at one token per '
              'step ({steps} steps, {block} tokens); the growth of each with the steps is in the numbers (effect: log '
              "of the encoder's seconds over AO-GPT's, per timing repeat).",
    '6 length': "At one token per step the encoder's time over AO-GPT's grows with the sequence length, from {short} "
                "to {long} tokens (the paper's ~25x at 1,024 tokens is a statement about scaling; effect: the log "
                'ratio at the longest length minus that at the shortest, per timing repeat).',
    '6 steps': "More steps give better samples: AO-GPT's gen PPL at the fewest steps ({fewest}) is above that at the "
               'most ({most}), temperature {temperature}, top_p {top_p} (effect in nats of per-sample log gen PPL).',
    '6 encoder': "With temperature annealing (temperature {temperature}, top_p {top_p}) at {most} steps AO-GPT's "
                 "samples are as good as the encoder's: their log gen PPLs (one scorer) differ by less than {same} "
                 'nats (effect: AO-GPT minus encoder; holds if the interval lies within the tolerance, does not hold '
                 'if wholly outside it).',
    '8 adaln': "With EMA on both, AO-GPT's adaLN reaches a lower any-order loss than sigma-GPT's additive injection "
               "(each with its own swept settings: position_encoding {ao!r} for AO-GPT, {sigma!r} for "
               'sigma-GPT{differ}). Besides the injection the two recipes differ in their norms (RMSNorm / '
               'LayerNorm), QK-norm (on / off), head (untied with a bias / tied to the embedding), dropout placement '
               'and init (truncated normal / normal): model.RECIPES.',
    '8 ema': "EMA lowers AO-GPT's any-order loss: the same runs' EMA weights against their raw weights, on the same "
             'chunks and orders (eval_ppl.py, ensemble=1).',
    'plateau learned': "(Ours) With queries at the target position ('rotary') AO-GPT (10% left to right, its swept "
                       "learning rate and gate_init) ends with a lower any-order loss than with the authors' learned "
                       "positions ('learned'), on the same tokens (effect: learned minus rotary, final EMA val "
                       f'any-order loss, nats). {AT_PLATEAU}',
    'plateau plain': "(Ours) It is the query at the target, not rotation as such: 'rotary' ends below 'rotary_plain' "
                     "(each query at its own slot's position, as in a GPT) (effect: rotary_plain minus rotary, final "
                     f'EMA val any-order loss, nats). {AT_PLATEAU}',
    'long learned': '(Ours) At block {block} (batch {batch}: the tokens of an iteration as before) AO-GPT (10% left to '
                    "right, its swept learning rate and gate_init) with queries at the target position ('rotary') "
                    'ends with a lower any-order loss than with learned positions (effect: learned minus rotary, '
                    f'final EMA val any-order loss, nats). {AT_PLATEAU}',
    'long l2r': '(Ours) At block {block} (batch {batch}: the tokens of an iteration as before) ... and with a lower '
                'left-to-right loss (effect: learned minus rotary, final EMA val left-to-right loss, nats). '
                f'{AT_PLATEAU}',
    'length encoder': "(Ours) At block {block} AO-GPT (10% left to right, its swept learning rate, position_encoding "
                      "'{positions}') ends with an any-order loss below the encoder's NELBO (each with its swept "
                      "settings{swept}, the same tokens; effect: the encoder's final EMA val NELBO minus AO-GPT's "
                      'any-order loss, nats).',
    'infill right': '(Ours) AO-GPT uses the right context: a gap read after the rest of its chunk (left to right, '
                    "exactly; AO-GPT 10% left to right) has a lower NLL per gap token than the left-to-right GPT's, "
                    'which reads the left side only (each with its swept settings, the same chunks and gaps; effect: '
                    "the GPT's NLL minus AO-GPT's, nats per gap token, averaged over the spans shorter than the "
                    'block: {spans} tokens).',
    'infill encoder': '(Ours) AO-GPT fills gaps at least as well as the encoder: its exact NLL per gap token (the '
                      "gap read left to right after the rest) is not above the encoder's exact NLL of the gap "
                      'revealed left to right by more than the floor ({floor} nats) (effect: the encoder minus '
                      'AO-GPT, averaged over the spans {spans}; holds if the interval lies above minus the floor). '
                      "The encoder's NELBO bound restricted to the gap is in the numbers.",
    'length variant': "(Ours) At block {block} AO-GPT with '{positions}' ends with a lower any-order loss than with "
                      "'rotary' (each its own swept rate; effect: rotary minus the variant, final EMA val any-order "
                      'loss, nats).',
    'orders tax': '(Ours) {arm} reads left to right within {tax} nats of the left-to-right GPT (each on every seed, '
                  "the same tokens; effect: its final EMA val left-to-right loss minus the GPT's; holds if the "
                  'interval lies below {tax}, does not hold if above it).',
    'orders gaps': '(Ours) {arm} fills gaps better than the left-to-right GPT reading the left side: its exact NLL '
                   "per gap token given both sides ({reading}) is below the GPT's from the left only (effect: the "
                   "GPT's NLL minus its own, nats per gap token, averaged over the spans {spans}).",
    'orders fim': '(Ours) {arm} fills gaps at least as well as the FIM GPT (50% left to right, 50% FIM): its NLL per '
                  "gap token given both sides is not above the FIM GPT's by more than the floor ({floor} nats) "
                  '(effect: the FIM GPT minus it, averaged over the spans {spans}; holds if the interval lies above '
                  'minus the floor).',
    'orders gaps paper': "(Ours) {arm} fills gaps better than the paper's mix: its NLL per gap token given both "
                         "sides is below the paper's mix's (effect: the paper's mix's NLL minus its own, nats per gap "
                         'token, averaged over the spans {spans}).',
    'orders ao': "(Ours) {arm} keeps its any-order loss within {cost} nats of the paper's mix (effect: its final EMA "
                 "val any-order loss minus the paper's mix's; holds if the interval lies below {cost}, does not hold "
                 'if above it).',
    'orders samples': "(Ours) {arm}'s samples at {steps} steps (temperature 1, {order}) score better than the "
                      "paper's mix's under one left-to-right GPT (effect: the paper's mix's mean per-sample NLL minus"
                      ' its own, nats).',
    'orders longer': "(Ours) The any-order tax shrinks with training: the paper's mix's left-to-right loss above the "
                     "GPT's (same seed) is smaller after {times}x the iterations (effect: the tax at {iters} "
                     'iterations minus the tax at {longer}, nats).',
    'adapt gaps': '(Ours) {arm} fills gaps of {span} tokens better than the left-to-right GPT reading the left side: '
                  'its exact NLL per gap token given both sides (the rest, then the gap left to right) is below the '
                  "GPT's from the left only (each on every seed, the same total iterations; effect: the GPT's NLL "
                  'minus its own, nats per gap token).',
    'adapt tax': "(Ours) {arm} (adapted at learning rate {rate:g}, its own sweep's choice) reads left to right "
                 'within {tax} nats of the left-to-right GPT trained for the whole budget (each on every seed, the '
                 "same total iterations; effect: its final EMA val left-to-right loss minus the GPT's; holds if the "
                 'interval lies below {tax}, does not hold if above it).',
    'adapt ao': '(Ours) {arm} keeps its any-order loss within {cost} nats of the FIM mix (10% left to right, 40% FIM, '
                '50% random) trained from scratch for the whole budget (effect: its final EMA val any-order loss minus '
                "the FIM mix's; holds if the interval lies below {cost}, does not hold if above it).",
    'streams ao': '(Ours) {arm} ends with a lower any-order loss than the single stream (the FIM mix) by at least '
                  '{gain} nats (each on every seed, the same orders; effect: the single stream\'s final EMA val '
                  'any-order loss minus its own; holds if the interval lies above zero and the effect reaches {gain}).',
    'streams gaps': '(Ours) {arm} fills gaps of {span} tokens better than the single stream by at least {gain} nats: '
                    'its exact NLL per gap token given both sides (the rest, then the gap left to right) (effect: the '
                    "single stream's NLL minus its own; holds if the interval lies above zero and the effect reaches "
                    '{gain}).',
    'adapt size': "(Ours) The tax of {arm} shrinks with size: its left-to-right loss above the GPT's (same seed) is "
                  "smaller at {larger} (the preset's other settings kept) than at the preset's size (effect: the tax "
                  "at the preset's size minus the tax at the larger one, nats). At the larger size each arm trains at "
                  'the learning rate chosen at the smaller one: no sweep there.',
}
