#!/usr/bin/env bash
# Capture throughput: `headscope`'s recorder (bench_capture) against the
# natural Python workflow (bench/capture_torch.py: PyTorch forward keeping the
# maps + h5py writes of the same layout and compression), same model (4
# layers, d 256, 8 heads, learned positions, GELU MLP), same sequences, same
# thread count; plus the raw write bandwidth of the disk (dd).
#
#   bench/capture.sh [--threads "1 2"] [--dir DIR] [--blas-autodetect] [--tiny] [--contend]
#
# Files go to DIR (default /tmp), on the disk being measured. Results:
# bench/out/capture.jsonl and bench/out/capture.md. --tiny runs a tiny model
# (2 layers, d 64, 4 heads), two batches of T 32, at 1 thread and an 8 MiB dd
# (a few seconds; scripts/test --slow, so the benchmark keeps working), results
# in bench/out/tiny/.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init "threads blas tiny contend"
threads="1 2"
dir=/tmp
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done
bench_build bench_capture
bin=build/float/bench/bench_capture
# (T, batch, batches): about the same number of map bytes per row of the table.
runs=("128 4 16" "512 2 8" "1024 1 8")
model=4,256,8 # layers, d, heads
outdir=bench/out
dd_mib=1024
if [ "$tiny" = 1 ]; then
  runs=("32 2 2") model=2,64,4 outdir=bench/out/tiny dd_mib=8 threads=1
fi
mkdir -p "$outdir"
out=$outdir/capture.jsonl
: >"$out"
f="$dir/headscope-bench-$$.h5"
bench_on_exit 'rm -f "$f" "$f".tmp.* "$dir/headscope-dd-$$"'

bench_contend_start
for t in $threads; do
  bench_threads "$t"
  for r in "${runs[@]}"; do
    set -- $r
    for variant in "f32 0" "f16 0" "f16 4"; do
      set -- $r $variant
      echo "threads $t T $1 $4 compress $5" >&2
      "$bin" --threads "$t" --config "$model,$1" --batch "$2" --batches "$3" --out "$f" \
        --dtype "$4" --compress "$5" >>"$out"
      rm -f "$f"
      bench_torch bench/capture_torch.py --threads "$t" \
        --config "$model,$1" --batch "$2" --batches "$3" --out "$f" --dtype "$4" \
        --compress "$5" >>"$out"
      rm -f "$f"
    done
  done
done
dd_out=$(dd if=/dev/zero of="$dir/headscope-dd-$$" bs=1M count="$dd_mib" conv=fdatasync 2>&1 | tail -1)
rm -f "$dir/headscope-dd-$$"

bench_mark "$out"
/usr/bin/python3 - "$out" "$dd_out" "${OPENBLAS_CORETYPE:-autodetect}" "$dd_mib" <<'PY' | bench_md "$outdir/capture.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
key = lambda r: (r["threads"], r["T"], r["dtype"], r["compress"])
hs = {key(r): r for r in rows if r["impl"] == "headscope"}
th = {key(r): r for r in rows if r["impl"] == "torch_h5py"}
print(f"OpenBLAS kernels: {sys.argv[3]}; {rows[0]['L']} layers x {rows[0]['H']} heads, d {rows[0]['d']}; maps of every head\n")
print("| threads | T | dtype | compress | hs maps/s | torch+h5py maps/s | x | hs MB/s | hs capture / plain forward |")
print("|---|---|---|---|---|---|---|---|---|")
for k in sorted(hs):
    a, b = hs[k], th.get(k)
    if not b:
        continue
    print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {a['maps_per_s']:,.0f} | {b['maps_per_s']:,.0f} | "
          f"{a['maps_per_s']/b['maps_per_s']:.2f} | {a['mb_per_s']:,.0f} | {a['capture_s']/a['forward_s']:.2f} |")
print(f"\nRaw disk write (dd, {sys.argv[4]} MiB, fdatasync): {sys.argv[2]}")
PY
