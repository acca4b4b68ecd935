"""Expectations of viewer_test.js long (a long map's rows loaded on demand)
from a map file, read with h5py: the first captured layer's rows of every
captured head at the last hover and at the held query, the hovers spread
along the sequence, and the row files the page may load at open (the
overview, the head view's first 96 rows of each head, 16 rows a file, and
every row of the shown head where the matrix shows them all: 512 at most).

usage: viewer_long_expect.py MAPS.h5 OUT.json
"""
import json
import sys

import h5py
import numpy as np

f = h5py.File(sys.argv[1], "r")
d = f[sorted(k for k in f if k.startswith("layer_"))[0]]["attn"]
heads = [int(h) for h in d.attrs["heads"]]
q0, T = int(d.attrs["query_start"]), d.shape[-1]
hovers = [q0 + int((k * 7919) % 997 / 997 * d.shape[2]) for k in range(1, 21)]
held = q0 + (3 * d.shape[2]) // 4
rows = {}
for i, h in enumerate(heads):
    for q in (hovers[-1], held):
        r = np.asarray(d[0, i, q - q0])
        if r.dtype.kind != "f":  # float16 as stored: a custom type read as its bits
            r = r.view(np.float16)
        rows["%d,%d" % (h, q)] = r.astype(np.float64).tolist()
json.dump({"layer": int(d.attrs["layer"]), "heads": heads, "T": int(f["tokens"].shape[1]), "rows": rows,
           "hovers": hovers, "held": held,
           "files_at_open_max": 1 + len(heads) * 6 + (-(-d.shape[2] // 16) if d.shape[2] <= 512 else 0)},
          open(sys.argv[2], "w"))
