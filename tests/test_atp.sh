#!/usr/bin/env bash
# End-to-end checks of `headscope atp` and `headscope circuit` (SPEC §15):
# their JSON against the PyTorch autograd oracle tests/fixtures/atp/oracle.json
# (within 1e-4, float build), the index rows, the refusals (post-norm
# families, options, 0/0), the figures (plot circuit, plot atp, plot curve
# --curve faithfulness, the report's section, the viewer's head panel data),
# 1, 2 and 3 MPI ranks recording the same rows, and (slow tier) the circuit
# of the indirect-object model of scripts/demo recovered by eap-ig.
#
# usage: tests/test_atp.sh HEADSCOPE_BINARY FIXTURE_DIR
# ONLY="name1 name2" runs the checks named. Needs /usr/bin/python3, sqlite3.
SUITE=atp
source "$(dirname "$0")/lib.sh"

A=$FIX/atp
ROOT=$(cd "$FIX/../.." && pwd)

# compare OUT.json CASE KIND: the command's rows against the oracle's
# (KIND: denoising, noising, eap, eap_ig), values and stderrs within 1e-4 of
# the metric's scale, and (circuits) the faithfulness curve.
compare() {
    py - "$1" "$A/oracle.json" "$2" "$3" <<'PY' || bad "$(cat cmp.txt)"
import json, sys
got = json.load(open(sys.argv[1]))
case = json.load(open(sys.argv[2]))["cases"][sys.argv[3]]
kind = sys.argv[4]
rows, want = {}, {}
if kind in ("eap", "eap_ig"):
    for r in got["edges"]:
        rows[(r["metric"], r["sender"], r["receiver"])] = (r["value"], r["stderr"])
    want = {kind: [[u, v, x, e] for u, v, x, e in case[kind]]}
else:
    for r in got["heads"]:
        rows[(r["metric"], r["layer"], r["head"])] = (r["value"], r["stderr"])
    for r in got["positions"]:
        rows[(r["metric"], r["layer"], r["position"])] = (r["value"], r["stderr"])
    want = case[kind]
worst, bad = 0.0, []
for metric, lst in want.items():
    sv = max(abs(x[2]) for x in lst) + 1e-12
    se = max(abs(x[3]) for x in lst) + 1e-12
    for a, b, v, e in lst:
        g = rows.get((metric, a, b))
        if g is None:
            bad.append("missing %s %s %s" % (metric, a, b)); continue
        d = max(abs(g[0] - v) / (abs(v) + sv), abs(g[1] - e) / (abs(e) + se))
        worst = max(worst, d)
        if d > 1e-4:
            bad.append("%s %s %s: got %r want %r" % (metric, a, b, g, (v, e)))
# SPEC §21: the premise as the oracle's gap and stderr say (mla_q's is weak:
# run with --allow-weak-premise)
v, e = case["logit_diff_gap"]
if (got["premise"] == "ok") != (abs(v) >= 2 * e):
    bad.append("premise: gap %r stderr %r, %r" % (v, e, got["premise"]))
if kind not in ("eap", "eap_ig"):
    g = rows.get(("logit_diff_gap", -1, -1))
    if g is None or abs(g[0] - v) > 1e-4 or abs(g[1] - e) > 1e-4:
        bad.append("logit_diff_gap: got %r want %r" % (g, (v, e)))
if kind in ("eap", "eap_ig"):
    f = [[p[0], p[1]] for p in got["faithfulness"]]
    for (x, y), (wx, wy) in zip(f, case["faithfulness_" + kind]):
        if x != wx or abs(y - wy) > 1e-4:
            bad.append("faithfulness at %s: got %r want %r" % (x, y, wy))
open("cmp.txt", "w").write("; ".join(bad[:4]) or "max difference %.3g" % worst)
sys.exit(1 if bad else 0)
PY
    echo "    $2 $3: $(cat cmp.txt)"
}

TOP=0,1,2,4,8,16,1000000

oracle_case() {
    local case=$1 model prompts steps
    model=$FIX/$(py -c 'import json,sys; print(json.load(open(sys.argv[1]))["cases"][sys.argv[2]]["model"])' "$A/oracle.json" "$case")
    prompts=$FIX/$(py -c 'import json,sys; print(json.load(open(sys.argv[1]))["cases"][sys.argv[2]]["prompts"])' "$A/oracle.json" "$case")
    steps=$(py -c 'import json,sys; print(json.load(open(sys.argv[1]))["cases"][sys.argv[2]]["ig_steps"])' "$A/oracle.json" "$case")
    local mode extra weak
    weak=$(py -c 'import json,sys; v, e = json.load(open(sys.argv[1]))["cases"][sys.argv[2]]["logit_diff_gap"]; print("--allow-weak-premise" if abs(v) < 2 * e else "")' "$A/oracle.json" "$case")
    for mode in denoising noising; do
        extra=($weak)
        [ "$mode" = noising ] && extra+=(--noising)
        hs atp --model "$model" --prompts "$prompts" --db o.db --site z,pattern,q,k,v,resid_pre,attn_out,mlp_out \
            --star --batch 4 "${extra[@]}" --json
        expect_rc 0 "atp $case $mode" || return 1
        cp out.txt atp.json
        compare atp.json "$case" "$mode" || return 1
    done
    hs circuit --model "$model" --prompts "$prompts" --db o.db --method eap --top-n $TOP $weak --json
    expect_rc 0 "circuit $case eap" || return 1
    cp out.txt eap.json
    compare eap.json "$case" eap || return 1
    hs circuit --model "$model" --prompts "$prompts" --db o.db --method eap-ig --ig-steps "$steps" \
        --top-n $TOP $weak --json
    expect_rc 0 "circuit $case eap-ig" || return 1
    cp out.txt ig.json
    compare ig.json "$case" eap_ig
}

oracle_gpt2() { oracle_case gpt2; }
oracle_llama_gqa() { oracle_case llama_gqa; }
oracle_neox_par() { oracle_case neox_par; }
oracle_mla() { oracle_case mla_qlora && oracle_case mla_q; }

# The rows each command records, and --verify's exact values beside the estimates.
index_rows() {
    local g=$FIX/models/gpt2_tiny p=$FIX/causal/gpt2.jsonl
    hs atp --model "$g" --prompts "$p" --db r.db --star --verify 3 --site z,pattern,k,resid_pre
    expect_rc 0 "atp" || return 1
    expect_grep "$OUT" "largest |atp_star_z|" "atp's summary" || return 1
    hs circuit --model "$g" --prompts "$p" --db r.db --method eap-ig --top-n 1,10,110
    expect_rc 0 "circuit" || return 1
    expect_grep "$OUT" "faithfulness of the top N edges: 1:" "circuit's summary" || return 1
    expect_eq "$(sqlite3 r.db "select group_concat(kind || ':' || status) from runs")" \
        "atp:complete,circuit:complete" "runs" || return 1
    expect_eq "$(sqlite3 r.db "select count(*) from head_metrics where run_id=1 and metric='atp_z'")" 8 "atp_z rows" || return 1
    expect_eq "$(sqlite3 r.db "select count(*) from head_metrics where run_id=1 and metric='atp_star_k'")" 8 "atp_star_k rows" || return 1
    expect_eq "$(sqlite3 r.db "select count(*) from head_metrics where run_id=1 and metric='patch_z'")" 3 "verified heads" || return 1
    expect_eq "$(sqlite3 r.db "select count(*) from head_metrics where run_id=1 and metric='patch_pattern'")" 3 "verified maps" || return 1
    expect_eq "$(sqlite3 r.db "select count(*) from position_metrics where run_id=1 and metric='atp_resid_pre'")" 12 "position rows" || return 1
    expect_eq "$(sqlite3 r.db "select count(*), count(distinct sender), min(n), max(n) from edge_metrics where run_id=2 and metric='eap_ig'")" \
        "110|11|6|6" "edge rows" || return 1
    expect_eq "$(sqlite3 r.db "select group_concat(x || ':' || (y between -2 and 2)) from curves where run_id=2 and curve='faithfulness'")" \
        "1.0:1,10.0:1,110.0:1" "the faithfulness curve" || return 1
    # the verified heads are those of largest |atp_z|
    expect_eq "$(sqlite3 r.db "select group_concat(layer || '.' || head) from (select layer, head from head_metrics where run_id=1 and metric='atp_z' order by abs(value) desc limit 3)")" \
        "$(sqlite3 r.db "select group_concat(layer || '.' || head) from (select h.layer, h.head from head_metrics h join head_metrics a on a.run_id=h.run_id and a.layer=h.layer and a.head=h.head and a.metric='atp_z' where h.run_id=1 and h.metric='patch_z' order by abs(a.value) desc)")" \
        "verified heads" || return 1
    # the exact values are patch's own
    hs patch --model "$g" --prompts "$p" --db r.db --site z --json
    expect_rc 0 "patch" || return 1
    expect_eq "$(sqlite3 r.db "select count(*) from head_metrics a join head_metrics p on p.run_id=3 and p.metric='patch_z' and a.layer=p.layer and a.head=p.head and a.value=p.value where a.run_id=1 and a.metric='patch_z'")" \
        3 "atp --verify's patch_z = patch's" || return 1
}

refusals() {
    local g=$FIX/models/gpt2_tiny p=$FIX/causal/gpt2.jsonl fam
    py -c 'import json
for i in range(3):  # ids below 5, the smallest vocabulary of the fixtures (tinylm_h1)
    print(json.dumps({"clean_ids": [0, 1 + i % 2, 2, 3], "corrupt_ids": [0, 4, 2 + i % 2, 3], "answer_id": 1, "wrong_id": 4}))' >small.jsonl
    for fam in gemma2 olmo2 gemma3; do
        expect_refused 1 circuit "atp covers this family" --model "$FIX/families3/$fam" --prompts small.jsonl --db f.db --method eap || return 1
        hs atp --model "$FIX/families3/$fam" --prompts small.jsonl --db f.db --site z,q,k,v --star \
            --allow-weak-premise
        expect_rc 0 "atp on $fam" || return 1
    done
    expect_refused 1 circuit "post-norm" --model "$FIX/models/hs_post_gelu" --prompts small.jsonl --db f.db --method eap-ig || return 1
    expect_eq "$(sqlite3 f.db "select group_concat(kind) from runs")" "atp,atp,atp" "a refused circuit records no run" || return 1
    expect_refused 2 circuit "--method" --model "$g" --prompts "$p" --db b.db || return 1
    expect_refused 2 circuit "'eap-x' is not eap or eap-ig" --model "$g" --prompts "$p" --db b.db --method eap-x || return 1
    expect_refused 2 circuit "--top-n '1,x'" --model "$g" --prompts "$p" --db b.db --method eap --top-n 1,x || return 1
    # once accepted, and then no SIGINT stopped its step loop
    expect_refused 2 circuit "--ig-steps 100000000: at most 1000" --model "$g" --prompts "$p" --db b.db --method eap-ig --ig-steps 100000000 || return 1
    expect_refused 2 atp "unknown site 'zz'" --model "$g" --prompts "$p" --db b.db --site z,zz || return 1
    expect_refused 2 atp "--verify K" --model "$g" --prompts "$p" --db b.db --site q --verify 2 || return 1
    expect_refused 2 atp "one layer" --model "$FIX/models/tinylm_h1" --prompts small.jsonl --db b.db --star || return 1
    expect_refused 2 atp "--site mlp_out" --model "$FIX/models/tinylm_h1" --prompts small.jsonl --db b.db --site mlp_out || return 1
    expect_refused 2 atp "--model DIR" --prompts "$p" --db b.db || return 1
    expect_nofile b.db "refused options" || return 1
    py -c 'import json
print(json.dumps({"clean_ids": [1, 2, 3], "corrupt_ids": [1, 2, 3], "answer_id": 3, "wrong_id": 4}))' >same.jsonl
    expect_refused 1 atp "would be 0/0" --model "$g" --prompts same.jsonl --db z.db || return 1
    expect_refused 1 circuit "would be 0/0" --model "$g" --prompts same.jsonl --db z.db --method eap || return 1
    expect_eq "$(sqlite3 z.db "select group_concat(status) from runs")" "failed,failed" "0/0 runs" || return 1
}

figures() {
    local g=$FIX/models/gpt2_tiny p=$FIX/causal/gpt2.jsonl
    hs atp --model "$g" --prompts "$p" --db f.db --star --verify 8 --site z,pattern
    expect_rc 0 "atp" || return 1
    expect_refused 1 plot "no edge metric" circuit --db f.db --out x.png || return 1
    expect_nofile x.png "a refused figure" || return 1
    hs circuit --model "$g" --prompts "$p" --db f.db --method eap-ig
    expect_rc 0 "circuit" || return 1
    # dot writes into a folder only we can write (test_figures.sh's
    # private_output_folder for gnuplot): a dot in front of the real one
    # records its mode
    local real
    real=$(command -v dot)
    mkdir -p spy
    printf '#!/bin/bash\nargs=("$@")\nfor i in "${!args[@]}"; do [ "${args[$i]}" = -o ] && out=${args[$((i + 1))]}; done\nstat -c %%a "$(dirname "$out")" >>"%s/modes.txt"\n' "$PWD" >spy/dot
    printf 'exec "%s" "$@"\n' "$real" >>spy/dot
    chmod +x spy/dot
    PATH="$PWD/spy:$PATH" hs plot circuit --db f.db --out circuit.png
    expect_rc 0 "plot circuit" || return 1
    png_ok circuit.png || return 1
    expect_eq "$(sort -u modes.txt)" 700 "the folder dot draws into" || return 1
    hs plot circuit --db f.db --metric eap_ig --run 2 --out circuit.svg
    expect_rc 0 "plot circuit svg" || return 1
    grep -q "faithfulness" circuit.svg || bad "the graph's title names its faithfulness" || return 1
    hs plot atp --db f.db --out atp.png
    expect_rc 0 "plot atp" || return 1
    png_ok atp.png || return 1
    hs plot atp --db f.db --metric atp_pattern --out atp.svg
    expect_rc 0 "plot atp pattern" || return 1
    grep -q "Spearman" atp.svg || bad "the scatter gives its rank correlation" || return 1
    hs plot curve --db f.db --curve faithfulness --out f.png
    expect_rc 0 "plot curve faithfulness" || return 1
    png_ok f.png || return 1
    hs report --db f.db --out rep
    expect_rc 0 "report" || return 1
    grep -q 'id="circuits"' rep/index.html || bad "the report has no circuits section" || return 1
    for fig in circuit_run2.png faithfulness_run2.png atp_z_run1.png atp_verify_run1.png; do
        png_ok "rep/$fig" || return 1
    done
    ! grep -q 'class="missing"' rep/index.html || bad "a figure of the report is missing: $(grep -o 'class="missing">[^<]*' rep/index.html | head -2)" || return 1
    # the viewer's head panel reads every per-head metric of the model
    hs capture --model "$g" --data "$g/eval.bin" --out maps.h5 --batch 1 --seq-len 8 --max-batches 1
    expect_rc 0 "capture" || return 1
    hs view --maps maps.h5 --db f.db --out v
    expect_rc 0 "view" || return 1
    local m
    for m in atp_z atp_pattern atp_star_z patch_z; do
        grep -q "\"name\":\"$m\",\"kind\":\"atp\"" v/data.js || bad "the viewer's data lacks $m of the atp run" || return 1
    done
}

# 1, 2 and 3 ranks record the same rows (tests/test_mpi.sh's conventions).
mpi_same() {
    command -v mpirun >/dev/null || { echo "    skipped: no mpirun"; return 0; }
    ldd "$HS" 2>/dev/null | grep -q libmpi || { echo "    skipped: built without MPI"; return 0; }
    under_asan && { echo "    skipped: under AddressSanitizer"; return 0; }
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_btl_vader_single_copy_mechanism=none
    local n m=$FIX/models/llama_gqa p=$FIX/causal/llama_gqa.jsonl
    for n in 1 2 3; do
        mpirun --oversubscribe -np "$n" "$HS" atp --model "$m" --prompts "$p" --db m$n.db --star \
            --verify 2 --batch 2 --site z,pattern,q,k,v,resid_pre --threads 1 >/dev/null 2>err.txt ||
            bad "atp on $n ranks: $(tail -c 300 err.txt)" || return 1
        mpirun --oversubscribe -np "$n" "$HS" circuit --model "$m" --prompts "$p" --db m$n.db \
            --method eap-ig --batch 2 --threads 1 >/dev/null 2>err.txt ||
            bad "circuit on $n ranks: $(tail -c 300 err.txt)" || return 1
        sqlite3 m$n.db "select layer, head, metric, quote(value), quote(stderr), n from head_metrics order by run_id, 1, 2, 3;
                        select layer, position, metric, quote(value), quote(stderr), n from position_metrics order by run_id, 1, 2, 3;
                        select sender, receiver, metric, quote(value), quote(stderr), n from edge_metrics order by run_id, 1, 2, 3;
                        select curve, step, quote(x), quote(y) from curves order by run_id, 1, 2;
                        select group_concat(status) from runs" >rows$n.txt
    done
    [ "$(wc -l <rows1.txt)" -gt 100 ] || bad "too few rows" || return 1
    for n in 2 3; do
        cmp -s rows1.txt rows$n.txt || bad "$n ranks differ from one: $(diff rows1.txt rows$n.txt | head -3)" || return 1
    done
}

# The indirect-object task of scripts/demo (scripts/ioi.awk), trained as the
# demo trains it but with 8 heads a layer (257 edges): eap-ig's smallest
# circuit reaching faithfulness 0.8 has at most 5% of the edges, and its
# heads are the heads exact patching singles out.
ioi_circuit() {
    awk -v mode=text -v seed=1 -v count=60000 -f "$ROOT/scripts/ioi.awk" >ioi_train.txt
    awk -v mode=prompts -v seed=3 -v count=64 -f "$ROOT/scripts/ioi.awk" >ioi.jsonl
    hs tokens --in ioi_train.txt --out ioi_train.bin
    hs train --preset attn-only n_ctx=99 n_layer=2 n_head=8 d_model=64 --data ioi_train.bin \
        --out ioi --steps 1500 --batch 16 --seq-len 99 --lr 3e-3 --seed 1
    expect_rc 0 "train" || return 1
    hs patch --model ioi --prompts ioi.jsonl --db i.db --site z
    expect_rc 0 "patch" || return 1
    hs circuit --model ioi --prompts ioi.jsonl --db i.db --method eap-ig --top-n 1,2,3,4,5,6,8,10,12 --json
    expect_rc 0 "circuit" || return 1
    cp out.txt c.json
    py - c.json i.db <<'PY' >res.txt || bad "$(cat res.txt)" || return 1
import json, re, sqlite3, sys
c = json.load(open(sys.argv[1]))
db = sqlite3.connect(sys.argv[2])
edges = c["edges"]
order = sorted(edges, key=lambda e: (-abs(e["value"]), e["sender"], e["receiver"]))
reach = [x for x, y in c["faithfulness"] if y >= 0.8]
N = int(reach[0]) if reach else None
heads = set()
for e in order[:N or 0]:
    for s in (e["sender"], e["receiver"]):
        m = re.match(r"a(\d+)\.h(\d+)", s)
        if m:
            heads.add((int(m.group(1)), int(m.group(2))))
patch = db.execute("select layer, head, value from head_metrics where metric='patch_z' and run_id=1").fetchall()
named = {(l, h) for l, h, v in patch if abs(v) >= 0.1}
print("%d edges, N=%s (%.1f%%), faithfulness %s; circuit heads %s, patch_z >= 0.1: %s" % (
    len(edges), N, 100.0 * (N or 0) / len(edges), c["faithfulness"], sorted(heads), sorted(named)))
ok = N is not None and N <= 0.05 * len(edges) and heads == named
sys.exit(0 if ok else 1)
PY
    echo "    $(cat res.txt)"
    hs plot circuit --db i.db --out ioi_circuit.png
    expect_rc 0 "plot circuit" || return 1
    png_ok ioi_circuit.png
}
SLOW_CHECKS="ioi_circuit"

run_checks oracle_gpt2 oracle_llama_gqa oracle_neox_par oracle_mla index_rows refusals figures mpi_same \
    ioi_circuit
