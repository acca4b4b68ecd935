#!/usr/bin/env bash
# Attention-output SAEs (SPEC §19): `headscope features` and `headscope
# train-sae` on a GPT-2-small-shaped model (12 layers, d 768, 12 heads,
# vocabulary 50257, n_positions 1024; random weights in HF's GPT-2 layout)
# with a TopK SAE on blocks.5.attn.hook_z (d_in 768, d_sae 24,576, k 32,
# SAELens's format; random weights, b_dec the mean of z), against PyTorch at
# its best in the same run (bench/sae_torch.py, float32), at 1 and 2 threads.
#   features: --tokens N (default 1,048,576) random tokens in batches of 8 x
#     128, --top 10 --dfa-examples 0 (no attribution pass). Torch does the
#     same work: the forward up to the hook (SAELens's stop_at_layer: layers
#     0-4 whole, layer 5's attention to z), the encode (x - b_dec) W_enc +
#     b_enc, topk, relu, frequency / mean_act / head_share and the top 10
#     (value, token) of each feature merged batch by batch; its statistics
#     are checked against our index's rows.
#   train-sae: --train-steps S (default 32) steps of 32 x 128 tokens (d_sae
#     24,576, k 32, AuxK 512, Adam lr 1e-3), activations from forwards
#     through a shuffled buffer of 16 steps' tokens on both sides (both
#     tokens/s include the forwards). Torch: autograd with EleutherAI
#     sparsify's sparse encoder backward, embedding_bag decoding.
# Ours: tokens over the command's own seconds (its JSON: the study with the
# index writes, model loading excluded; train-sae: its tokens_per_second,
# the step loop); torch: the loop alone; medians of R runs (default 1: a
# full-size features run is ~78 TFLOP of forwards to the hook and ~40 TFLOP
# of encode GEMM, ~23 minutes a side at 1 thread on a Zen 4 core at ~780
# tokens/s; the whole default run takes about 1.5 hours). Peak memory: ours
# /usr/bin/time's maximum RSS of the command, torch getrusage's. The encode
# GEMM's GFLOP/s (2 tokens d_in d_sae / seconds) on each side: ours over the
# encode and statistics' time (the command's seconds minus its forwards',
# measured by a run of the same tokens through a 64-latent SAE, both over at
# most 65,536 tokens, scaled), torch over the same and over the GEMM's own
# time, each elapsed and per CPU-second (the machine may be shared), against
# the FMA peak (bench/out/peak.jsonl when there, else bench_peak in this
# run). Target: tokens/s >= 1.5x torch float32; where torch's GEMM
# already runs above 2/3 of the peak, ours >= 85% of the peak instead.
#
#   bench/sae.sh [--threads "1 2"] [--runs R] [--tokens N] [--train-steps S]
#                [--layer L] [--blas-autodetect] [--tiny] [--contend]
#
# Results: bench/out/sae.jsonl and bench/out/sae.md (the load average before
# and after each side in every row). --tiny: 2 layers, d 64, 4 heads,
# vocabulary 512, d_sae 256, k 8, 4,096 tokens in batches of 4 x 64, 8
# training steps of 4 x 64, 1 thread, 1 run (seconds; scripts/test --slow),
# results in bench/out/tiny/.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init "threads blas tiny contend"
threads="1 2"
runs=1 tokens=1048576 steps=32 layer=5
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --train-steps) steps=$2; shift 2 ;;
    --layer) layer=$2; shift 2 ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done
shape=(--layers 12 --d 768 --heads 12 --vocab 50257 --n-positions 1024)
d_sae=24576 k=32 fb=8 ft=128 tb=32 tt=128 outdir=bench/out
if [ "$tiny" = 1 ]; then
  shape=(--layers 2 --d 64 --heads 4 --vocab 512 --n-positions 128)
  d_sae=256 k=8 fb=4 ft=64 tb=4 tt=64 layer=1 tokens=4096 steps=8 threads=1 runs=1
  outdir=bench/out/tiny
fi
fn=$((fb * ft))
[ "$tokens" -ge "$fn" ] || bench_die "--tokens $tokens: at least one batch of $fb x $ft"
tokens=$((tokens / fn * fn))
split_tokens=$((tokens < 65536 ? tokens : 65536))
bench_build headscope_cli bench_peak
hs=$(pwd)/$bench_dir/headscope
mkdir -p "$outdir"
bench_tmp
out=$outdir/sae.jsonl
: >"$out"
echo "making the model, the SAEs and $tokens tokens" >&2
/usr/bin/python3 bench/sae_torch.py make "$tmp" "${shape[@]}" --layer "$layer" --d-sae "$d_sae" \
  --k "$k" --tokens "$tokens"

load() { cut -d' ' -f1 /proc/loadavg; }
# ours NAME ARGS...: one headscope command under /usr/bin/time; its JSON
# line to $tmp/NAME.json, maximum RSS (KiB), wall, user and system seconds
# to $tmp/NAME.time
ours() {
  local name=$1
  shift
  /usr/bin/time -f '%M %e %U %S' -o "$tmp/$name.time" "$hs" "$@" >"$tmp/$name.json"
}
# row MODE THREADS LOAD0 LOAD1 JSON TIME [JSON TIME ...]: one headscope row
# (the run of median tokens/s; tokens over the JSON's seconds, or its
# tokens_per_second), with every run's, the largest maxrss, the loads
row() {
  /usr/bin/python3 -c 'import json, sys
js = [json.loads(l) for l in sys.argv[5::2]]
tm = [l.split() for l in sys.argv[6::2]]
tps = [j["tokens_per_second"] if "tokens_per_second" in j else j["tokens"] / j["seconds"] for j in js]
r = js[sorted(range(len(js)), key=lambda i: tps[i])[len(js) // 2]]
r.update(impl="headscope", mode=sys.argv[1], threads=int(sys.argv[2]),
         tokens_per_second=sorted(tps)[len(tps) // 2], all_tokens_per_second=tps,
         maxrss_kib=max(int(t[0]) for t in tm), wall_s=[float(t[1]) for t in tm],
         cpu_s=[float(t[2]) + float(t[3]) for t in tm], load_before=sys.argv[3], load_after=sys.argv[4])
print(json.dumps(r))' "$@"
}
# torch_row JSON LOAD0 LOAD1
torch_row() {
  /usr/bin/python3 -c 'import json, sys
r = json.loads(sys.argv[1]); r.update(load_before=sys.argv[2], load_after=sys.argv[3]); print(json.dumps(r))' "$@"
}

bench_contend_start
for t in $threads; do
  bench_threads "$t"
  # the FMA peak: bench/out/peak.jsonl's widest ISA at t threads, else measured now
  pk=$(grep -h '"fma_peak"' bench/out/peak.jsonl 2>/dev/null | grep "\"threads\":$t," | tail -n 1 || true)
  src=bench/out/peak.jsonl
  if [ -z "$pk" ]; then
    pk=$(OMP_WAIT_POLICY=passive "$bench_dir"/bench/bench_peak --threads "$t" --seconds 0.1 --reps 3 \
         --read-mb 0 | tail -n 1)
    src="bench_peak, this run"
  fi
  /usr/bin/python3 -c 'import json, sys
r = json.loads(sys.argv[1]); r.update(impl="fma_peak", source=sys.argv[2], threads=int(sys.argv[3])); print(json.dumps(r))' \
    "$pk" "$src" "$t" >>"$out"

  fargs=(--model "$tmp/model" --data "$tmp/data.bin" --batch "$fb" --seq-len "$ft" --top 10
         --dfa-examples 0 --threads "$t" --json)
  echo "threads $t: features over $tokens tokens (headscope)" >&2
  l0=$(load) res=()
  for r in $(seq 1 "$runs"); do
    rm -f "$tmp/f.db"
    ours features features "${fargs[@]}" --sae "$tmp/sae" --db "$tmp/f.db" --max-batches $((tokens / fn))
    res+=("$(cat "$tmp/features.json")" "$(cat "$tmp/features.time")")
  done
  row features "$t" "$l0" "$(load)" "${res[@]}" >"$tmp/row.json"
  # the encode and statistics' share: features minus the forwards alone (a
  # 64-latent SAE), both over the same split_tokens (CPU times: loading cancels)
  if [ "$split_tokens" -lt "$tokens" ]; then
    echo "threads $t: features over $split_tokens tokens (headscope)" >&2
    rm -f "$tmp/s.db"
    ours split features "${fargs[@]}" --sae "$tmp/sae" --db "$tmp/s.db" --max-batches $((split_tokens / fn))
  else
    cp "$tmp/features.json" "$tmp/split.json"
    cp "$tmp/features.time" "$tmp/split.time"
  fi
  echo "threads $t: the forwards alone over $split_tokens tokens (headscope, a 64-latent SAE)" >&2
  rm -f "$tmp/n.db"
  ours null features "${fargs[@]}" --sae "$tmp/sae_null" --db "$tmp/n.db" --max-batches $((split_tokens / fn))
  /usr/bin/python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
sp, nl = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
cpu = lambda f: sum(map(float, open(f).read().split()[2:4]))
k = r["tokens"] / sp["tokens"]
r.update(split_tokens=sp["tokens"], split_s=sp["seconds"], null_s=nl["seconds"],
         split_cpu_s=cpu(sys.argv[4]), null_cpu_s=cpu(sys.argv[5]),
         forward_s_per_token=nl["seconds"] / nl["tokens"], forward_s=nl["seconds"] * k, encode_s=(sp["seconds"] - nl["seconds"]) * k,
         encode_cpu_s=(cpu(sys.argv[4]) - cpu(sys.argv[5])) * k)
print(json.dumps(r))' "$tmp/row.json" "$tmp/split.json" "$tmp/null.json" "$tmp/split.time" \
    "$tmp/null.time" >>"$out"
  echo "threads $t: features over $tokens tokens (torch)" >&2
  l0=$(load)
  j=$(bench_torch bench/sae_torch.py features "$tmp" --batch "$fb" --seq-len "$ft" --top 10 \
      --tokens "$tokens" --threads "$t" --runs "$runs" --db "$tmp/f.db")
  torch_row "$j" "$l0" "$(load)" >>"$out"

  echo "threads $t: train-sae, $steps steps of $tb x $tt (headscope)" >&2
  l0=$(load) res=()
  for r in $(seq 1 "$runs"); do
    rm -f "$tmp/t.db"
    ours train train-sae --model "$tmp/model" --hook "blocks.$layer.attn.hook_z" --data "$tmp/data.bin" \
      --out "$tmp/trained" --force --d-sae "$d_sae" --k "$k" --steps "$steps" --batch "$tb" \
      --seq-len "$tt" --db "$tmp/t.db" --threads "$t" --json
    res+=("$(cat "$tmp/train.json")" "$(cat "$tmp/train.time")")
  done
  row train "$t" "$l0" "$(load)" "${res[@]}" >>"$out"
  echo "threads $t: train, $steps steps of $tb x $tt (torch)" >&2
  l0=$(load)
  j=$(bench_torch bench/sae_torch.py train "$tmp" --batch "$tb" --seq-len "$tt" --d-sae "$d_sae" \
      --k "$k" --steps "$steps" --threads "$t" --runs "$runs")
  torch_row "$j" "$l0" "$(load)" >>"$out"
done
bench_contend_stop
bench_mark "$out"

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)
fam=$(lscpu | sed -n 's/^CPU family: *//p' | head -n 1)
/usr/bin/python3 - "$out" "${shape[*]}" "$layer" "$d_sae" "$k" "$tokens" "$fb x $ft" "$steps" \
  "$tb x $tt" "$runs" "$cpu (family $fam)" "${OPENBLAS_CORETYPE:-autodetected}" <<'PY' | bench_md "$outdir/sae.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
shape, layer, M, k, N, fbt, steps, tbt, runs, cpu, blas = sys.argv[2:13]
M, k = int(M), int(k)
d_in = int(shape.split("--d ")[1].split()[0])
print(f"GPT-2-shaped, random weights ({shape}); TopK SAE on blocks.{layer}.attn.hook_z "
      f"(d_in {d_in}, d_sae {M}, k {k}); {cpu}, OpenBLAS kernels {blas}; medians of {runs} run(s). "
      f"features: {N} tokens in batches of {fbt}, --top 10 --dfa-examples 0; train-sae: {steps} "
      f"steps of {tbt} tokens (forwards included on both sides). Ours: tokens over the command's "
      f"own seconds (loading excluded), torch: the loop alone.\n")
print("| threads | command | headscope tok/s | torch tok/s | **ours / torch** | target 1.5x | "
      "peak RSS MiB ours / torch | CPU s / wall s, ours⁰; torch | 1-min load before → after, ours; torch |")
print("|---|---|---|---|---|---|---|---|---|")
get = lambda impl, mode, t: [r for r in rows if r["impl"] == impl and r.get("mode") == mode
                             and r["threads"] == t][0]
ts = sorted({r["threads"] for r in rows if r["impl"] == "headscope"})
for t in ts:
    for mode in ("features", "train"):
        o, p = get("headscope", mode, t), get("torch", mode, t)
        ratio = o["tokens_per_second"] / p["tokens_per_second"]
        print(f"| {t} | {'features' if mode == 'features' else 'train-sae'} | "
              f"{o['tokens_per_second']:,.0f} | {p['tokens_per_second']:,.0f} | **{ratio:.2f}x** | "
              f"{'met' if ratio >= 1.5 else 'missed'} | {o['maxrss_kib'] / 1024:,.0f} / "
              f"{p['maxrss_kib'] / 1024:,.0f} | {sum(o['cpu_s']) / sum(o['wall_s']):.2f}; "
              f"{sum(p['cpu_s']) / sum(p['walls']):.2f} | {o['load_before']} → {o['load_after']}; "
              f"{p['load_before']} → {p['load_after']} |")
print("\n⁰ the whole command's, loading included (/usr/bin/time); torch's: the loop's "
      "(time.process_time). Below the thread count: the process did not get its cores.")
print("\nfeatures, where the time goes, and the encode's rate (2 x tokens x d_in x d_sae FLOP) "
      "against the FMA peak, elapsed; per CPU-second x threads (the machine is shared: the "
      "second is what the cores did while they ran):\n")
print("| threads | FMA peak GFLOP/s | ours s: all, forwards¹, encode + stats¹ | ours encode + stats "
      "GFLOP/s (% peak) | torch s: all, forwards², encode + stats | torch encode + stats GFLOP/s "
      "(% peak) | torch's GEMM alone GFLOP/s (% peak) | rule (per CPU-second) | agreement |")
print("|---|---|---|---|---|---|---|---|---|")
for t in ts:
    pk = [r for r in rows if r["impl"] == "fma_peak" and r["threads"] == t][0]
    peak = pk["gflops"]
    o, p = get("headscope", "features", t), get("torch", "features", t)
    fl = 2.0 * o["tokens"] * d_in * M / 1e9
    rate = lambda s: fl / s if s > 0 else float("nan")
    pct = lambda g: f"{g:.1f} ({100 * g / peak:.0f}%)"
    o_w, o_c = rate(o["encode_s"]), rate(o["encode_cpu_s"] / t)
    pe = p["seconds"] - p["forward_s"]
    p_w, p_c = rate(pe), rate((p["loop_cpu_s"] - p["forward_cpu_s"]) / t)
    g_w, g_c = p["gemm_gflops"], p["gemm_gflops_per_cpu_s"] * t
    if g_c > 2 / 3 * peak:
        rule = (f"torch's GEMM above 2/3 of the peak, so ours >= 85% of it: "
                f"{'met' if o_c >= 0.85 * peak else 'missed'}")
    else:
        rule = "torch's GEMM below 2/3 of the peak: 1.5x applies"
    agree = (f"frequency diff {p.get('max_frequency_diff', float('nan')):.1e}, mean_act rel "
             f"{p.get('max_mean_act_rel_diff', float('nan')):.1e}, head_share "
             f"{p.get('max_head_share_diff', float('nan')):.1e}, top-10 lists equal "
             f"{100 * p.get('top_examples_same', float('nan')):.2f}%")
    print(f"| {t} | {peak:.1f} ({pk['isa']}, {pk['source']}) | {o['seconds']:.2f}, "
          f"≈{o['forward_s']:.2f}, ≈{o['encode_s']:.2f} | {pct(o_w)}; {pct(o_c)} | "
          f"{p['seconds']:.2f}, {p['forward_s']:.2f}, {pe:.2f} | {pct(p_w)}; {pct(p_c)} | "
          f"{pct(g_w)}; {pct(g_c)} | {rule} | {agree} |")
print("\n¹ the split is a features run minus a run of the same batches through a 64-latent SAE "
      "(the forwards and a negligible encode; both over "
      f"{o['split_tokens']:,} tokens, scaled; per CPU-second: their CPU times, loading cancels). "
      "² torch stops at the hook (SAELens's stop_at_layer).\n")
print("train-sae, where the time goes:\n")
print("| threads | ours: tok/s, s, forwards³ s, steps s | torch: tok/s, s, forwards s, steps s, "
      "encode GEMM s (GFLOP/s) | last MSE ours / torch |")
print("|---|---|---|---|")
for t in ts:
    o, p = get("headscope", "train", t), get("torch", "train", t)
    of = get("headscope", "features", t)["forward_s_per_token"]
    n = int(tbt.split(" x ")[0]) * int(tbt.split(" x ")[1])
    fwd_tokens = 16 * n * -(-int(steps) // 16)
    os_ = o["tokens"] / o["tokens_per_second"]
    print(f"| {t} | {o['tokens_per_second']:,.0f}, {os_:.2f}, ≈{of * fwd_tokens:.2f}, "
          f"≈{os_ - of * fwd_tokens:.2f} | {p['tokens_per_second']:,.0f}, {p['seconds']:.2f}, "
          f"{p['forward_s']:.2f}, {p['step_s']:.2f}, {p['gemm_s']:.2f} ({p['gemm_gflops']:.1f}) | "
          f"{o['mse']:.4g} / {p['mse']:.4g} |")
print("\n³ estimated: the forwards' tokens (16 steps' worth a refill) at the features run's "
      f"rate per token (batches of {fbt}" + (f", not {tbt})." if fbt != tbt else ")."))
PY
