#!/usr/bin/env bash
# Decoding throughput of `headscope generate` against a PyTorch decoder with
# its own KV cache (bench/generate_torch.py), and the peak memory of
# decoding 2,048 tokens with MHA, GQA and MQA.
#
#   bench/generate.sh [--threads "1 2"] [--runs R] [--max-new N] [--tiny]
#
# Models: llama family (RoPE, RMSNorm, SwiGLU), d 256, 4 layers, 8 heads of
# 32, F 688, byte vocabulary, made by `headscope train --steps 1` (trained
# weights do not change the cost). Throughput: MHA (8 kv heads) and GQA (2),
# prompt of 16 ids, N new tokens (default 256), greedy, both sides pinned to
# the same threads (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, --threads /
# torch.set_num_threads); ours: the median of R runs (default 5) of the
# command's tokens_per_s (prefill + steps, model loading excluded); torch:
# the median of R runs after a warm-up. Both decode greedily, so their ids
# are compared too (equal up to float near-ties). Memory: peak RSS
# (/usr/bin/time -v) of generate --prompt-ids 1 --max-new 2048 at 1 thread
# for 8, 2 and 1 kv heads, with the cache bytes it reports. Results:
# bench/out/generate.md. --tiny: d 64, 2 layers, 16 new tokens, 256 for the
# memory part, 1 thread, 3 runs (a few seconds; scripts/test --slow),
# results in bench/out/tiny/.
set -euo pipefail
cd "$(dirname "$0")/.."
threads="1 2"
runs=5
max_new=256
tiny=0
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --max-new) max_new=$2; shift 2 ;;
    --tiny) tiny=1; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "generate.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

cmake -S . -B build/float >/dev/null
cmake --build build/float -j "$(nproc)" --target headscope_cli >/dev/null
hs=$(pwd)/build/float/headscope
shape=(d_model=256 n_layer=4 n_head=8 d_ff=688)
mem_new=2048 outdir=bench/out
if [ "$tiny" = 1 ]; then
  shape=(d_model=64 n_layer=2 n_head=8 d_ff=128) max_new=16 mem_new=256 threads=1 runs=3
  outdir=bench/out/tiny
fi
mkdir -p "$outdir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=passive
for i in $(seq 1 40); do echo "The quick brown fox jumps over the lazy dog $i times."; done >"$tmp/text.txt"
"$hs" tokens --in "$tmp/text.txt" --out "$tmp/train.bin" >/dev/null
for G in 8 2 1; do
  "$hs" train --preset llama "${shape[@]}" n_kv_head=$G n_ctx=$((mem_new + 1)) --data "$tmp/train.bin" \
    --out "$tmp/g$G" --steps 1 --batch 1 --seq-len 16 >/dev/null
done
prompt=$(seq -s, 10 25)
out=$tmp/rows.jsonl
: >"$out"
for t in $threads; do
  export OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t
  for G in 8 2; do
    echo "threads $t, $G kv heads: headscope, torch" >&2
    for r in $(seq 1 "$runs"); do
      "$hs" generate --model "$tmp/g$G" --prompt-ids "$prompt" --max-new "$max_new" --threads "$t" \
        --json | sed "s/^{/{\"impl\":\"headscope\",\"threads\":$t,\"G\":$G,/" >>"$out"
    done
    /usr/bin/python3 bench/generate_torch.py --model "$tmp/g$G" --prompt-ids "$prompt" \
      --max-new "$max_new" --threads "$t" --runs "$runs" 2>/dev/null |
      sed "s/^{/{\"G\":$G,/" >>"$out"
  done
done
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for G in 8 2 1; do
  /usr/bin/time -v "$hs" generate --model "$tmp/g$G" --prompt-ids 1 --max-new "$mem_new" --threads 1 \
    --json >"$tmp/mem$G.json" 2>"$tmp/time$G.txt"
  kib=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$tmp/time$G.txt")
  sed "s/^{/{\"impl\":\"memory\",\"G\":$G,\"peak_rss_kib\":$kib,/" "$tmp/mem$G.json" >>"$out"
done

/usr/bin/python3 - "$out" "$max_new" "$mem_new" "${shape[*]}" <<'PY' | tee "$outdir/generate.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
max_new, mem_new, shape = sys.argv[2], sys.argv[3], sys.argv[4]
print(f"llama family ({shape}, byte vocabulary), prompt 16 ids, {max_new} new tokens, greedy;"
      " tokens/s = median over runs\n")
print("| threads | kv heads | headscope tok/s | torch tok/s | ratio | same ids |")
print("|---|---|---|---|---|---|")
keys = sorted({(r["threads"], r["G"]) for r in rows if r["impl"] == "torch"})
for t, G in keys:
    ours = [r for r in rows if r["impl"] == "headscope" and r["threads"] == t and r["G"] == G]
    th = [r for r in rows if r["impl"] == "torch" and r["threads"] == t and r["G"] == G][0]
    a = statistics.median(r["tokens_per_s"] for r in ours)
    same = ours[0]["ids"] == th["ids"]
    if not same:
        first = next(i for i, (x, y) in enumerate(zip(ours[0]["ids"], th["ids"])) if x != y)
        same = f"no (from position {first})"
    else:
        same = "yes"
    print(f"| {t} | {G} | {a:,.0f} | {th['tokens_per_s']:,.0f} | {a / th['tokens_per_s']:.2f} | {same} |")
print(f"\nPeak RSS decoding {mem_new} tokens (prompt 1 id, 1 thread):\n")
print("| kv heads | KV cache bytes | peak RSS (MiB) |")
print("|---|---|---|")
for r in sorted((r for r in rows if r["impl"] == "memory"), key=lambda r: -r["G"]):
    print(f"| {r['G']} | {r['cache_bytes']:,} | {r['peak_rss_kib'] / 1024:.1f} |")
PY
