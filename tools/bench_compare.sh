#!/usr/bin/env bash
# kvscope next to the PyTorch reference on GPT-2 124M-shaped random weights, in one run on this
# machine: kvscope bench (table + chart) and tools/bench_reference.py (cached and uncached decode, the
# same 4-token prompt length), then the ratios.
#   bash tools/bench_compare.sh [--threads N] [--repeat R]     writes docs/bench.txt, docs/bench_steps.png
# With LLAMA_CPP_DIR set (a llama.cpp source tree, LLAMA_CPP_BIN its CPU build's bin folder), it then runs
# tools/bench_llama.sh on the same weights: kvscope and llama.cpp back to back, table in docs/bench_llama.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=$(nproc); repeat=3
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    *) echo "usage: bash tools/bench_compare.sh [--threads N] [--repeat R]" >&2; exit 2 ;;
  esac
done
bash tools/setup.sh test
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
cmake --build build -j"$(nproc)" --target kvscope
work=build/bench-gpt2-shape
mkdir -p docs
./build/app/kvscope bench --gpt2-shape --work "$work" --threads "$threads" --repeat "$repeat" \
  --chart docs/bench_steps.png > build/bench_kvscope.txt
./build/app/kvscope bench --gpt2-shape --work "$work" --threads "$threads" --repeat "$repeat" --json \
  > build/bench_kvscope.json
/usr/bin/python3 tools/bench_reference.py "$work" --threads "$threads" --repeat "$repeat" > build/bench_reference.json
/usr/bin/python3 - "$threads" <<'PY' | tee docs/bench.txt
import json, platform, subprocess, sys, datetime
k = json.load(open("build/bench_kvscope.json")); r = json.load(open("build/bench_reference.json"))
cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"], capture_output=True, text=True).stdout.strip()
print(f"kvscope vs PyTorch reference — {datetime.date.today()}, {cpu}, {sys.argv[1]} threads, GPT-2 124M shape (random weights)")
print()
print(open("build/bench_kvscope.txt").read())
kc, rc, ru = k["decode_tokens_per_s"]["batch1"]["median"], r["cached"]["tokens_per_s"]["median"], r["uncached"]["tokens_per_s"]["median"]
print(f"PyTorch reference ({r['implementation']}), prompt {r['prompt_len']} tokens:")
print(f"  cached decode   {rc:8.1f} tokens/s over {r['cached']['new_tokens']} new tokens   kvscope / reference = {kc / rc:.1f}x")
print(f"  uncached decode {ru:8.1f} tokens/s over {r['uncached']['new_tokens']} new tokens")
PY
if [ -n "${LLAMA_CPP_DIR:-}" ]; then
  bash tools/bench_llama.sh --threads "$threads" --repeat "$repeat" --kvscope build/app/kvscope --work "$work" \
    --out docs/bench_llama.txt
fi
