"""Checks two headscope map files against the torch oracle, reading them with h5py.

usage: check_maps_h5py.py MAPFILE_F32 MAPFILE_F16 ORACLE_TXT CASE

MAPFILE_F32 and MAPFILE_F16 are `headscope capture` outputs for the same model
and data (every layer, head and query), stored as float32 and float16. The
oracle (tests/fixtures/maps_oracle.txt, scripts/oracle/gen_maps.py) holds case
CASE with ints B, T, L, H, the tokens (B, T) and att_LL (B, H, T, T) in float64.

Checks the layout of SPEC §6 (store/maps.h): root attributes and their types,
/tokens int32 [N, T], /layer_LL/attn float32|float16 [N, H, Q, S] with
dimension labels seq, head, query, key and attributes layer, heads,
query_start; then the values: tokens equal, maps within 1e-5 (f32) / 1e-3
(f16) of the oracle, rows summing to 1, masked entries (s > t) exactly 0.
Prints what it checked; exits 1 on the first failure.
"""
import sys

import h5py
import numpy as np

TOL = {"float32": 1e-5, "float16": 1e-3}
# float16 storage rounds each entry by at most 2^-11 of itself, so a row of
# non-negative entries summing to 1 in float32 sums to 1 within 2^-11 + 1e-5.
ROW_TOL = {"float32": 1e-5, "float16": 2.0 ** -11 + 1e-5}


def load_case(path, name):
    ints, tensors, cur = {}, {}, None
    with open(path) as f:
        lines = [ln.split() for ln in f if ln.strip() and not ln.startswith("#")]
    i = 0
    while i < len(lines):
        w = lines[i]
        i += 1
        if w[0] == "case":
            cur = w[1]
        elif w[0] == "end":
            if cur == name:
                return ints, tensors
            cur = None
        elif cur != name:
            continue
        elif w[0] == "int":
            ints[w[1]] = int(w[2])
        elif w[0] == "tensor":
            nd = int(w[2])
            dims = [int(x) for x in w[3:3 + nd]]
            n, vals = int(np.prod(dims)), []
            while len(vals) < n:
                vals += [float(x) for x in lines[i]]
                i += 1
            assert len(vals) == n, f"oracle tensor {w[1]}: {len(vals)} values for {dims}"
            tensors[w[1]] = np.array(vals, dtype=np.float64).reshape(dims)
    raise SystemExit(f"FAIL: no case {name} in {path}")


def is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def check_file(path, want_dtype, ints, tens):
    B, T, L, H = ints["B"], ints["T"], ints["L"], ints["H"]
    tol = TOL[want_dtype]
    with h5py.File(path, "r") as f:
        a = f.attrs
        for k in ("format", "version", "model_sha256", "model_config", "data_path",
                  "data_sha256", "seq_len", "tool_version", "complete"):
            assert k in a, f"{path}: root attribute {k} missing (have {sorted(a)})"
        assert isinstance(a["format"], str) and a["format"] == "headscope-maps", \
            f"{path}: format is {a['format']!r}, expected the str 'headscope-maps'"
        for k in ("version", "complete", "seq_len"):
            assert is_int(a[k]), f"{path}: attribute {k} is {type(a[k]).__name__}, expected an integer"
        for k in ("model_sha256", "model_config", "data_path", "data_sha256", "tool_version"):
            assert isinstance(a[k], str) and a[k], f"{path}: attribute {k} is {a[k]!r}, expected a non-empty str"
        assert a["version"] == 1, f"{path}: version {a['version']}"
        assert a["complete"] == 1, f"{path}: complete {a['complete']}"
        assert a["seq_len"] == T, f"{path}: seq_len {a['seq_len']}, expected {T}"
        assert len(a["model_sha256"]) == 64 and len(a["data_sha256"]) == 64, f"{path}: sha256 attributes"

        tok = f["tokens"]
        assert tok.dtype == np.dtype("int32"), f"{path}: /tokens dtype {tok.dtype}"
        assert tok.shape == (B, T), f"{path}: /tokens shape {tok.shape}, expected {(B, T)}"
        assert np.array_equal(tok[...], tens["tokens"].astype(np.int32)), \
            f"{path}: tokens {tok[...].tolist()} != oracle {tens['tokens'].astype(int).tolist()}"

        layers = sorted(k for k in f.keys() if k.startswith("layer_"))
        assert layers == ["layer_%02d" % i for i in range(L)], f"{path}: layer groups {layers}"
        allowed = np.tril(np.ones((T, T), dtype=bool))
        worst = 0.0
        for li in range(L):
            name = "layer_%02d" % li
            d = f[name]["attn"]
            assert d.dtype == np.dtype(want_dtype), f"{path}: {name}/attn dtype {d.dtype}, expected {want_dtype}"
            assert d.shape == (B, H, T, T), f"{path}: {name}/attn shape {d.shape}"
            assert d.maxshape[0] is None, f"{path}: {name}/attn first dimension not unlimited ({d.maxshape})"
            labels = [dim.label for dim in d.dims]
            assert labels == ["seq", "head", "query", "key"], f"{path}: {name}/attn labels {labels}"
            assert is_int(d.attrs["layer"]) and d.attrs["layer"] == li, f"{path}: {name} attr layer {d.attrs.get('layer')}"
            assert list(d.attrs["heads"]) == list(range(H)), f"{path}: {name} attr heads {d.attrs.get('heads')}"
            assert d.attrs["query_start"] == 0, f"{path}: {name} attr query_start {d.attrs.get('query_start')}"
            got = d[...].astype(np.float64)
            ref = tens["att_%02d" % li]
            for b in range(B):
                for h in range(H):
                    g, r = got[b, h], ref[b, h]
                    assert np.all(np.isfinite(g)), f"{path}: layer {li} seq {b} head {h}: non-finite values"
                    err = float(np.abs(g - r).max())
                    worst = max(worst, err)
                    assert err <= tol, \
                        f"{path}: layer {li} seq {b} head {h}: max |capture - oracle| {err:.3g} > {tol:g}"
                    masked = g[~allowed]
                    assert np.all(masked == 0), \
                        f"{path}: layer {li} seq {b} head {h}: masked (s > t) entries not exactly 0: {masked[masked != 0][:4]}"
                    rows = float(np.abs(g.sum(-1) - 1).max())
                    rtol = ROW_TOL[want_dtype]
                    assert rows <= rtol, \
                        f"{path}: layer {li} seq {b} head {h}: row sums differ from 1 by {rows:.3g} > {rtol:g}"
    print(f"ok {path}: {want_dtype}, layout and attributes, tokens {B}x{T}, {L} layers x {H} heads "
          f"within {tol:g} of the oracle (max {worst:.2e}), rows sum to 1, masked entries 0")


def main():
    if len(sys.argv) != 5:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    f32, f16, oracle, case = sys.argv[1:]
    ints, tens = load_case(oracle, case)
    for k in ("B", "T", "L", "H"):
        assert k in ints, f"oracle case {case}: no int {k}"
    try:
        check_file(f32, "float32", ints, tens)
        check_file(f16, "float16", ints, tens)
        with h5py.File(f32, "r") as a, h5py.File(f16, "r") as b:
            for k in ("model_sha256", "data_sha256", "model_config", "seq_len"):
                assert a.attrs[k] == b.attrs[k], f"attribute {k} differs between {f32} and {f16}"
            for li in range(ints["L"]):
                x = a["layer_%02d/attn" % li][...].astype(np.float64)
                y = b["layer_%02d/attn" % li][...].astype(np.float64)
                e = float(np.abs(x - y).max())
                assert e <= 1e-3, f"layer {li}: f16 file differs from the f32 file by {e:.3g}"
        print(f"ok {case}: f32 and f16 files agree (same provenance, maps within 1e-3)")
    except AssertionError as e:
        print(f"FAIL {case}: {e}")
        return 1
    except (OSError, KeyError) as e:
        print(f"FAIL {case}: {type(e).__name__}: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
