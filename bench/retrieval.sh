#!/usr/bin/env bash
# Retrieval heads at long context (SPEC §18) on the Llama-3.2-1B shape: a
# random BF16 checkpoint in the Hugging Face layout (scripts/llama_bf16.py,
# max_position_embeddings raised to 131072 as the real model's) with a
# byte-level tokenizer, and one needle at depth 50 in a haystack of N tokens
# for each N of --lengths: `retrieval`'s wall time and peak RSS per run,
# beside its memory plan (info's forward of 512 rows, the prefill's chunk,
# plus the cache kv-bytes gives at N + the needle's tokens), and beside
# bench/retrieval_torch.py, the same copy-rule loop and haystack loss in
# PyTorch eager in the same run (the losses side by side). Then the decoding step at the longest N: `generate` with the
# full cache and under a plan keeping 25% of the kv heads (kv-plan from
# the run's scores, sink 4, window 256), cache bytes and the steps' tokens/s.
# A random model retrieves nothing: the figures are the cost of the
# instrument, not a finding.
#
#   bench/retrieval.sh [--threads "2"] [--lengths 2048,4096,8192] [--tiny]
#
# Results: bench/out/retrieval.jsonl and bench/out/retrieval.md (--tiny: a
# tiny Llama shape, lengths 64,128, in bench/out/tiny/).
. "$(dirname "$0")/lib.sh"
bench_init "threads tiny"
threads="2" lengths="2048,4096,8192" dims="2048 8192 16 32 8 128256 1" shape=1b
while [ $# -gt 0 ]; do
  case "$1" in
    --lengths) lengths=$2; shift 2 ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done
outdir=bench/out
[ "$tiny" = 1 ] && { dims="64 172 2 4 2 1000 1" shape=tiny lengths="64,128" threads=1 outdir=bench/out/tiny; }
bench_build headscope_cli
bench_tmp
mkdir -p "$outdir"
out=$outdir/retrieval.jsonl
: >"$out"
hs=$bench_dir/headscope
load() { cut -d' ' -f1 /proc/loadavg; }
dir=$tmp/$shape
echo "$shape: writing the checkpoint" >&2
# shellcheck disable=SC2086
/usr/bin/python3 scripts/llama_bf16.py "$dir" $dims random
/usr/bin/python3 - "$dir" <<'PY'
import json, sys
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xa1, 0xad)) + list(range(0xae, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
json.dump({"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": level,
           "post_processor": None, "decoder": level,
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False,
                     "byte_fallback": False, "vocab": {chr(c): b for b, c in zip(bs, cs)},
                     "merges": []}}, open(sys.argv[1] + "/tokenizer.json", "w"))
c = json.load(open(sys.argv[1] + "/config.json"))
c["max_position_embeddings"] = 131072
json.dump(c, open(sys.argv[1] + "/config.json", "w"))
PY
needle=" The secret code is 7194." question=" What is the secret code? The secret code is" answer=" 7194"
printf '{"needle": "%s", "question": "%s", "answer": "%s"}\n' "$needle" "$question" "$answer" \
  >"$tmp/needles.jsonl"
while [ "$(stat -c %s "$tmp/hay.txt" 2>/dev/null || echo 0)" -lt 40000 ]; do
  cat README.md docs/*.md | tr -cd '\11\12\15\40-\176' >>"$tmp/hay.txt"
done
longest=${lengths##*,}
for t in $threads; do
  bench_threads "$t"
  row() { printf '{"shape":"%s","threads":%s,"load_avg":"%s",%s}\n' "$shape" "$t" "$(load)" "$1" >>"$out"; }
  plan512=$("$hs" info --model "$dir" --batch 1 --seq-len 512 --json |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["memory_plan"]["forward"])')
  for n in ${lengths//,/ }; do
    echo "$shape, $t threads: headscope retrieval at $n tokens" >&2
    rm -f "$tmp/r.db"*
    /usr/bin/time -f '%e %M' -o "$tmp/time.txt" "$hs" retrieval --model "$dir" \
      --haystack "$tmp/hay.txt" --needles "$tmp/needles.jsonl" --lengths "$n" --depths 50 \
      --db "$tmp/r.db" --json >"$tmp/r.json" 2>"$tmp/r.err" || bench_die "retrieval: $(cat "$tmp/r.err")"
    kv=$("$hs" kv-bytes --model "$dir" --seq-len $((n + 80)) --bytes 4 --json |
      /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["kv_bytes"])')
    # the plan: decoding (a forward of 512 rows and the cache) or the haystack's loss (eval at N)
    evaln=$("$hs" info --model "$dir" --batch 1 --seq-len "$n" --json |
      /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["memory_plan"]["eval"])')
    plan=$((plan512 + kv > evaln ? plan512 + kv : evaln))
    row "\"impl\":\"headscope\",\"length\":$n,\"run_s\":$(cut -d' ' -f1 "$tmp/time.txt"),\"peak_rss_kb\":$(cut -d' ' -f2 "$tmp/time.txt"),\"plan_bytes\":$plan,\"result\":$(cat "$tmp/r.json")"
  done
  # torch: one process per length, glibc's own allocator (bench_torch's keeps every freed
  # block, and the prefill's score blocks grow chunk by chunk: at 8K they filled 24 GB)
  for n in ${lengths//,/ }; do
    echo "$shape, $t threads: torch eager, the same loop at $n tokens" >&2
    OMP_WAIT_POLICY=passive /usr/bin/python3 bench/retrieval_torch.py --model "$dir" \
      --haystack "$tmp/hay.txt" --needle "$needle" --question "$question" --answer "$answer" \
      --lengths "$n" --depth 50 --threads "$t" >"$tmp/torch.jsonl" || bench_die "retrieval_torch.py failed"
    while read -r j; do row "${j:1:${#j}-2}"; done <"$tmp/torch.jsonl"
  done
  # the decoding step at the longest length: the full cache against a plan keeping 25%
  "$hs" kv-plan --db "$tmp/r.db" --run 1 --keep-fraction 0.25 --sink 4 --window 256 \
    --out "$tmp/plan.json" >/dev/null || bench_die "kv-plan failed"
  ids=$(head -c "$longest" "$tmp/hay.txt" | od -An -v -tu1 | tr -s ' \n' ',' | sed 's/^,//; s/,$//')
  for p in full plan; do
    echo "$shape, $t threads: generate after $longest tokens ($p)" >&2
    extra=$([ $p = plan ] && echo "--kv-plan $tmp/plan.json")
    # shellcheck disable=SC2086
    /usr/bin/time -f '%e %M' -o "$tmp/time.txt" "$hs" generate --model "$dir" --prompt-ids "$ids" \
      --max-new 32 --json $extra >"$tmp/g.json" 2>"$tmp/g.err" || bench_die "generate: $(cat "$tmp/g.err")"
    row "\"impl\":\"headscope_generate_$p\",\"length\":$longest,\"wall_s\":$(cut -d' ' -f1 "$tmp/time.txt"),\"peak_rss_kb\":$(cut -d' ' -f2 "$tmp/time.txt"),\"result\":$(/usr/bin/python3 -c 'import json,sys; g = json.load(open(sys.argv[1])); g.pop("ids"); g.pop("new_ids"); print(json.dumps(g))' "$tmp/g.json")"
  done
done
rm -rf "$dir"
/usr/bin/python3 - "$out" <<'PY' | bench_md "$outdir/retrieval.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("One needle at depth 50 in N byte tokens of text, a random BF16 Llama of the shape "
      "(nothing is retrieved: the cost of the instrument); one run each. headscope: "
      "`retrieval`'s wall time (load included: the grid's run and the haystack's loss) and "
      "peak RSS against its plan (the larger of: the weights as stored + a forward of 512 rows "
      "+ the float cache at N; info's eval plan at N, the haystack's loss); torch: the same "
      "loop in eager float32 (prefill in chunks of 512 rows, weights converted from BF16, "
      "glibc's own allocator, one process per N) and the same haystack loss (a forward of N "
      "rows in chunks of 512), without the load; x torch: torch's run and loss over ours.\n")
print("| shape | threads | N | side | run s | prefill s | steps tok/s | haystack loss (s) "
      "| x torch | peak RSS | plan |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
ours = {(r["threads"], r["length"]): r for r in rows if r["impl"] == "headscope"}
for r in rows:
    if r["impl"] == "headscope":
        print(f"| {r['shape']} | {r['threads']} | {r['length']} | headscope | {r['run_s']:.1f} "
              f"| | | {r['result']['haystack_loss']:.6f} | | {r['peak_rss_kb'] / 2**20:.2f} GiB "
              f"| {r['plan_bytes'] / 2**30:.2f} GiB |")
    elif r["impl"].startswith("torch"):
        o = ours.get((r["threads"], r["length"]))
        both = r["run_s"] + r["haystack_loss_s"]
        print(f"| {r['shape']} | {r['threads']} | {r['length']} | torch eager | {r['run_s']:.1f} "
              f"| {r['prefill_s']:.1f} | {r['step_tokens_per_s']:.2f} "
              f"| {r['haystack_loss']:.6f} ({r['haystack_loss_s']:.1f}) "
              f"| {both / o['run_s'] if o else float('nan'):.2f} "
              f"| {r['peak_rss_kb'] / 2**20:.2f} GiB | |")
print("\nThe decoding step after the longest prompt, 32 new tokens: the full cache against a "
      "plan keeping 25% of the kv heads full (sink 4, window 256)\n")
print("| shape | threads | N | cache | cache bytes | prefill s | steps tok/s | peak RSS |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    if r["impl"].startswith("headscope_generate"):
        g = r["result"]
        print(f"| {r['shape']} | {r['threads']} | {r['length']} | {r['impl'][19:]} "
              f"| {g['cache_bytes'] / 2**20:.1f} MiB | {g['prefill_s']:.1f} "
              f"| {g['step_tokens_per_s']:.2f} | {r['peak_rss_kb'] / 2**20:.2f} GiB |")
PY
echo "wrote $out and $outdir/retrieval.md" >&2
