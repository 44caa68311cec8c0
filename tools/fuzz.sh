#!/usr/bin/env bash
# Builds every libFuzzer target (tests/fuzz/fuzz_*.cpp) with clang, ASan and UBSan, then runs each
# for a fixed time. Exit status: 0 all clean, 1 a target found a crash (input saved under
# <build>/artifacts/), 77 clang or libFuzzer is not available (ctest counts that as skipped).
#
#   tools/fuzz.sh                 short pass, 20 s per target (what CI runs via ctest, with 10 s)
#   tools/fuzz.sh 3600            long pass: an hour per target; the corpus in <build>/corpus/ grows
#                                 across runs, so repeated long runs keep making progress
#   tools/fuzz.sh 60 fuzz_config  only the named targets
#
# Environment: KVSCOPE_FUZZ_BUILD (build dir, default <repo>/build-fuzz), JOBS (build jobs, default 2).
# To reproduce a crash: <build>/tests/fuzz/<target> <build>/artifacts/<target>/crash-...
set -euo pipefail

seconds=${1:-20}
shift || true
script_dir=${BASH_SOURCE[0]%/*}
[ "$script_dir" = "${BASH_SOURCE[0]}" ] && script_dir=.
root=$(cd "$script_dir/.." && pwd)
build=${KVSCOPE_FUZZ_BUILD:-$root/build-fuzz}
jobs=${JOBS:-2}

# pass 1: is libFuzzer there at all?
if ! command -v clang++ >/dev/null 2>&1 || ! command -v clang >/dev/null 2>&1; then
    echo "fuzz: clang/clang++ not found; skipping (apt-get install clang libclang-rt-dev)"
    exit 77
fi
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
    >"$probe_dir/probe.cpp"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe_dir/probe.cpp" -o "$probe_dir/probe" \
        >"$probe_dir/log" 2>&1; then
    echo "fuzz: clang++ cannot link libFuzzer; skipping (install libclang-rt-<version>-dev)"
    sed 's/^/  /' "$probe_dir/log" | head -5
    exit 77
fi

# pass 2: build the library and the targets with coverage instrumentation
if [ $# -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for f in "$root"/tests/fuzz/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
mkdir -p "$build"
sanitize="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer"
# -O1 with line tables (-g1): what libFuzzer's docs suggest, and half the build time of -O2 -g.
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS=$sanitize" \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
    -DKVSCOPE_FUZZ=ON -DKVSCOPE_GUI=OFF -DBUILD_TESTING=OFF -DKVSCOPE_NATIVE=OFF >"$build/configure.log" 2>&1 \
    || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j"$jobs" --target "${targets[@]}"

# pass 3: seeds (a valid tiny safetensors file, config.json variants) and a token dictionary
seeds="$build/seeds"
mkdir -p "$seeds/fuzz_safetensors" "$seeds/fuzz_config" "$seeds/fuzz_prompt_cache"
python3 - "$seeds" <<'PY'
import json, struct, sys, os
out = sys.argv[1]
def st(name, header, data):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(os.path.join(out, "fuzz_safetensors", name), "wb").write(struct.pack("<Q", len(h)) + h + data)
st("two_f32", {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
               "b": {"dtype": "F32", "shape": [], "data_offsets": [8, 12]}},
   struct.pack("<3f", 1.0, -2.0, 0.5))
st("mixed", {"__metadata__": {"format": "pt"},
             "h": {"dtype": "F16", "shape": [1, 2], "data_offsets": [0, 4]},
             "b": {"dtype": "BF16", "shape": [1], "data_offsets": [4, 6]},
             "z": {"dtype": "F32", "shape": [0, 3], "data_offsets": [6, 6]}},
   struct.pack("<3H", 0x3C00, 0xC000, 0x3F80))
st("empty", {}, b"")
gpt2 = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "layer_norm_epsilon": 1e-05,
        "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
        "summary_activation": None, "vocab_size": 50257}
ext = {"vocab_size": 300, "n_positions": 64, "n_embd": 48, "n_layer": 3, "n_head": 6, "n_inner": None,
       "activation_function": "relu", "layer_norm_epsilon": 0.001, "tie_word_embeddings": False,
       "qkv_bias": False, "lm_head_bias": True, "norm_position": "post", "position_embedding": "sinusoidal",
       "embedding_scale": 6.9282, "final_layer_norm": False}
for name, doc in (("gpt2", gpt2), ("extensions", ext)):
    open(os.path.join(out, "fuzz_config", name + ".json"), "w").write(json.dumps(doc, indent=2))
open(os.path.join(out, "fuzz_config", "escapes.json"), "w").write('["\\ud83d\\ude00\\u0120\\n", -0.5e-3, {}]')
# A prompt cache of fuzz_prompt_cache.cpp's made-up model (L=1, H=2, D=4, N=3); the checksum is left zero
# because the target also reads every input with the right checksum put in.
pc = b"KVPROMPT" + struct.pack("<I", 1)
for s in (b"fuzz-config", b"f32", b"fuzz", b"f32"):
    pc += struct.pack("<I", len(s)) + s
pc += struct.pack("<Q4q3i", 0x1234, 1, 2, 4, 3, 7, 0, 49) + struct.pack("<48f", *[i / 8 for i in range(48)])
open(os.path.join(out, "fuzz_prompt_cache", "three_tokens"), "wb").write(pc + bytes(8))
# model.safetensors.index.json beside fuzz_checkpoint_index.cpp's two shards (a.safetensors: x, b.safetensors: y)
os.makedirs(os.path.join(out, "fuzz_checkpoint_index"), exist_ok=True)
for name, doc in (("valid", {"metadata": {"total_size": 16}, "weight_map": {"x": "a.safetensors", "y": "b.safetensors"}}),
                  ("swapped", {"weight_map": {"x": "b.safetensors", "y": "a.safetensors"}}),
                  ("outside", {"weight_map": {"x": "../a.safetensors", "y": "b.safetensors"}})):
    open(os.path.join(out, "fuzz_checkpoint_index", name + ".json"), "w").write(json.dumps(doc))
# tokenizer.json: a byte-level one with the Llama 3 regex and a BOS, a SentencePiece one with byte
# fallback; mode byte 3 (load, allow_special), the text after a 0 byte
os.makedirs(os.path.join(out, "fuzz_tokenizer_json"), exist_ok=True)
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
byte_map = {b: chr(b) for b in bs}
n = 0
for b in range(256):
    if b not in byte_map:
        byte_map[b] = chr(256 + n)
        n += 1
vocab = {byte_map[b]: b for b in range(256)}
vocab.update({"ab": 256, "abc": 257})
llama3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
byte_level = {
    "added_tokens": [{"id": 258, "content": "<|bos|>", "special": True}, {"id": 259, "content": "<t>", "special": False}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": llama3}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|bos|>"}}, {"Sequence": {"id": "A"}}]},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": vocab, "merges": ["a b", ["ab", "c"]], "ignore_merges": True},
}
sp_vocab = {"<unk>": 0, "<s>": 1}
for b in range(256):
    sp_vocab["<0x%02X>" % b] = 2 + b
for t in ("\u2581", "a", "b", "\u2581a", "ab", "\u2581ab"):
    sp_vocab[t] = len(sp_vocab)
sentencepiece = {
    "added_tokens": [{"id": 0, "content": "<unk>", "special": True}, {"id": 1, "content": "<s>", "special": True}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                       {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": None,
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}]},
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                                                 {"type": "ByteFallback"}, {"type": "Fuse"},
                                                 {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "vocab": sp_vocab, "merges": ["\u2581 a", "a b", "\u2581a b"], "byte_fallback": True, "unk_token": "<unk>"},
}
for name, doc in (("byte_level", byte_level), ("sentencepiece", sentencepiece)):
    body = json.dumps(doc).encode() + b"\0" + "I'M <t> caf\u00e9 12345 <|bos|> \u2581x".encode()
    open(os.path.join(out, "fuzz_tokenizer_json", name), "wb").write(b"\x03" + body)
PY
# the real chat templates seed fuzz_jinja; its dictionary holds the tag and filter words they use
mkdir -p "$seeds/fuzz_jinja"
cp "$root"/tests/data/chat_templates/*.jinja "$seeds/fuzz_jinja/"
jinja_dict="$build/jinja.dict"
cat >"$jinja_dict" <<'DICT'
"{{"
"}}"
"{%"
"%}"
"{%-"
"-%}"
"{#"
"#}"
"for "
" in "
"endfor"
"if "
"elif "
"else"
"endif"
"set "
"endset"
"macro "
"endmacro"
"namespace("
"loop.index"
"loop.last"
"messages"
"message['content']"
"|tojson"
"|trim"
"|length"
"|selectattr('role', 'equalto', 'system')"
"|map(attribute='role')"
"is defined"
"is string"
"raise_exception("
"[::-1]"
".split("
".strip()"
"range("
DICT
dict="$build/json.dict"
cat >"$dict" <<'DICT'
"{"
"}"
"["
"]"
":"
","
"\""
"\\u"
"\\ud83d\\ude00"
"true"
"false"
"null"
"-0.5e+3"
"1e-05"
"9223372036854775808"
"\"dtype\""
"\"shape\""
"\"data_offsets\""
"\"__metadata__\""
"\"weight_map\""
"\"a.safetensors\""
"\"b.safetensors\""
"\"F32\""
"\"F16\""
"\"BF16\""
"\"I64\""
"\"vocab_size\""
"\"n_positions\""
"\"n_embd\""
"\"n_layer\""
"\"n_head\""
"\"n_inner\""
"\"activation_function\""
"\"gelu_new\""
"\"layer_norm_epsilon\""
"\"tie_word_embeddings\""
"\"position_embedding\""
"\"sinusoidal\""
"\"norm_position\""
"\"post\""
"\"embedding_scale\""
DICT

# GGUF seeds, when the Python with numpy is at hand (tests/reference/gguf_reference.py): the independent
# writer's fixture (every metadata type, every readable tensor type); tiny models of every architecture, three
# with a tokenizer (fuzz_gguf_model); tokenizer-only files of each byte-level pre-tokenizer and of SentencePiece
# (fuzz_gguf_tokenizer). The reader, fuzz_gguf, starts from all of them. Each file is a few kilobytes.
mkdir -p "$seeds/fuzz_gguf" "$seeds/fuzz_gguf_model" "$seeds/fuzz_gguf_tokenizer"
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
    gguf_reference="$root/tests/reference/gguf_reference.py"
    /usr/bin/python3 "$gguf_reference" fixture "$build/gguf-seed" >/dev/null &&
        cp "$build/gguf-seed/fixture.gguf" "$seeds/fuzz_gguf/fixture.gguf"
    if /usr/bin/python3 "$gguf_reference" seeds "$build/gguf-seeds" >/dev/null; then
        cp "$build"/gguf-seeds/model/*.gguf "$seeds/fuzz_gguf_model/"
        cp "$build"/gguf-seeds/tokenizer/*.gguf "$seeds/fuzz_gguf_tokenizer/"
        cp "$build"/gguf-seeds/model/*.gguf "$build"/gguf-seeds/tokenizer/*.gguf "$seeds/fuzz_gguf/"
    fi
fi
# GGUF key and tensor names, architectures and pre-tokenizers: strings in GGUF carry their length, so these
# help most where they overwrite a word of the same length ("qwen2" for "llama").
gguf_dict="$build/gguf.dict"
cat >"$gguf_dict" <<'DICT'
"general.architecture"
"llama"
"qwen2"
"qwen3"
"gemma3"
"gpt2"
"block_count"
"embedding_length"
"feed_forward_length"
"context_length"
"attention.head_count"
"attention.head_count_kv"
"attention.key_length"
"attention.value_length"
"attention.layer_norm_rms_epsilon"
"attention.sliding_window"
"attention.sliding_window_pattern"
"attention.scale"
"rope.freq_base"
"rope.freq_base_swa"
"rope.scaling.type"
"rope.scaling.factor"
"linear"
"none"
"rope_freqs.weight"
"token_embd.weight"
"position_embd.weight"
"output_norm.weight"
"output.weight"
"blk.0."
"blk.1."
"attn_q.weight"
"attn_k.weight"
"attn_qkv.weight"
"attn_norm.weight"
"ffn_norm.weight"
"post_ffw_norm.weight"
"tokenizer.ggml.model"
"tokenizer.ggml.pre"
"llama-bpe"
"smollm"
"gpt-2"
"default"
"tokenizer.ggml.tokens"
"tokenizer.ggml.merges"
"tokenizer.ggml.scores"
"tokenizer.ggml.token_type"
"tokenizer.ggml.bos_token_id"
"tokenizer.ggml.add_bos_token"
"tokenizer.ggml.add_space_prefix"
"tokenizer.chat_template"
"\xe2\x96\x81"
"<0x41>"
DICT

# pass 4: run each target for the given time
status=0
for t in "${targets[@]}"; do
    bin="$build/tests/fuzz/$t"
    corpus="$build/corpus/$t"
    artifacts="$build/artifacts/$t"
    mkdir -p "$corpus" "$artifacts" "$seeds/$t"
    extra=()
    [ -d "$root/tests/fuzz/corpus/$t" ] && extra+=("$root/tests/fuzz/corpus/$t")
    dict_flag=()
    case "$t" in fuzz_checkpoint_index|fuzz_config|fuzz_safetensors|fuzz_tokenizer_json) dict_flag=("-dict=$dict") ;; esac
    [ "$t" = fuzz_jinja ] && dict_flag=("-dict=$jinja_dict")
    case "$t" in fuzz_gguf|fuzz_gguf_model|fuzz_gguf_tokenizer) dict_flag=("-dict=$gguf_dict") ;; esac
    log="$build/$t.log"
    echo "fuzz: $t for ${seconds}s"
    if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
            "${dict_flag[@]}" -artifact_prefix="$artifacts/" "$corpus" "$seeds/$t" "${extra[@]}" >"$log" 2>&1; then
        runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
        echo "fuzz: $t clean: $runs executions, $cov, corpus $(ls "$corpus" | wc -l) files"
    else
        status=1
        echo "fuzz: $t FAILED; log: $log; inputs: $artifacts/"
        grep -E 'ERROR|SUMMARY|==[0-9]+==|#0|#1|#2|#3' "$log" | head -20 | sed 's/^/  /'
    fi
done
exit $status
