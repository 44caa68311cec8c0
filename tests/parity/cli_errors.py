#!/usr/bin/python3
"""Bad input to `kvscope generate` must end in ONE stderr line starting `error:` and exit code 1
(runtime, e.g. a broken model file) or 2 (usage, e.g. a flag out of range) — never a signal, a
hang, or a traceback. Each broken model is the base model with one thing wrong, and a control run
proves the unbroken version works with the same arguments.

    cli_errors.py --kvscope BIN --work DIR
"""
import json
import os
import shutil
import struct
import sys

from common import Failure, main, make_model, model_dir, ref, run_cli


def broken_models(work, good):
    """-> {name: folder}, each a copy of `good` with one fault."""
    out = {}

    def copy(name):
        d = os.path.join(work, "broken", name)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(good, d)
        out[name] = d
        return d

    st = open(os.path.join(good, "model.safetensors"), "rb").read()
    (n,) = struct.unpack("<Q", st[:8])
    header = json.loads(st[8:8 + n])
    body = st[8 + n:]

    def write_st(d, hdr, body_bytes, length=None):
        text = json.dumps(hdr).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(text) if length is None else length) + text + body_bytes)

    def edit_config(d, **changes):
        p = os.path.join(d, "config.json")
        cfg = json.load(open(p))
        for k, v in changes.items():
            if v is KeyError:
                cfg.pop(k, None)
            else:
                cfg[k] = v
        json.dump(cfg, open(p, "w"))

    # safetensors faults
    with open(os.path.join(copy("truncated_body"), "model.safetensors"), "wb") as f:
        f.write(st[: 8 + n + len(body) // 2])
    with open(os.path.join(copy("truncated_header"), "model.safetensors"), "wb") as f:
        f.write(st[: 8 + n // 2])
    with open(os.path.join(copy("too_short"), "model.safetensors"), "wb") as f:
        f.write(st[:5])
    with open(os.path.join(copy("empty_file"), "model.safetensors"), "wb") as f:
        pass
    write_st(copy("huge_header_length"), header, body, length=1 << 62)
    with open(os.path.join(copy("header_not_json"), "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", 16) + b"{not json at all" + body)
    with open(os.path.join(copy("garbage"), "model.safetensors"), "wb") as f:
        f.write(bytes((i * 131 + 7) % 256 for i in range(4096)))
    h = json.loads(json.dumps(header))
    h["wte.weight"]["data_offsets"][1] += 4
    write_st(copy("offsets_mismatch_shape"), h, body)
    h = json.loads(json.dumps(header))
    h["ln_f.bias"]["data_offsets"] = [len(body) - 4, len(body) + 252]
    write_st(copy("offsets_past_end"), h, body)
    h = json.loads(json.dumps(header))
    h["wte.weight"]["dtype"] = "I8"
    write_st(copy("unknown_dtype"), h, body)
    h = json.loads(json.dumps(header))
    h["h.0.attn.c_attn.weight"]["shape"] = [32, 384]  # same byte count, wrong shape
    write_st(copy("wrong_shape"), h, body)
    h = json.loads(json.dumps(header))
    h["h.1.mlp.c_fc.weight"]["shape"] = [256, 64]  # transposed (a Linear layout, not Conv1D)
    write_st(copy("transposed_shape"), h, body)
    # A well-formed file that lacks one tensor (so the loader's name check, not its byte
    # accounting, has to notice).
    _, tensors, dtypes = make_model.build()
    ref.safetensors_io.write(os.path.join(copy("missing_tensor"), "model.safetensors"),
                             [(n, t) for n, t in tensors if n != "h.1.ln_2.bias"], dtypes)
    h = json.loads(json.dumps(header))
    h["wte.weight"]["shape"] = [-300, 64]
    write_st(copy("negative_dim"), h, body)
    os.remove(os.path.join(copy("no_safetensors"), "model.safetensors"))

    # config faults
    os.remove(os.path.join(copy("no_config"), "config.json"))
    open(os.path.join(copy("config_not_json"), "config.json"), "w").write('{"vocab_size": 300,')
    open(os.path.join(copy("config_is_array"), "config.json"), "w").write("[1, 2, 3]")
    edit_config(copy("config_string_n_embd"), n_embd="64")
    edit_config(copy("config_fraction_n_layer"), n_layer=2.5)
    edit_config(copy("config_bool_n_head"), n_head=True)
    edit_config(copy("config_activation_number"), activation_function=3)
    edit_config(copy("config_activation_unknown"), activation_function="swish")
    edit_config(copy("config_norm_unknown"), norm_position="middle")
    edit_config(copy("config_missing_vocab"), vocab_size=KeyError)
    edit_config(copy("config_zero_heads"), n_head=0)
    edit_config(copy("config_heads_not_divisor"), n_head=5)
    edit_config(copy("config_negative_layers"), n_layer=-1)
    edit_config(copy("config_zero_positions"), n_positions=0)
    edit_config(copy("config_huge_vocab"), vocab_size=1 << 40)
    edit_config(copy("config_vocab_disagrees"), vocab_size=301)
    edit_config(copy("config_more_layers"), n_layer=3)
    edit_config(copy("config_eps_string"), layer_norm_epsilon="1e-5")
    edit_config(copy("config_scale_string"), embedding_scale="8")
    edit_config(copy("config_untied_no_head"), tie_word_embeddings=False)
    edit_config(copy("config_bias_no_tensor"), lm_head_bias=True)
    return out


def expect_error(kvscope, args, what):
    rc, out, err = run_cli(kvscope, args, timeout=60)
    lines = err.splitlines()
    if rc not in (1, 2):
        raise Failure(f"{what}: exit {rc}, expected 1 or 2\n  stderr: {err.strip()[:400]}")
    if len(lines) != 1 or not lines[0].startswith("error:") or len(lines[0]) <= len("error: "):
        raise Failure(f"{what}: stderr should be one line 'error: ...', got {len(lines)} lines:\n{err[:600]}")
    return f"{what}: exit {rc}: {lines[0][:150]}"


def cases(kvscope, work):
    good = model_dir(work, "base")              # V = 300, P = 128
    base = ["generate", "--model", good, "--prompt-ids", "1,2,3", "--max-new-tokens", "4"]
    npy = os.path.join(work, "ok.npy")

    def control(args, what):
        rc, out, err = run_cli(kvscope, args)
        if rc != 0:
            raise Failure(f"control run '{what}' should succeed, exit {rc}: {err.strip()[:300]}")
        return f"control: {what}: exit 0"

    yield lambda: control(base + ["--json", "--dump-logits", npy], "base model, valid flags")
    yield lambda: control(["generate", "--model", good, "--prompt-ids", "299", "--max-new-tokens", "127"],
                          "largest id, prompt + new = n_positions")

    for name, d in broken_models(work, good).items():
        yield lambda d=d, name=name: expect_error(kvscope, ["generate", "--model", d, "--prompt-ids", "1,2,3",
                                                           "--max-new-tokens", "4"], f"model {name}")

    def flag(extra, what, replace_prompt=None):
        """base arguments with `extra` appended; an option already in base gets the new value instead."""
        args, extra = list(base), list(extra)
        if replace_prompt is not None:
            args[args.index("--prompt-ids") + 1] = replace_prompt
        if len(extra) == 2 and extra[0] in ("--max-new-tokens",):
            args[args.index(extra[0]) + 1] = extra[1]
            extra = []
        return lambda: expect_error(kvscope, args + extra, what)

    yield lambda: expect_error(kvscope, ["generate", "--model", os.path.join(work, "does_not_exist"),
                                         "--prompt-ids", "1"], "missing model dir")
    yield lambda: expect_error(kvscope, ["generate", "--model", os.path.join(good, "config.json"),
                                         "--prompt-ids", "1"], "model path is a file")
    yield flag([], "prompt id = vocab", "1,300,2")
    yield flag([], "prompt id huge", "99999999999999999999")
    yield flag([], "prompt id negative", "1,-1")
    yield flag([], "prompt ids not numbers", "a,b")
    yield flag([], "prompt ids trailing comma", "1,2,")
    yield flag([], "empty prompt", "")
    yield flag(["--prompt-ids", "5,6,7,400"], "second prompt of a batch has a bad id")
    yield flag(["--max-new-tokens", "126"], "prompt 3 + new 126 > n_positions 128")
    yield lambda: expect_error(kvscope, base + ["--max-new-tokens", "4"], "max-new-tokens given twice")
    yield flag([], "prompt longer than n_positions", ",".join(["1"] * 129))
    for v in ("0", "-1", "-5", "x"):
        yield flag(["--window", v], f"window {v}")
    for v in ("0", "-2"):
        yield flag(["--prefill-chunk", v], f"prefill chunk {v}")
    for v in ("0", "-1", "abc", "1.5"):
        yield flag(["--max-new-tokens", v], f"max-new-tokens {v}")
    for v in ("0", "-0.5", "nan", "inf"):
        yield flag(["--temperature", v], f"temperature {v}")
    for v in ("0", "-0.1", "1.5", "nan"):
        yield flag(["--top-p", v], f"top-p {v}")
    yield flag(["--dump-logits", "/nonexistent_kvscope_dir/x.npy"], "unwritable --dump-logits (no dir)")
    yield flag(["--dump-logits", work], "--dump-logits is a directory")
    yield flag(["--sinks", "2"], "sinks without a window")
    yield flag(["--sinks", "-1", "--window", "4"], "sinks -1")
    for v in ("0", "-4"):
        yield flag(["--block-size", v], f"block size {v}")
    yield flag(["--prompt-cache", os.path.join(work, "pc.kvc"), "--window", "4"], "prompt cache with a window")
    yield flag(["--prompt-cache", os.path.join(work, "pc.kvc"), "--prompt-ids", "4,5"], "prompt cache with two prompts")
    yield flag(["--prompt-cache", "/nonexistent_kvscope_dir/pc.kvc"], "unwritable --prompt-cache")
    yield flag(["--prompt-cache", work], "--prompt-cache is a directory")
    yield flag(["--no-such-flag"], "unknown flag")
    yield flag(["--window"], "flag missing its value")
    yield lambda: expect_error(kvscope, ["no-such-command"], "unknown subcommand")


if __name__ == "__main__":
    sys.exit(main(cases, sys.argv[1:]))
