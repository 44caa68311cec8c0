#!/bin/sh
# Trains the default model (assets/default) with the C++ trainer from random initialisation: the one
# command its README documents. Nothing is planted: every weight starts random (GPT-2's initialisation).
#
#   tools/train_default_model.sh KVSCOPE OUT_DIR [--quick] [more kvscope train options]
#
# KVSCOPE is the kvscope binary, OUT_DIR the model folder to write. Two stages:
#   1. the main run: OUT_DIR-step12000 (its loss curve in OUT_DIR-step12000/loss.png), and the checkpoints
#      before and after the induction heads form, OUT_DIR-step3000 and OUT_DIR-step5000 (for assets/default: the
#      model picker's default-step3000, -step5000 and -step12000)
#   2. a fine-tune of OUT_DIR-step12000 on the same mix with sentences repeating inside texts (--text-repeat),
#      so the copying learned on id spans pays off in prose too: OUT_DIR (its curve in OUT_DIR/loss.png)
# --quick runs the same recipe for 16 + 8 steps (checkpoint after step 8; the train.reproducible ctest compares
# two such runs byte for byte). Equal options give byte-identical folders on any thread count. More options
# go to both stages.
#
# The recipe (assets/default/README.md explains each part):
#   architecture   GPT-2: 2 layers, 4 heads, width 128, 256 positions
#   data           half grammar text, half whole-vocabulary copying segments: a span of 4-24 random ids
#                  (80 % of them drawn from a pool of 6-32 ids, so ids repeat inside the span), then three
#                  more copies, each after 0-12 random ids and starting at a random id of the span
#   loss           text in full; of the copying segments only what a model can predict (the copies)
#   12000 steps    16 x 128 tokens each, AdamW lr 2e-3 (30 warm-up steps, cosine to 2e-4)
#   fine-tune      1500 steps of the same mix, fresh data (seed 2), 30 % of text sentences one said earlier in
#                  the sequence; lr 1e-3 (30 warm-up steps, cosine to 1e-4)
set -eu
if [ $# -lt 2 ]; then
    echo "usage: $0 KVSCOPE OUT_DIR [--quick] [kvscope train options]" >&2
    exit 2
fi
kvscope=$1 out=$2
shift 2
steps=12000 save=3000,5000 log=100 tune=1500
if [ "${1:-}" = "--quick" ]; then
    steps=16 save=8 log=8 tune=8
    shift
fi
data="--batch 16 --seq 128 --no-emb-decay --mix-text 0.5 --mix-copy 0 --mix-vocab 0.5 --no-span-newline
    --vocab-span 4-24 --vocab-gap 12 --vocab-repeats 4 --vocab-partial --vocab-pool 0.8,6-32 --score-copies-only"
# shellcheck disable=SC2086 # $data is a list of options
"$kvscope" train --out "$out-step$steps" --save-prefix "$out" --loss-png "$out-step$steps/loss.png" --seed 1 \
    --n-layer 2 --n-head 4 --n-embd 128 --n-positions 256 \
    --steps $steps --lr 2e-3 --warmup 30 $data --save-at $save --log-every $log "$@"
# shellcheck disable=SC2086
exec "$kvscope" train --init-from "$out-step$steps" --out "$out" --loss-png "$out/loss.png" --seed 2 \
    --steps $tune --lr 1e-3 --warmup 30 --text-repeat 0.3 $data --log-every $log "$@"
