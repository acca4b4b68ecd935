#!/usr/bin/env bash
# Models at their real size (SPEC §13): random BF16 checkpoints of the
# Llama-3.2-1B and Llama-3-8B shapes in the Hugging Face layout (one
# model.safetensors each, 2.5 and 16 GB, written to a temporary folder),
# and on each: `info` with the memory plan of 1 x T, `eval` of one sequence
# of T tokens and of two with the weights packed by every call
# (HEADSCOPE_PREPACK=0: the second's time is one forward, the rest of the
# first's the load), and of two and three as an eval of many batches runs,
# the weights pre-packed first (the third's time is one forward), beside a torch
# implementation of the same forward (bench/scale_torch.py: float32 and
# bfloat16) in the same run, losses compared. Where the plan does not fit
# the machine, eval's refusal is recorded instead (it says so before it
# loads anything). --steps generate: 32 tokens after a prompt of 8, its
# tokens/s (all, and of the steps after the prefill) and peak RSS, the
# read bandwidth of bench_peak (2 MiB pages) at that thread count, and
# torch's own-cache greedy loop (bench/generate_torch.py, float32 and
# bfloat16, median of 3; where its loading fits). --steps patch: `patch --site z` of every head on
# 8 random prompt pairs of 24 tokens (SPEC §11), its wall time and peak RSS,
# with the weights pre-packed (the default) and with HEADSCOPE_PREPACK=0.
# --compute "f32 bf16": eval and generate once per mode of --compute (rows
# headscope, headscope_bf16, ...; bf16 only where the CPU has AVX512-BF16).
#
#   bench/scale.sh [--threads "2"] [--seq-len 512] [--shapes "1b 8b"]
#                  [--steps "eval generate patch"] [--compute "f32"]
#                  [--tiny]
#
# Results: bench/out/scale.jsonl and bench/out/scale.md (--tiny: a tiny
# Llama shape, T 32, in bench/out/tiny/).
. "$(dirname "$0")/lib.sh"
bench_init "threads tiny"
threads="2" T=512 shapes="1b 8b" steps="eval generate" computes="f32"
while [ $# -gt 0 ]; do
  case "$1" in
    --seq-len) T=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --shapes) shapes=$2; shift 2 ;;
    --compute) computes=$2; shift 2 ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done
outdir=bench/out
[ "$tiny" = 1 ] && { shapes=tiny T=32 threads=1 outdir=bench/out/tiny steps="eval generate patch"; }
bench_build headscope_cli bench_peak
bench_tmp
mkdir -p "$outdir"
out=$outdir/scale.jsonl
: >"$out"
hs=$bench_dir/headscope
load() { cut -d' ' -f1 /proc/loadavg; }

jq_num() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[2]))[sys.argv[1]])' "$1" "$2"; }
for i in $(seq 1 400); do echo "The quick brown fox $i jumps over the lazy dog, and the dog sleeps."; done >"$tmp/t.txt"
"$hs" tokens --in "$tmp/t.txt" --out "$tmp/t.bin" >/dev/null
for shape in $shapes; do
  case $shape in # d, d_ff, layers, heads, kv heads, vocabulary, tied
    1b) dims="2048 8192 16 32 8 128256 1" ;;
    8b) dims="4096 14336 32 32 8 128256 0" ;;
    tiny) dims="64 172 2 4 2 1000 1" ;;
    *) bench_die "unknown shape $shape (1b, 8b)" ;;
  esac
  dir=$tmp/$shape
  echo "$shape: writing the checkpoint" >&2
  # shellcheck disable=SC2086
  /usr/bin/python3 scripts/llama_bf16.py "$dir" $dims random
  bytes=$(stat -c %s "$dir/model.safetensors")
  "$hs" info --model "$dir" --batch 1 --seq-len "$T" --json >"$tmp/info.json"
  for t in $threads; do
    bench_threads "$t"
    row() { printf '{"shape":"%s","threads":%s,"T":%s,"file_bytes":%s,"load_avg":"%s",%s}\n' \
      "$shape" "$t" "$T" "$bytes" "$(load)" "$1" >>"$out"; }
    # warm: the file's pages in the cache (it was just written) and the machine's
    "$hs" eval --model "$dir" --data "$tmp/t.bin" --batch 1 --seq-len 8 --max-batches 1 \
      >/dev/null 2>&1 || true
    if [[ " $steps " == *" patch "* ]]; then
      vocab=$(echo "$dims" | cut -d' ' -f6)
      /usr/bin/python3 - "$vocab" >"$tmp/pairs.jsonl" <<'PY'
import json, random, sys
r, v = random.Random(11), int(sys.argv[1])
for _ in range(8):
    clean = [r.randrange(v) for _ in range(24)]
    corrupt = list(clean)
    corrupt[3] = r.randrange(v)
    print(json.dumps({"clean_ids": clean, "corrupt_ids": corrupt, "answer_id": r.randrange(v),
                      "wrong_id": r.randrange(v)}))
PY
      # the weights pre-packed once (the default for commands of many
      # forwards), then packed by every GEMM call (HEADSCOPE_PREPACK=0)
      for pp in 1 0; do
        impl=headscope_patch$([ $pp = 1 ] || echo _unpacked)
        echo "$shape, $t threads: headscope patch --site z of every head (HEADSCOPE_PREPACK=$pp)" >&2
        rm -f "$tmp/p.db"*
        if HEADSCOPE_PREPACK=$pp /usr/bin/time -f '%e %M' -o "$tmp/time.txt" "$hs" patch --model "$dir" \
          --prompts "$tmp/pairs.jsonl" --db "$tmp/p.db" --site z --batch 8 --allow-weak-premise --json \
          >"$tmp/patch.json" 2>"$tmp/patch.err"; then
          heads=$(/usr/bin/python3 -c 'import json,sys; print(sum(1 for h in json.load(open(sys.argv[1]))["heads"] if h["metric"] == "patch_z"))' "$tmp/patch.json")
          row "\"impl\":\"$impl\",\"prompts\":8,\"prompt_tokens\":24,\"heads\":$heads,\"wall_s\":$(cut -d' ' -f1 "$tmp/time.txt"),\"peak_rss_kb\":$(cut -d' ' -f2 "$tmp/time.txt")"
        else
          row "\"impl\":\"$impl\",\"refused\":$(/usr/bin/python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read().strip()))' "$tmp/patch.err")"
        fi
      done
    fi
    if [[ " $steps " == *" generate "* ]]; then
      # the weights a token reads: every matrix once (an untied embedding's one row aside)
      read_bytes=$((bytes - ($(echo "$dims" | cut -d' ' -f7) ? 0 : $(echo "$dims" | cut -d' ' -f1) * $(echo "$dims" | cut -d' ' -f6) * 2)))
      # the bound of a decoding step: reading them at this thread count
      bw=$(OMP_WAIT_POLICY=passive "$bench_dir"/bench/bench_peak --threads "$t" --seconds 0.1 --reps 3 \
        --read-mb 1024 | grep '"read_bandwidth"' | tail -n 1)
      row "\"impl\":\"read_bandwidth\",\"gbps\":$(echo "$bw" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["gbps"])')"
      need=$((bytes * 4)) have=$(awk '/MemTotal/ {printf "%.0f", $2 * 1024}' /proc/meminfo)
      for dt in float32 bfloat16; do # float32 holds and reads a float copy: twice the bytes
        [ "$need" -gt "$have" ] && break # as eval's torch side: float32 copies of every weight
        echo "$shape, $t threads: torch $dt generate of 32 tokens after 8 (its own cache)" >&2
        rb=$read_bytes
        [ "$dt" = float32 ] && rb=$((read_bytes * 2))
        if bench_torch bench/generate_torch.py --model "$dir" --prompt-ids 1,2,3,4,5,6,7,8 \
          --max-new 32 --threads "$t" --runs 3 --dtype "$dt" >"$tmp/tgen.json" 2>"$tmp/tgen.err"; then
          row "\"impl\":\"torch_generate_$dt\",\"read_bytes\":$rb,\"new_tokens\":32,\"tokens_per_s\":$(jq_num tokens_per_s "$tmp/tgen.json"),\"step_tokens_per_s\":$(jq_num step_tokens_per_s "$tmp/tgen.json")"
        else
          tail -n 3 "$tmp/tgen.err" >&2
          bench_die "torch generate failed"
        fi
      done
    fi
    for cm in $computes; do
      sfx=$([ "$cm" = f32 ] || echo "_$cm")
      if [[ " $steps " == *" generate "* ]]; then
        echo "$shape, $t threads: headscope generate of 32 tokens after 8 (--compute $cm)" >&2
        if /usr/bin/time -f '%e %M' -o "$tmp/time.txt" "$hs" generate --model "$dir" --compute "$cm" \
          --prompt-ids 1,2,3,4,5,6,7,8 --max-new 32 --json >"$tmp/gen.json" 2>"$tmp/gen.err"; then
          row "\"impl\":\"headscope_generate$sfx\",\"read_bytes\":$read_bytes,\"new_tokens\":32,\"tokens_per_s\":$(jq_num tokens_per_s "$tmp/gen.json"),\"step_tokens_per_s\":$(jq_num step_tokens_per_s "$tmp/gen.json"),\"wall_s\":$(cut -d' ' -f1 "$tmp/time.txt"),\"peak_rss_kb\":$(cut -d' ' -f2 "$tmp/time.txt")"
        else
          row "\"impl\":\"headscope_generate$sfx\",\"refused\":$(/usr/bin/python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read().strip()))' "$tmp/gen.err")"
        fi
      fi
      [[ " $steps " == *" eval "* ]] || continue
      # batches and pre-packing: 2 less 1 unpacked is a forward packing per call,
      # 3 less 2 pre-packed a forward of an eval of many batches. The first
      # pre-packed run after unpacked ones (first 1) spent 4-5 s more of
      # system time faulting its 2 MiB pages in than the next (on a Zen 4 VM,
      # whether or not memory was compacted first): its time gives the load
      # and packing, the next two the forward. Runs: batches,pre-packed,first.
      for run in $(for r in 1 2 3; do echo 1,0,0 2,0,0 2,1,1 2,1,0 3,1,0; done); do
        IFS=, read -r n pp first <<<"$run"
        echo "$shape, $t threads: headscope eval of $n x (1 x $T) (--compute $cm, pre-packed $pp)" >&2
        if HEADSCOPE_PREPACK=$pp /usr/bin/time -f '%e %M' -o "$tmp/time.txt" "$hs" eval --model "$dir" --data "$tmp/t.bin" \
          --compute "$cm" --batch 1 --seq-len "$T" --max-batches "$n" --json >"$tmp/eval.json" 2>"$tmp/eval.err"; then
          row "\"impl\":\"headscope$sfx\",\"batches\":$n,\"prepacked\":$pp,\"first_packed\":$first,\"wall_s\":$(cut -d' ' -f1 "$tmp/time.txt"),\"peak_rss_kb\":$(cut -d' ' -f2 "$tmp/time.txt"),\"eval\":$(cat "$tmp/eval.json"),\"plan\":$(cat "$tmp/info.json")"
        else
          row "\"impl\":\"headscope$sfx\",\"batches\":$n,\"refused\":$(/usr/bin/python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read().strip()))' "$tmp/eval.err"),\"plan\":$(cat "$tmp/info.json")"
          break
        fi
      done
    done
    [[ " $steps " == *" eval "* ]] || continue
    for dt in float32 bfloat16; do
      # the torch side holds the weights in dt and converts each through float32 while
      # loading: run it where twice the float32 weights fit (not the 8B shape in 24 GB)
      need=$((bytes * 4)) have=$(awk '/MemTotal/ {printf "%.0f", $2 * 1024}' /proc/meminfo)
      if [ "$need" -gt "$have" ]; then
        row "\"impl\":\"torch_$dt\",\"refused\":\"not run: its loading would need about $need bytes, more than the $have of this machine\""
        continue
      fi
      echo "$shape, $t threads: torch $dt" >&2
      j=$(bench_torch bench/scale_torch.py --model "$dir" --tokens "$tmp/t.bin" \
        --seq-len "$T" --threads "$t" --dtype "$dt" --reps "$([ "$tiny" = 1 ] && echo 1 || echo 3)")
      if [ -n "$j" ]; then row "${j:1:${#j}-2}"; else row "\"impl\":\"torch_$dt\",\"refused\":\"failed\""; fi
    done
  done
  rm -rf "$dir"
done
/usr/bin/python3 - "$out" <<'PY' | bench_md "$outdir/scale.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("Random BF16 Llama checkpoints (HF layout), one sequence; headscope eval's wall time "
      "(medians of 3: a forward is an eval of two sequences less one, the load the rest) and peak "
      "RSS; torch (float32 / bfloat16, glibc keeping freed "
      "blocks) loading with numpy and its forward's median of 3\n")
print("| shape | threads | T | file | side | load s | forward s | loss | peak RSS | plan: eval |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    plan = r.get("plan", {}).get("memory_plan", {}).get("eval")
    plan = f"{plan / 1e9:.2f} GB" if plan else ""
    head = f"| {r['shape']} | {r['threads']} | {r['T']} | {r['file_bytes'] / 1e9:.2f} GB | {r['impl']}"
    if "refused" in r:
        print(f"{head} | refused: {r['refused'][:160]} | | | | {plan} |")
    elif r["impl"].startswith("headscope_patch"):
        print(f"{head}: --site z of {r['heads']} heads, {r['prompts']} pairs of {r['prompt_tokens']} "
              f"tokens | | {r['wall_s']:.1f} (all) | | {r['peak_rss_kb'] / 1e6:.2f} GB | |")
    elif r["impl"] == "read_bandwidth":
        print(f"{head}: bench_peak's read of 1 GiB | | {r['gbps']:.1f} GB/s | | | |")
    elif "_generate" in r["impl"]:
        # the weights a token reads over a step's time
        bw = [x["gbps"] for x in rows if x["impl"] == "read_bandwidth" and
              x["threads"] == r["threads"] and x["shape"] == r["shape"]]
        gbs = r["read_bytes"] * r["step_tokens_per_s"] / 1e9
        pct = f", {100 * gbs / bw[0]:.0f}% of the read bandwidth" if bw else ""
        rss = f"{r['peak_rss_kb'] / 1e6:.2f} GB" if "peak_rss_kb" in r else ""
        print(f"{head}: 32 tokens after 8 | | {r['tokens_per_s']:.2f} tokens/s; steps "
              f"{r['step_tokens_per_s']:.2f} tokens/s = {gbs:.1f} GB/s{pct} | | {rss} | |")
    elif r["impl"].startswith("headscope"):
        g = [x for x in rows if x["impl"] == r["impl"] and x["shape"] == r["shape"] and
             x["threads"] == r["threads"] and "wall_s" in x]
        if r is not g[-1]:
            continue
        def wall(n, pp, first=0):
            w = [x["wall_s"] for x in g if x["batches"] == n and x.get("prepacked", 0) == pp and
                 x.get("first_packed", 0) == first]
            return statistics.median(w) if w else None
        w1, w2 = wall(1, 0), wall(2, 0)
        fwd = w2 - w1
        one = g[0]
        print(f"{head} | {w1 - fwd:.2f} | {fwd:.2f} | {one['eval']['loss']:.6f} | "
              f"{one['peak_rss_kb'] / 1e6:.2f} GB | {plan} |")
        p2, p3, cold = wall(2, 1), wall(3, 1), wall(2, 1, 1)
        if p2 is not None and p3 is not None and cold is not None:
            pk = [x for x in g if x["batches"] == 2 and x["prepacked"] == 1]  # first or not: equal
            un = [x for x in g if x["batches"] == 2 and x["prepacked"] == 0]
            print(f"{head}, eval of many batches, pre-packed | {cold - 2 * (p3 - p2):.2f} (load and "
                  f"packing; {p2 - 2 * (p3 - p2):.2f} in the next run) | {p3 - p2:.2f} | two sequences {pk[0]['eval']['loss']:.6f} (packed per "
                  f"call {un[0]['eval']['loss']:.6f}) | "
                  f"{pk[0]['peak_rss_kb'] / 1e6:.2f} GB | |")
    else:
        print(f"{head} | {r['load_s']:.2f} | {r['forward_s']:.2f} | {r['loss']:.6f} | "
              f"{r['peak_rss_kb'] / 1e6:.2f} GB | |")
PY
