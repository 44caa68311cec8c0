"""kvscope_reference: an independent PyTorch implementation of what kvscope computes.

Used by tests/parity/ and tools/make_*model.py. Needs Debian's python3-torch and numpy only.
"""
from . import safetensors_io
from .generate import greedy, greedy_batch, greedy_cached, margins
from .model import CachedRunner, Model, load_config, sinusoidal_table
from .llama import LlamaModel
