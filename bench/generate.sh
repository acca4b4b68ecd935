#!/usr/bin/env bash
# Decoding throughput of `headscope generate` against a PyTorch decoder with
# its own KV cache (bench/generate_torch.py), and the peak memory of
# decoding 2,048 tokens with MHA, GQA, MQA and MLA.
#
#   bench/generate.sh [--threads "1 2"] [--runs R] [--max-new N] [--tiny] [--contend]
#
# Models: llama family (RoPE, RMSNorm, SwiGLU), d 256, 4 layers, 8 heads of
# 32, F 688, byte vocabulary, made by `headscope train --steps 1` (trained
# weights do not change the cost). Throughput: MHA (8 kv heads) and GQA (2),
# prompt of 16 ids, N new tokens (default 256), greedy, both sides pinned to
# the same threads (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, --threads /
# torch.set_num_threads); ours: the median of R runs (default 5) of the
# command's tokens_per_s (prefill + steps, model loading excluded); torch:
# the median of R runs after a warm-up. Both decode greedily, so their ids
# are compared too (equal up to float near-ties). MLA: two headscope-family
# `attention: "mla"` models of the same d, layers, heads and MLP, head
# widths from dh = d / heads (qk_nope_head_dim dh, qk_rope_head_dim dh/2,
# v_head_dim dh, plain q_proj), kv_lora_rank 4 dh (= d/2, DeepSeek-V2's
# proportion) and dh; their tokens/s against the MHA model's, ours only
# (the torch decoder is Llama's). Memory: peak RSS (/usr/bin/time -v) of
# generate --prompt-ids 1 --max-new 2048 at 1 thread for 8, 2 and 1 kv
# heads and both MLA models, with the cache bytes it reports. Results:
# bench/out/generate.md. --tiny: d 64, 2 layers, 16 new tokens, 256 for the
# memory part, 1 thread, 3 runs (a few seconds; scripts/test --slow),
# results in bench/out/tiny/.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init "threads tiny contend"
threads="1 2"
runs=5
max_new=256
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --max-new) max_new=$2; shift 2 ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done

bench_build headscope_cli
hs=$(pwd)/build/float/headscope
shape=(d_model=256 n_layer=4 n_head=8 d_ff=688) dh=32
mem_new=2048 outdir=bench/out
if [ "$tiny" = 1 ]; then
  shape=(d_model=64 n_layer=2 n_head=8 d_ff=128) dh=8 max_new=16 mem_new=256 threads=1 runs=3
  outdir=bench/out/tiny
fi
mla_ranks="$((4 * dh)) $dh" # kv_lora_rank: d/2 (DeepSeek-V2's 4 dh), and dh
mkdir -p "$outdir"
bench_tmp
for i in $(seq 1 40); do echo "The quick brown fox jumps over the lazy dog $i times."; done >"$tmp/text.txt"
"$hs" tokens --in "$tmp/text.txt" --out "$tmp/train.bin" >/dev/null
for G in 8 2 1; do
  "$hs" train --preset llama "${shape[@]}" n_kv_head=$G n_ctx=$((mem_new + 1)) --data "$tmp/train.bin" \
    --out "$tmp/g$G" --steps 1 --batch 1 --seq-len 16 >/dev/null
done
for C in $mla_ranks; do
  "$hs" train --preset mla "${shape[@]}" kv_lora_rank=$C qk_nope_head_dim=$dh \
    qk_rope_head_dim=$((dh / 2)) v_head_dim=$dh n_ctx=$((mem_new + 1)) \
    --data "$tmp/train.bin" --out "$tmp/mla$C" --steps 1 --batch 1 --seq-len 16 >/dev/null
done
mla_fast=${mla_ranks%% *}
prompt=$(seq -s, 10 25)
out=$tmp/rows.jsonl
: >"$out"
bench_contend_start
for t in $threads; do
  bench_threads "$t"
  for G in 8 2; do
    echo "threads $t, $G kv heads: headscope, torch" >&2
    for r in $(seq 1 "$runs"); do
      "$hs" generate --model "$tmp/g$G" --prompt-ids "$prompt" --max-new "$max_new" --threads "$t" \
        --json | sed "s/^{/{\"impl\":\"headscope\",\"threads\":$t,\"G\":$G,/" >>"$out"
    done
    bench_torch bench/generate_torch.py --model "$tmp/g$G" --prompt-ids "$prompt" \
      --max-new "$max_new" --threads "$t" --runs "$runs" 2>/dev/null |
      sed "s/^{/{\"G\":$G,/" >>"$out"
  done
  echo "threads $t, MLA (kv_lora_rank $mla_fast): headscope" >&2
  for r in $(seq 1 "$runs"); do
    "$hs" generate --model "$tmp/mla$mla_fast" --prompt-ids "$prompt" --max-new "$max_new" \
      --threads "$t" --json |
      sed "s/^{/{\"impl\":\"headscope\",\"threads\":$t,\"G\":\"mla$mla_fast\",/" >>"$out"
  done
done
bench_threads "1"
for G in 8 2 1; do
  /usr/bin/time -v "$hs" generate --model "$tmp/g$G" --prompt-ids 1 --max-new "$mem_new" --threads 1 \
    --json >"$tmp/mem$G.json" 2>"$tmp/time$G.txt"
  kib=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$tmp/time$G.txt")
  sed "s/^{/{\"impl\":\"memory\",\"G\":$G,\"peak_rss_kib\":$kib,/" "$tmp/mem$G.json" >>"$out"
done
for C in $mla_ranks; do
  /usr/bin/time -v "$hs" generate --model "$tmp/mla$C" --prompt-ids 1 --max-new "$mem_new" \
    --threads 1 --json >"$tmp/mem_mla$C.json" 2>"$tmp/time_mla$C.txt"
  kib=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$tmp/time_mla$C.txt")
  sed "s/^{/{\"impl\":\"memory\",\"G\":\"mla$C\",\"C\":$C,\"peak_rss_kib\":$kib,/" \
    "$tmp/mem_mla$C.json" >>"$out"
done
bench_contend_stop
bench_mark "$out"

/usr/bin/python3 - "$out" "$max_new" "$mem_new" "${shape[*]}" "$dh" <<'PY' | bench_md "$outdir/generate.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
max_new, mem_new, shape, dh = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
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
mla = sorted({r["G"] for r in rows if r["impl"] == "headscope" and isinstance(r["G"], str)})
if mla:
    print(f"\nMLA vs MHA, headscope only (same prompt and new tokens; MLA: kv_lora_rank"
          f" {mla[0][3:]}, qk_nope {dh}, qk_rope {dh // 2}, v {dh}):\n")
    print("| threads | MHA tok/s | MLA tok/s | MLA / MHA |")
    print("|---|---|---|---|")
    for t in sorted({r["threads"] for r in rows if r["impl"] == "headscope"}):
        med = lambda G: statistics.median(r["tokens_per_s"] for r in rows if r["impl"] ==
                                          "headscope" and r["threads"] == t and r["G"] == G)
        a, b = med(8), med(mla[0])
        print(f"| {t} | {a:,.0f} | {b:,.0f} | {b / a:.2f} |")
print(f"\nPeak RSS decoding {mem_new} tokens (prompt 1 id, 1 thread):\n")
print("| model | cached values per token and layer | KV cache bytes | peak RSS (MiB) | tok/s |")
print("|---|---|---|---|---|")
names = {8: "MHA (8 kv heads)", 2: "GQA (2 kv heads)", 1: "MQA (1 kv head)"}
mem = [r for r in rows if r["impl"] == "memory"]
for r in sorted(mem, key=lambda r: -(2 * r["G"] * dh if isinstance(r["G"], int) else r["C"] + dh // 2)):
    if isinstance(r["G"], int):
        name, vals = names.get(r["G"], f"{r['G']} kv heads"), f"2 x {r['G']} x {dh} = {2 * r['G'] * dh}"
    else:
        name, vals = f"MLA (kv_lora_rank {r['C']})", f"{r['C']} + {dh // 2} = {r['C'] + dh // 2}"
    print(f"| {name} | {vals} | {r['cache_bytes']:,} | {r['peak_rss_kib'] / 1024:.1f} |"
          f" {r['tokens_per_s']:,.0f} |")
PY
