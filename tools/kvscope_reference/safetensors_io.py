"""The safetensors container, read and written by hand (Debian has no `safetensors` package).

Layout: u64 little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}} padded with
spaces to a multiple of 8, then the raw little-endian tensor bytes (offsets are relative to them).
"""
import json
import os
import struct

import numpy as np
import torch

# dtype name -> (bytes per element, numpy dtype of the raw bits)
INDEX_NAME = "model.safetensors.index.json"

DTYPES = {"F32": (4, "<f4"), "F16": (2, "<f2"), "BF16": (2, "<u2")}


def _to_bytes(t, dtype):
    """fp32 tensor -> little-endian bytes in `dtype` (round to nearest even, as torch casts)."""
    t = t.detach().to(torch.float32).contiguous()
    if dtype == "F32":
        return t.numpy().astype("<f4").tobytes()
    if dtype == "F16":
        return t.to(torch.float16).numpy().astype("<f2").tobytes()
    if dtype == "BF16":
        # torch has no numpy view of bfloat16: reinterpret the 16 bits through int16.
        bits = t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2")
        return bits.tobytes()
    raise ValueError(f"unknown dtype {dtype}")


def encode(tensors, dtype="F32", metadata=None, raw=None, header_extra=None):
    """Bytes of a safetensors file.

    tensors: list of (name, torch tensor) in file order, each stored as `dtype`
             (or a dict name -> dtype for per-tensor choice).
    raw: optional list of (name, dtype, shape, bytes) written verbatim (for broken fixtures).
    header_extra: entries merged into the header as is (for broken fixtures).
    """
    header, blobs, offset = {}, [], 0
    items = [(n, (dtype[n] if isinstance(dtype, dict) else dtype), list(t.shape), _to_bytes(t, dtype[n] if isinstance(dtype, dict) else dtype))
             for n, t in tensors]
    items += list(raw or [])
    for name, dt, shape, data in items:
        header[name] = {"dtype": dt, "shape": [int(s) for s in shape],
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    if header_extra:
        header.update(header_extra)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def write(path, tensors, dtype="F32", metadata=None):
    with open(path, "wb") as f:
        f.write(encode(tensors, dtype, metadata))


def shard_name(i, n):
    """Hugging Face's shard file names: model-00001-of-00003.safetensors."""
    return f"model-{i + 1:05d}-of-{n:05d}.safetensors"


def write_sharded(folder, tensors, n_shards, dtype="F32", metadata=None):
    """tensors split in file order into n_shards files beside model.safetensors.index.json
    {"metadata": {"total_size": data bytes}, "weight_map": {name: shard}} (what save_pretrained writes)."""
    n = max(1, min(n_shards, len(tensors)))
    groups = [tensors[len(tensors) * i // n:len(tensors) * (i + 1) // n] for i in range(n)]
    weight_map, total = {}, 0
    for i, group in enumerate(groups):
        name = shard_name(i, n)
        write(os.path.join(folder, name), group, dtype, metadata)
        for tname, t in group:
            weight_map[tname] = name
            total += len(_to_bytes(t, dtype[tname] if isinstance(dtype, dict) else dtype))
    with open(os.path.join(folder, INDEX_NAME), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")


def read_folder(folder):
    """A model folder's tensors, as read(): model.safetensors when present (transformers prefers it),
    else every shard model.safetensors.index.json names, each tensor exactly where the index puts it."""
    single = os.path.join(folder, "model.safetensors")
    if os.path.exists(single) or not os.path.exists(os.path.join(folder, INDEX_NAME)):
        return read(single)
    with open(os.path.join(folder, INDEX_NAME)) as f:
        weight_map = json.load(f)["weight_map"]
    tensors, dtypes, metadata = {}, {}, {}
    for shard in sorted(set(weight_map.values())):
        t, d, metadata = read(os.path.join(folder, shard))
        for name in t:
            if weight_map.get(name) != shard or name in tensors:
                raise ValueError(f"{folder}: tensor {name} in {shard} is not where the index puts it")
        tensors.update(t)
        dtypes.update(d)
    if set(tensors) != set(weight_map):
        raise ValueError(f"{folder}: the shards do not hold every tensor the index lists")
    return tensors, dtypes, metadata


def read(path):
    """-> (dict name -> float32 torch tensor, dict name -> stored dtype, metadata dict).

    Strict: every check a loader should make, so a fixture this accepts is a valid file.
    """
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = memoryview(data)[8 + n:]
    metadata = header.pop("__metadata__", {}) or {}
    tensors, dtypes = {}, {}
    for name, info in header.items():
        dt, shape = info["dtype"], [int(s) for s in info["shape"]]
        begin, end = (int(v) for v in info["data_offsets"])
        size, npdt = DTYPES[dt]
        count = int(np.prod(shape)) if shape else 1
        if not (0 <= begin <= end <= len(body)) or end - begin != count * size:
            raise ValueError(f"{path}: tensor {name} has bad data_offsets {begin}..{end}")
        arr = np.frombuffer(body[begin:end], dtype=npdt)
        if dt == "BF16":
            # bf16 is the top half of an fp32: shift the bits up and reinterpret.
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        t = torch.from_numpy(arr.astype(np.float32).reshape(shape))
        tensors[name], dtypes[name] = t, dt
    return tensors, dtypes, metadata
