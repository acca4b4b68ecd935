"""Safetensors by hand for the PyTorch sides of the benchmarks (F32 only):
the checkpoints they make and read back. No safetensors package here."""
import json
import struct

import numpy as np
import torch


def write_st(path, tensors):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for k, t in tensors.items():
        b = t.contiguous().numpy().astype("<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-(8 + len(h))) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for k, e in head.items():
        if k != "__metadata__":
            a, b = e["data_offsets"]
            out[k] = torch.from_numpy(np.frombuffer(raw[8 + n + a:8 + n + b], "<f4").copy()
                                      ).reshape(e["shape"])
    return out
