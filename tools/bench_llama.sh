#!/usr/bin/env bash
# kvscope next to llama.cpp on the same random weights of a real model's shape (GPT-2 124M, SmolLM2-135M or
# Qwen2.5-0.5B), in one session on this machine: kvscope bench --shape, then llama-bench on the same bytes
# converted to GGUF (F32 and F16, by
# tools/gguf_from_folder.py) and llama-batched-bench (batch 1 and 8). --repeat R rounds run each program
# once, back to back, so a change in the machine's load hits both sides; then one table with
# min / median / max over the rounds (llama-bench: over its runs) and the ratios kvscope / llama.cpp.
#
#   LLAMA_CPP_DIR=SRC [LLAMA_CPP_BIN=DIR] bash tools/bench_llama.sh [--shape gpt2|smollm2-135m|qwen2.5-0.5b]
#       [--threads N] [--repeat R] [--kvscope BIN] [--work DIR] [--out FILE] [--quick]
#
# LLAMA_CPP_DIR   a llama.cpp source tree: its gguf-py (pure Python + numpy) writes the GGUF files
# LLAMA_CPP_BIN   the folder with its llama-bench and llama-batched-bench (default $LLAMA_CPP_DIR/build/bin);
#                 kvscope does not build llama.cpp, bring a CPU build of your own
# LLAMA_CPP_COMMIT  names the llama.cpp version in the table when its build could not tell (no .git)
# --kvscope       the kvscope binary (default build/app/kvscope)
# --shape         the model shape (default gpt2)
# --work          the model folder of that shape, written by kvscope bench if absent (default
#                 build/bench-gpt2-shape for gpt2, else build/bench-SHAPE); GGUF files and raw results go next to it
# --out           where the table goes too (default: <work>-llama.txt)
# --quick         small counts, one run: checks that everything runs, the figures mean nothing
# Other processes sharing the cores change every figure: the table records the load average before
# each program ran, and says so when it was high.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=$(nproc); repeat=3; kvscope=build/app/kvscope; shape=gpt2; work=""; out=""
quick=(); pp=512; tg=128; btg=64
usage="usage: LLAMA_CPP_DIR=SRC [LLAMA_CPP_BIN=DIR] bash tools/bench_llama.sh [--shape NAME] [--threads N] [--repeat R] [--kvscope BIN] [--work DIR] [--out FILE] [--quick]"
while [ $# -gt 0 ]; do
  case "$1" in
    --shape) shape=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --kvscope) kvscope=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) quick=(--quick); repeat=1; pp=32; tg=8; btg=8; shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
case "$shape" in
  gpt2) work=${work:-build/bench-gpt2-shape} ;;
  smollm2-135m|qwen2.5-0.5b) work=${work:-build/bench-$shape} ;;
  *) echo "bench_llama: --shape must be gpt2, smollm2-135m or qwen2.5-0.5b, got '$shape'" >&2; exit 2 ;;
esac
out=${out:-$work-llama.txt}
if [ -z "${LLAMA_CPP_DIR:-}" ] || [ ! -d "$LLAMA_CPP_DIR/gguf-py" ]; then
  echo "bench_llama: set LLAMA_CPP_DIR to a llama.cpp source tree (it needs \$LLAMA_CPP_DIR/gguf-py)" >&2; exit 2
fi
bin=${LLAMA_CPP_BIN:-$LLAMA_CPP_DIR/build/bin}
for tool in llama-bench llama-batched-bench; do
  [ -x "$bin/$tool" ] || { echo "bench_llama: no $bin/$tool; set LLAMA_CPP_BIN to the folder of a llama.cpp CPU build" >&2; exit 2; }
done
[ -x "$kvscope" ] || { echo "bench_llama: no kvscope binary at $kvscope (build it, or pass --kvscope)" >&2; exit 2; }

if [ ! -f "$work/model.safetensors" ]; then
  "$kvscope" bench --shape "$shape" --work "$work" --quick --json --threads "$threads" > /dev/null
fi
res=$work-llama
mkdir -p "$res"
for t in f32 f16; do
  if [ ! "$res/$shape-$t.gguf" -nt "$work/model.safetensors" ]; then
    /usr/bin/python3 tools/gguf_from_folder.py "$work" "$res/$shape-$t.gguf" --type "$t" --placeholder-vocab --verify
  fi
done
# Every program starts with its weights in the page cache.
cat "$work/model.safetensors" "$res/$shape"-f32.gguf "$res/$shape"-f16.gguf > /dev/null

load() { cut -d' ' -f1-3 /proc/loadavg; }
# Rounds, each one run of every program back to back, so a change in the machine's load hits both sides.
rm -f "$res"/kvscope.*.json "$res"/llama-bench.*.json
: > "$res/load.txt"; : > "$res/batched.jsonl"
for round in $(seq "$repeat"); do
  echo "$round kvscope $(load)" >> "$res/load.txt"
  "$kvscope" bench --shape "$shape" --work "$work" --threads "$threads" --repeat 1 ${quick[@]+"${quick[@]}"} \
    --json > "$res/kvscope.$round.json"
  echo "$round llama-bench $(load)" >> "$res/load.txt"
  "$bin/llama-bench" -m "$res/$shape-f32.gguf,$res/$shape-f16.gguf" -p "$pp" -n "$tg" -t "$threads" \
    -r 1 -o json > "$res/llama-bench.$round.json" 2> "$res/llama-bench.err"
  echo "$round llama-batched-bench $(load)" >> "$res/load.txt"
  # The shape of kvscope's batch figures: 4-token prompts, 64 new tokens per sequence.
  "$bin/llama-batched-bench" -m "$res/$shape-f32.gguf" -c 1024 -npp 4 -ntg "$btg" -npl 1,8 -t "$threads" \
    --output-format jsonl 2> "$res/batched.err" | grep '^{' >> "$res/batched.jsonl"
done
echo "end - $(load)" >> "$res/load.txt"

/usr/bin/python3 - "$res" "$threads" "$repeat" "$pp" "$tg" "$btg" "$shape" <<'PY' | tee "$out"
import datetime, json, os, statistics, subprocess, sys
res, threads, repeat, pp, tg, btg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *map(int, sys.argv[4:7])
shape = sys.argv[7]
shape_name = {"gpt2": "GPT-2 124M", "smollm2-135m": "SmolLM2-135M", "qwen2.5-0.5b": "Qwen2.5-0.5B"}[shape]
ks = [json.load(open(f"{res}/kvscope.{r}.json")) for r in range(1, repeat + 1)]
rounds = [json.load(open(f"{res}/llama-bench.{r}.json")) for r in range(1, repeat + 1)]
runs = [x for rr in rounds for x in rr]
batched = [json.loads(line) for line in open(f"{res}/batched.jsonl")]
load = [line.split() for line in open(f"{res}/load.txt")]

def mmm(xs):
    xs = sorted(xs)
    return {"min": xs[0], "median": statistics.median(xs), "max": xs[-1]}

def kv(*keys):  # one figure per round (each round ran kvscope bench --repeat 1)
    def get(k):
        for key in keys:
            k = k[key]
        return k["median"]
    return mmm([get(k) for k in ks])

def llama(model_suffix, n_prompt, n_gen, runs=runs):
    xs = [t for r in runs if r["model_filename"].endswith(model_suffix) and r["n_prompt"] == n_prompt
          and r["n_gen"] == n_gen for t in r["samples_ts"]]
    if not xs:
        raise SystemExit(f"bench_llama: llama-bench printed no run for {model_suffix} p={n_prompt} n={n_gen}")
    return mmm(xs)

def fmt(s):
    return "—" if s is None else f"{s['min']:.1f} / {s['median']:.1f} / {s['max']:.1f}"

r0 = runs[0]
cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"], capture_output=True, text=True).stdout.strip()
rows = [  # (what, kvscope figure, llama.cpp figure, what llama.cpp ran)
    ("decode, batch 1, fp32 weights", kv("decode_tokens_per_s", "batch1"), llama("f32.gguf", 0, tg), f"llama-bench F32 tg{tg}"),
    (f"prefill {pp} tokens, fp32 weights", kv("prefill_tokens_per_s"), llama("f32.gguf", pp, 0), f"llama-bench F32 pp{pp}"),
    ("decode, batch 1, 16-bit weights", kv("decode_tokens_per_s", "bf16_batch1"), llama("f16.gguf", 0, tg),
     f"kvscope bf16 | llama-bench F16 tg{tg}"),
    (f"prefill {pp} tokens, 16-bit weights", kv("prefill_bf16_tokens_per_s"), llama("f16.gguf", pp, 0),
     f"kvscope bf16 | llama-bench F16 pp{pp}"),
    ("decode, batch 1, fp32 (batched-bench)", kv("decode_tokens_per_s", "batch1"),
     mmm([b["speed_tg"] for b in batched if b["pl"] == 1]), "llama-batched-bench F32 pl 1"),
    ("decode, batch 8 total, fp32 weights", kv("decode_tokens_per_s", "batch8"),
     mmm([b["speed_tg"] for b in batched if b["pl"] == 8]), "llama-batched-bench F32 pl 8"),
]
print(f"kvscope vs llama.cpp — {datetime.date.today()}, {cpu}, {threads} threads, {repeat} rounds, "
      f"{shape_name} shape (random weights, the same bytes in both)")
commit = os.environ.get("LLAMA_CPP_COMMIT") or f"{r0.get('build_commit', '?')} (build {r0.get('build_number', '?')})"
print(f"llama.cpp {commit}, {r0.get('cpu_info', '')}, "
      f"backend {r0.get('backends', '?')}, KV cache {r0.get('type_k', '?')}/{r0.get('type_v', '?')}, "
      f"-b {r0.get('n_batch', '?')} -ub {r0.get('n_ubatch', '?')}, flash-attn {int(bool(r0.get('flash_attn', 0)))}")
bw = kv("machine", "read_bandwidth_gb_s")
print(f"kvscope bench measured read bandwidth {fmt(bw)} GB/s in the same rounds")
print("load average (1 min) before each program, by round: " + "; ".join(
    f"{w[0]} {w[1]} {w[2]}" for w in load))
busy = max(float(w[2]) for w in load)
if busy > threads:
    print(f"  (load up to {busy:.1f} on {threads} cores: other processes shared them, every figure is below what an idle "
          "machine gives, and spinning thread pools suffer most)")
print()
print(f"{'tokens/s, min / median / max':38} {'kvscope':>22} {'llama.cpp':>22}  {'ratio':>6}  llama.cpp run")
for what, kf, lf, how in rows:
    ratio = f"{kf['median'] / lf['median']:.2f}x" if kf else "—"
    print(f"{what:38} {fmt(kf):>22} {fmt(lf):>22}  {ratio:>6}  {how}")
d = kv("decode_tokens_per_s", "batch1")["median"] / llama("f32.gguf", 0, tg)["median"]
p = kv("prefill_tokens_per_s")["median"] / llama("f32.gguf", pp, 0)["median"]
print()
b = kv("decode_tokens_per_s", "bf16_batch1")["median"] / llama("f16.gguf", 0, tg)["median"]
need_p = 0.8 if shape == "gpt2" else 1.0  # issue 5 asked 0.8 on GPT-2; issue 14 asks 1.0 on the Llama shapes
print(f"target (medians): fp32 decode {d:.2f}x llama.cpp (needs >= 1.00: {'met' if d >= 1 else 'NOT met'}), "
      f"16-bit decode {b:.2f}x (needs >= 1.00: {'met' if b >= 1 else 'NOT met'}), "
      f"prefill {pp} {p:.2f}x (needs >= {need_p:.2f}: {'met' if p >= need_p else 'NOT met'})")
# Load moves during a round less than across rounds: the ratio within each round says more than medians of both.
per_round = []
for i, (k, rr) in enumerate(zip(ks, rounds)):
    rd = k["decode_tokens_per_s"]["batch1"]["median"] / llama("f32.gguf", 0, tg, rr)["median"]
    rp = k["prefill_tokens_per_s"]["median"] / llama("f32.gguf", pp, 0, rr)["median"]
    per_round.append(f"round {i + 1}: {rd:.2f}x | {rp:.2f}x")
print("the same ratios within each round (fp32 decode | prefill): " + "; ".join(per_round))
print(f"kvscope decode: 4-token prompts + {8 if pp < 512 else 64} new tokens per sequence; "
      f"llama-bench tg{tg}: {tg} tokens from an empty cache; batched-bench: 4-token prompts + {btg} new tokens per sequence")
PY
