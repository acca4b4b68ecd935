#!/usr/bin/env bash
# End-to-end checks of dla, logit-lens and composition (SPEC §11) and of the
# causal figures of plot and report: the commands' rows equal the PyTorch
# oracle (scripts/oracle/gen_interp.py, tests/fixtures/interp/: GPT-2,
# Llama-GQA, GPT-NeoX parallel and sequential) within 1e-4,
# the DLA parts sum to the logit difference, the lens's last entry is the
# model's own loss, bad input is refused before a run is recorded, and the
# figures of patching, DLA, the lens and composition are drawn from the index
# (patching rows inserted here, as `patch` would write them).
#
# usage: tests/test_interp.sh HEADSCOPE_BINARY FIXTURE_DIR
# Prints "ok NAME" or "FAIL NAME: reason" per check, then "N passed, M failed";
# exits 1 if any check failed. Needs /usr/bin/python3 (sqlite3, json) and gnuplot.
set -u

SUITE=interp
TESTS=$(cd "$(dirname "$0")" && pwd) # before lib.sh moves to the scratch directory
. "$TESTS/lib.sh"
ORACLE="$FIX/interp/oracle.json"
PROMPTS="$FIX/interp/prompts.jsonl"
GPT2="$FIX/models/gpt2_tiny"
LLAMA="$FIX/models/llama_gqa"
export HEADSCOPE_SCRIPTS="${HEADSCOPE_SCRIPTS:-$TESTS/../scripts}"
# the oracle's cases: GPT-2, Llama-GQA and GPT-NeoX (parallel residual with
# quarter rotary, sequential); the NeoX checkpoints' vocabulary is 32, so
# they read their own prompts file and token shard
CASES="gpt2_tiny llama_gqa neox_par neox_seq"
model_of() { case $1 in neox_*) echo "$FIX/families/$1" ;; *) echo "$FIX/models/$1" ;; esac; }
prompts_of() { case $1 in neox_*) echo "$FIX/interp/prompts_neox.jsonl" ;; *) echo "$PROMPTS" ;; esac; }
shard_of() { case $1 in neox_*) echo "$FIX/interp/neox_eval.bin" ;; *) echo "$GPT2/eval.bin" ;; esac; }

# oracle_match DB CASE RUN WHAT: the run's rows equal the oracle's (value and
# stderr; |a - b| <= 1e-4 max(1, |b|)), no row missing and none extra.
oracle_match() {
    local res
    res=$(py - "$1" "$ORACLE" "$2" "$3" "$4" <<'PYEOF'
import json, sqlite3, sys
db, oracle, case, run, what = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
o = json.load(open(oracle))["cases"][case][what]
con = sqlite3.connect(db)
worst, n = 0.0, 0
if what == "composition":
    got = {r[:5]: r[5] for r in con.execute("SELECT layer_a, head_a, layer_b, head_b, metric,"
           " value FROM head_pair_metrics WHERE run_id=? AND metric NOT LIKE '%_control'", (run,))}
    for la, ha, lb, hb, m, v in o:
        g = got.pop((la, ha, lb, hb, m), None)
        if g is None:
            print("missing %s" % [la, ha, lb, hb, m]); sys.exit(1)
        worst = max(worst, abs(g - v) / max(1, abs(v))); n += 1
else:
    got = {r[:3]: r[3:] for r in con.execute("SELECT layer, head, metric, value, stderr"
           " FROM head_metrics WHERE run_id=?", (run,))}
    for row in o:
        l, h, m, v, se = row if what == "dla" else (row[0], -1, row[1], row[2], row[3])
        g = got.pop((l, h, m), None)
        if g is None:
            print("missing %s" % [l, h, m]); sys.exit(1)
        worst = max(worst, abs(g[0] - v) / max(1, abs(v)), abs(g[1] - se) / max(1, abs(se))); n += 1
if got:
    print("extra rows %s" % sorted(got)[:4]); sys.exit(1)
print("%d rows, largest difference %.2g" % (n, worst))
sys.exit(0 if n and worst <= 1e-4 else 1)
PYEOF
    ) || bad "$2 $4 against the oracle: $res" || return 1
    echo "    $2 $4: $res"
}

# sql DB QUERY: one value.
sql() { py -c 'import sqlite3,sys; r=sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone(); print(r[0] if r else "")' "$1" "$2"; }

# ---- the oracle ------------------------------------------------------------------

dla_oracle() {
    local m run
    for m in $CASES; do
        hs dla --model "$(model_of $m)" --prompts "$(prompts_of $m)" --db r.db --batch 3 --json
        expect_rc 0 "dla on $m" || return 1
        run=$(jget out.txt run_id)
        oracle_match r.db "$m" "$run" dla || return 1
        [ "$(sql r.db "SELECT status FROM runs WHERE run_id=$run")" = complete ] ||
            bad "dla run $run not complete" || return 1
        # the parts' means add up to the mean logit difference
        local gap
        gap=$(sql r.db "SELECT abs(sum(CASE WHEN metric='logit_diff_clean' THEN -value ELSE value END))
                        FROM head_metrics WHERE run_id=$run")
        close "$gap" 0 1e-4 || bad "$m: the parts sum to the logit difference +- $gap" || return 1
        close "$(jget out.txt sum_gap_max)" 0 1e-4 || bad "$m: sum_gap_max $(jget out.txt sum_gap_max)" || return 1
    done
}

lens_oracle() {
    local m run
    for m in $CASES; do
        hs logit-lens --model "$(model_of $m)" --prompts "$(prompts_of $m)" --db r.db --json
        expect_rc 0 "logit-lens --prompts on $m" || return 1
        oracle_match r.db "$m" "$(jget out.txt run_id)" logit_lens_prompts || return 1
        hs logit-lens --model "$(model_of $m)" --data "$(shard_of $m)" --batch 2 --seq-len 8 \
            --max-batches 2 --db r.db --json
        expect_rc 0 "logit-lens --data on $m" || return 1
        run=$(jget out.txt run_id)
        oracle_match r.db "$m" "$run" logit_lens_data || return 1
        # the final residual's entry is the model's own loss
        hs eval --model "$(model_of $m)" --data "$(shard_of $m)" --batch 2 --seq-len 8 \
            --max-batches 2 --json
        expect_rc 0 "eval on $m" || return 1
        close "$(sql r.db "SELECT value FROM head_metrics WHERE run_id=$run AND layer=2 AND
                            metric='logit_lens_loss'")" "$(jget out.txt loss)" 1e-6 ||
            bad "$m: the lens's last entry is not the evaluation loss" || return 1
    done
}

composition_oracle() {
    local m run n
    for m in $CASES; do
        hs composition --model "$(model_of $m)" --db r.db --json
        expect_rc 0 "composition on $m" || return 1
        run=$(jget out.txt run_id)
        oracle_match r.db "$m" "$run" composition || return 1
        # as many control scores as scores: 48 on 2 layers of 4 heads, 12 on 2 of 2
        n=$(py -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["cases"][sys.argv[2]]["composition"]))' "$ORACLE" "$m")
        [ "$(sql r.db "SELECT count(*) FROM head_pair_metrics WHERE run_id=$run AND metric LIKE '%_control'
                       AND value BETWEEN 0 AND 1")" = "$n" ] || bad "$m: not $n control scores in [0, 1]" || return 1
    done
    hs composition --model "$GPT2" --db r.db --no-control --json
    expect_rc 0 "composition --no-control" || return 1
    [ "$(sql r.db "SELECT count(*) FROM head_pair_metrics WHERE run_id=$(jget out.txt run_id)")" = 48 ] ||
        bad "--no-control: not the model's 48 scores alone" || return 1
}

# ---- refusals: clear messages, nothing recorded -----------------------------------

refusals() {
    printf '{"clean_ids":[1,2,3],"corrupt_ids":[1,2,3],"answer_id":4,"wrong_id":5}\n\n{"clean_ids":[1,2,3],"corrupt_ids":[1,2],"answer_id":4,"wrong_id":5}\n' >bad.jsonl
    expect_refused 1 dla "bad.jsonl:3" --model "$GPT2" --prompts bad.jsonl --db r.db || return 1
    expect_refused 1 dla "post-norm" --model "$FIX/models/hs_post_gelu" --prompts "$PROMPTS" --db r.db || return 1
    printf '{"clean_ids":[1,2,3],"corrupt_ids":[1,2,3],"answer_id":99,"wrong_id":5}\n' >vocab.jsonl
    expect_refused 1 logit-lens "vocab.jsonl:1" --model "$GPT2" --prompts vocab.jsonl --db r.db || return 1
    expect_nofile r.db "refused commands" || return 1
    expect_refused 2 logit-lens "--data" --model "$GPT2" --prompts "$PROMPTS" --data "$GPT2/eval.bin" --db r.db || return 1
    expect_refused 2 logit-lens "--prompts FILE or --data FILE" --model "$GPT2" --db r.db || return 1
    expect_refused 2 logit-lens "--seq-len needs --data" --model "$GPT2" --prompts "$PROMPTS" --seq-len 4 --db r.db || return 1
    expect_refused 2 composition "--seed does not apply with --no-control" --model "$GPT2" --no-control --seed 3 --db r.db || return 1
    expect_refused 2 dla "--prompts FILE" --model "$GPT2" --db r.db || return 1
    expect_refused 1 composition "one layer" --model "$FIX/models/tinylm_h4" --db r.db || return 1
    expect_nofile r.db "refused commands (no index, no run)" || return 1
}

# ---- figures ------------------------------------------------------------------------

# insert_patch DB: a complete `patch` run as the patch command records it
# (model-wide logit differences, per-head patch_z, per-position
# patch_resid_pre over the 6 positions of the prompts file's first line).
insert_patch() {
    py - "$1" "$GPT2" "$PROMPTS" <<'PYEOF'
import json, sqlite3, sys
db, model, prompts = sys.argv[1:4]
con = sqlite3.connect(db)
args = json.dumps(["patch", "--model", model, "--prompts", prompts, "--db", db])
run = con.execute("INSERT INTO runs(kind, model_path, data_path, args, started_at, finished_at,"
                  " status) VALUES('patch', ?, ?, ?, '2026-01-01', '2026-01-01', 'complete')",
                  (model, prompts, args)).lastrowid
for l in range(3):
    for p in range(6):
        con.execute("INSERT INTO position_metrics(run_id, layer, position, metric, value, stderr, n)"
                    " VALUES(?,?,?,?,?,?,?)",
                    (run, l, p, "patch_resid_pre", 1.0 if p == 1 and l < 2 else 0.05 * l, 0.01, 7))
for l in range(2):
    for h in range(4):
        con.execute("INSERT INTO head_metrics(run_id, layer, head, metric, value, stderr, n)"
                    " VALUES(?,?,?,?,?,?,?)",
                    (run, l, h, "patch_z", 0.8 if (l, h) == (1, 2) else 0.02 * h, 0.01, 7))
for m, v in (("logit_diff_clean", 2.0), ("logit_diff_corrupt", -1.0)):
    con.execute("INSERT INTO head_metrics(run_id, layer, head, metric, value, stderr, n)"
                " VALUES(?,?,?,?,?,?,?)", (run, -1, -1, m, v, 0.1, 7))
# the labels a patch run records of its 6-token prompts (checked in causal_figures)
con.execute("INSERT INTO run_params VALUES(?, 'positions_6', ?)",
            (run, json.dumps(["#27", "#24", "#28", "#38", "#39", "#25"])))
con.commit()
PYEOF
}

causal_figures() {
    hs dla --model "$GPT2" --prompts "$PROMPTS" --db r.db
    expect_rc 0 "dla" || return 1
    hs logit-lens --model "$GPT2" --prompts "$PROMPTS" --db r.db
    expect_rc 0 "logit-lens" || return 1
    hs composition --model "$GPT2" --db r.db --json
    expect_rc 0 "composition" || return 1
    local top
    top=$(py -c 'import json,sys; b=json.load(open(sys.argv[1]))["q"]["best"]
print("Q-composition: L%dH%d &rarr; L%dH%d %.3f" % (b["layer_a"], b["head_a"], b["layer_b"], b["head_b"], b["value"]))' out.txt)
    insert_patch r.db || bad "could not insert the patch rows" || return 1
    local t
    hs plot patch --db r.db --out p.svg
    expect_rc 0 "plot patch" || return 1
    t=$(cat p.svg)
    # the positions are the first 6-token prompt's tokens: 27 24 28 38 39 25 (ids: no
    # tokenizer), as a patch run records them
    hs patch --model "$GPT2" --prompts "$PROMPTS" --db q.db --site z --allow-weak-premise
    expect_rc 0 "patch" || return 1
    expect_eq "$(sqlite3 q.db "SELECT value FROM run_params WHERE key='positions_6'")" \
        '["#27","#24","#28","#38","#39","#25"]' "the labels a patch run records" || return 1
    for tok in '#27' '#24' '#28' '#38' '#39' '#25'; do
        expect_grep "$t" ">$tok<" "plot patch: token label $tok" || return 1
    done
    expect_grep "$t" "fixed scale −1 .. 1 (fractions of the gap), white at 0" \
        "plot patch: the normalised numbers' shared scale" || return 1
    hs plot dla --db r.db --out d.svg
    expect_rc 0 "plot dla" || return 1
    t=$(cat d.svg)
    for w in L1H0 'MLP 1' 'pos_embed' 'final norm bias' '-0.663'; do
        expect_grep "$t" "$w" "plot dla: $w" || return 1
    done
    hs plot lens --db r.db --out l.svg
    expect_rc 0 "plot lens" || return 1
    expect_grep "$(cat l.svg)" ">final<" "plot lens: the final residual's entry" || return 1
    expect_grep "$(cat l.svg)" "logit difference" "plot lens: the logit difference on prompts" || return 1
    hs plot composition --db r.db --metric k_composition --out c.svg
    expect_rc 0 "plot composition" || return 1
    t=$(cat c.svg)
    expect_grep "$t" "random-init control: mean" "plot composition: the control beside it" || return 1
    expect_grep "$t" "L1H3" "plot composition: head labels" || return 1
    expect_grep "$t" "fixed scale 0 .. 1" "plot composition: the fixed scale" || return 1
    hs plot scores --db r.db --metric patch_z --out z.png
    expect_rc 0 "plot scores --metric patch_z" || return 1
    png_ok z.png || return 1
    # options that would be ignored, and absent results
    expect_refused 2 plot "--metric does not apply to plot dla" dla --db r.db --metric dla --out x.svg || return 1
    expect_refused 2 plot "plot lens needs --db" lens --out x.svg || return 1
    expect_refused 1 plot 'no position metric "patch_mlp_out"' patch --db r.db --metric patch_mlp_out --out x.svg || return 1
    expect_nofile x.svg "refused plots" || return 1
    hs report --db r.db --out rep
    expect_rc 0 "report" || return 1
    local page=rep/index.html f
    expect_grep "$(cat "$page")" 'id="causal"' "the report's causal section" || return 1
    if grep -q 'class="missing"' "$page"; then bad "a figure not drawn: $(grep -o 'class="missing">[^<]*' "$page")"; return 1; fi
    for f in patch_resid_pre_run4 patch_z_run4 dla_run1 lens_run2 q_composition_run3 k_composition_run3 v_composition_run3; do
        grep -q "src=\"$f.png\"" "$page" || bad "no figure $f.png on the page" || return 1
        png_ok "rep/$f.png" || return 1
    done
    expect_grep "$(cat "$page")" "<b>L1H0</b>" "the report names the top DLA head" || return 1
    expect_grep "$(cat "$page")" "$top" "the report names the highest Q-composition pair" || return 1
}

# Names that would run `touch X` if pasted into gnuplot code reach it as data:
# the index's path (in every title), the metric, the output file.
hostile_names() {
    local evil="a'; system('touch X'); x='" evil2='b"; system("touch X"); x="' k
    hs composition --model "$GPT2" --db "$evil.db"
    expect_rc 0 "composition --db (a quote in the name)" || return 1
    hs dla --model "$GPT2" --prompts "$PROMPTS" --db "$evil.db"
    expect_rc 0 "dla" || return 1
    hs logit-lens --model "$GPT2" --prompts "$PROMPTS" --db "$evil.db"
    expect_rc 0 "logit-lens" || return 1
    insert_patch "$evil.db" || bad "could not insert the patch rows" || return 1
    for k in patch dla lens composition; do
        hs plot "$k" --db "$evil.db" --out "$evil2.svg"
        expect_rc 0 "plot $k on $evil.db to $evil2.svg" || return 1
        [ ! -e X ] || bad "plot $k: gnuplot ran the injected command" || return 1
        expect_grep "$(cat "$evil2.svg")" "system(" "plot $k: the name shown as it is" || return 1
    done
    hs plot patch --db "$evil.db" --metric "$evil" --out p.svg
    expect_rc 1 "plot patch --metric (a quote in the name)" || return 1
    hs plot composition --db "$evil.db" --metric "$evil2" --out p.svg
    expect_rc 1 "plot composition --metric (a quote in the name)" || return 1
    [ ! -e X ] || bad "gnuplot ran the injected command" || return 1
}

# A byte-level model (vocabulary 256, no tokenizer) labels the patching
# heatmap with its bytes, a space as a middle dot.
byte_labels() {
    printf 'When A and B met, B gave it to A\n%.0s' $(seq 40) >t.txt
    hs tokens --in t.txt --out t.bin
    expect_rc 0 "tokens" || return 1
    hs train --preset attn-only n_layer=1 n_head=2 d_model=16 n_ctx=16 --data t.bin --out bm \
        --steps 1 --batch 1 --seq-len 8
    expect_rc 0 "train a byte-level model" || return 1
    # "Hi A" / "Hi B": answer A (65), wrong B (66)
    echo '{"clean_ids": [72, 105, 32, 65], "corrupt_ids": [72, 105, 32, 66], "answer_id": 65, "wrong_id": 66}' >b.jsonl
    hs patch --model bm --prompts b.jsonl --db b.db --site resid_pre
    expect_rc 0 "patch on the byte-level model" || return 1
    hs plot patch --db b.db --out b.svg
    expect_rc 0 "plot patch" || return 1
    local t tok
    t=$(cat b.svg)
    for tok in H i '·' A; do
        expect_grep "$t" ">$tok<" "plot patch: byte label $tok" || return 1
    done
}

run_checks dla_oracle lens_oracle composition_oracle refusals causal_figures byte_labels hostile_names
