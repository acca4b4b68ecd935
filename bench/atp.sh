#!/usr/bin/env bash
# Attribution patching benchmark (SPEC §15): on a GPT-2-small-shaped model
# (12 layers, d 768, 12 heads, GELU MLP 4d, learned positions, vocabulary 256)
# over clean/corrupt prompt pairs, all in one batch, at one thread:
#   * all-heads `atp --site z` (bench/bench_atp.c: hs_atp) against exact
#     all-heads `patch --site z` (hs_patch, the fast path) and `patch --naive`
#     (one forward per head, once) in the same run: the ratios of their
#     times, and the Spearman correlation of atp_z with patch_z
#     over the heads (random weights: a cost check, not a study);
#   * the same atp_z in PyTorch (bench/atp_torch.py: one clean forward, one
#     corrupt forward and backward with z in the graph), values compared;
#   * `circuit --method eap-ig --ig-steps 5`'s edge scores (hs_circuit without
#     a faithfulness curve) against EAP-IG in PyTorch on the split-input graph
#     (bench/atp_torch.py), values compared; circuit's peak resident memory
#     beside the weights' and the scores' bytes.
# Times are medians of --repeats, CPU seconds of each process (wall beside).
#
#   bench/atp.sh [--threads "1 2"] [--repeats N] [--prompts N] [--tiny]
# Results: bench/out/atp.jsonl and bench/out/atp.md. --tiny: 2 layers, d 64,
# 4 heads, T 16, 4 prompts (seconds; the slow tier runs it), in bench/out/tiny/.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_init "threads tiny"
threads="1"
repeats=3
prompts=8
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) repeats=$2; shift 2 ;;
    --prompts) prompts=$2; shift 2 ;;
    *) bench_opt "$@"; shift "$bench_shift" ;;
  esac
done
bench_build bench_atp bench_ablate
config=12,768,12,32 # layers, d, heads, T
outdir=bench/out
if [ "$tiny" = 1 ]; then
  config=2,64,4,16 prompts=4 threads=1 repeats=1 outdir=bench/out/tiny
fi
T=${config##*,}
mkdir -p "$outdir"
out=$outdir/atp.jsonl
: >"$out"
bench_tmp

"$bench_dir"/bench/bench_ablate --write "$tmp/m" --config "$config"
bench_torch_weights "$tmp/m/model.safetensors" "$tmp/m.pt"
bench_prompt_pairs "$tmp/p.jsonl" "$prompts" "$T"

for t in $threads; do
  bench_threads "$t"
  for what in atp patch patch-naive eap-ig; do
    echo "threads $t: headscope $what" >&2
    # patch-naive (one forward per head, about 150 forwards) runs once
    "$bench_dir"/bench/bench_atp --what "$what" --model "$tmp/m" --prompts "$tmp/p.jsonl" \
      --threads "$t" --repeats "$([ "$what" = patch-naive ] && echo 1 || echo "$repeats")" \
      --dump "$tmp/hs_$what.json" >>"$out"
  done
  for what in atp eap-ig; do
    echo "threads $t: torch $what" >&2
    bench_torch bench/atp_torch.py --what "$what" --threads "$t" \
      --config "$config" --weights "$tmp/m.pt" --prompts "$tmp/p.jsonl" --repeats "$repeats" \
      --dump "$tmp/torch_$what.json" >>"$out"
  done
  /usr/bin/python3 - "$tmp" "$t" >>"$out" <<'PY'
import json, sys
d, t = sys.argv[1], int(sys.argv[2])
load = lambda n: json.load(open("%s/%s.json" % (d, n)))
flat = lambda g: [v for row in g for v in row]
atp, patch = flat(load("hs_atp")["atp_z"]), flat(load("hs_patch")["patch_z"])
tatp = flat(load("torch_atp")["atp_z"])
hs_e, th_e = load("hs_eap-ig")["eap_ig"], load("torch_eap-ig")["eap_ig"]
def ranks(x):
    r = [0.0] * len(x)
    for i, j in enumerate(sorted(range(len(x)), key=lambda k: x[k])):
        r[j] = i
    return r
def pearson(a, b):
    n = len(a); ma, mb = sum(a) / n, sum(b) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    va = sum((x - ma) ** 2 for x in a) ** 0.5; vb = sum((y - mb) ** 2 for y in b) ** 0.5
    return cov / (va * vb) if va and vb else float("nan")
scale = max(abs(v) for v in th_e.values()) or 1
print(json.dumps({"impl": "compare", "threads": t,
                  "spearman_atp_patch": pearson(ranks(atp), ranks(patch)),
                  "max_abs_atp_z_diff_torch": max(abs(a - b) for a, b in zip(atp, tatp)),
                  "edges": len(hs_e), "edges_torch": len(th_e),
                  "same_edges": sorted(hs_e) == sorted(th_e),
                  "max_rel_eap_ig_diff_torch":
                      max(abs(hs_e[k] - th_e.get(k, float("nan"))) for k in hs_e) / scale}))
PY
done

# The table: per thread count, each time and the ratios the issue asks for.
/usr/bin/python3 - "$out" "$config" <<'PY' | bench_md "$outdir/atp.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
L, d, H, T = sys.argv[2].split(",")
print("Attribution patching, L %s d %s H %s T %s, %d prompts (CPU s, medians; wall in brackets)\n"
      % (L, d, H, T, rows[0]["prompts"]))
print("| threads | atp (hs) | patch (hs) | patch / atp | patch --naive | naive / atp | atp (torch) "
      "| torch / hs | eap-ig m=5 (hs) | eap-ig (torch) | torch / hs | circuit peak RSS | "
      "Spearman atp~patch |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for t in sorted({r["threads"] for r in rows}):
    g = {(r["impl"], r.get("what")): r for r in rows if r["threads"] == t}
    a, p, e = g[("headscope", "atp")], g[("headscope", "patch")], g[("headscope", "eap-ig")]
    pn = g[("headscope", "patch-naive")]
    ta, te, c = g[("torch", "atp")], g[("torch", "eap-ig")], g[("compare", None)]
    f = lambda r: "%.3f (%.3f)" % (r["cpu_s"], r["wall_s"])
    print("| %d | %s | %s | %.1f× | %s | %.1f× | %s | %.2f× | %s | %s | %.2f× | %.0f MB | %.3f |" % (
        t, f(a), f(p), p["cpu_s"] / a["cpu_s"], f(pn), pn["cpu_s"] / a["cpu_s"], f(ta),
        ta["cpu_s"] / a["cpu_s"], f(e), f(te), te["cpu_s"] / e["cpu_s"], e["peak_rss_mb"],
        c["spearman_atp_patch"]))
    print("\nthreads %d: atp_z within %.2g of torch's; %d edges (torch %d, same set: %s), eap_ig "
          "within %.2g of torch's largest |score|" % (t, c["max_abs_atp_z_diff_torch"], c["edges"],
          c["edges_torch"], c["same_edges"], c["max_rel_eap_ig_diff_torch"]))
PY
