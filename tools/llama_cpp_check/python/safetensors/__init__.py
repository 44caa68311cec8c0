"""A stand-in for `safetensors.safe_open` as llama.cpp's convert_hf_to_gguf.py calls it (Debian has no
safetensors package): the file read by hand (u64 little-endian header length, JSON header
{name: {dtype, shape, data_offsets}}, then the raw little-endian data), tensors handed out as torch tensors.

    with safe_open(path, framework="pt", device="cpu") as f:
        f.keys(); f.get_tensor(name); f.get_slice(name).get_dtype() / .get_shape() / [:]
"""
import json
import struct

import numpy as np
import torch

__version__ = "0.0-kvscope-stand-in"

# safetensors dtype -> (numpy dtype of the stored bits, torch dtype they are viewed as)
_DTYPES = {"F64": ("<f8", None), "F32": ("<f4", None), "F16": ("<f2", None), "BF16": ("<i2", torch.bfloat16),
           "I64": ("<i8", None), "I32": ("<i4", None), "I16": ("<i2", None), "I8": ("i1", None), "U8": ("u1", None)}


class _Slice:
    def __init__(self, file, name):
        self._file, self._name = file, name

    def get_dtype(self):
        return self._file._header[self._name]["dtype"]

    def get_shape(self):
        return list(self._file._header[self._name]["shape"])

    def __getitem__(self, index):
        return self._file.get_tensor(self._name)[index]


class safe_open:  # noqa: N801 (the real module's name)
    def __init__(self, path, framework="pt", device="cpu"):
        if framework != "pt" or device != "cpu":
            raise ValueError("safetensors stand-in: framework 'pt' on 'cpu' only")
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        self._header, self._data_start = header, 8 + n
        self._map = np.memmap(path, dtype=np.uint8, mode="r")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def keys(self):
        return list(self._header)

    def get_slice(self, name):
        return _Slice(self, name)

    def get_tensor(self, name):
        entry = self._header[name]
        np_dtype, view = _DTYPES[entry["dtype"]]
        begin, end = entry["data_offsets"]
        raw = np.array(self._map[self._data_start + begin:self._data_start + end])  # a copy: torch owns it
        t = torch.from_numpy(raw.view(np_dtype).reshape(entry["shape"]))
        return t.view(view) if view is not None else t
