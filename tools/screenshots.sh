#!/bin/sh
# Regenerate the README screenshots in docs/screenshots/ with the window's scripted mode under Xvfb.
#   tools/screenshots.sh [path/to/kvscope [NAME...]]   (default: build/app/kvscope, then build-gui/app/kvscope;
#                                                       NAMEs: only those pictures, e.g. overview memory)
# Needs xvfb-run (apt install xvfb). The scripts below are the same intents the buttons send.
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-}
[ $# -gt 0 ] && shift
names=${*:-overview window cache_off memory sinks encoder_decoder rotary kv_cache kv_groups long_context chat cache_lab_window logit_lens}
if [ -z "$bin" ]; then
  for b in "$repo/build/app/kvscope" "$repo/build-gui/app/kvscope"; do [ -x "$b" ] && bin=$b && break; done
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "error: kvscope binary not found; pass its path" >&2; exit 1; }
out="$repo/docs/screenshots"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# Each script ends in the workspace its picture is about (the bar at the top: Step, Cache, Memory, Lab, Chat).
# 1. Step: prefill then four decode steps, viewing the prefill step of the default model's strongest induction
#    head (layer 1 head 1, `kvscope heads`): the repeated words look at the word after their first occurrence.
cat > "$work/overview.txt" <<'S'
prompt Tom saw the cookie at school. Tom saw the
prefill
decode 4
layer 1
head 1
show-step 0
select 10 4
S
# 2. Sliding window 6, prefill in chunks of 4: the window band in the mask, evicted tokens greyed,
#    all heads of a layer on a log scale.
cat > "$work/window.txt" <<'S'
options chunk=4 window=6
prompt The cat sat on the mat because it was tired and the dog
step 6
show-step 2
layer 1
view all-heads
scale log
S
# 3. Cache off for one step: the comparison panel and the full recompute map.
cat > "$work/cache_off.txt" <<'S'
prompt Once upon a time there was a
prefill
decode 3
cache off
decode 1
panel Cache on vs off
values scores
layer 1
head 1
S
# 4. A batch of 3 sequences over one paged pool (blocks of 4) sharing a system prompt, each with its own
#    suffix: the Memory panel at the prefill step (shared blocks x3, the partly shared block copied on
#    write by sequences 1 and 2), the timeline of sequence 1 with its mapped positions in teal.
cat > "$work/memory.txt" <<'S'
options block=4 share=1 seqs=3 temperature=0.8 max-new=3
prompt Be kind and brief.
suffix 1  Why?
suffix 2  Who sat?
prefill
decode 2
sequence 1
show-step 0
S
# 5. Cache: window 5 with 2 attention sinks: kept, sunk (magenta) and evicted positions in the KV cache.
cat > "$work/sinks.txt" <<'S'
options window=5 sinks=2 chunk=4 max-new=8
prompt The cat sat on the mat because it was
run end
show-step 2
workspace Cache
S
# 6. The encoder-decoder (assets/encoder-decoder), loaded as the Model panel's picker does, at the step
#    that ran the encoder: the source pane and 'encoder ran here', cross-attention of the prefill's decoder
#    queries over the source tokens (row-normalised), the growing self cache beside the fixed cross cache.
cat > "$work/encoder_decoder.txt" <<S
model $repo/assets/encoder-decoder
source the cat sat on the mat
prompt le chat est assis
run 8
layer 1
head 2
attention cross
rownorm on
show-step 0
S
# 7. The trained chat model (assets/chat): the Rotary tab for layer 0 head 5, its previous-token head (its
#    score by distance peaks at distance 1 within its window), the query "by" (position 10) and the key "is" (9).
cat > "$work/rotary.txt" <<S
model $repo/assets/chat
prompt Anna has a small duck. Tom is by the river.
prefill
layer 0
head 5
select 10 9
panel Rotary
S
# 8a. Cache: the trained chat model's cache after a prefill, layer 0 (it slides a window of 8: the rows it no
#     longer stores are dark), its K/V heads section open (8 query heads over 2 K/V heads, bytes per token).
cat > "$work/kv_cache.txt" <<S
model $repo/assets/chat
prompt Anna has a small duck. Tom is by the river. Anna has a small duck.
prefill
layer 0
head 5
kv-heads open
workspace Cache
S
# 8. Grouped-query attention on the trained chat model (8 query heads over 2 K/V heads): layer 0, all heads
#    grouped, query head 5 selected: heads 4-7 read the same keys and values and do different things.
cat > "$work/kv_groups.txt" <<S
model $repo/assets/chat
prompt Anna has a small duck. Tom is by the river. Anna has a small duck.
prefill
layer 0
head 5
view all-heads
kv-heads open
S
# 9. An 8,192-token context on a rotary model (llama-gqa with max_position_embeddings raised to 8256): the
#    prefill's 8192 x 8192 attention map as an overview, each pixel the strongest cell of its block, log scale.
mkdir -p "$work/llama-gqa-8k"
cp "$repo/assets/llama-gqa/"* "$work/llama-gqa-8k/"
sed -i 's/"max_position_embeddings": 256/"max_position_embeddings": 8256/' "$work/llama-gqa-8k/config.json"
# 17897 characters of a repeated sentence are 8192 tokens with llama-gqa's tokenizer.
long=$(/usr/bin/python3 -c "print(('The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat by the door. ' * 200)[:17897], end='')")
cat > "$work/long_context.txt" <<S
compare off
model $work/llama-gqa-8k
prompt $long
prefill
layer 1
head 2
scale log
S
# 10. A three-turn chat on the trained chat model (assets/chat): facts, then two questions. The step where the
#     third answer's " is" (position 98) picks " by": every head of layer 2 looks back at the first turn's " by"
#     (position 15; head 3 with 0.885 of its weight).
cat > "$work/chat.txt" <<S
model $repo/assets/chat
options max-new=16
chat Anna has a small duck. Tom is by the river. Ben has a red kite.
chat What does Anna have?
chat Where is Tom?
layer 2
head 3
show-step 17
view all-heads
workspace Chat
S
# 11. The default model's prefill of a repeated sentence, layer 1: the K/V quant tab (int4, G 8, R 4) and the
#     Cache lab tab's table for the default configurations on the sequence's own tokens.
cat > "$work/cache_lab_window.txt" <<'S'
prompt Tom saw the cat. Tom saw the dog. Tom saw the cat. Tom
prefill
layer 1
quant-view int4 8 4
panel K/V quant
lab
panel Cache lab
S
# 12. The default model's prompt, the Logit lens tab at ' at' (position 5): the embeddings row names the input
#     token itself, the first layer moves towards ' school', the full model's choice.
cat > "$work/logit_lens.txt" <<'S'
prompt Tom saw the cookie at school. Tom saw the
prefill
select 5 0
panel Logit lens
S
# Each picture at 1920x1080 (NAME.png, the README's) and at 1280x720 (NAME_1280x720.png): both sizes should
# be looked at after a layout change.
for name in $names; do
  [ -f "$work/$name.txt" ] || { echo "error: no picture named $name" >&2; exit 1; }
  for size in 1920x1080 1280x720; do
    file=$name.png
    [ "$size" = 1920x1080 ] || file=${name}_$size.png
    # The picture this tool made last time (in git, so kvscope's ledger may not know it): replaced by name.
    rm -f "$out/$file"
    xvfb-run -a -s "-screen 0 2000x1200x24" "$bin" gui --script "$work/$name.txt" --screenshot "$out/$file" --size $size
    echo "wrote $out/$file"
  done
done
