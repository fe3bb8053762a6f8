"""
The library under the scripts at the repository's root (model.py, the networks, and configurator.py, the settings,
stay there). One job a module:

    engine.py        the decoding engine: the KV cache, a step's forward, compiled steps, sampling a token
    speculative.py   speculative decoding: drafts and their verification, k per order and batch
    decoding.py      generate(): one token per step or many, in any order, and the encoder's ancestral sampler
    scoring.py       likelihoods: left to right, in orders and their ensembles, the NELBO, the zero-shot chunks
    infilling.py     gaps of no given length: AO-GPT's length posterior, the FIM GPT's middles, both scored
    fim.py           the FIM GPT's data: sentinels, the PSM and SPM layouts, training rows
    scorers.py       models that score generated text (gen_ppl.py): a checkpoint of ours or a Hugging Face LM
    sampling.py      the settings and prompts of sample.py and gen_ppl.py
    training.py      the training objective: order mixes, batches, the learning rate, losses
    runs.py          a run's folder: resuming, parents, the metrics and best-checkpoint records
    checkpoints.py   reading and writing checkpoints and model folders, GPT-2 and the authors' weights
    common.py        what the scripts share: settings checks, devices, memory, tokenizers, file readers
    benchmarks.py    the zero-shot sets: their text, the authors' chunking, token files
    report.py        the figures and tables of a run and of the findings
    timing.py        bench.py's tools: medians of runs taking turns, where a call's time goes, slow samplers
    harness.py       the lm-evaluation-harness model (lm_eval_ao.py)
    modeling_ao_gpt.py  the transformers classes an exported folder runs (export.py copies it there)
    experiments/     the findings (findings.py), one module a finding

engine.py, speculative.py, decoding.py, scoring.py, infilling.py, fim.py and modeling_ao_gpt.py import one another
relatively: an exported folder holds them side by side, with model.py and configurator.py, as one package.
"""
