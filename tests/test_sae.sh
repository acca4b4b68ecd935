#!/bin/bash
# Attention-output SAEs (SPEC §19) end to end against the float64 oracle of
# scripts/oracle/gen_sae.py (tests/fixtures/sae: five SAELens directories
# on gpt2_tiny and llama_gqa -- standard, jumprelu stored in BF16, topk with
# k in either key, on hook_z, hook_resid_pre and hook_attn_out): features'
# frequency, mean_act, head_share, top examples, every DFA value of every
# top example and the CSR file; sae-eval's l0, explained variance, MSE and
# the three losses of the CE-loss score; the refusals of bad SAE
# directories, naming the key or tensor.
# Usage: tests/test_sae.sh HEADSCOPE_BINARY FIXTURE_DIR
SUITE=sae
. "$(dirname "$0")/lib.sh"
SAE="$FIX/sae"

# model CASE: the case's model directory
model() {
    py -c 'import json, sys
o = json.load(open(sys.argv[1]))
print([c["model"] for c in o["cases"] if c["name"] == sys.argv[2]][0])' "$SAE/oracle.json" "$1"
}

CASES="gpt2_z_standard gpt2_z_jumprelu llama_z_topk gpt2_resid_topk llama_attn_out_standard"

features_equal_the_oracle() {
    local c
    for c in $CASES; do
        rm -f f.db f.h5
        hs features --model "$FIX/$(model "$c")" --sae "$SAE/$c" --data "$SAE/data.bin" \
            --batch 2 --seq-len 8 --top 3 --db f.db --out f.h5 --json
        expect_rc 0 "features $c" || return 1
        expect_eq "$(jget out.txt tokens)" 48 "features $c: tokens" || return 1
        py - f.db f.h5 "$SAE/oracle.json" "$c" <<'PYEOF' || bad "features $c: $(tail -n1 err.txt)" || return 1
import json, sqlite3, sys
import h5py
import numpy as np
db, h5, oracle, name = sys.argv[1:5]
case = [c for c in json.load(open(oracle))["cases"] if c["name"] == name][0]
want = case["features"]
q = sqlite3.connect(db).execute
L = int(case["hook"].split(".")[1])
tol = 2e-5
def close(a, b, what):
    assert abs(a - b) <= tol * max(1.0, abs(b)), (what, a, b)
for f in range(case["d_sae"]):
    (freq,), = q("select value from feature_metrics where feature=? and metric='frequency' "
                 "and head=-1 and layer=?", (f, L)).fetchall()
    close(freq, want["frequency"][f], ("frequency", f))
    (mean,), = q("select value from feature_metrics where feature=? and metric='mean_act'",
                 (f,)).fetchall()
    if want["mean_act"][f] is None:
        assert mean is None, ("mean_act of a dead feature", f, mean)
    else:
        close(mean, want["mean_act"][f], ("mean_act", f))
    shares = q("select head, value from feature_metrics where feature=? and metric='head_share' "
               "order by head", (f,)).fetchall()
    if want["head_share"] is None:
        assert not shares, ("head_share of a non-z SAE", shares)
    else:
        assert [h for h, _ in shares] == list(range(case["heads"]))
        for h, v in shares:
            close(v, want["head_share"][f][h], ("head_share", f, h))
    got = q("select seq, position, value from feature_examples where feature=? "
            "order by value desc, seq, position", (f,)).fetchall()
    ex = want["examples"][f]
    assert [(s, p) for s, p, _ in got] == [(s, p) for s, p, _ in ex], ("examples", f, got, ex)
    for (_, _, v), (_, _, w) in zip(got, ex):
        close(v, w, ("example value", f))
dfa = want.get("dfa") or []
n_rows = q("select count(*) from feature_dfa").fetchone()[0]
n_nonzero = 0
for d in dfa:
    rows = dict(((h, s), v) for h, s, v in q(
        "select head, source, value from feature_dfa where feature=? and seq=? and position=? "
        "and layer=?", (d["feature"], d["seq"], d["position"], L)).fetchall())
    for h, row in enumerate(d["values"]):
        for s, w in enumerate(row):
            close(rows.get((h, s), 0.0), w, ("dfa", d["feature"], d["seq"], d["position"], h, s))
            n_nonzero += w != 0
assert n_rows == n_nonzero, ("feature_dfa rows beyond the nonzero values", n_rows, n_nonzero)
if not dfa:
    assert n_rows == 0
f = h5py.File(h5, "r")
assert f.attrs["complete"] == 1
csr = want["csr"]
assert f["features/indptr"][()].tolist() == csr["indptr"], "indptr"
assert f["features/indices"][()].tolist() == csr["indices"], "indices"
assert np.abs(f["features/values"][()] - np.array(csr["values"])).max() <= tol * 10, "values"
assert f["features"].attrs["d_sae"] == case["d_sae"]
assert f["tokens"].shape == (6, 8)
PYEOF
    done
}

sae_eval_equals_the_oracle() {
    local c k
    for c in $CASES; do
        hs sae-eval --model "$FIX/$(model "$c")" --sae "$SAE/$c" --data "$SAE/data.bin" \
            --batch 2 --seq-len 8 --db e.db --json
        expect_rc 0 "sae-eval $c" || return 1
        for k in l0 explained_variance mse loss_clean loss_sae loss_zero ce_loss_score; do
            py -c 'import json, sys
got = json.load(open("out.txt"))[sys.argv[3]]
want = [c for c in json.load(open(sys.argv[1]))["cases"] if c["name"] == sys.argv[2]][0]["eval"][sys.argv[3]]
tol = 2e-3 if sys.argv[3] == "ce_loss_score" else 2e-5   # that case divides by 0.0046
sys.exit(abs(got - want) > tol * max(1, abs(want)))' "$SAE/oracle.json" "$c" "$k" ||
                bad "sae-eval $c: $k $(jget out.txt "$k")" || return 1
        done
    done
    # the last case's gap (0.35 nats) stands; gpt2_resid_topk's (0.0046) is noise
    expect_eq "$(jget out.txt premise_ok)" True "llama_attn_out_standard's premise" || return 1
    hs sae-eval --model "$FIX/models/gpt2_tiny" --sae "$SAE/gpt2_resid_topk" --data "$SAE/data.bin" \
        --batch 2 --seq-len 8 --db e.db
    expect_grep "$OUT" "is within two standard errors" "a score of noise said so" || return 1
    expect_eq "$(sqlite3 e.db "select count(*) from feature_metrics where feature = -1
        and metric in ('l0', 'explained_variance', 'mse', 'ce_loss_score')")" 24 \
        "sae-eval's rows in feature_metrics" || return 1
}

# bad DIR KEY VALUE: a copy of gpt2_z_standard with cfg.json's KEY set to VALUE (JSON)
bad_cfg() {
    rm -rf "$1" && cp -r "$SAE/gpt2_z_standard" "$1" || return 1
    py -c 'import json, sys
p = sys.argv[1] + "/cfg.json"
c = json.load(open(p))
if sys.argv[3] == "DELETE":
    del c[sys.argv[2]]
else:
    c[sys.argv[2]] = json.loads(sys.argv[3])
json.dump(c, open(p, "w"))' "$1" "$2" "$3"
}

bad_sae_directories_refused() {
    local m="$FIX/models/gpt2_tiny" d=(--data "$SAE/data.bin" --batch 2 --seq-len 8 --db r.db)
    bad_cfg a architecture '"gated"' || return 1
    expect_refused 1 features 'a/cfg.json: "architecture" "gated"' --model "$m" --sae a "${d[@]}" || return 1
    bad_cfg a normalize_activations '"expected_average_only_in"' || return 1
    expect_refused 1 features '"normalize_activations" expected_average_only_in is not implemented' \
        --model "$m" --sae a "${d[@]}" || return 1
    bad_cfg a architecture '"jumprelu"' || return 1
    expect_refused 1 features 'a jumprelu SAE needs the tensor "threshold"' --model "$m" --sae a "${d[@]}" || return 1
    bad_cfg a architecture '"topk"' || return 1
    expect_refused 1 features 'a topk SAE needs "k"' --model "$m" --sae a "${d[@]}" || return 1
    bad_cfg a hook_name '"blocks.1.hook_q"' || return 1
    expect_refused 2 features 'the model has no such hook' --model "$m" --sae a "${d[@]}" || return 1
    bad_cfg a hook_name '"blocks.7.attn.hook_z"' || return 1
    expect_refused 2 sae-eval 'the model has 2 layers' --model "$m" --sae a "${d[@]}" || return 1
    bad_cfg a d_in 12 || return 1
    expect_refused 1 features 'tensor "W_enc" is not [12, 24]' --model "$m" --sae a "${d[@]}" || return 1
    bad_cfg a d_sae DELETE || return 1
    expect_refused 1 features '"d_sae" must be a whole number' --model "$m" --sae a "${d[@]}" || return 1
    # NaN in a weight: W_enc's first float overwritten in place
    rm -rf a && cp -r "$SAE/gpt2_z_standard" a || return 1
    py -c 'import json, struct, sys
p = "a/sae_weights.safetensors"
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
off = 8 + n + h["W_enc"]["data_offsets"][0]
b[off:off + 4] = struct.pack("<f", float("nan"))
open(p, "wb").write(b)'
    expect_refused 1 features 'tensor "W_enc" holds a non-finite value' --model "$m" --sae a "${d[@]}" || return 1
    expect_nofile r.db "a refused SAE opens no run" 2>/dev/null
    [ ! -s r.db ] || [ "$(sqlite3 r.db 'select count(*) from runs')" = 0 ] ||
        bad "a refused SAE recorded a run" || return 1
    # d_in against the hook: a z SAE of width 16 read at the residual of a model of d 16
    # fits; one of width 8 does not
    rm -rf a && mkdir a && py - <<'PYEOF' || bad "could not write the d_in 8 SAE" || return 1
import json, struct
def st(path, tensors):
    header, data = {}, b""
    for name, shape in tensors:
        n = 1
        for s in shape:
            n *= s
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + 4 * n]}
        data += struct.pack("<%df" % n, *([0.01] * n))
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
st("a/sae_weights.safetensors", [("W_enc", [8, 4]), ("b_enc", [4]), ("W_dec", [4, 8]), ("b_dec", [8])])
json.dump({"d_in": 8, "d_sae": 4, "hook_name": "blocks.0.attn.hook_z", "architecture": "standard",
           "apply_b_dec_to_input": False, "normalize_activations": "none"}, open("a/cfg.json", "w"))
PYEOF
    expect_refused 2 features 'd_in 8 does not match blocks.0.attn.hook_z, 16 wide' --model "$m" --sae a "${d[@]}" || return 1
    expect_refused 2 features "option --top: '0' is not an integer" --model "$m" --sae "$SAE/gpt2_z_standard" "${d[@]}" --top 0 || return 1
    touch exists.h5
    expect_refused 2 features '--out exists.h5 exists' --model "$m" --sae "$SAE/gpt2_z_standard" "${d[@]}" --out exists.h5 || return 1
}

# SAELens 6 keeps hook_name under "metadata": the same SAE read either way.
saelens6_metadata_hook() {
    rm -rf m6 && cp -r "$SAE/gpt2_z_standard" m6 || return 1
    py -c 'import json
c = json.load(open("m6/cfg.json"))
c["metadata"] = {"hook_name": c.pop("hook_name"), "model_name": "gpt2_tiny"}
c["reshape_activations"] = "none"
json.dump(c, open("m6/cfg.json", "w"))' || return 1
    local d=(--data "$SAE/data.bin" --batch 2 --seq-len 8)
    hs sae-eval --model "$FIX/models/gpt2_tiny" --sae m6 "${d[@]}" --db m6.db --json
    expect_rc 0 "sae-eval of a SAELens 6 cfg.json" || return 1
    local l0=$(jget out.txt l0)
    hs sae-eval --model "$FIX/models/gpt2_tiny" --sae "$SAE/gpt2_z_standard" "${d[@]}" --db m6.db --json
    expect_eq "$l0" "$(jget out.txt l0)" "l0 with hook_name under metadata" || return 1
}

# The report's SAE section: the features run's counts, sae-eval's numbers,
# the most frequent features with their largest head share.
report_shows_features() {
    local m="$FIX/models/gpt2_tiny" d=(--data "$SAE/data.bin" --batch 2 --seq-len 8)
    hs features --model "$m" --sae "$SAE/gpt2_z_standard" "${d[@]}" --top 3 --db rep.db
    expect_rc 0 "features for the report" || return 1
    hs sae-eval --model "$m" --sae "$SAE/gpt2_z_standard" "${d[@]}" --db rep.db
    expect_rc 0 "sae-eval for the report" || return 1
    hs report --db rep.db --out rep
    expect_rc 0 "report" || return 1
    local text
    text=$(sed 's/<[^>]*>/ /g' rep/index.html | tr -s ' \n' ' ')
    expect_grep "$text" "Run 1: 24 features, 23 active on the data at least once." "report: counts" || return 1
    expect_grep "$text" "sae-eval (run 2): 7.38 active features a token, explained variance 0.9141" \
        "report: sae-eval's numbers (the oracle's l0 7.375, EV 0.91409)" || return 1
    expect_grep "$text" "22 0.6875" "report: the most frequent feature (the oracle's 22 at 0.6875)" || return 1
}

run_checks saelens6_metadata_hook report_shows_features features_equal_the_oracle sae_eval_equals_the_oracle bad_sae_directories_refused
