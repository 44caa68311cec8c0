#!/bin/sh
# Trains the chat model (assets/chat) with the C++ trainer from random initialisation: the one command its
# README documents. Nothing is planted: every weight starts random (llama_init_params).
#
#   tools/train_chat_model.sh KVSCOPE OUT_DIR [--quick] [more kvscope train options]
#
# KVSCOPE is the kvscope binary, OUT_DIR the model folder to write; its loss curve goes to OUT_DIR/loss.png.
# The tokenizer is assets/default's byte-level BPE plus ChatML's <|im_start|> and <|im_end|>
# (tools/make_chat_tokenizer.py, written into a temporary folder and copied by kvscope train).
# --quick runs the same recipe for 16 steps. Equal options give byte-identical folders on any thread count.
#
# The recipe (assets/chat/README.md explains each part):
#   architecture   Qwen3-style: 3 layers, width 128, 8 query heads of width 16 over 2 K/V heads (GQA),
#                  rotary positions, QK-norm, SwiGLU 384; layer 0 slides a window of 8 positions, layers 1-2
#                  see everything; tied embeddings; 512 positions
#   data           35 % grammar text (30 % of its sentences repeat one said earlier in the sequence), 35 %
#                  whole-vocabulary copying segments (as assets/default's), 30 % chats in the ChatML template:
#                  facts, acknowledgements, small talk, questions answered from the first turn
#   loss           text and the assistant's turns in full; of copying segments only the copies; no user text
#   8000 steps     8 x 256 tokens each, AdamW lr 2e-3 (100 warm-up steps, cosine to 2e-4)
set -eu
if [ $# -lt 2 ]; then
    echo "usage: $0 KVSCOPE OUT_DIR [--quick] [kvscope train options]" >&2
    exit 2
fi
kvscope=$1 out=$2
shift 2
steps=8000 log=100
if [ "${1:-}" = "--quick" ]; then
    steps=16 log=8
    shift
fi
here=$(dirname "$0")
tok=$(mktemp -d)
trap 'rm -rf "$tok"' EXIT
/usr/bin/python3 "$here/make_chat_tokenizer.py" "$here/../assets/default" "$tok" >/dev/null
"$kvscope" train --out "$out" --loss-png "$out/loss.png" --seed 1 --tokenizer "$tok" \
    --family qwen3 --n-layer 3 --n-head 8 --n-kv-head 2 --n-embd 128 --head-dim 16 --intermediate 384 \
    --sliding-window 8 --sliding-layers 0 --n-positions 512 \
    --steps $steps --batch 8 --seq 256 --lr 2e-3 --warmup 100 --no-emb-decay \
    --mix-text 0.35 --text-repeat 0.3 --mix-copy 0 --mix-vocab 0.35 --mix-chat 0.3 --no-span-newline \
    --vocab-span 4-24 --vocab-gap 12 --vocab-repeats 4 --vocab-partial --vocab-pool 0.8,6-32 \
    --score-copies-only --log-every $log "$@"
