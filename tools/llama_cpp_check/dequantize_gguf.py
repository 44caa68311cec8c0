#!/usr/bin/python3
"""A float32 copy of a GGUF file: every tensor dequantized by llama.cpp's own Python dequantizers (gguf-py's
gguf.quants.dequantize, written by llama.cpp's authors, independent of kvscope), the metadata copied byte for
byte (general.file_type still names the quantized type; llama.cpp only prints it).

llama.cpp multiplies quantized weights with quantized activations (Q8_0 / Q8_1 / Q8_K blocks; F16 and BF16
weights with F16 / BF16 activations), kvscope with float32 ones, so their logits differ by more than
rounding. On this copy llama.cpp runs float32 matmuls on the same weight values: kvscope on the quantized
file against llama.cpp on the copy isolates how kvscope reads the quantized file.

    dequantize_gguf.py IN.gguf OUT.gguf          (PYTHONPATH must hold llama.cpp's gguf-py)

The container is split here by hand (gguf-py's GGUFReader builds one numpy array per vocabulary string and
takes minutes on a 128k-token vocabulary): header, metadata (skipped over, kept as bytes), tensor infos,
data at general.alignment.
"""
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

# value type -> size in bytes of the fixed-size types (8 = string, 9 = array)
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


class Cursor:
    def __init__(self, buf, pos=0):
        self.buf, self.pos = buf, pos

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string(self):
        n = self.take("Q")
        s = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return s

    def skip_value(self, vtype):
        """Skips one value; returns it when it is a u32 (for general.alignment)."""
        if vtype == 8:
            self.string()
        elif vtype == 9:
            sub, n = self.take("I"), self.take("Q")
            if sub in FIXED:
                self.pos += FIXED[sub] * n
            else:
                for _ in range(n):
                    self.skip_value(sub)
        elif vtype == 4:
            return self.take("I")
        else:
            self.pos += FIXED[vtype]
        return None


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    buf = np.memmap(argv[0], dtype=np.uint8, mode="r")
    c = Cursor(buf)
    magic, version, n_tensors, n_kv = c.take("4s"), c.take("I"), c.take("Q"), c.take("Q")
    if magic != b"GGUF" or version not in (2, 3):
        sys.exit(f"dequantize_gguf.py: {argv[0]} is not a GGUF v2/v3 file")
    kv_begin, alignment = c.pos, 32
    for _ in range(n_kv):
        key, vtype = c.string(), c.take("I")
        v = c.skip_value(vtype)
        if key == b"general.alignment":
            alignment = v
    kv_bytes = bytes(buf[kv_begin:c.pos])
    infos = []
    for _ in range(n_tensors):
        name, n_dims = c.string(), c.take("I")
        dims = [c.take("Q") for _ in range(n_dims)]  # innermost first
        infos.append((name, dims, GGMLQuantizationType(c.take("I")), c.take("Q")))
    data_begin = -(-c.pos // alignment) * alignment

    out = open(argv[1], "wb")
    out.write(b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + kv_bytes)
    offset, offsets = 0, []
    for name, dims, _, _ in infos:
        out.write(struct.pack("<Q", len(name)) + name + struct.pack("<I", len(dims)))
        out.write(struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", int(GGMLQuantizationType.F32), offset))
        offsets.append(offset)
        offset += -(-4 * int(np.prod(dims)) // alignment) * alignment
    out.write(b"\0" * (-out.tell() % alignment))
    for (name, dims, qtype, rel), at in zip(infos, offsets):
        rows, cols = int(np.prod(dims[1:])), dims[0]
        block, block_bytes = GGML_QUANT_SIZES[qtype]
        raw = np.asarray(buf[data_begin + rel:data_begin + rel + rows * cols // block * block_bytes])
        if qtype == GGMLQuantizationType.F32:
            values = raw.view(np.float32)
        elif qtype == GGMLQuantizationType.F16:
            values = raw.view(np.float16).astype(np.float32)
        else:
            values = dequantize(raw.reshape(rows, cols // block * block_bytes), qtype)
        values = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
        assert values.size == rows * cols, name
        out.write(values.tobytes())
        out.write(b"\0" * (-out.tell() % alignment))
    out.close()


if __name__ == "__main__":
    main(sys.argv[1:])
