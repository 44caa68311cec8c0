#!/bin/sh
# Regenerate the README screenshots in docs/screenshots/ with the window's scripted mode under Xvfb.
#   tools/screenshots.sh [path/to/kvscope [NAME...]]   (default: build/app/kvscope, then build-gui/app/kvscope;
#                                                       NAMEs: only those pictures, e.g. overview memory)
# Needs xvfb-run (apt install xvfb). The scripts below are the same intents the buttons send.
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-}
[ $# -gt 0 ] && shift
names=${*:-overview window cache_off memory sinks encoder_decoder rotary kv_groups long_context chat cache_lab_window logit_lens}
if [ -z "$bin" ]; then
  for b in "$repo/build/app/kvscope" "$repo/build-gui/app/kvscope"; do [ -x "$b" ] && bin=$b && break; done
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "error: kvscope binary not found; pass its path" >&2; exit 1; }
out="$repo/docs/screenshots"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# 1. Prefill then four decode steps, viewing the prefill step of the default model's strongest induction
#    head (layer 1 head 2): the repeated words look at the word after their first occurrence.
cat > "$work/overview.txt" <<'S'
prompt Tom saw the cookie at school. Tom saw the
prefill
decode 4
layer 1
head 2
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
# 5. Window 5 with 2 attention sinks: kept, sunk (magenta) and evicted positions in the KV cache, the
#    mask's rule and the attention row's sink columns.
cat > "$work/sinks.txt" <<'S'
options window=5 sinks=2 chunk=4 max-new=8
prompt The cat sat on the mat because it was
run end
show-step 2
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
# 7. A rotary model (assets/llama-gqa): the Rotary tab for layer 1 head 2, the query at position 29 and
#    the key at position 4 selected in the attention map.
cat > "$work/rotary.txt" <<S
model $repo/assets/llama-gqa
prompt The quick brown fox jumps over the lazy dog and the cat
prefill
decode 2
layer 1
head 2
select 29 4
panel Rotary
S
# 8. Grouped-query attention: random weights with SmolLM2's head layout (9 query heads, 3 K/V heads) and
#    llama-gqa's tokenizer; the KV cache panel's groups and bytes, all heads grouped, query head 4 selected.
/usr/bin/python3 "$repo/tools/make_llama_model.py" "$work/gqa_9x3" --vocab 768 --hidden 72 --inner 96 --layers 2 \
  --heads 9 --kv-heads 3 --seed 21 --no-tokenizer >/dev/null
cp "$repo/assets/llama-gqa/vocab.json" "$repo/assets/llama-gqa/merges.txt" "$work/gqa_9x3/"
cat > "$work/kv_groups.txt" <<S
model $work/gqa_9x3
prompt The quick brown fox jumps over the lazy dog and the cat
prefill
decode 2
layer 1
head 4
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
# 10. A three-turn chat on assets/llama-gqa with a Llama 3 chat template (built as tests/cli/check_chat.py
#    builds it): the conversation in Controls, the turn marks on the timeline, per-turn rows with the cache
#    on and off.
/usr/bin/python3 -c "import sys; sys.path.insert(0, '$repo/tests/cli'); from check_chat import make_chat_folder; make_chat_folder('$work', 'llama3')"
cat > "$work/chat.txt" <<S
model $work/llama3-chat
options max-new=8
chat Hello there
chat What is a cat?
chat Thanks
panel Cache on vs off
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
# Each picture at 1920x1080 (NAME.png, the README's) and at 1280x720 (NAME_1280x720.png): the layout adapts
# (tabs where panels would not fit side by side), and both sizes should be looked at after a layout change.
for name in $names; do
  [ -f "$work/$name.txt" ] || { echo "error: no picture named $name" >&2; exit 1; }
  for size in 1920x1080 1280x720; do
    file=$name.png
    [ "$size" = 1920x1080 ] || file=${name}_$size.png
    xvfb-run -a -s "-screen 0 2000x1200x24" "$bin" gui --script "$work/$name.txt" --screenshot "$out/$file" --size $size
    echo "wrote $out/$file"
  done
done
