#!/usr/bin/env bash
# Training and inference throughput against PyTorch eager, and the memory of
# loading a ~100M-parameter checkpoint.
#
#   bench/train.sh [--steps S] [--threads "1 2"] [--blas-autodetect] [--skip-load] [--tiny]
#                  [--contend] [--avx2-only]
#                  [--before BIN] [--rounds R] [--mfu-only]
#
# Same model on both sides (bench/train_torch.py's definition: learned
# positions, pre-LayerNorm, biases, GELU MLP of 4d, tied unembedding, byte
# vocabulary 256, batch 4), same random batch shape, both pinned to N threads
# (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, torch.set_num_threads). As in
# bench/attention.sh, --blas-autodetect unsets OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE for both sides. Results: bench/out/train.jsonl and
# bench/out/train.md. --tiny runs tiny models for 2 steps at 1 thread and loads
# a tiny checkpoint (a few seconds; scripts/test --slow, so the benchmark keeps
# working), results in bench/out/tiny/.
#
# Model FLOP utilisation (bench/out/train_mfu.md): a training step at GPT-2
# small's shape (12 layers, d 768, 12 heads, T 64, vocabulary 50257) and at
# 6,384,6,6,256 (vocabulary 256), batch 4: the step's FLOPs (6 x tokens x
# each linear's weights, logits included, plus 12 x L x B x T^2 x d for the
# attention's full T x T square), the median step time, GFLOP/s and % of the
# FMA peak (bench/peak.h) measured at that thread count in the same run.
# --before BIN adds the same figures for another bench_train binary (e.g.
# bench/bench_train.c built against main's library), run alternately with
# ours, R rounds (default 3), medians over the rounds. At 1 thread the step's
# process CPU time is shown beside the elapsed time (the machine is shared). --mfu-only skips the PyTorch comparison and the checkpoint load.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init "threads blas tiny contend isa"
steps=10
threads="1 2"
load=1
before=""
rounds=3
mfu_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --skip-load) load=0; shift ;;
    --before) before=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --mfu-only) mfu_only=1 load=0; shift ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done

bench_build bench_train bench_peak
bin=$bench_dir/bench/bench_train
configs=(--config 2,128,4,4,128 --config 4,256,8,2,256 --config 6,384,6,6,256)
# the load: gpt2 family, d=768, 12 layers, vocabulary 32768: about 111M parameters.
load_config=(--config 12,768,12,12,1024 --vocab 32768)
outdir=bench/out
if [ "$tiny" = 1 ]; then
  configs=(--config 1,32,2,2,32 --config 2,64,4,2,32) steps=2 threads=1 outdir=bench/out/tiny
  load_config=(--config 2,64,4,4,64 --vocab 256)
fi
# model FLOP utilisation: (vocabulary, config) pairs
mfu_configs=("50257 12,768,12,12,64" "256 6,384,6,6,256")
mfu_steps=3
if [ "$tiny" = 1 ]; then
  mfu_configs=("256 2,64,4,2,32") mfu_steps=2 rounds=1
fi
mkdir -p "$outdir"
out=$outdir/train.jsonl
: >"$out"
bench_contend_start
if [ "$mfu_only" = 0 ]; then
# torch keeps two thread pools (its OpenMP one and OpenBLAS's); with OpenMP
# threads spinning while idle, torch at 2 threads ran up to 5x slower than at
# 1 on this 2-core machine, so torch runs with OMP_WAIT_POLICY=passive. Ours
# runs with headscope's own default (hs_runtime_init: passive waiting; bench/lib.sh
# leaves OMP_WAIT_POLICY unset for it).
for t in $threads; do
  bench_threads "$t"
  echo "threads $t: headscope, torch" >&2
  "$bin" --threads "$t" --steps "$steps" "${configs[@]}" >>"$out"
  bench_torch bench/train_torch.py --threads "$t" --steps "$steps" "${configs[@]}" \
    >>"$out" 2>/dev/null
done
fi

if [ "$load" = 1 ]; then
  bench_tmp
  echo "writing a checkpoint (${load_config[*]})" >&2
  OMP_NUM_THREADS=2 "$bin" --write-checkpoint "$tmp/ckpt" "${load_config[@]}" >/dev/null
  sync
  OMP_NUM_THREADS=1 "$bin" --load "$tmp/ckpt" >>"$out"
fi

bench_mark "$out"
if [ "$mfu_only" = 0 ]; then
/usr/bin/python3 - "$out" "${OPENBLAS_CORETYPE:-autodetect}" <<'PY' | bench_md "$outdir/train.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
key = lambda r: (r["threads"], r["L"], r["d"], r["H"], r["G"], r["T"])
hs = {key(r): r for r in rows if r["impl"] == "headscope"}
th = {key(r): r for r in rows if r["impl"] == "torch"}
print(f"OpenBLAS kernels: {sys.argv[2]}; batch 4, vocabulary 256, float32, median of the steps\n")
print("| threads | L,d,H,G,T | params | train tok/s (hs / torch) | train x | eval tok/s (hs / torch) | eval x |")
print("|---|---|---|---|---|---|---|")
for k in sorted(hs):
    a, b = hs[k], th.get(k)
    if not b:
        continue
    print(f"| {k[0]} | {k[1]},{k[2]},{k[3]},{k[4]},{k[5]} | {a['params']:,} | "
          f"{a['train_tok_s']:,.0f} / {b['train_tok_s']:,.0f} | {a['train_tok_s']/b['train_tok_s']:.2f} | "
          f"{a['eval_tok_s']:,.0f} / {b['eval_tok_s']:,.0f} | {a['eval_tok_s']/b['eval_tok_s']:.2f} |")
for r in rows:
    if r["impl"] == "headscope_load":
        print(f"\nLoading a {r['params']:,}-parameter F32 checkpoint ({r['file_bytes']/2**20:.0f} MiB): "
              f"peak RSS {r['peak_rss_kib']/1024:.0f} MiB = {r['peak_over_file']:.3f} x the file "
              f"(growth while loading {r['growth_over_file']:.3f} x), {r['load_s']:.2f} s.")
PY
fi

# Model FLOP utilisation, alternating ours and --before's binary per round.
mfu=$outdir/train_mfu.jsonl
: >"$mfu"
for r in $(seq "$rounds"); do
  for t in $threads; do
    bench_threads "$t"
    echo "mfu round $r, threads $t" >&2
    # the widest ISA's peak (AVX-512 where the CPU has it: the last line;
    # AVX2's with --avx2-only)
    pk=$(OMP_WAIT_POLICY=passive "$bench_dir"/bench/bench_peak --threads "$t" --seconds 0.1 --reps 3 --read-mb 0 |
         { if [ "$isa" = avx2-only ]; then grep '"isa":"avx2"'; else tail -n 1; fi; })
    echo "${pk/#\{/{\"round\":$r,\"load\":$(cut -d' ' -f1 /proc/loadavg),}" >>"$mfu"
    for c in "${mfu_configs[@]}"; do
      order="after before"
      [ $((r % 2)) = 0 ] && order="before after"
      for side in $order; do
        b=$bin
        if [ "$side" = before ]; then
          [ -n "$before" ] || continue
          b=$before
        fi
        l=$(cut -d' ' -f1 /proc/loadavg)
        "$b" --threads "$t" --steps "$mfu_steps" --warmup 1 --vocab "${c%% *}" --config "${c#* }" |
          sed "s/^{/{\"side\":\"$side\",\"round\":$r,\"load\":$l,/" >>"$mfu"
      done
    done
  done
done
bench_mark "$mfu"
/usr/bin/python3 - "$mfu" "${OPENBLAS_CORETYPE:-autodetect}" <<'PY' | bench_md "$outdir/train_mfu.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def flops(r):
    """A training step's FLOPs: 6 per token per weight of every linear (q, k,
    v, o, fc, proj; logits), plus the attention's QK^T and PV over the full
    T x T square, forward (4 B T^2 d) and backward (8 B T^2 d)."""
    L, d, H, G, T, B, V = (r[k] for k in ("L", "d", "H", "G", "T", "B", "V"))
    gd = G * (d // H)
    w = L * (d * d + 2 * d * gd + d * d + 8 * d * d) + d * V
    return 6 * B * T * w + 12 * L * B * T * T * d
peak = {}
for r in rows:
    if r["impl"] == "fma_peak":
        peak.setdefault((r["threads"], "wall"), []).append(r["gflops"])
        peak.setdefault((r["threads"], "cpu"), []).append(r.get("gflops_per_cpu_s", float("nan")))
groups = {}
for r in rows:
    if r["impl"] == "headscope":
        k = (r["threads"], r["L"], r["d"], r["H"], r["G"], r["T"], r["V"])
        groups.setdefault(k, {}).setdefault(r["side"], []).append(r)
isa = "/".join(sorted({r["isa"] for r in rows if r["impl"] == "fma_peak"}))
print(f"OpenBLAS kernels: {sys.argv[2]}; batch 4, float32; step = forward + backward + Adam; "
      f"medians over the rounds (each the median of its steps). % of the FMA peak ({isa}, "
      "12 accumulators) measured in the same rounds by the same clock: *cpu* = process CPU time "
      "(1 thread only: the time the step held a core, robust to other processes on a shared "
      "machine), *wall* = elapsed time\n")
print("| threads | clock | L,d,H,G,T,V | GFLOP/step | FMA peak GFLOP/s | before ms | before GFLOP/s | "
      "before % | after ms | after GFLOP/s | after % | after/before | load (1 min) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for k in sorted(groups):
    g = groups[k]
    f = flops(g["after"][0])
    for clock in (("cpu", "wall") if k[0] == 1 else ("wall",)):
        field = "train_step_cpu_ms" if clock == "cpu" else "train_step_ms"
        p = statistics.median(peak.get((k[0], clock), [float("nan")]))
        def fig(side):
            if side not in g or field not in g[side][0]:
                return None, ["–", "–", "–"]
            ms = statistics.median(r[field] for r in g[side])
            gf = f / ms * 1e-6
            return ms, [f"{ms:.1f}", f"{gf:.1f}", f"{100 * gf / p:.0f}%"]
        bms, b = fig("before")
        ams, a = fig("after")
        ratio = f"{bms / ams:.2f}" if bms and ams else "–"
        loads = [r["load"] for s in g.values() for r in s]
        print(f"| {k[0]} | {clock} | {k[1]},{k[2]},{k[3]},{k[4]},{k[5]},{k[6]} | {f * 1e-9:.1f} | "
              f"{p:.1f} | {' | '.join(b)} | {' | '.join(a)} | {ratio} | "
              f"{min(loads):.2f}–{max(loads):.2f} |")
PY
