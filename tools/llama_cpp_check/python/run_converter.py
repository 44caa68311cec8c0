"""Runs llama.cpp's convert_hf_to_gguf.py unchanged under Debian's torch 1.13, which predates the float8 dtypes
the converter names in its table of safetensors dtypes (torch.float8_e4m3fn / float8_e5m2, torch >= 2.1).
The folders tools/llama_cpp_check.sh converts hold no float8 tensor, so the two names only have to exist:
they get placeholders that no tensor can match.

    run_converter.py CONVERT_HF_TO_GGUF.PY ARGS...
"""
import runpy
import sys

import torch

for name in ("float8_e4m3fn", "float8_e5m2"):
    if not hasattr(torch, name):
        setattr(torch, name, f"<no torch.{name} in torch {torch.__version__}>")

script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
