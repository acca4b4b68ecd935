#!/usr/bin/env bash
# Pattern statistics at long context: `headscope patterns` (row-wise during the
# forward, no T x T buffer) against the Python workflow (bench/patterns_torch.py:
# PyTorch forward keeping every full (B, H, T, T) map, then tensor reductions),
# same 2-layer, 4-head attention-only RoPE model, same tokens, batch 1.
# Reports wall time and peak RSS per T; torch runs under an address-space limit
# (--mem-limit-gib, default 16) and is reported out of memory beyond it.
# The statistics of both are compared where torch ran (max |difference|).
#
#   bench/patterns.sh [--threads N] [--seq-lens "1024 4096 16384"] [--repeats R]
#                     [--mem-limit-gib G] [--blas-autodetect] [--tiny] [--contend]
#
# Each side runs R times (default 3): the table shows the median time and the
# largest peak RSS; torch is not repeated once it ran out of memory.
#
# Results: bench/out/patterns.jsonl and bench/out/patterns.md. --tiny runs
# T 64 and 128, two sequences each, once (a few seconds; scripts/test --slow, so
# the benchmark keeps working), results in bench/out/tiny/.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init "threads blas tiny contend"
threads=1
lens="1024 4096 16384"
memlim=16
repeats=3
while [ $# -gt 0 ]; do
  case "$1" in
    --seq-lens) lens=$2; shift 2 ;;
    --mem-limit-gib) memlim=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done
bench_build headscope
hs=build/float/headscope
bench_threads "$threads"
bench_tmp
work=$tmp
outdir=bench/out
tokens_per_row=16384 # sequences per T: about this many tokens, at least one sequence
if [ "$tiny" = 1 ]; then
  lens="64 128" repeats=1 tokens_per_row=256 outdir=bench/out/tiny
fi
mkdir -p "$outdir"
out=$outdir/patterns.jsonl
: >"$out"

# 2 x 16384 + 1 uniformly random bytes; a model made by one training step.
/usr/bin/python3 -c '
import numpy as np, sys
t = np.random.default_rng(7).integers(0, 256, 2 * 16384 + 1).astype("<u2")
h = np.zeros(256, "<i4"); h[:3] = (20240520, 1, len(t))
open(sys.argv[1], "wb").write(h.tobytes() + t.tobytes())' "$work/data.bin"
"$hs" train --preset attn-only positional=rope n_ctx=16384 --data "$work/data.bin" \
  --out "$work/model" --steps 1 --batch 1 --seq-len 64 >/dev/null

bench_contend_start
for T in $lens; do
  n=$((tokens_per_row / T)); [ "$n" -ge 1 ] || n=1
  for r in $(seq "$repeats"); do
    echo "T $T: headscope ($r/$repeats)" >&2
    rm -f "$work/p.db"*
    /usr/bin/time -f "%e %M" -o "$work/time" "$hs" patterns --model "$work/model" \
      --data "$work/data.bin" --db "$work/p.db" --batch 1 --seq-len "$T" --max-batches "$n" \
      --threads "$threads" >/dev/null
    read -r secs kib <"$work/time"
    echo "{\"impl\":\"headscope\",\"T\":$T,\"threads\":$threads,\"batches\":$n,\"seconds\":$secs,\"peak_rss_mib\":$((kib / 1024))}" >>"$out"
  done
  for r in $(seq "$repeats"); do
    echo "T $T: torch ($r/$repeats)" >&2
    rm -f "$work/torch.txt"
    bench_torch bench/patterns_torch.py --model "$work/model" \
      --data "$work/data.bin" --seq-len "$T" --batches "$n" --threads "$threads" \
      --mem-limit-gib "$memlim" --stats-out "$work/torch.txt" >"$work/torch.json"
    [ -s "$work/torch.txt" ] || break # out of memory: once is enough
    [ "$r" = "$repeats" ] || { cat "$work/torch.json" >>"$out"; }
  done
  diff=null
  if [ -s "$work/torch.txt" ]; then
    diff=$(/usr/bin/python3 - "$work/torch.txt" "$work/p.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[2])
run = db.execute("select max(run_id) from runs").fetchone()[0]
worst = 0.0
for line in open(sys.argv[1]):
    l, h, k, v = line.split()
    (ours,) = db.execute("select value from head_metrics where run_id=? and layer=? and head=? and metric=?",
                         (run, int(l), int(h), k)).fetchone()
    worst = max(worst, abs(ours - float(v)) / max(1.0, abs(float(v))))
print(f"{worst:.3g}")
PY
)
  fi
  /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r["max_rel_diff_vs_headscope"]=json.loads(sys.argv[2]); print(json.dumps(r))' \
    "$work/torch.json" "$diff" >>"$out"
  rm -f "$work/p.db"*
done

bench_mark "$out"
/usr/bin/python3 - "$out" "${OPENBLAS_CORETYPE:-autodetect}" "$memlim" <<'PY' | bench_md "$outdir/patterns.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]


def summary(impl):
    """Per T: the median seconds, the largest peak RSS, the run count; the
    last run's other fields (oom, agreement)."""
    out = {}
    for T in sorted({r["T"] for r in rows if r["impl"] == impl}):
        rs = [r for r in rows if r["impl"] == impl and r["T"] == T]
        out[T] = dict(rs[-1], seconds=statistics.median(r["seconds"] for r in rs),
                      peak_rss_mib=max(r["peak_rss_mib"] for r in rs), runs=len(rs))
    return out


hs = summary("headscope")
th = summary("torch_full_maps")
print(f"OpenBLAS kernels: {sys.argv[2]}; 2 layers x 4 heads, d 64, RoPE; batch 1, "
      f"{rows[0]['threads']} thread(s); torch limited to {sys.argv[3]} GiB of address space\n")
print("| T | sequences | headscope s (median) | headscope peak RSS MiB | torch full maps s (median) | torch peak RSS MiB | x (time) | runs | stats max rel. diff |")
print("|---|---|---|---|---|---|---|---|---|")
for T in sorted(hs):
    a, b = hs[T], th[T]
    if b.get("oom"):
        tb, x, d = "out of memory", "-", "-"
        mb = f"{b['peak_rss_mib']:.0f} reached, then out of memory"
    else:
        tb, mb = f"{b['seconds']:.2f}", f"{b['peak_rss_mib']:.0f}"
        x, d = f"{b['seconds'] / a['seconds']:.2f}", f"{b['max_rel_diff_vs_headscope']:.1e}"
    print(f"| {T} | {a['batches']} | {a['seconds']:.2f} | {a['peak_rss_mib']} | {tb} | {mb} | {x} | "
          f"{a['runs']}/{b['runs']} | {d} |")
PY
