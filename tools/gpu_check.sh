#!/usr/bin/env bash
# The GPU check: the speed figures of docs/speed.md and the small recipe's curves on the Python corpus
# (docs/training.md) on one GPU, each step under its own time limit (21 minutes at most in all; ONLY picks steps and
# BUDGET caps a call's seconds, so that a call fits a session's device time).
#
#   bash tools/gpu_check.sh                           # on a machine with a GPU; the report in $OUT/report.md
#   ONLY='python decode' bash tools/gpu_check.sh      # some steps only (keys: env tax train char python decode
#                                                     #   ensemble speculate generate arch rotary), the runs kept in $WORK
#                                                     #   for the next call
#   BUDGET=580 bash tools/gpu_check.sh                # each step's limit cut to the seconds left; none starts with < 30
#   PYTHON_PE=rotary bash tools/gpu_check.sh          # the Python corpus with rotary positions only (speculate's model)
#   SMALL=1 bash tools/gpu_check.sh                   # a dry run on the CPU with tiny models (tests/test_bench.py)
#
# Needs data/shakespeare, data/shakespeare_char and data/python prepared (python data/<set>/prepare.py; a GPU machine
# without a network can take them as they are). Each step runs under its own time limit, so one that hangs or runs
# long costs only its own figures; the report says which ended how. $OUT (default gpu-check/) gets report.md and
# all.log (each call's steps appended); $WORK (default out-gpu-check/) the runs' checkpoints, which later steps and
# calls read.
set -uo pipefail
cd "$(dirname "$0")/.."
STEPS='env tax train char python decode ensemble speculate generate arch rotary'
ONLY=${ONLY:-$STEPS}
for key in $ONLY; do  # a misspelt key would run nothing and say nothing
    if [[ " $STEPS " != *" $key "* ]]; then
        echo "error: ONLY=$ONLY: $key is not a step; the steps are: $STEPS" >&2
        exit 1
    fi
done
if [ -n "${BUDGET:-}" ] && ! [[ $BUDGET =~ ^[0-9]+$ ]]; then
    echo "error: BUDGET=$BUDGET: give the seconds a call may take, a whole number such as 580" >&2
    exit 1
fi
OUT=${OUT:-gpu-check}
if ! mkdir -p "$OUT" 2>/dev/null || [ ! -w "$OUT" ]; then
    echo "error: cannot write the report to OUT=$OUT: set OUT to a writable folder" >&2
    exit 1
fi
REPORT=$OUT/report.md
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 WANDB_MODE=offline

WORK=${WORK:-out-gpu-check}
if [ "${SMALL:-0}" = 1 ]; then  # tiny shapes on the CPU: every step runs, none of its figures mean anything
    SCALE=(--device=cpu --dtype=float32)
    BLOCK=32
    RECIPE=(--n_layer=2 --n_head=2 --n_embd=32 --cond_dim=16 --block_size=$BLOCK --vocab_size=512)
    TINY=(--device=cpu --dtype=float32 --compile=False --n_layer=2 --n_head=2 --n_embd=32 --cond_dim=16
          --block_size=$BLOCK --batch_size=4 --eval_iters=1 --log_interval=2)  # after each training's own flags
    SHORT=(--max_iters=4 --eval_interval=4 --warmup_iters=2 --lr_decay_iters=4)
    CHAR_ITERS=5
    TAX_DATA=shakespeare_char  # three runs side by side on 2 cores: at GPT-2's vocabulary each spends them in its head
    LONG=(--max_iters=4 --eval_interval=4 --warmup_iters=2 --lr_decay_iters=4)
    BATCHES=2  # one batch: each compiles its graphs
    ROUNDS=(--rounds=1)  # each timing once, after the step's own --rounds
    SYNC=()
    SPECULATE=(--speculate_k=4 --compile=False --batch_size=2)  # compiling a graph for each k and batch takes
                                                                 # minutes here, a batch of 16 at 50k tokens a minute
    GAPS=(--gaps=span:1,span:4,span:16 --max_chunks=2 --ensemble=2)
    ARCH=(--compile=False)  # three architectures' graphs take a minute here; tests/test_compiled.py compiles each
    GENERATE=(--generate_tokens=16 --batch_size=2)
else  # the small recipe (124M, block 1,024), bf16 autocast, compiled
    SCALE=(--device=cuda --dtype=bfloat16)
    BLOCK=1024
    RECIPE=(--n_layer=12 --n_head=12 --n_embd=768 --cond_dim=128 --block_size=$BLOCK --vocab_size=50304)
    TINY=()
    SHORT=(--max_iters=40 --eval_interval=40 --eval_iters=2 --log_interval=10 --warmup_iters=10 --lr_decay_iters=40)
    CHAR_ITERS=500
    TAX_DATA=python
    # the Python corpus: about 2 minutes a run with the compile, 1,000 iterations of 16 x 1,024 tokens (16M tokens,
    # an epoch)
    LONG=(--max_iters=1000 --eval_interval=200 --eval_iters=10 --log_interval=100 --warmup_iters=100
          --lr_decay_iters=1000)
    BATCHES=1,16,64
    ROUNDS=()
    SYNC=(--sync_check=True --step_profile=True)
    # auto: 8 at batch 1, none at 16 with GPT-2's vocabulary (the CPU's rule): k=4 tries it; a graph for each k and
    # batch compiles
    SPECULATE=(--speculate_k=4,auto --compile=True --batch_size=16)
    # every val chunk of the Python corpus (339), each column in bf16
    GAPS=(--gaps=span:1,span:4,span:16,span:64 --max_chunks=0 --ensemble=4)
    GENERATE=(--generate_tokens=256 --batch_size=16 --rounds=2)
    ARCH=(--compile=True)
fi

wanted() {  # wanted KEY: whether ONLY has KEY
    [[ " $ONLY " == *" $1 "* ]]
}

step() {  # step KEY NAME SECONDS COMMAND...: run COMMAND under a time limit if ONLY has KEY; its output's end goes
         # in the report
    local key=$1 name=$2 seconds=$3 log t0=$SECONDS rc verdict
    wanted $key || return 0
    [ "${SMALL:-0}" = 1 ] && seconds=300  # the CPU compiles slowly; tiny models decide nothing
    shift 3
    if [ -n "${BUDGET:-}" ] && [ $((BUDGET - SECONDS)) -lt "$seconds" ]; then
        seconds=$((BUDGET - SECONDS))
        if [ "$seconds" -lt 30 ]; then
            { echo "## $name: not run, $seconds s of BUDGET=$BUDGET left"; echo; } >>"$REPORT"
            return 0
        fi
    fi
    log=$(mktemp)
    timeout --kill-after=10 "$seconds" "$@" >"$log" 2>&1
    rc=$?
    case $rc in 0) verdict=ok ;; 124|137) verdict="stopped at its limit of $seconds s" ;; *) verdict="exit $rc" ;; esac
    { echo "## $name: $verdict, $((SECONDS - t0)) s"; echo; echo '```'; echo "\$ $*"
      grep -v -e 'Warning' -e '^ *warnings.warn' -e '^override: ' -e 'it/s]$' "$log" | tail -n 60; echo '```'; echo; } >>"$REPORT"
    { echo "===== $name: $verdict"; cat "$log"; } >>"$OUT/all.log"
    rm -f "$log"
}

{ echo "# GPU check, $(date -u +%Y-%m-%d), steps: $ONLY"; echo; } >>"$REPORT"
touch "$OUT/all.log"
step env environment 60 python3 -c "
import torch, platform
print('python', platform.python_version(), '| torch', torch.__version__, '| cuda', torch.version.cuda)
print(torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU: ' + platform.processor())"

# the any-order tax at the small recipe's size (rotary, queries at the target; the Python corpus, the same batches
# for each: they depend on the seed and the iteration only): the GPT, the paper's mix and finding orders' FIM mix,
# trained side by side on the one GPU (their compiles overlap), then each one's gap NLL (eval_ppl.py --gaps, both
# sides and the left only) on the val chunks, its gaps.json brought back in $OUT
FIM_MIX=$(python3 -c 'from experiments.orders import FIM_MIX; print(FIM_MIX)')
TAX_ARMS="gpt:--order=l2r paper:--order=mixed fim-mix:--order_mix=$FIM_MIX"
side_by_side() {  # side_by_side LOG COMMAND...: COMMAND for each arm at once, @ARM@ in it read as the arm's name and
                  # an argument @ORDER@ as its order flag, each one's output in $WORK/tax-<arm>.LOG; the end of each
                  # printed; fails if any fails
    local log=$1 rc=0 arm flag arg args pids=()
    shift
    for spec in $TAX_ARMS; do
        arm=${spec%%:*} flag=${spec#*:} args=()
        for arg in "$@"; do
            arg=${arg//@ARM@/$arm}
            args+=("${arg/#@ORDER@/$flag}")
        done
        mkdir -p $WORK/tax-$arm
        "${args[@]}" >$WORK/tax-$arm.$log 2>&1 &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait $pid || rc=1; done
    for spec in $TAX_ARMS; do echo "### ${spec%%:*}"; tail -n 16 $WORK/tax-${spec%%:*}.$log; done
    return $rc
}
export -f side_by_side
export WORK TAX_ARMS
step tax 'the any-order tax: GPT, paper mix, FIM mix trained side by side' 360 bash -c 'side_by_side train.log "$@"' _ \
    python3 train.py config/train_ao_gpt_small_rotary.py --dataset=$TAX_DATA --gradient_accumulation_steps=1 \
    --out_dir=$WORK/tax-@ARM@ @ORDER@ --overwrite=True "${SCALE[@]}" "${LONG[@]}" "${TINY[@]}"
wanted tax && for spec in $TAX_ARMS; do
    arm=${spec%%:*}
    [ -f $WORK/tax-$arm/metrics.jsonl ] && { echo "### metrics.jsonl, $arm"; echo '```'; cat $WORK/tax-$arm/metrics.jsonl
                                            echo '```'; echo; } >>"$REPORT"
done
step tax 'the any-order tax: gap NLLs' 120 bash -c 'side_by_side gaps.log "$@"' _ python3 eval_ppl.py \
    --out_dir=$WORK/tax-@ARM@ --data_file=data/$TAX_DATA/val.bin --dtype=bfloat16 "${SCALE[@]:0:1}" "${GAPS[@]}" \
    --out_json=$WORK/tax-@ARM@/gaps.json
wanted tax && for spec in $TAX_ARMS; do
    arm=${spec%%:*}
    [ -f $WORK/tax-$arm/gaps.json ] && cp $WORK/tax-$arm/gaps.json "$OUT/tax-$arm-gaps.json"
done

# training: tok/s, MFU and peak memory of the small recipe (tiny Shakespeare in GPT-2 BPE stands in for OpenWebText);
# its checkpoint is the ensemble's model. The rotary run (key rotary) comes last: the least needed if time runs short
step train 'training, learned positions' 100 torchrun --standalone --nproc_per_node=1 train.py config/train_ao_gpt_small.py \
    --dataset=shakespeare --gradient_accumulation_steps=1 --out_dir=$WORK/learned --overwrite=True "${SHORT[@]}" "${TINY[@]}"
# a character-level AO-GPT (the quick start's config) for the small-vocabulary rows
step char 'training, the quick start (char)' 45 python3 train.py config/train_shakespeare_char.py \
    --out_dir=$WORK/char --overwrite=True --max_iters=$CHAR_ITERS --lr_decay_iters=$CHAR_ITERS --eval_interval=$CHAR_ITERS \
    --warmup_iters=$((CHAR_ITERS / 5)) --eval_iters=2 --log_interval=100 "${SCALE[@]}" "${TINY[@]}"
# the small recipe on the Python standard library's source (data/python), learned positions against rotary (queries
# at the target): the val losses any-order and left to right against the iteration (docs/training.md)
for pe in ${PYTHON_PE:-learned rotary}; do
    config=config/train_ao_gpt_small.py
    [ $pe = rotary ] && config=config/train_ao_gpt_small_rotary.py
    step python "the small recipe on the Python corpus, $pe positions" 150 torchrun --standalone --nproc_per_node=1 \
        train.py $config --dataset=python --gradient_accumulation_steps=1 --out_dir=$WORK/python-$pe --overwrite=True \
        "${LONG[@]}" "${TINY[@]}"
    wanted python && [ -f $WORK/python-$pe/metrics.jsonl ] && { echo "### metrics.jsonl, $pe"; echo '```'; cat $WORK/python-$pe/metrics.jsonl
                                                echo '```'; echo; } >>"$REPORT"
done
# decoding: eager against compiled steps (CUDA graphs), 256 tokens one per step at block 1,024, batch 1, 16 and 64
# (the char model's rows where it was trained), and compiled speculative decoding (auto k); host syncs in the loop
# checked with torch.cuda.set_sync_debug_mode, and where a compiled call's time goes (the profiler)
CHAR=()
[ -f $WORK/char/ckpt.pt ] && CHAR=(--checkpoint=$WORK/char/ckpt.pt)
step decode 'decoding steps, eager and compiled' 240 python3 bench.py --run=step "${CHAR[@]}" \
    "${SCALE[@]}" "${RECIPE[@]}" --sample_block_size=$BLOCK --sample_steps=$BLOCK --step_batches=$BATCHES --rounds=3 \
    "${ROUNDS[@]}" "${SYNC[@]}"
# the context-order ensemble's seconds per 1,024-token chunk, float32 (the authors') and bf16
step ensemble 'eval_ppl.py --ensemble 8, float32' 45 python3 eval_ppl.py --init_from=$WORK/learned/ckpt.pt \
    --data_file=data/shakespeare/val.bin --max_chunks=1 --ensemble=8 --dtype=float32 "${SCALE[@]:0:1}"
step ensemble 'eval_ppl.py --ensemble 8, bfloat16' 30 python3 eval_ppl.py --init_from=$WORK/learned/ckpt.pt \
    --data_file=data/shakespeare/val.bin --max_chunks=1 --ensemble=8 --dtype=bfloat16 "${SCALE[@]:0:1}"
# speculative decoding (compiled) against one token per step, top_p 0.9, k=4 and auto's, at batch 1 and 16: on the
# small recipe trained on the Python corpus (GPT-2's vocabulary; how many drafts are kept depends on what the model
# learned) where it was, the last of the runs listed that exists (the rotary ones learn the corpus faster,
# docs/training.md, and draft more tellingly), else on the char model and a random model of the recipe's size. The dry run always on those: its barely trained
# GPT-2-vocabulary models spread top_p's mass over the whole vocabulary, the nucleus search's slowest case
MODEL=(--checkpoint=$WORK/char/ckpt.pt)
[ "${SMALL:-0}" = 1 ] || for run in python-learned python-rotary tax-paper; do
    [ -f $WORK/$run/ckpt.pt ] && MODEL=(--checkpoint=$WORK/$run/ckpt.pt --speculate_random=False)
done
step speculate 'speculative decoding' 200 python3 bench.py --run=speculate "${MODEL[@]}" "${SCALE[@]}" \
    "${RECIPE[@]}" "${SPECULATE[@]}" --sample_block_size=$BLOCK --sample_steps=$BLOCK --speculate_top_p=0.9 \
    --speculate_tokens=$((BLOCK / 4)) --rounds=2 "${ROUNDS[@]}"
# the paper's Figure 4: the encoder against AO-GPT, 1,024 tokens one per step, batch 16, compiled
step arch 'encoder against AO-GPT' 120 python3 bench.py --run=arch --arch_train=False "${ARCH[@]}" "${SCALE[@]}" \
    "${RECIPE[@]}" --sample_block_size=$BLOCK --sample_steps=$BLOCK --batch_size=16
# transformers' generate() with its cache, against none and the folder's sample(), greedy, batch 1 and 16
step generate "transformers' generate()" 90 python3 bench.py --run=generate "${SCALE[@]}" "${RECIPE[@]}" \
    --sample_block_size=$BLOCK --sample_steps=$BLOCK "${GENERATE[@]}" "${ROUNDS[@]}"
step rotary 'training, rotary positions' 100 torchrun --standalone --nproc_per_node=1 train.py \
    config/train_ao_gpt_small_rotary.py --dataset=shakespeare --gradient_accumulation_steps=1 --out_dir=$WORK/rotary --overwrite=True \
    "${SHORT[@]}" "${TINY[@]}"
echo "report: $REPORT"
