#!/bin/sh
# Trains the default model (assets/default) with the C++ trainer: the one command its README documents.
#
#   tools/train_default_model.sh KVSCOPE OUT_DIR [--quick] [more kvscope train options]
#
# KVSCOPE is the kvscope binary, OUT_DIR the model folder to write (its loss curve goes next to it as
# OUT_DIR/loss.png). --quick runs the same recipe for 16 steps (the train.reproducible ctest compares
# two such runs byte for byte). Equal options give byte-identical folders on any thread count.
#
# The recipe (assets/default/README.md explains each part):
#   architecture   2 layers, 4 heads, width 128, 256 positions (the engine's GPT-2 layout)
#   init           --circuit-init 3: head 0 of layer 0 starts as a previous-token head, head 0 of layer 1
#                  as an induction head reading it; tokens and positions at RMS 0.3; positions frozen
#   steps 1-600    attention only, sequences of 64 tokens: random letter/digit spans repeated 2-3 times
#   steps 601-2400 the full model on the default mix (grammar text, copied spans, repeated random spans),
#                  without a newline after the random spans
set -eu
if [ $# -lt 2 ]; then
    echo "usage: $0 KVSCOPE OUT_DIR [--quick] [kvscope train options]" >&2
    exit 2
fi
kvscope=$1 out=$2
shift 2
steps=2400 phase=600 log=100
if [ "${1:-}" = "--quick" ]; then
    steps=16 phase=6 log=8
    shift
fi
exec "$kvscope" train --out "$out" --loss-png "$out/loss.png" --seed 1 \
    --n-layer 2 --n-head 4 --n-embd 128 --n-positions 256 \
    --circuit-init 3 --tok-init 0.3 --pos-init 0.3 --pos-lr 0 --no-emb-decay \
    --steps $steps --batch 16 --seq 128 --lr 1e-3 --warmup 50 \
    --copy-phase $phase --copy-seq 64 --copy-span 8-24 --attn-only $phase \
    --no-span-newline --log-every $log "$@"
