#!/usr/bin/env bash
# End-to-end checks of headscope ablate / importance / prune (SPEC §5, §7): the
# rows they record in the run index against the PyTorch oracle
# (tests/fixtures/ablate_oracle.txt), the fast ablation path against --naive,
# --resume after SIGKILL and SIGINT, concurrent writers, the pruning curve and
# mask, pruned checkpoints, exit codes and messages, and the plots.
#
# usage: tests/test_analyze.sh HEADSCOPE_BINARY FIXTURE_DIR
# Prints "ok NAME (S s)" or "FAIL NAME: reason (S s)" per check, then "N passed,
# M failed"; exits 1 if any check failed. Runs the fast tier's checks, or with
# HEADSCOPE_SLOW=1 the slow tier's (SLOW_CHECKS, at the bottom), or with ONLY="A
# B" the checks named. Needs sqlite3, /usr/bin/python3 (its sqlite3 module) and
# gnuplot (plots).
set -u

SUITE=analyze
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
GPT2="$FIX/models/gpt2_tiny"
LLAMA="$FIX/models/llama_gqa"
EVAL="$GPT2/eval.bin"
ORACLE="$FIX/ablate_oracle.txt"
command -v sqlite3 >/dev/null || { echo "sqlite3 is required" >&2; exit 2; }
py -c 'import sqlite3' 2>/dev/null || { echo "$PY lacks the sqlite3 module" >&2; exit 2; }
[ -s "$ORACLE" ] || { echo "no oracle $ORACLE (scripts/oracle/gen_ablate.py)" >&2; exit 2; }

# bad_input makes a file immutable (chattr +i); never leave it so, or the
# scratch directory cannot be removed.
IMMUTABLE=""
trap '[ -n "$IMMUTABLE" ] && chattr -i "$IMMUTABLE" 2>/dev/null; cleanup' EXIT

# ---- helpers -------------------------------------------------------------------

q() { sqlite3 "$1" "$2"; }

SMALL=(--batch 2 --seq-len 8) # eval.bin: 33 tokens, 2 batches of 2 x 8 (+1), n = 4 sequences

# oracle_check DB RUN CASE: every head_metrics row of RUN (ablate or importance
# metrics) equals the oracle's value and stderr to 1e-5, with n = 4; the clean
# 'loss' row equals clean_loss.
oracle_check() {
    py - "$ORACLE" "$3" "$1" "$2" >check.txt 2>&1 <<'EOF' || bad "$1 run $2 against the oracle ($3): $(tail -c 600 check.txt)"
import sqlite3, sys
oracle, case, db, run = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
cases, cur, lines = {}, None, iter(open(oracle).read().splitlines())
for line in lines:
    w = line.split()
    if not w or w[0].startswith("#"):
        continue
    if w[0] == "case":
        cur = cases.setdefault(w[1], {})
    elif w[0] == "int":
        cur[w[1]] = int(w[2])
    elif w[0] == "tensor":
        ndim = int(w[2])
        dims = [int(d) for d in w[3:3 + ndim]]
        count, vals = 1, []
        for d in dims:
            count *= d
        while len(vals) < count:
            vals += [float(x) for x in next(lines).split()]
        assert len(vals) == count, (w, len(vals))
        cur[w[1]] = (dims, vals)
o = cases[case]
n_seq = o["B"] * o["batches"]
def at(name, l, h):
    dims, vals = o[name]
    return vals[l * dims[1] + h]
pairs = {"importance": ("importance", "stderr_importance"),
         "importance_raw": ("importance_raw", "stderr_importance_raw")}
for k in ("zero", "mean", "resample"):
    pairs["loss_delta_" + k] = ("loss_delta_" + k, "stderr_" + k)
rows = sqlite3.connect(db).execute(
    "select layer, head, metric, value, stderr, n from head_metrics where run_id=?", (run,)).fetchall()
assert rows, "no rows"
bad = []
for l, h, m, v, s, n in rows:
    if m == "loss":
        want = o["clean_loss"][1][0]
        if (l, h) != (-1, -1) or abs(v - want) > 1e-5:
            bad.append("loss at (%d,%d) = %r, oracle %r" % (l, h, v, want))
        continue
    if m not in pairs:
        bad.append("unexpected metric %s" % m)
        continue
    wv, ws = at(pairs[m][0], l, h), at(pairs[m][1], l, h)
    if abs(v - wv) > 1e-5 or abs(s - ws) > 1e-5 or n != n_seq:
        bad.append("%s[%d][%d] = %r +- %r (n %r), oracle %r +- %r (n %d)" % (m, l, h, v, s, n, wv, ws, n_seq))
assert not bad, "%d rows differ: %s" % (len(bad), "; ".join(bad[:4]))
EOF
}

# same_rows DB1 RUN1 DB2 RUN2 MODE: the head_metrics rows of the two runs have the same
# (layer, head, metric) keys, the same n, and values and stderrs equal: MODE exact (to
# 1e-12) or loss (to 1e-6 relative to the clean loss: a loss_delta is the difference of
# two losses, so its own relative error says nothing in float32).
same_rows() {
    py - "$@" >check.txt 2>&1 <<'EOF' || bad "$1 run $2 vs $3 run $4: $(tail -c 600 check.txt)"
import sqlite3, sys
db1, r1, db2, r2, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
def rows(db, run):
    c = sqlite3.connect(db)
    return {(l, h, m): (v, s, n) for l, h, m, v, s, n in c.execute(
        "select layer, head, metric, value, stderr, n from head_metrics where run_id=?", (run,))}
a, b = rows(db1, r1), rows(db2, r2)
assert a, "no rows in the first run"
assert a.keys() == b.keys(), "keys differ: only first %s, only second %s" % (
    sorted(a.keys() - b.keys())[:4], sorted(b.keys() - a.keys())[:4])
scale = 1.0
if mode == "loss":
    scale = max(1.0, abs(a.get((-1, -1, "loss"), (1.0,))[0]))
tol = 1e-12 if mode == "exact" else 1e-6
bad = []
for k in sorted(a):
    (v1, s1, n1), (v2, s2, n2) = a[k], b[k]
    t = tol * (scale if mode == "loss" else max(1.0, abs(v1)))
    ts = tol * (scale if mode == "loss" else max(1.0, abs(s1)))
    if n1 != n2 or abs(v1 - v2) > t or abs(s1 - s2) > ts:
        bad.append("%s: %r +- %r (n %r) vs %r +- %r (n %r)" % (k, v1, s1, n1, v2, s2, n2))
assert not bad, "%d of %d rows differ: %s" % (len(bad), len(a), "; ".join(bad[:4]))
print("%d rows equal" % len(a))
EOF
}

# A ~230 KB byte-level shard and an attn-only model (2 layers of 4 heads, vocabulary
# 256), once, in $TMP/shared: a full ablate of it (batch 4 x 64, ~900 batches) runs
# for a few seconds, most of it in layer 0.
LONG_BIN="$TMP/shared/long.bin"
LONG_MODEL="$TMP/shared/am"
long_setup() {
    [ -s "$LONG_MODEL/model.safetensors" ] && return 0
    mkdir -p "$TMP/shared" || return 1
    text "$TMP/shared/long.txt" 4000
    "$HS" tokens --in "$TMP/shared/long.txt" --out "$LONG_BIN" >/dev/null 2>&1 ||
        bad "tokens could not make long.bin" || return 1
    attn_model "$LONG_MODEL" 2
}
# attn_model DIR LAYERS: DIR is an attn-only model of LAYERS layers of 4 heads
# (d 32), trained 5 steps on the long shard.
attn_model() {
    "$HS" train --preset attn-only n_layer="$2" n_head=4 d_model=32 --steps 5 --batch 4 --seq-len 64 \
        --data "$LONG_BIN" --out "$1" >/dev/null 2>&1 ||
        bad "train could not make the $2-layer attn-only model" || return 1
}
LONG_ABLATE=(ablate --data "$LONG_BIN" --batch 4 --seq-len 64)
# The interrupted and resumed runs (start_long, resume_after_kill) ablate a model of
# 3 layers (KILL_MODEL, same shape otherwise), so that layers 1 and 2 are left once
# layer 0 is recorded, over as many batches as keep them busy for about 2 s on an
# idle machine, so that the signal lands while they run: 450 batches in the float
# build, 150 in the double one (~3x slower a batch), 20 under AddressSanitizer
# (~30x). With 2 layers the whole shard (~900 batches) left ~1 s to layer 1.
KILL_MODEL="$TMP/shared/am3"
kill_setup() {
    long_setup || return 1
    [ -s "$KILL_MODEL/model.safetensors" ] && return 0
    attn_model "$KILL_MODEL" 3
}
kill_batches=450
if under_asan; then
    kill_batches=20
elif "$HS" --version 2>/dev/null | grep -q double; then
    kill_batches=150
fi
KILL_RUN=("${LONG_ABLATE[@]}" --model "$KILL_MODEL" --max-batches "$kill_batches")

# layer0_rows DB: layer 0's 12 rows (4 heads x 3 methods) are in DB.
layer0_rows() {
    local n
    [ -e "$1" ] || return 1
    n=$(sqlite3 "$1" "select count(*) from head_metrics where layer=0" 2>/dev/null) || return 1
    [ "${n:-0}" -ge 12 ]
}

# start_long DB: the ablate of KILL_MODEL (KILL_RUN) into DB in the background (BG_PID);
# waits until layer 0's 12 rows are in DB (outer limit 10 minutes).
start_long() {
    start_bg "$HS" "${KILL_RUN[@]}" --db "$1"
    wait_until 600 "layer 0 rows in $1" layer0_rows "$1"
}



# ---- 1. ablate records what the oracle says --------------------------------------

ablate_records() {
    local id
    hs ablate --model "$GPT2" --data "$EVAL" --db a.db "${SMALL[@]}" --json
    expect_rc 0 "ablate" || return 1
    id=$(jget out.txt run_id) || bad "ablate --json has no run_id: $OUT" || return 1
    expect_eq "$(q a.db "select kind||' '||status from runs where run_id=$id")" "ablate complete" "run kind and status" || return 1
    expect_eq "$(q a.db "select model_sha256 from runs where run_id=$id")" "$(sha "$GPT2/model.safetensors")" \
        "model_sha256" || return 1
    expect_eq "$(q a.db "select data_sha256 from runs where run_id=$id")" "$(sha "$EVAL")" "data_sha256" || return 1
    expect_eq "$(q a.db 'PRAGMA journal_mode')" wal "journal_mode" || return 1
    expect_eq "$(q a.db 'PRAGMA user_version')" 6 "user_version" || return 1
    expect_eq "$(q a.db "select count(*) from head_metrics where run_id=$id and metric like 'loss_delta_%'")" 24 \
        "loss_delta rows (2 layers x 4 heads x 3 methods)" || return 1
    expect_eq "$(q a.db "select metric||':'||count(*) from head_metrics where run_id=$id group by metric order by metric" | tr '\n' ' ')" \
        "loss:1 loss_delta_mean:8 loss_delta_resample:8 loss_delta_zero:8 " "rows per metric" || return 1
    expect_eq "$(q a.db "select count(*) from head_metrics where run_id=$id and metric like 'loss_delta_%' and n=4 and stderr > 0")" 24 \
        "loss_delta rows with n = 4 and a stderr" || return 1
    expect_eq "$(q a.db "select layer||','||head from head_metrics where run_id=$id and metric='loss'")" "-1,-1" \
        "clean loss row at layer = head = -1" || return 1
    close "$(jget out.txt clean_loss)" "$(q a.db "select value from head_metrics where run_id=$id and metric='loss'")" 1e-6 ||
        bad "--json clean_loss differs from the recorded loss" || return 1
    oracle_check a.db "$id" gpt2_tiny || return 1

    hs ablate --model "$GPT2" --data "$EVAL" --db a.db "${SMALL[@]}" --method zero --json
    expect_rc 0 "ablate --method zero" || return 1
    id=$(jget out.txt run_id) || bad "ablate --method zero --json has no run_id: $OUT" || return 1
    expect_eq "$(q a.db "select metric||':'||count(*) from head_metrics where run_id=$id group by metric order by metric" | tr '\n' ' ')" \
        "loss:1 loss_delta_zero:8 " "rows of --method zero" || return 1
    oracle_check a.db "$id" gpt2_tiny || return 1

    hs ablate --model "$GPT2" --data "$EVAL" --db a.db "${SMALL[@]}" --layers 1 --heads 0,2 --json
    expect_rc 0 "ablate --layers 1 --heads 0,2" || return 1
    id=$(jget out.txt run_id) || bad "ablate --layers 1 --heads 0,2 --json has no run_id: $OUT" || return 1
    expect_eq "$(q a.db "select layer||':'||head||':'||count(*) from head_metrics where run_id=$id and metric like 'loss_delta_%' group by layer, head order by layer, head" | tr '\n' ' ')" \
        "1:0:3 1:2:3 " "(layer, head) rows of --layers 1 --heads 0,2" || return 1
    oracle_check a.db "$id" gpt2_tiny || return 1
    expect_eq "$(q a.db "select count(*) from runs where status='complete'")" 3 "complete runs" || return 1
}

# ---- 2. the fast path equals the naive one ------------------------------------------

ablate_fast_equals_naive() {
    local fast naive
    hs ablate --model "$GPT2" --data "$EVAL" --db n.db "${SMALL[@]}" --json
    expect_rc 0 "ablate" || return 1
    fast=$(jget out.txt run_id) || bad "no run_id: $OUT" || return 1
    hs ablate --model "$GPT2" --data "$EVAL" --db n.db "${SMALL[@]}" --naive --json
    expect_rc 0 "ablate --naive" || return 1
    naive=$(jget out.txt run_id) || bad "no run_id: $OUT" || return 1
    same_rows n.db "$fast" n.db "$naive" loss || return 1
    expect_eq "$(q n.db "select count(*) from head_metrics where run_id=$naive")" 25 "rows of --naive" || return 1
    # llama_gqa (RoPE, grouped KV heads) too
    hs ablate --model "$LLAMA" --data "$EVAL" --db n.db "${SMALL[@]}" --json
    expect_rc 0 "ablate llama_gqa" || return 1
    fast=$(jget out.txt run_id)
    hs ablate --model "$LLAMA" --data "$EVAL" --db n.db "${SMALL[@]}" --naive --json
    expect_rc 0 "ablate llama_gqa --naive" || return 1
    naive=$(jget out.txt run_id)
    same_rows n.db "$fast" n.db "$naive" loss || return 1
    oracle_check n.db "$fast" llama_gqa || return 1
    # GPT-NeoX's parallel residual: the continuation's MLP reads the layer's input
    hs ablate --model "$FIX/families/neox_par" --data "$FIX/interp/neox_eval.bin" --db n.db "${SMALL[@]}" --json
    expect_rc 0 "ablate neox_par" || return 1
    fast=$(jget out.txt run_id)
    hs ablate --model "$FIX/families/neox_par" --data "$FIX/interp/neox_eval.bin" --db n.db "${SMALL[@]}" \
        --naive --json
    expect_rc 0 "ablate neox_par --naive" || return 1
    naive=$(jget out.txt run_id)
    same_rows n.db "$fast" n.db "$naive" loss
}

# ---- 3. --resume after SIGKILL and SIGINT --------------------------------------------

resume_after_kill() {
    kill_setup || return 1
    # the reference: one uninterrupted run
    hs "${KILL_RUN[@]}" --db base.db --json
    expect_rc 0 "uninterrupted ablate" || return 1
    local base id
    base=$(jget out.txt run_id) || bad "no run_id: $OUT" || return 1
    expect_eq "$(q base.db "select count(*) from head_metrics where run_id=$base")" 37 \
        "rows of the uninterrupted run (the clean loss, 3 layers x 4 heads x 3 methods)" || return 1

    # SIGKILL once layer 0 is recorded
    start_long k.db || return 1
    stop_bg KILL || return 1
    expect_eq "$RC" 137 "exit status after SIGKILL" || return 1
    expect_eq "$(q k.db 'PRAGMA integrity_check')" ok "integrity_check after SIGKILL" || return 1
    id=$(q k.db 'select max(run_id) from runs')
    expect_eq "$(q k.db "select status from runs where run_id=$id")" running "status after SIGKILL" || return 1
    [ "$(q k.db "select count(*) from head_metrics where run_id=$id and layer=2")" -lt 12 ] ||
        bad "layer 2 was complete before the kill: the run was not interrupted" || return 1
    hs "${KILL_RUN[@]}" --db k.db --resume "$id" --json
    expect_rc 0 "ablate --resume $id after SIGKILL" || return 1
    expect_eq "$(jget out.txt run_id)" "$id" "--json run_id of the resumed run" || return 1
    [ "$(jget out.txt layers_skipped)" -ge 1 ] 2>/dev/null ||
        bad "--json layers_skipped '$(jget out.txt layers_skipped)', expected >= 1: $OUT" || return 1
    expect_eq "$(q k.db "select status from runs")" complete "status after --resume (and no second run)" || return 1
    same_rows base.db "$base" k.db "$id" exact || return 1
    expect_eq "$(q k.db 'PRAGMA integrity_check')" ok "integrity_check after --resume" || return 1

    # SIGINT (Ctrl-C) once layer 0 is recorded: stops cleanly, the run is failed
    start_long i.db || return 1
    stop_bg INT || return 1
    expect_rc 1 "ablate after SIGINT" || return 1
    expect_grep "$ERR" "headscope: ablate: " "message prefix" || return 1
    expect_grep "$ERR" "interrupted" "message" || return 1
    expect_grep "$ERR" "--resume" "message mentions --resume" || return 1
    id=$(q i.db 'select max(run_id) from runs')
    expect_grep "$ERR" "--resume $id" "message gives the run to resume" || return 1
    expect_eq "$(q i.db "select status from runs where run_id=$id")" failed "status after SIGINT" || return 1
    expect_eq "$(q i.db 'PRAGMA integrity_check')" ok "integrity_check after SIGINT" || return 1
    hs "${KILL_RUN[@]}" --db i.db --resume "$id" --json
    expect_rc 0 "ablate --resume $id after SIGINT" || return 1
    [ "$(jget out.txt layers_skipped)" -ge 1 ] 2>/dev/null ||
        bad "--json layers_skipped '$(jget out.txt layers_skipped)' after SIGINT, expected >= 1: $OUT" || return 1
    expect_eq "$(q i.db "select status from runs")" complete "status after --resume (and no second run)" || return 1
    same_rows base.db "$base" i.db "$id" exact || return 1
}

# ---- 4. concurrent writers ----------------------------------------------------------

# writers_at_once DB N ARGS...: N copies of `ablate ARGS --db DB` started together;
# fails unless every one exits 0. Their stdout in wN.out, stderr in wN.err.
writers_at_once() {
    local db=$1 n=$2 i rc pids=()
    shift 2
    for ((i = 0; i < n; i++)); do
        "$HS" ablate "$@" --db "$db" --json >"w$i.out" 2>"w$i.err" &
        pids+=($!)
    done
    for ((i = 0; i < n; i++)); do
        wait "${pids[$i]}"
        rc=$?
        [ "$rc" -eq 0 ] || bad "one of $n writers at once on $db exited $rc: $(head -c 300 "w$i.err")" || return 1
    done
}

concurrent_writers() {
    long_setup || return 1
    # The reference (and the index's first run): all heads alone.
    hs "${LONG_ABLATE[@]}" --model "$LONG_MODEL" --db c.db --max-batches 60 --threads 1 --json
    expect_rc 0 "the reference ablate" || return 1
    local ref
    ref=$(jget out.txt run_id)
    # Four runs at once, each its own selection; rows each: the clean loss + heads x methods.
    local sets=("--layers 0 --method zero" "--layers 1 --method mean,resample" "--heads 1,3" "")
    local want=(5 9 13 25) pids=() i rc ids="" id
    for i in 0 1 2 3; do
        # shellcheck disable=SC2086
        "$HS" "${LONG_ABLATE[@]}" --model "$LONG_MODEL" --db c.db --max-batches 60 --threads 1 \
            ${sets[$i]} --json >"out$i.txt" 2>"err$i.txt" &
        pids+=($!)
    done
    for i in 0 1 2 3; do
        wait "${pids[$i]}"
        rc=$?
        [ "$rc" -eq 0 ] || bad "writer $i (${sets[$i]:-all}) exited $rc: $(head -c 300 "err$i.txt")" || return 1
    done
    expect_eq "$(q c.db 'PRAGMA integrity_check')" ok "integrity_check" || return 1
    expect_eq "$(q c.db "select count(*) from runs where status='complete' and kind='ablate'")" 5 "complete runs" || return 1
    expect_eq "$(q c.db 'select count(*) from runs')" 5 "runs" || return 1
    for i in 0 1 2 3; do
        id=$(jget "out$i.txt" run_id) || bad "writer $i: no run_id in $(cat "out$i.txt")" || return 1
        ids="$ids $id"
        expect_eq "$(q c.db "select count(*) from head_metrics where run_id=$id")" "${want[$i]}" \
            "rows of writer $i (${sets[$i]:-all})" || return 1
        expect_eq "$(q c.db "select count(*) from head_metrics where run_id=$id and metric<>'loss' and n=240")" \
            "$((want[i] - 1))" "writer $i: rows with n = 240 (60 batches of 4)" || return 1
    done
    # shellcheck disable=SC2086 # split the ids onto lines
    expect_eq "$(echo $ids | tr ' ' '\n' | sort -n | tr '\n' ' ')" "2 3 4 5 " "run ids of the writers" || return 1
    expect_eq "$(q c.db 'select count(*) from head_metrics')" $((25 + 52)) "rows in all" || return 1
    same_rows c.db "$ref" c.db "$(jget out3.txt run_id)" exact || return 1

    # Writers that race to create a fresh index (schema, WAL): 15 rounds of four (3
    # under AddressSanitizer: the race is SQLite's locking, which it does not change).
    local r rounds=15
    under_asan && rounds=3
    for ((r = 0; r < rounds; r++)); do
        rm -f f.db f.db-wal f.db-shm
        writers_at_once f.db 4 --model "$GPT2" --data "$EVAL" "${SMALL[@]}" --threads 1 || {
            REASON="fresh index, round $((r + 1)) of $rounds: $REASON"
            return 1
        }
        expect_eq "$(q f.db "select count(*)||' '||sum(status='complete') from runs")" "4 4" "fresh index, round $((r + 1)): runs" || return 1
        expect_eq "$(q f.db 'select count(*) from head_metrics')" 100 "fresh index, round $((r + 1)): rows" || return 1
        expect_eq "$(q f.db 'PRAGMA integrity_check')" ok "fresh index, round $((r + 1)): integrity_check" || return 1
    done

    # The same race made deterministic: another opener of a fresh index is switching it
    # to WAL (it holds the rollback journal's write lock on the empty file). A second
    # opener must wait for it (busy timeout), not fail with "database is locked".
    rm -f h.db h.db-wal h.db-shm
    py - "$HS" "$GPT2" "$EVAL" >check.txt 2>&1 <<'EOF' || bad "$(tail -c 500 check.txt)" || return 1
import sqlite3, subprocess, sys, time
hs, model, data = sys.argv[1:4]
c = sqlite3.connect("h.db", isolation_level=None)
c.execute("BEGIN IMMEDIATE")
p = subprocess.Popen([hs, "ablate", "--model", model, "--data", data, "--batch", "2", "--seq-len", "8",
                      "--db", "h.db"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
time.sleep(0.5)
early = p.poll()
c.execute("COMMIT")
c.close()
err = p.communicate(timeout=600)[1].decode().strip()
if early is not None or p.returncode != 0:
    sys.exit("ablate on a fresh index whose first opener held its write lock for 0.5 s (BEGIN IMMEDIATE, "
             "rollback journal) %s with status %d: %s" % ("ended at once" if early is not None else "ended",
                                                          p.returncode, err))
EOF
    expect_eq "$(q h.db "select status from runs")" complete "h.db run" || return 1
}

# ---- 5. importance ---------------------------------------------------------------------

importance_records() {
    hs importance --model "$GPT2" --data "$EVAL" --db i.db "${SMALL[@]}" --json
    expect_rc 0 "importance" || return 1
    local id
    id=$(jget out.txt run_id) || bad "importance --json has no run_id: $OUT" || return 1
    expect_eq "$(jget out.txt sequences)" 4 "--json sequences" || return 1
    expect_eq "$(q i.db "select kind||' '||status from runs where run_id=$id")" "importance complete" "run kind and status" || return 1
    expect_eq "$(q i.db "select data_sha256 from runs where run_id=$id")" "$(sha "$EVAL")" "data_sha256" || return 1
    expect_eq "$(q i.db "select metric||':'||count(*)||':'||min(n)||':'||max(n) from head_metrics where run_id=$id group by metric order by metric" | tr '\n' ' ')" \
        "importance:8:4:4 importance_raw:8:4:4 " "rows per metric (count:min n:max n)" || return 1
    expect_eq "$(q i.db "select count(distinct layer||','||head) from head_metrics where run_id=$id")" 8 "heads" || return 1
    oracle_check i.db "$id" gpt2_tiny || return 1
    local norms
    norms=$(q i.db "select layer||' '||sum(value*value) from head_metrics where run_id=$id and metric='importance' group by layer")
    expect_eq "$(printf '%s\n' "$norms" | wc -l)" 2 "layers with importance" || return 1
    local l s
    while read -r l s; do
        close "$s" 1 1e-6 || bad "layer $l: squared L2 norm of importance is $s, expected 1" || return 1
    done <<<"$norms"
    # least_important in --json is the smallest importance
    expect_eq "$(jget out.txt least_important | tr -d '{}"' | sed 's/layer://; s/,head:/,/')" \
        "$(q i.db "select layer||','||head from head_metrics where run_id=$id and metric='importance' order by value limit 1")" \
        "--json least_important" || return 1
    # llama_gqa against its oracle too
    hs importance --model "$LLAMA" --data "$EVAL" --db i.db "${SMALL[@]}" --json
    expect_rc 0 "importance llama_gqa" || return 1
    oracle_check i.db "$(jget out.txt run_id)" llama_gqa || return 1
}

# ---- 6. prune: curve and mask -----------------------------------------------------------

PRUNE=(prune --model "$LLAMA" --data "$EVAL" --batch 2 --seq-len 8 --step-percent 25 --min-heads-per-layer 1
       --max-percent 100)

# prune_shape DB RUN: curve 'pruning' is x = 0, .25, .5, .75 at steps in order, y finite;
# one 'pruned' row per head, 6 ones, every layer keeps a head.
prune_shape() {
    local db=$1 id=$2
    expect_eq "$(q "$db" "select kind||' '||status from runs where run_id=$id")" "prune complete" "run $id" || return 1
    expect_eq "$(q "$db" "select x*8 from curves where run_id=$id and curve='pruning' order by step" | tr '\n' ' ')" \
        "0.0 2.0 4.0 6.0 " "run $id: curve x (as heads of 8) in step order" || return 1
    expect_eq "$(q "$db" "select count(distinct step) from curves where run_id=$id and curve='pruning'")" 4 \
        "run $id: distinct steps" || return 1
    expect_eq "$(q "$db" "select count(*) from curves where run_id=$id and curve='pruning' and y > 0 and y < 100")" 4 \
        "run $id: curve y in (0, 100)" || return 1
    expect_eq "$(q "$db" "select count(*)||':'||sum(value)||':'||count(distinct layer||','||head) from head_metrics where run_id=$id and metric='pruned' and value in (0, 1)")" \
        "8:6.0:8" "run $id: 'pruned' rows (count:ones:heads)" || return 1
    expect_eq "$(q "$db" "select layer||':'||sum(1-value) from head_metrics where run_id=$id and metric='pruned' group by layer order by layer" | tr '\n' ' ')" \
        "0:1.0 1:1.0 " "run $id: heads kept per layer (6 of 8 pruned, >= 1 kept each)" || return 1
}

prune_curve() {
    local a b c
    hs "${PRUNE[@]}" --db p.db --json
    expect_rc 0 "prune" || return 1
    a=$(jget out.txt run_id) || bad "prune --json has no run_id: $OUT" || return 1
    expect_eq "$(jget out.txt pruned)/$(jget out.txt heads)" 6/8 "--json pruned/heads" || return 1
    prune_shape p.db "$a" || return 1
    # --json curve = the recorded curve
    py - out.txt p.db "$a" <<'EOF' >check.txt 2>&1 || bad "--json curve differs from the index: $(tail -c 400 check.txt)" || return 1
import json, sqlite3, sys
j = json.load(open(sys.argv[1]))["curve"]
c = sqlite3.connect(sys.argv[2]).execute("select x, y from curves where run_id=? and curve='pruning' order by step",
                                         (int(sys.argv[3]),)).fetchall()
assert len(j) == len(c), (j, c)
for p, (x, y) in zip(j, c):
    assert abs(p["fraction"] - x) < 1e-9 and abs(p["loss"] - y) <= 1e-7 * abs(y), (p, x, y)
EOF
    # the same run again: the same curve and mask
    hs "${PRUNE[@]}" --db p.db --json
    expect_rc 0 "second prune" || return 1
    b=$(jget out.txt run_id)
    expect_eq "$(q p.db "select step||' '||x||' '||y from curves where run_id=$b order by step")" \
        "$(q p.db "select step||' '||x||' '||y from curves where run_id=$a order by step")" "curve of the second run" || return 1
    expect_eq "$(q p.db "select layer||' '||head||' '||value from head_metrics where run_id=$b and metric='pruned' order by layer, head")" \
        "$(q p.db "select layer||' '||head||' '||value from head_metrics where run_id=$a and metric='pruned' order by layer, head")" \
        "mask of the second run" || return 1
    # step 0 is the unpruned model: its loss is eval's
    hs eval --model "$LLAMA" --data "$EVAL" "${SMALL[@]}" --json
    expect_rc 0 "eval llama_gqa" || return 1
    close "$(q p.db "select y from curves where run_id=$a and step=0")" "$(jget out.txt loss)" 1e-5 ||
        bad "curve at x = 0 is not the unpruned eval loss $(jget out.txt loss)" || return 1
    # --one-shot
    hs "${PRUNE[@]}" --db p.db --one-shot --json
    expect_rc 0 "prune --one-shot" || return 1
    c=$(jget out.txt run_id)
    prune_shape p.db "$c" || return 1
    close "$(q p.db "select y from curves where run_id=$c and step=0")" "$(q p.db "select y from curves where run_id=$a and step=0")" 1e-9 ||
        bad "--one-shot: curve at x = 0 differs from the iterative run's" || return 1
    # lowest importance first: --one-shot prunes by the unpruned model's importance (the
    # importance command's, same data), lowest first, skipping a layer down to one head;
    # its first step is the iterative run's first step
    hs importance --model "$LLAMA" --data "$EVAL" "${SMALL[@]}" --db p.db --json
    expect_rc 0 "importance llama_gqa" || return 1
    local imp
    imp=$(jget out.txt run_id)
    py - p.db "$imp" "$c" <<'EOF' >check.txt 2>&1 || bad "--one-shot mask is not the 6 least important heads (1 kept per layer): $(tail -c 400 check.txt)" || return 1
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
imp = db.execute("select layer, head, value from head_metrics where run_id=? and metric='importance'",
                 (int(sys.argv[2]),)).fetchall()
assert len(imp) == 8, imp
left, want = {0: 4, 1: 4}, set()
for l, h, v in sorted(imp, key=lambda r: (r[2], r[0], r[1])):
    if len(want) < 6 and left[l] > 1:
        want.add((l, h))
        left[l] -= 1
got = {(l, h) for l, h in db.execute("select layer, head from head_metrics where run_id=? and metric='pruned' and value=1",
                                     (int(sys.argv[3]),))}
assert got == want, (sorted(got), sorted(want), sorted(imp, key=lambda r: r[2]))
EOF
    expect_eq "$(q p.db "select y from curves where run_id=$c and step=1")" "$(q p.db "select y from curves where run_id=$a and step=1")" \
        "--one-shot and iterative loss after step 1 (the same importance)" || return 1
    # steps below one head (10% of 8): counts floor(0.8 k) = 0 0 1 2 3 4 4 5 6, never
    # decreasing, until protection (one head per layer) stops at 6
    hs prune --model "$LLAMA" --data "$EVAL" "${SMALL[@]}" --step-percent 10 --min-heads-per-layer 1 \
        --max-percent 100 --db p.db --json
    expect_rc 0 "prune --step-percent 10" || return 1
    c=$(jget out.txt run_id)
    expect_eq "$(q p.db "select cast(round(x*8) as int) from curves where run_id=$c and curve='pruning' order by step" | tr '\n' ' ')" \
        "0 0 1 2 3 4 4 5 6 " "--step-percent 10: curve x (as heads of 8) in step order" || return 1
    expect_eq "$(jget out.txt pruned)/$(jget out.txt heads)" 6/8 "--step-percent 10: --json pruned/heads" || return 1
}

# prune with its defaults on a model of fewer than 10 heads: 10% steps grow the
# target below one head per step, and it still prunes, up to half the heads
# (--max-percent 50); the written model's dead heads are the mask, and `info`
# says so.
prune_defaults() {
    hs prune --model "$LLAMA" --data "$EVAL" "${SMALL[@]}" --db d.db --out dense --json
    expect_rc 0 "prune with defaults" || return 1
    local id
    id=$(jget out.txt run_id)
    expect_eq "$(jget out.txt pruned)/$(jget out.txt heads)" 4/8 "defaults: --json pruned/heads" || return 1
    expect_eq "$(q d.db "select cast(round(x*8) as int) from curves where run_id=$id and curve='pruning' order by step" | tr '\n' ' ')" \
        "0 0 1 2 3 4 " "defaults: curve x (as heads of 8) in step order" || return 1
    hs info --model dense --json
    expect_rc 0 "info of the pruned model" || return 1
    expect_eq "$(jget out.txt dead_heads)" \
        "[$(q d.db "select '['||layer||','||head||']' from head_metrics where run_id=$id and metric='pruned' and value=1 order by layer, head" | paste -sd,)]" \
        "info --json dead_heads = the pruned mask" || return 1
    hs info --model dense
    expect_grep "$OUT" "dead heads" "info names the dead heads" || return 1
    hs info --model "$LLAMA" --json
    expect_eq "$(jget out.txt dead_heads)" "[]" "info of the unpruned model: no dead heads" || return 1
}

# ---- 7. pruned checkpoints -----------------------------------------------------------------

structural_out() {
    local id last full
    hs info --model "$LLAMA" --json
    expect_rc 0 "info llama_gqa" || return 1
    full=$(jget out.txt parameters)
    hs "${PRUNE[@]}" --db s.db --out small --structural --json
    expect_rc 0 "prune --out small --structural" || return 1
    id=$(jget out.txt run_id)
    expect_eq "$(jget out.txt out)" small "--json out" || return 1
    last=$(q s.db "select y from curves where run_id=$id and curve='pruning' order by step desc limit 1")
    hs info --model small --json
    expect_rc 0 "info of the structural checkpoint" || return 1
    [ "$(jget out.txt parameters)" -lt "$full" ] 2>/dev/null ||
        bad "structural checkpoint has $(jget out.txt parameters) parameters, the full model $full" || return 1
    # the kept heads per layer: 4 - pruned, from the mask
    expect_eq "$(jget out.txt n_head)" \
        "[$(q s.db "select 4 - sum(value) from head_metrics where run_id=$id and metric='pruned' group by layer order by layer" | sed 's/\.0$//' | paste -sd,)]" \
        "n_head of the structural checkpoint (4 - pruned, per layer)" || return 1
    hs eval --model small --data "$EVAL" "${SMALL[@]}" --json
    expect_rc 0 "eval of the structural checkpoint" || return 1
    close "$(jget out.txt loss)" "$last" "$(py -c "print(1e-5 * abs($last))")" ||
        bad "structural eval loss $(jget out.txt loss), last pruning curve value $last" || return 1
    expect_eq "$(q s.db "select sha256||' '||complete from artifacts where run_id=$id")" "$(sha small/model.safetensors) 1" \
        "artifact of the structural checkpoint" || return 1
    # the latency of both models is recorded (positive milliseconds, 7 runs each)
    expect_eq "$(q s.db "select count(*) from head_metrics where run_id=$id and layer=-1 and n=7 and value>0
                         and metric in ('forward_ms_unpruned','forward_ms_pruned')")" 2 "latency rows" || return 1

    # without --structural: the dense model, pruned heads' W_o columns zeroed
    hs "${PRUNE[@]}" --db s.db --out dense --json
    expect_rc 0 "prune --out dense" || return 1
    id=$(jget out.txt run_id)
    hs info --model dense --json
    expect_rc 0 "info of the dense checkpoint" || return 1
    expect_eq "$(jget out.txt parameters)" "$full" "parameters of the dense checkpoint" || return 1
    expect_eq "$(jget out.txt n_head)" "[4,4]" "n_head of the dense checkpoint" || return 1
    hs eval --model dense --data "$EVAL" "${SMALL[@]}" --json
    expect_rc 0 "eval of the dense checkpoint" || return 1
    close "$(jget out.txt loss)" "$last" "$(py -c "print(1e-5 * abs($last))")" ||
        bad "dense eval loss $(jget out.txt loss), last pruning curve value $last" || return 1

    # an existing --out is refused without --force, and nothing is recorded
    local before runs
    before=$(sha dense/model.safetensors)
    runs=$(q s.db 'select * from runs')
    hs "${PRUNE[@]}" --db s.db --out dense --structural
    expect_rc 1 "prune into an existing --out without --force" || return 1
    expect_grep "$ERR" "headscope: prune: dense/model.safetensors" "message names the file" || return 1
    expect_grep "$ERR" "--force" "message suggests --force" || return 1
    expect_eq "$(sha dense/model.safetensors)" "$before" "dense/model.safetensors after the refusal" || return 1
    expect_eq "$(q s.db 'select * from runs')" "$runs" "runs after the refusal" || return 1
    hs "${PRUNE[@]}" --db s.db --out dense --structural --force --json
    expect_rc 0 "prune --force into dense" || return 1
    expect_eq "$(sha dense/model.safetensors)" "$(sha small/model.safetensors)" "dense replaced by the structural model" || return 1
}

# ---- 8. bad input -------------------------------------------------------------------------

# refuse CODE CMD PATTERN DB ARGS...: CMD ARGS exits CODE with "headscope: CMD:" and
# PATTERN on stderr, nothing on stdout; DB is not created, or if it exists its
# runs table (and the file, when it is not a database) is unchanged.
refuse() {
    local code=$1 cmd=$2 pat=$3 db=$4 before="" fsha=""
    shift 4
    if [ -e "$db" ]; then
        fsha=$(sha "$db")
        before=$(sqlite3 "$db" 'select * from runs' 2>/dev/null)
    fi
    expect_refused "$code" "$cmd" "$pat" "$@" || return 1
    local what="$cmd $*"
    if [ -z "$fsha" ]; then
        [ ! -e "$db" ] || bad "$what: created $db" || return 1
    elif sqlite3 "$db" 'select 1 from runs limit 1' >/dev/null 2>&1; then
        expect_eq "$(sqlite3 "$db" 'select * from runs')" "$before" "$what: runs table" || return 1
    else
        expect_eq "$(sha "$db")" "$fsha" "$what: $db" || return 1
    fi
}

bad_input() {
    local A=(--model "$GPT2" --data "$EVAL" "${SMALL[@]}")
    refuse 2 ablate "unknown method 'bogus'" new.db "${A[@]}" --db new.db --method bogus || return 1
    refuse 2 ablate "--method" new.db "${A[@]}" --db new.db --method , || return 1
    refuse 2 ablate "--heads '9'" new.db "${A[@]}" --db new.db --heads 9 || return 1
    refuse 2 ablate "--heads '4'" new.db "${A[@]}" --db new.db --heads 4 || return 1
    refuse 2 ablate "--layers '5'" new.db "${A[@]}" --db new.db --layers 5 || return 1
    expect_grep "$ERR" "2 layers" "--layers 5 message" || return 1
    refuse 2 ablate "--batch" new.db --model "$GPT2" --data "$EVAL" --batch 1 --seq-len 8 --db new.db --method resample || return 1
    refuse 2 ablate "--layers '2'" new.db "${A[@]}" --db new.db --layers 2 || return 1
    refuse 2 ablate "--db FILE" new.db "${A[@]}" || return 1
    refuse 2 importance "--db FILE" new.db "${A[@]}" || return 1
    refuse 2 prune "--db FILE" new.db "${A[@]}" || return 1
    refuse 2 ablate "--seq-len 17 exceeds the model's n_ctx=16" new.db --model "$GPT2" --data "$EVAL" \
        --batch 1 --seq-len 17 --db new.db || return 1
    refuse 1 ablate "nodir" new.db --model nodir --data "$EVAL" "${SMALL[@]}" --db new.db || return 1
    refuse 1 importance "nofile.bin" new.db --model "$GPT2" --data nofile.bin "${SMALL[@]}" --db new.db || return 1
    refuse 2 prune "--step-percent" new.db "${A[@]}" --db new.db --step-percent 0 || return 1
    refuse 2 prune "--step-percent" new.db "${A[@]}" --db new.db --step-percent 101 || return 1
    refuse 2 prune "--structural needs --out" new.db "${A[@]}" --db new.db --structural || return 1

    # not a database: a text file, left byte for byte
    printf 'this is a text file, not an SQLite database\n' >text.db
    local tsha
    tsha=$(sha text.db)
    refuse 1 ablate "text.db" text.db "${A[@]}" --db text.db || return 1
    expect_grep "$ERR" "not a database" "text.db message" || return 1
    expect_eq "$(sha text.db)" "$tsha" "text.db after the refusal" || return 1
    expect_nofile text.db-wal "text.db" || return 1
    refuse 1 importance "text.db" text.db "${A[@]}" --db text.db || return 1
    refuse 1 prune "text.db" text.db "${A[@]}" --db text.db || return 1
    expect_eq "$(sha text.db)" "$tsha" "text.db after the refusals" || return 1

    # a schema newer than this tool's
    sqlite3 newer.db 'PRAGMA user_version=99; CREATE TABLE future(x);' || bad "could not make newer.db" || return 1
    local nsha
    nsha=$(sha newer.db)
    refuse 1 ablate "newer" newer.db "${A[@]}" --db newer.db || return 1
    expect_grep "$ERR" "newer.db" "newer.db message names the file" || return 1
    expect_grep "$ERR" "99" "newer.db message gives the version" || return 1
    refuse 1 prune "newer" newer.db "${A[@]}" --db newer.db || return 1
    expect_eq "$(sha newer.db)" "$nsha" "newer.db after the refusals" || return 1
    expect_eq "$(q newer.db 'PRAGMA user_version')" 99 "newer.db user_version" || return 1

    # --resume of runs that do not exist, or are another kind / model
    hs ablate "${A[@]}" --db r.db --json
    expect_rc 0 "ablate into r.db" || return 1
    local abl imp
    abl=$(jget out.txt run_id)
    hs importance "${A[@]}" --db r.db --json
    expect_rc 0 "importance into r.db" || return 1
    imp=$(jget out.txt run_id)
    refuse 1 ablate "no run 999" r.db "${A[@]}" --db r.db --resume 999 || return 1
    refuse 1 ablate "run $imp" r.db "${A[@]}" --db r.db --resume "$imp" || return 1
    expect_grep "$ERR" "is a 'importance' run, not 'ablate'" "--resume of an importance run" || return 1
    refuse 1 ablate "run $abl" r.db --model "$LLAMA" --data "$EVAL" "${SMALL[@]}" --db r.db --resume "$abl" || return 1
    expect_grep "$ERR" "another model or data" "--resume with another model" || return 1
    refuse 1 ablate "run $abl" r.db --model "$GPT2" --data "$GPT2/train.bin" "${SMALL[@]}" --db r.db --resume "$abl" || return 1
    refuse 2 ablate "--resume" r.db "${A[@]}" --db r.db --resume 0 || return 1
    # options that change the numbers must match the original run's
    refuse 1 ablate "other options" r.db "${A[@]}" --method zero --db r.db --resume "$abl" || return 1
    # --resume never creates an index
    refuse 1 ablate "no index" fresh.db "${A[@]}" --db fresh.db --resume 1 || return 1
    expect_eq "$(q r.db "select group_concat(status) from runs")" "complete,complete" "statuses after the refused resumes" || return 1
    expect_eq "$(q r.db 'PRAGMA integrity_check')" ok "r.db integrity_check" || return 1

    # read-only: root ignores file modes, so make the file immutable
    cp r.db ro.db && rm -f ro.db-wal ro.db-shm
    if chattr +i ro.db 2>/dev/null; then
        IMMUTABLE="$(pwd)/ro.db"
        local rsha rruns
        rsha=$(sha ro.db)
        rruns=$(q ro.db 'select * from runs')
        hs ablate "${A[@]}" --db ro.db
        chattr -i ro.db && IMMUTABLE=""
        expect_rc 1 "ablate into an immutable database" || return 1
        expect_grep "$ERR" "headscope: ablate: ro.db" "message names the database" || return 1
        expect_grep "$ERR" "readonly" "message says why" || return 1
        expect_eq "$(sha ro.db)" "$rsha" "ro.db after the refusal" || return 1
        expect_eq "$(q ro.db 'select * from runs')" "$rruns" "ro.db runs after the refusal" || return 1
    else
        echo "  (read-only database not checked: chattr +i is not supported here)"
    fi

    # --resume into an index that does not exist must not create it
    refuse 1 ablate "no index to resume" fresh.db "${A[@]}" --db fresh.db --resume 999 || return 1
}

# ---- 9. plots ---------------------------------------------------------------------------

plot_scores() {
    command -v gnuplot >/dev/null || bad "gnuplot is required" || return 1
    hs ablate --model "$GPT2" --data "$EVAL" --db p.db "${SMALL[@]}"
    expect_rc 0 "ablate" || return 1
    hs importance --model "$GPT2" --data "$EVAL" --db p.db "${SMALL[@]}"
    expect_rc 0 "importance" || return 1
    hs "${PRUNE[@]}" --db p.db
    expect_rc 0 "prune" || return 1
    hs plot scores --db p.db --metric loss_delta_zero --out s.png
    expect_rc 0 "plot scores --metric loss_delta_zero" || return 1
    png_ok s.png || return 1
    hs plot scores --db p.db --metric importance --out i.png
    expect_rc 0 "plot scores --metric importance" || return 1
    png_ok i.png || return 1
    hs plot scores --db p.db --metric loss_delta_resample --run 1 --out r.svg
    expect_rc 0 "plot scores --run 1 .svg" || return 1
    grep -q '<svg' r.svg || bad "r.svg has no <svg" || return 1
    hs plot curve --db p.db --curve pruning --out c.png
    expect_rc 0 "plot curve --curve pruning" || return 1
    png_ok c.png || return 1
    hs plot scores --db p.db --metric no_such_metric --out no.png
    expect_rc 1 "plot scores --metric no_such_metric" || return 1
    expect_grep "$ERR" "no_such_metric" "message names the metric" || return 1
    expect_nofile no.png "plot scores --metric no_such_metric" || return 1
}


# ---- progress ----------------------------------------------------------------------

# Every long command draws a bar with rate and ETA when stderr is a terminal
# (script(1) gives it one) and none otherwise.
progress_on_terminal() {
    command -v script >/dev/null || bad "script (util-linux) is required" || return 1
    long_setup || return 1
    local M="$LONG_MODEL" D="$LONG_BIN" cmd
    local cmds=(
        "train --preset attn-only d_model=16 --data $D --out t --steps 3 --batch 2 --seq-len 16"
        "eval --model $M --data $D --batch 2 --seq-len 16"
        "capture --model $M --data $D --out m.h5 --batch 2 --seq-len 16 --max-batches 2"
        "ablate --model $M --data $D --db p.db --batch 2 --seq-len 16 --max-batches 2"
        "importance --model $M --data $D --db p.db --batch 2 --seq-len 16 --max-batches 2"
        "prune --model $M --data $D --db p.db --batch 2 --seq-len 16 --max-batches 2 --step-percent 50"
        "induction --model $M --db p.db --seq-len 8 --samples 4"
        "patterns --model $M --data $D --db p.db --batch 2 --seq-len 16 --max-batches 2"
        "experiment head-count --preset attn-only d_model=16 --data $D --db p.db --heads 1,2 --seeds 1 --steps 3 --batch 2 --seq-len 16")
    for cmd in "${cmds[@]}"; do
        rm -rf t m.h5
        # shellcheck disable=SC2086
        script -qec "$HS $cmd --threads 1" /dev/null >tty.txt 2>&1 || bad "$cmd failed on a terminal: $(tail -c 300 tty.txt)" || return 1
        grep -q 'ETA' tty.txt || bad "no progress bar on a terminal: $cmd" || return 1
        rm -rf t m.h5
        # shellcheck disable=SC2086
        hs $cmd --threads 1
        expect_rc 0 "$cmd" || return 1
        if grep -q 'ETA' err.txt; then bad "progress drawn into a file: $cmd"; return 1; fi
    done
}

# ---- the report -------------------------------------------------------------------

report_page() {
    command -v gnuplot >/dev/null || bad "gnuplot is required" || return 1
    hs induction --model "$GPT2" --db r.db --seq-len 6 --samples 8
    expect_rc 0 "induction" || return 1
    hs ablate --model "$GPT2" --data "$EVAL" --db r.db "${SMALL[@]}"
    expect_rc 0 "ablate" || return 1
    hs importance --model "$GPT2" --data "$EVAL" --db r.db "${SMALL[@]}"
    expect_rc 0 "importance" || return 1
    hs "${PRUNE[@]}" --db r.db --out pr --structural
    expect_rc 0 "prune --structural" || return 1
    hs patterns --model "$GPT2" --data "$EVAL" --db r.db "${SMALL[@]}"
    expect_rc 0 "patterns" || return 1
    hs capture --model "$GPT2" --data "$EVAL" --out m.h5 "${SMALL[@]}" --db r.db
    expect_rc 0 "capture --db" || return 1
    expect_eq "$(q r.db "select count(*) from artifacts a join runs r using (run_id) where r.kind='capture'
                         and a.complete=1 and a.path='$PWD/m.h5' and a.sha256='$(sha m.h5)'")" 1 "capture artifact" || return 1
    hs report --db r.db --out rep --json
    expect_rc 0 "report" || return 1
    expect_eq "$(jget out.txt missing)" 0 "figures not drawn" || return 1
    # every figure the page names exists and is a PNG; the page shows what it promised
    local imgs n=0 img
    imgs=$(grep -o 'src="[^"]*"' rep/index.html | sed 's/src="//; s/"$//')
    for img in $imgs; do
        png_ok "rep/$img" || return 1
        n=$((n + 1))
    done
    expect_eq "$n" "$(jget out.txt figures)" "figures on the page" || return 1
    local want
    for want in causal_run1.png induction_run1.png prev_token_run1.png copying_run1.png \
        loss_delta_zero_run2.png importance_run3.png pruning_run4.png entropy_run5.png maps_grid.png; do
        [ -f "rep/$want" ] || bad "report lacks $want" || return 1
    done
    expect_grep "$(cat rep/index.html)" "class=\"claim" "the induction claim" || return 1
    expect_grep "$(cat rep/index.html)" "ms unpruned" "the structural-pruning latency" || return 1
    expect_grep "$(cat rep/index.html)" "do not establish" "the cautions" || return 1
    [ ! -e rep/.index.html.tmp ] || bad "temporary page left behind" || return 1
    # bad input: nothing written
    hs report --db missing.db --out rep2
    expect_rc 1 "report of a missing index" || return 1
    expect_grep "$ERR" "missing.db" "message names the file" || return 1
    echo "not sqlite" >junk.db
    hs report --db junk.db --out rep3
    expect_rc 1 "report of a file that is no index" || return 1
    expect_nofile rep3/index.html "report of junk" || return 1
    hs report --db r.db
    expect_rc 2 "report without --out" || return 1
}

# ---- induction scores and patterns -------------------------------------------------

induction_records() {
    hs induction --model "$GPT2" --db i.db --seq-len 6 --samples 8 --data "$EVAL" --icl-seq-len 8 \
        --late 6 --early 1 --json
    expect_rc 0 "induction" || return 1
    local run
    run=$(jget out.txt run_id)
    # the ICL score is in --json, equal to its row (SPEC §21)
    close "$(jget out.txt icl value)" \
        "$(q i.db "select value from head_metrics where run_id=$run and metric='icl'")" 1e-5 ||
        bad "icl in --json" || return 1
    local m
    for m in induction duplicate_token prev_token copying; do
        expect_eq "$(q i.db "select count(*) from head_metrics where run_id=$run and metric='$m'")" 8 "$m rows" || return 1
        expect_eq "$(q i.db "select count(*) from head_metrics where run_id=$run and metric='${m}_control'")" 8 "${m}_control rows" || return 1
    done
    expect_eq "$(q i.db "select n from head_metrics where run_id=$run and metric='induction' limit 1")" 8 "induction n" || return 1
    # the probe against chance: the first half's loss beside ln V in --json
    close "$(jget out.txt first_half_loss value)" \
        "$(q i.db "select value from head_metrics where run_id=$run and metric='first_half_loss'")" 1e-5 ||
        bad "first_half_loss in --json" || return 1
    close "$(jget out.txt first_half_loss ln_v)" \
        "$(py -c 'import json, math, sys; print(math.log(json.load(open(sys.argv[1] + "/config.json"))["vocab_size"]))' "$GPT2")" 1e-5 ||
        bad "ln V" || return 1
    # r's tokens from a range, or from the ids of a shard (the pool's size)
    hs induction --model "$GPT2" --db v.db --seq-len 6 --samples 8 --vocab 3:10 --json
    expect_rc 0 "induction --vocab" && expect_eq "$(jget out.txt pool)" 7 "--vocab 3:10" || return 1
    hs induction --model "$GPT2" --db v.db --seq-len 6 --samples 8 --vocab 3-10 --json
    expect_rc 0 "induction --vocab" && expect_eq "$(jget out.txt pool)" 8 "--vocab 3-10" || return 1
    hs induction --model "$GPT2" --db v.db --seq-len 6 --samples 8 --from-data "$EVAL" --json
    expect_rc 0 "induction --from-data" || return 1
    expect_eq "$(jget out.txt pool)" "$(py -c 'import struct, sys
raw = open(sys.argv[1], "rb").read()
version, n = struct.unpack("<2i", raw[4:12])
w = "H" if version == 1 else "I"
print(len(set(struct.unpack("<%d%s" % (n, w), raw[1024:1024 + struct.calcsize(w) * n]))))' "$EVAL")" "--from-data: the shard's distinct ids" || return 1
    expect_refused 2 induction "--vocab '9:9'" --model "$GPT2" --db v.db --vocab 9:9 || return 1
    expect_refused 2 induction "--from-data does not apply with --vocab" --model "$GPT2" --db v.db \
        --vocab 1:4 --from-data "$EVAL" || return 1
    for m in second_half_loss first_half_loss causal_loss_delta_top_k causal_loss_delta_random_k icl icl_control; do
        expect_eq "$(q i.db "select count(*) from head_metrics where run_id=$run and metric='$m' and layer=-1 and head=-1")" 1 "$m row" || return 1
    done
    expect_eq "$(q i.db "select n from head_metrics where run_id=$run and metric='causal_loss_delta_random_k'")" 20 "random draws" || return 1
    expect_eq "$(q i.db "select count(*) from head_metrics where run_id=$run and metric='causal_top_k'")" 1 "causal_top_k rows" || return 1
    # each draw is in the curve; their mean and n-1 spread are the recorded summary
    expect_eq "$(q i.db "select count(*) from curves where run_id=$run and curve='causal_random_k'")" 20 "draw rows" || return 1
    local mean std
    mean=$(q i.db "select avg(y) from curves where run_id=$run and curve='causal_random_k'")
    std=$(q i.db "select sqrt(sum((y - $mean) * (y - $mean)) / 19) from curves where run_id=$run and curve='causal_random_k'")
    close "$mean" "$(q i.db "select value from head_metrics where run_id=$run and metric='causal_loss_delta_random_k'")" 1e-9 || bad "draw mean" || return 1
    close "$std" "$(q i.db "select stderr from head_metrics where run_id=$run and metric='causal_loss_delta_random_k'")" 1e-9 || bad "draw spread" || return 1
    hs plot causal --db i.db --out causal.png
    expect_rc 0 "plot causal" || return 1
    png_ok causal.png || return 1
    hs plot causal --db p_missing.db --out c2.png
    expect_rc 1 "plot causal of a missing index" || return 1
    # copying lies in [-1, 1]
    expect_eq "$(q i.db "select count(*) from head_metrics where run_id=$run and metric like 'copying%' and abs(value) > 1")" 0 "copying range" || return 1
    # usage errors record nothing
    refuse 2 induction "--causal-k" i.db --model "$GPT2" --db i.db --seq-len 6 --causal-k 5 || return 1
    refuse 2 induction "n_ctx" i.db --model "$GPT2" --db i.db --seq-len 9 || return 1
}

# A model trained by `headscope train` develops an induction head: 2 layers,
# attention only, one head in layer 0 (room for a previous-token head and
# nothing else: with two or more, models learn an equally good circuit that
# matches the previous token against a t-3 head and scores ~0 on induction)
# and eight in layer 1 (with fewer, random draws often hit the one
# previous-token head, which the circuit needs as much as the induction head),
# on byte-level text (Debian's license texts) in which every sequence of 64
# carries one planted repeated segment of random bytes. The induction command
# must find a layer-1 head with score >= 0.5 (control near chance) and
# establish it by the causal check. About 40 s of training in the float build:
# the slow tier (SLOW_CHECKS); skipped under AddressSanitizer.
trained_induction() {
    if under_asan; then
        echo "  trained_induction: skipped under AddressSanitizer (training takes minutes there)"
        return 0
    fi
    local f texts=()
    for f in Apache-2.0 Artistic BSD CC0-1.0 GFDL-1.3 GPL-2 GPL-3 LGPL-2.1 MPL-2.0; do
        [ -r "/usr/share/common-licenses/$f" ] && texts+=("/usr/share/common-licenses/$f")
    done
    [ "${#texts[@]}" -ge 5 ] || bad "too few texts in /usr/share/common-licenses (base-files)" || return 1
    cat "${texts[@]}" >text.txt
    hs tokens --in text.txt --out train.bin --repeat-share 1 --random-share 1 --seq-len 64 --repeat-len 8:28 --json
    expect_rc 0 "tokens --repeat-share" || return 1
    hs train --preset attn-only n_ctx=64 'n_head=[1,8]' head_dim=32 initializer_range=0.1 --data train.bin \
        --out m --steps 4000 --batch 32 --seq-len 64 --lr 3e-3 --seed 1 --threads 2
    expect_rc 0 "train" || return 1
    hs induction --model m --db i.db --seq-len 24 --samples 32 --threads 2 --json
    expect_rc 0 "induction" || return 1
    local run layer head score control
    run=$(jget out.txt run_id)
    read -r layer head score control <<<"$(q i.db "select a.layer, a.head, a.value, b.value from head_metrics a
        join head_metrics b on b.run_id=a.run_id and b.layer=a.layer and b.head=a.head and b.metric='induction_control'
        where a.run_id=$run and a.metric='induction' order by a.value desc limit 1" | tr '|' ' ')"
    echo "  top induction head L${layer}H${head}: $score (control $control); $(tail -c 200 out.txt)"
    expect_eq "$layer" 1 "layer of the top induction head" || return 1
    py -c "import sys; sys.exit(0 if $score >= 0.5 and $control < 0.1 else 1)" ||
        bad "induction $score (control $control): want >= 0.5 and a control near chance" || return 1
    expect_eq "$(jget out.txt causal induction_heads_established)" True \
        "the causal check establishes it" || return 1
    # the targeted ablation costs far more than a random head's on average
    py -c "import json,sys; c=json.load(open('out.txt'))['causal']; sys.exit(0 if c['loss_delta_top_k'] > 2 * c['loss_delta_random_mean'] else 1)" ||
        bad "targeted vs random: $(jget out.txt causal)" || return 1
}

patterns_model_equals_maps() {
    hs patterns --model "$LLAMA" --data "$EVAL" "${SMALL[@]}" --db p.db --delim 3,7 --json --js-out js_model.csv \
        --sink-positions 3
    expect_rc 0 "patterns --model" || return 1
    local r1 r2
    r1=$(jget out.txt run_id)
    hs capture --model "$LLAMA" --data "$EVAL" "${SMALL[@]}" --out m.h5
    expect_rc 0 "capture for patterns" || return 1
    hs patterns --maps m.h5 --db p.db --delim 3,7 --json --js-out js_maps.csv --sink-positions 8
    expect_rc 0 "patterns --maps" || return 1
    # the Jensen-Shannon matrix from the forward equals the one from the capture
    py - js_model.csv js_maps.csv <<'EOF' || bad "JS matrices differ: $(cat js.txt)" || return 1
import csv, sys
a, b = (list(csv.reader(open(p))) for p in sys.argv[1:3])
assert a[0] == b[0] and len(a) == len(b) == len(a[0]), (a[0], b[0])
worst = max(abs(float(x) - float(y)) for ra, rb in zip(a[1:], b[1:]) for x, y in zip(ra[1:], rb[1:]))
open("js.txt", "w").write(f"max |diff| {worst}")
sys.exit(0 if worst < 1e-5 else 1)
EOF
    r2=$(jget out.txt run_id)
    expect_eq "$(q p.db "select count(*) from head_metrics where run_id=$r1")" 65 \
        "pattern rows (8 heads x 7, sink per head, sink_rate)" || return 1
    # SPEC §18's sinks from the maps in float64: alpha_0 per head (each
    # sequence's mean over its queries of the attention on position 0, then
    # over sequences), sink_rate the share of heads above --sink-epsilon
    py - m.h5 p.db "$r1" <<'EOF' || bad "sinks: $(cat sink.txt)" || return 1
import sqlite3, sys, h5py, numpy as np
f, db, run = h5py.File(sys.argv[1]), sqlite3.connect(sys.argv[2]), int(sys.argv[3])
got = {(l, h): (v, e) for l, h, v, e in db.execute(
    "select layer, head, value, stderr from head_metrics where run_id=? and metric='sink'", (run,))}
worst, alphas = 0.0, []
for name in sorted(k for k in f if k.startswith("layer_")):
    att = f[name]["attn"][()].astype(np.float64)          # [N, H, T, T]
    per_seq = att[:, :, :, 0].mean(axis=2)                # [N, H]
    for h, a0 in enumerate(per_seq.mean(axis=0)):
        se = per_seq[:, h].std(ddof=1) / np.sqrt(per_seq.shape[0])
        v, e = got[(int(f[name]["attn"].attrs["layer"]), h)]
        worst = max(worst, abs(v - a0), abs(e - se))
        alphas.append(a0)
rate = db.execute("select value, n from head_metrics where run_id=? and metric='sink_rate'", (run,)).fetchone()
want = sum(a > 0.3 for a in alphas) / len(alphas)
# --sink-positions: alpha_k per head for k < K, each sequence's mean of att[t, k] over
# t = k .. T-1, then over sequences (the forward's run K = 3, the maps' K = 8 = T)
rows = 0
for r, K in ((run, 3), (run + 1, 8)):
    got = {(l, h, k): (v, e, n) for l, h, k, v, e, n in db.execute(
        "select layer, head, position, value, stderr, n from position_metrics"
        " where run_id=? and metric='sink_alpha'", (r,))}
    rows += len(got)
    for name in sorted(k for k in f if k.startswith("layer_")):
        att = f[name]["attn"][()].astype(np.float64)
        for h in range(att.shape[1]):
            for k in range(K):
                per_seq = att[:, h, k:, k].mean(axis=1)
                v, e, n = got[(int(f[name]["attn"].attrs["layer"]), h, k)]
                se = per_seq.std(ddof=1) / np.sqrt(len(per_seq))
                worst = max(worst, abs(v - per_seq.mean()), abs(e - se), abs(n - len(per_seq)))
open("sink.txt", "w").write("max |diff| %g, sink_rate %r against %g of %d, %d sink_alpha rows"
                            % (worst, rate, want, len(alphas), rows))
sys.exit(0 if worst < 1e-5 and rate == (want, len(alphas)) and rows == 8 * 11 else 1)
EOF
    expect_eq "$(q p.db "select count(*) from position_metrics where head = -1")" 0 \
        "patterns' position rows are per head" || return 1
    expect_refused 2 patterns "--sink-positions 9: more positions than --seq-len 8" \
        --model "$LLAMA" --data "$EVAL" "${SMALL[@]}" --db e.db --sink-positions 9 || return 1
    expect_refused 2 patterns "option --sink-positions: '-1'" --model "$LLAMA" --data "$EVAL" "${SMALL[@]}" \
        --db e.db --sink-positions -1 || return 1
    # the threshold moves the rate: above every head's alpha_0, none
    hs patterns --model "$LLAMA" --data "$EVAL" "${SMALL[@]}" --db e.db --sink-epsilon 0.99 --json
    expect_rc 0 "patterns --sink-epsilon" && expect_eq "$(jget out.txt sink_rate)" 0 "sink_rate at 0.99" || return 1
    expect_refused 2 patterns "--sink-epsilon 1.5" --model "$LLAMA" --data "$EVAL" "${SMALL[@]}" \
        --db e.db --sink-epsilon 1.5 || return 1
    # --control adds the same statistics of a random-init model, and only them
    hs patterns --model "$LLAMA" --data "$EVAL" "${SMALL[@]}" --db c.db --control --json
    expect_rc 0 "patterns --control" || return 1
    expect_eq "$(q c.db "select count(*) from head_metrics where metric like '%_control'")" 65 "control rows" || return 1
    # (next_token is 0 under the causal mask and delim 0 without --delim, in both)
    expect_eq "$(q c.db "select count(*) from head_metrics a join head_metrics b on b.layer=a.layer and b.head=a.head
                         and b.metric=a.metric || '_control' where a.value != b.value
                         and a.metric not in ('next_token', 'delim', 'sink_rate')")" 48 \
        "controls differ from the model (6 statistics and sink, 8 heads each)" || return 1
    hs patterns --maps m.h5 --db c.db --control
    expect_rc 2 "--control with --maps" || return 1
    local worst
    worst=$(q p.db "select max(abs(a.value - b.value)) from head_metrics a join head_metrics b
                    on a.layer=b.layer and a.head=b.head and a.metric=b.metric
                    where a.run_id=$r1 and b.run_id=$r2")
    close "$worst" 0 1e-5 || bad "patterns from maps differ from the forward by $worst" || return 1
    expect_eq "$(q p.db "select count(*) from head_metrics where run_id=$r1 and metric='next_token' and value != 0")" 0 "causal next_token" || return 1
}

experiment_head_count() {
    long_setup || return 1
    local args=(experiment head-count --preset attn-only d_model=32 --data "$LONG_BIN" --heads 1,2,4
                --seeds 1,2 --steps 5 --batch 2 --seq-len 16 --threads 1 --json)
    hs "${args[@]}" --db e.db
    expect_rc 0 "experiment head-count" || return 1
    local run
    run=$(jget out.txt run_id)
    expect_eq "$(q e.db "select count(*) from head_metrics where run_id=$run and metric like 'val_loss_heads_%'")" 3 "val_loss rows" || return 1
    expect_eq "$(q e.db "select n from head_metrics where run_id=$run and metric='val_loss_heads_2'")" 2 "seeds per head count" || return 1
    expect_eq "$(q e.db "select count(distinct curve) from curves where run_id=$run")" 6 "one curve per run" || return 1
    expect_eq "$(q e.db "select count(*) from curves where run_id=$run and curve='train_loss_heads_4_seed_2'")" 5 "steps per curve" || return 1
    # deterministic: the same command gives the same numbers
    hs "${args[@]}" --db e2.db
    expect_rc 0 "experiment head-count again" || return 1
    expect_eq "$(q e2.db "select group_concat(value) from head_metrics where metric like 'val_loss%' order by metric")" \
        "$(q e.db "select group_concat(value) from head_metrics where metric like 'val_loss%' order by metric")" "repeat run" || return 1
    refuse 2 experiment "--heads 3" e3.db head-count --preset attn-only d_model=32 --data "$LONG_BIN" --db e3.db --heads 3 || return 1
    refuse 2 experiment "head-count" e3.db bogus --db e3.db || return 1
}

# head-norms: its rows and the run (the values are test_study's, against a
# plain loop), the largest head in --json, and a plot of the metric drawn
# from its descriptor alone.
head_norms_records() {
    hs head-norms --model "$GPT2" --data "$EVAL" --db n.db "${SMALL[@]}" --json
    expect_rc 0 "head-norms" || return 1
    # --control as patterns takes it (head-norms always has its control): the same rows
    hs head-norms --model "$GPT2" --data "$EVAL" --db nc.db "${SMALL[@]}" --control --json
    expect_rc 0 "head-norms --control" || return 1
    expect_eq "$(q nc.db "select count(*) from head_metrics where metric like '%_control'")" \
        "$(q n.db "select count(*) from head_metrics where metric like '%_control'")" \
        "head-norms --control's rows" || return 1
    hs head-norms --model "$GPT2" --data "$EVAL" --db n.db "${SMALL[@]}" --json
    local id
    id=$(jget out.txt run_id) || bad "head-norms --json has no run_id: $OUT" || return 1
    expect_eq "$(jget out.txt sequences)" 4 "--json sequences" || return 1
    expect_eq "$(q n.db "select kind||' '||status from runs where run_id=$id")" "head-norms complete" "run kind and status" || return 1
    expect_eq "$(q n.db "select metric||':'||count(*)||':'||min(n) from head_metrics where run_id=$id group by metric order by metric" | tr '\n' ' ')" \
        "head_output_norm:8:4 head_output_norm_control:8:4 " "rows per metric (count:min n)" || return 1
    expect_eq "$(jget out.txt largest | tr -d '{}"' | sed 's/layer://; s/,head:/,/')" \
        "$(q n.db "select layer||','||head from head_metrics where run_id=$id and metric='head_output_norm' order by value desc limit 1")" \
        "--json largest" || return 1
    hs plot scores --db n.db --run "$id" --metric head_output_norm --out n.svg
    expect_rc 0 "plot scores --metric head_output_norm" || return 1
    grep -q 'ctrl\|control\|head_output_norm\|output norm' n.svg || bad "the figure names neither the metric nor its control" || return 1
}

# The slow tier (scripts/test --slow, HEADSCOPE_SLOW=1): the trained-induction
# study (4000 training steps: ~40 s in the float build), a run killed and
# resumed and four concurrent writers (~30 s together). experiment_head_count
# trains twelve 5-step models in ~2 s (4 s under ASan) and stays in the fast tier.
SLOW_CHECKS="trained_induction resume_after_kill concurrent_writers"
run_checks ablate_records ablate_fast_equals_naive resume_after_kill concurrent_writers importance_records head_norms_records \
    prune_curve prune_defaults structural_out bad_input plot_scores progress_on_terminal report_page induction_records trained_induction patterns_model_equals_maps \
    experiment_head_count
