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
#   LLAMA_CPP_BIN=DIR bash tools/bench_llama.sh --gguf FILE [--threads N] [--repeat R] [--kvscope BIN] [--out FILE] [--quick]
#
# --gguf          instead of a shape: one GGUF file as both programs read it (e.g. Q8_0 or Q4_K_M made by
#                 llama-quantize; kvscope computes on its blocks in place): kvscope bench --model FILE,
#                 llama-bench and llama-batched-bench -m FILE. Rows: decode, prefill, batch 8 in the file's types.
#                 The results go next to the file (FILE without .gguf, then -llama/); LLAMA_CPP_DIR is not needed
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
# Other processes sharing the cores change every figure: each program's run records the CPU time the
# rest of the machine used meanwhile (from /proc/stat, and the hypervisor's steal), and when that passes
# 5 % of the cores in any round the table prints no verdict. The verdict is the median of the per-round
# ratios (both programs ran seconds apart), not a ratio of medians.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=$(nproc); repeat=3; kvscope=build/app/kvscope; shape=gpt2; work=""; out=""; gguf=""
quick=(); pp=512; tg=128; btg=64
usage="usage: LLAMA_CPP_DIR=SRC [LLAMA_CPP_BIN=DIR] bash tools/bench_llama.sh [--shape NAME | --gguf FILE] [--threads N] [--repeat R] [--kvscope BIN] [--work DIR] [--out FILE] [--quick]"
while [ $# -gt 0 ]; do
  case "$1" in
    --shape) shape=$2; shift 2 ;;
    --gguf) gguf=$2; shift 2 ;;
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
if [ -n "$gguf" ]; then
  [ -f "$gguf" ] || { echo "bench_llama: --gguf $gguf is not a file" >&2; exit 2; }
  shape=gguf; work=${gguf%.gguf}
fi
out=${out:-$work-llama.txt}
if [ -z "$gguf" ] && { [ -z "${LLAMA_CPP_DIR:-}" ] || [ ! -d "$LLAMA_CPP_DIR/gguf-py" ]; }; then
  echo "bench_llama: set LLAMA_CPP_DIR to a llama.cpp source tree (it needs \$LLAMA_CPP_DIR/gguf-py)" >&2; exit 2
fi
bin=${LLAMA_CPP_BIN:-${LLAMA_CPP_DIR:-}/build/bin}
for tool in llama-bench llama-batched-bench; do
  [ -x "$bin/$tool" ] || { echo "bench_llama: no $bin/$tool; set LLAMA_CPP_BIN to the folder of a llama.cpp CPU build" >&2; exit 2; }
done
[ -x "$kvscope" ] || { echo "bench_llama: no kvscope binary at $kvscope (build it, or pass --kvscope)" >&2; exit 2; }

res=$work-llama
if [ -n "$gguf" ]; then
  mkdir -p "$res"
  cat "$gguf" > /dev/null  # both programs start with the file in the page cache
else
  if [ ! -f "$work/model.safetensors" ]; then
    "$kvscope" bench --shape "$shape" --work "$work" --quick --json --threads "$threads" > /dev/null
  fi
  mkdir -p "$res"
  for t in f32 f16; do
    if [ ! "$res/$shape-$t.gguf" -nt "$work/model.safetensors" ]; then
      /usr/bin/python3 tools/gguf_from_folder.py "$work" "$res/$shape-$t.gguf" --type "$t" --placeholder-vocab --verify
    fi
  done
  # Every program starts with its weights in the page cache.
  cat "$work/model.safetensors" "$res/$shape"-f32.gguf "$res/$shape"-f16.gguf > /dev/null
fi

# Runs a program, then appends to cpu.txt: round, label, wall seconds, its own CPU seconds, the CPU
# seconds the rest of the machine used meanwhile, and the seconds the hypervisor stole.
measured() {
  local round=$1 label=$2; shift 2
  /usr/bin/python3 - "$res/cpu.txt" "$round" "$label" "$@" <<'PY'
import os, subprocess, sys, time
tick = os.sysconf("SC_CLK_TCK")
def counters():
    f = list(map(int, open("/proc/stat").readline().split()[1:9]))
    user, nice, system, idle, iowait, irq, softirq, steal = f
    return (user + nice + system + irq + softirq) / tick, steal / tick
b0, s0 = counters()
t0 = time.monotonic()
child = subprocess.Popen(sys.argv[4:])
_, status, usage = os.wait4(child.pid, 0)
wall = time.monotonic() - t0
b1, s1 = counters()
own = usage.ru_utime + usage.ru_stime
with open(sys.argv[1], "a") as f:
    f.write(f"{sys.argv[2]} {sys.argv[3]} {wall:.2f} {own:.2f} {max(0.0, b1 - b0 - own):.2f} {s1 - s0:.2f}\n")
sys.exit(os.waitstatus_to_exitcode(status))
PY
}
# Rounds, each one run of every program back to back, so a change in the machine's load hits both sides.
rm -f "$res"/kvscope.*.json "$res"/llama-bench.*.json
: > "$res/cpu.txt"; : > "$res/batched.jsonl"
if [ -n "$gguf" ]; then
  kvscope_model=(--model "$gguf"); llama_models=$gguf; batched_model=$gguf
else
  kvscope_model=(--shape "$shape" --work "$work"); llama_models=$res/$shape-f32.gguf,$res/$shape-f16.gguf; batched_model=$res/$shape-f32.gguf
fi
for round in $(seq "$repeat"); do
  measured "$round" kvscope "$kvscope" bench "${kvscope_model[@]}" --threads "$threads" --repeat 1 ${quick[@]+"${quick[@]}"} \
    --json > "$res/kvscope.$round.json"
  measured "$round" llama-bench "$bin/llama-bench" -m "$llama_models" -p "$pp" -n "$tg" -t "$threads" \
    -r 1 -o json > "$res/llama-bench.$round.json" 2> "$res/llama-bench.err"
  # The shape of kvscope's batch figures: 4-token prompts, 64 new tokens per sequence.
  measured "$round" llama-batched-bench "$bin/llama-batched-bench" -m "$batched_model" -c 1024 -npp 4 -ntg "$btg" -npl 1,8 -t "$threads" \
    --output-format jsonl 2> "$res/batched.err" | grep '^{' | sed "s/^{/{\"round\": $round, /" >> "$res/batched.jsonl"
done

/usr/bin/python3 - "$res" "$threads" "$repeat" "$pp" "$tg" "$btg" "$shape" "$gguf" <<'PY' | tee "$out"
import datetime, json, os, statistics, subprocess, sys
res, threads, repeat, pp, tg, btg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *map(int, sys.argv[4:7])
shape, gguf = sys.argv[7], sys.argv[8]
shape_name = {"gpt2": "GPT-2 124M", "smollm2-135m": "SmolLM2-135M", "qwen2.5-0.5b": "Qwen2.5-0.5B"}.get(shape)
ks = [json.load(open(f"{res}/kvscope.{r}.json")) for r in range(1, repeat + 1)]
rounds = [json.load(open(f"{res}/llama-bench.{r}.json")) for r in range(1, repeat + 1)]
runs = [x for rr in rounds for x in rr]
batched = [json.loads(line) for line in open(f"{res}/batched.jsonl")]
cpu_rows = [line.split() for line in open(f"{res}/cpu.txt")]  # round label wall own others steal

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
# Virtual machines often name only the vendor ("AMD EPYC"): the family, model and vector width say which.
cpuinfo = {}
for line in open("/proc/cpuinfo"):
    key, _, value = line.partition(":")
    cpuinfo.setdefault(key.strip(), value.strip())
flags = cpuinfo.get("flags", "").split()
isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
cpu += f" (family {cpuinfo.get('cpu family', '?')} model {cpuinfo.get('model', '?')}, {isa})"
llc = ks[0]["machine"].get("llc_bytes", 0)

def kv_in(*keys):  # kvscope's figure in round i
    def get(i):
        k = ks[i]
        for key in keys:
            k = k[key]
        return k["median"]
    return get

def llama_in(model_suffix, n_prompt, n_gen):  # llama-bench's figure in round i
    return lambda i: llama(model_suffix, n_prompt, n_gen, rounds[i])["median"]

def batched_in(pl):
    def get(i):
        xs = [b["speed_tg"] for b in batched if b.get("round") == i + 1 and b["pl"] == pl]
        if not xs:
            raise SystemExit(f"bench_llama: llama-batched-bench printed no pl {pl} run in round {i + 1}")
        return statistics.median(xs)
    return get

if gguf:  # one file, as both read it: its types name the rows
    base = os.path.basename(gguf)
    rows = [
        ("decode", "decode, batch 1", kv_in("decode_tokens_per_s", "batch1"), llama_in(base, 0, tg), f"llama-bench tg{tg}"),
        ("prefill", f"prefill {pp} tokens", kv_in("prefill_tokens_per_s"), llama_in(base, pp, 0), f"llama-bench pp{pp}"),
        ("decode_batched", "decode, batch 1 (batched-bench)", kv_in("decode_tokens_per_s", "batch1"), batched_in(1),
         "llama-batched-bench pl 1"),
        ("batch8", "decode, batch 8 total", kv_in("decode_tokens_per_s", "batch8"), batched_in(8), "llama-batched-bench pl 8"),
    ]
else:
  rows = [  # (key, what, kvscope in round i, llama.cpp in round i, what llama.cpp ran)
    ("decode", "decode, batch 1, fp32 weights", kv_in("decode_tokens_per_s", "batch1"), llama_in("f32.gguf", 0, tg),
     f"llama-bench F32 tg{tg}"),
    ("prefill", f"prefill {pp} tokens, fp32 weights", kv_in("prefill_tokens_per_s"), llama_in("f32.gguf", pp, 0),
     f"llama-bench F32 pp{pp}"),
    ("decode16", "decode, batch 1, 16-bit weights", kv_in("decode_tokens_per_s", "bf16_batch1"),
     llama_in("f16.gguf", 0, tg), f"kvscope bf16 | llama-bench F16 tg{tg}"),
    ("prefill16", f"prefill {pp} tokens, 16-bit weights", kv_in("prefill_bf16_tokens_per_s"),
     llama_in("f16.gguf", pp, 0), f"kvscope bf16 | llama-bench F16 pp{pp}"),
    ("decode_batched", "decode, batch 1, fp32 (batched-bench)", kv_in("decode_tokens_per_s", "batch1"), batched_in(1),
     "llama-batched-bench F32 pl 1"),
    ("batch8", "decode, batch 8 total, fp32 weights", kv_in("decode_tokens_per_s", "batch8"), batched_in(8),
     "llama-batched-bench F32 pl 8"),
]
print(f"kvscope vs llama.cpp — {datetime.date.today()}, {cpu}"
      f"{f', {llc / 2**20:.0f} MiB last-level cache' if llc else ''}, {threads} threads, {repeat} rounds, "
      + (f"{os.path.basename(gguf)} (the same file in both)" if gguf else
         f"{shape_name} shape (random weights, the same bytes in both)"))
commit = os.environ.get("LLAMA_CPP_COMMIT") or f"{r0.get('build_commit', '?')} (build {r0.get('build_number', '?')})"
print(f"llama.cpp {commit}, {r0.get('cpu_info', '')}, "
      f"backend {r0.get('backends', '?')}, KV cache {r0.get('type_k', '?')}/{r0.get('type_v', '?')}, "
      f"-b {r0.get('n_batch', '?')} -ub {r0.get('n_ubatch', '?')}, flash-attn {int(bool(r0.get('flash_attn', 0)))}")
bw = kv("machine", "read_bandwidth_gb_s")
print(f"kvscope bench measured read bandwidth {fmt(bw)} GB/s in the same rounds")
# The rest of the machine's CPU time while each program ran, as a share of all cores.
n_cores = os.cpu_count()
shared = []
notes = []
for rnd, label, wall, own, others, steal in cpu_rows:
    wall, others, steal = float(wall), float(others), float(steal)
    share, stolen = others / (wall * n_cores), steal / (wall * n_cores)
    notes.append(f"{rnd} {label} {100 * share:.0f}%" + (f" (+{100 * stolen:.0f}% stolen)" if stolen >= 0.005 else ""))
    if share > 0.05 or stolen > 0.05:
        shared.append(f"round {rnd} {label}")
print("other processes' CPU time while each program ran, share of the cores: " + "; ".join(notes))
print()
print(f"{'tokens/s, min / median / max':38} {'kvscope':>22} {'llama.cpp':>22}  {'ratio':>6}  llama.cpp run")
ratios = {}
for key, what, kf, lf, how in rows:
    ks_fig = [kf(i) for i in range(repeat)]
    ls_fig = [lf(i) for i in range(repeat)]
    ratios[key] = [a / b for a, b in zip(ks_fig, ls_fig)]
    print(f"{what:38} {fmt(mmm(ks_fig)):>22} {fmt(mmm(ls_fig)):>22}  {statistics.median(ratios[key]):>5.2f}x  {how}")
print()
print("ratio = median of the per-round ratios (both programs ran seconds apart); by round: " + "; ".join(
    f"{key} " + " ".join(f"{x:.2f}" for x in ratios[key]) for key, *_ in rows))

# Decode streams every weight once per token, so tokens/s x bytes per token is the rate each program read
# memory at; beside the probe kvscope bench ran in the same round it shows how far either could still go.
# A ratio of r needs llama.cpp below 1/r of what the machine reads (the same bytes: one GGUF tensor per
# kvscope matrix, the tied embedding read once as the output layer).
print()
print("decode read rate, GB/s = tokens/s x bytes per token, medians (share of kvscope bench's probe in the same round, and the ratio at that probe: medians of the per-round figures):")
for label, key, kf, lf, probe_key, bytes_key in ((
        ("file's types, llama-bench", "decode", kv_in("decode_tokens_per_s", "batch1"), llama_in(os.path.basename(gguf), 0, tg),
         "read_bandwidth_gb_s", "weight_bytes_per_token"),) if gguf else (
        ("fp32, llama-bench", "decode", kv_in("decode_tokens_per_s", "batch1"), llama_in("f32.gguf", 0, tg),
         "read_bandwidth_gb_s", "weight_bytes_per_token"),
        ("fp32, batched-bench", "decode_batched", kv_in("decode_tokens_per_s", "batch1"), batched_in(1),
         "read_bandwidth_gb_s", "weight_bytes_per_token"),
        ("16-bit", "decode16", kv_in("decode_tokens_per_s", "bf16_batch1"), llama_in("f16.gguf", 0, tg),
         "read_bandwidth_bf16_set_gb_s", "weight_bytes_per_token_bf16"))):
    per = []
    for i in range(repeat):
        step = ks[i]["bounds"][bytes_key] / 1e9
        probe = ks[i]["machine"][probe_key]["median"]
        per.append((kf(i) * step, lf(i) * step, probe))
    kr, lr = (statistics.median(x[j] for x in per) for j in range(2))  # shares and ceiling: per round, then
    k_share, l_share = (statistics.median(x[j] / x[2] for x in per) for j in range(2))  # the median, as ratios
    ceiling = statistics.median(x[2] / x[1] for x in per)
    print(f"  {label:20} kvscope {kr:5.1f} ({100 * k_share:3.0f} %), llama.cpp {lr:5.1f} ({100 * l_share:3.0f} %); "
          f"kvscope at the probe would be {ceiling:.2f}x llama.cpp")

def verdict(name, targets):
    parts = [f"{what} {statistics.median(ratios[key]):.2f}x (needs >= {need:.2f}: "
             f"{'met' if statistics.median(ratios[key]) >= need else 'NOT met'})" for key, what, need in targets]
    print(f"{name}: " + ", ".join(parts))

if shared:
    print("no verdict: other processes used more than 5 % of the cores during " + ", ".join(shared) +
          "; rerun on a quiet machine")
elif gguf:  # issue 48: at least llama.cpp's speed on its own file
    verdict("quantized files target", [("decode", "decode", 1.0), ("prefill", f"prefill {pp}", 1.0)])
else:
    need_p = 0.8 if shape == "gpt2" else 1.0  # issue 5 asked 0.8 on GPT-2; issue 14 asks 1.0 on the Llama shapes
    verdict("modern decoders target", [("decode", "fp32 decode", 1.0), ("decode16", "16-bit decode", 1.0),
                                       ("prefill", f"prefill {pp}", need_p)])
    verdict("bandwidth-limit target", [("decode", "fp32 decode", 1.3), ("decode16", "16-bit decode", 1.3),
                                       ("batch8", "batch 8", 1.5), ("prefill", f"prefill {pp}", 1.5)])
print(f"kvscope decode: 4-token prompts + {8 if pp < 512 else 64} new tokens per sequence; "
      f"llama-bench tg{tg}: {tg} tokens from an empty cache; batched-bench: 4-token prompts + {btg} new tokens per sequence")
PY
