#!/usr/bin/env bash
# Hostile strings and faults: names that try to break out of gnuplot's quoted
# strings (--out, a metric name stored in an index, a map file's path shown as
# a title, a report folder) are drawn as data and never run; a command that
# cannot write (a file size limit) fails with one line and exit 1, its index
# stays sound and no run is left `running`.
#
# usage: tests/test_faults.sh HEADSCOPE_BINARY FIXTURE_DIR
# Prints "ok NAME" or "FAIL NAME: reason" per check, then "N passed, M failed";
# exits 1 if any check failed. Needs gnuplot, sqlite3 and /usr/bin/python3.
set -u

SUITE=faults
TESTS=$(cd "$(dirname "$0")" && pwd) # before lib.sh moves to the scratch directory
. "$TESTS/lib.sh"
GPT2="$FIX/models/gpt2_tiny"
EVAL="$GPT2/eval.bin"
command -v gnuplot >/dev/null || { echo "gnuplot is required" >&2; exit 2; }
command -v sqlite3 >/dev/null || { echo "sqlite3 is required" >&2; exit 2; }
export HEADSCOPE_SCRIPTS="${HEADSCOPE_SCRIPTS:-$TESTS/../scripts}"

SMALL=(--batch 2 --seq-len 8)
# A string that runs `touch X` if pasted into gnuplot code between single quotes.
EVIL="a'; system('touch X'); x='"
EVIL2='b"; system("touch X"); x="'

no_x() { [ ! -e X ] || bad "$1: gnuplot ran the injected command (X exists)"; }

# ---- gnuplot receives strings as data ---------------------------------------------

gnuplot_out() {
    hs capture --model "$GPT2" --data "$EVAL" --out m.h5 "${SMALL[@]}" --max-batches 1
    expect_rc 0 "capture" || return 1
    local name
    local odd1="q''\\'.png" odd2="''''"'`touch X`@fmt.png'
    for name in "$EVIL.png" "$EVIL2.svg" "$odd1" "$odd2"; do
        hs plot map --maps m.h5 --out "$name"
        no_x "plot map --out $name" || return 1
        expect_rc 0 "plot map --out $name" || return 1
        expect_file "$name" || return 1
    done
    hs plot map --maps m.h5 --out "$(printf 'n\nl.png')"
    no_x "plot map --out with a newline" || return 1
    expect_rc 1 "plot map --out with a newline" || return 1
    [ "$(wc -l <err.txt)" -eq 1 ] || bad "not one line: $(cat err.txt)" || return 1
    # the map file's path is the grid's title
    cp m.h5 "$EVIL.h5"
    hs plot grid --maps "$EVIL.h5" --out g.svg
    no_x "plot grid --maps $EVIL.h5" || return 1
    expect_rc 0 "plot grid" || return 1
    expect_file g.svg || return 1
    # the temporary folder's path reaches an eval'd string: a hostile TMPDIR is not used
    mkdir -p "$EVIL2"
    TMPDIR="$PWD/$EVIL2" hs plot map --maps m.h5 --out t.png
    no_x "plot map under TMPDIR=$EVIL2" || return 1
    expect_rc 0 "plot map under a hostile TMPDIR" || return 1
}

gnuplot_index() {
    hs induction --model "$GPT2" --db r.db --seq-len 6 --samples 8
    expect_rc 0 "induction" || return 1
    # a metric and a curve whose names are hostile, stored in the index
    local m1=${EVIL//\'/\'\'} m2=${EVIL2//\'/\'\'}
    sqlite3 r.db "INSERT INTO head_metrics(run_id, layer, head, metric, value, stderr, n)
                  SELECT run_id, layer, head, '$m1', value, stderr, n
                  FROM head_metrics WHERE metric='induction';
                  INSERT INTO head_metrics(run_id, layer, head, metric, value, stderr, n)
                  SELECT run_id, layer, head, '$m2', value, stderr, n
                  FROM head_metrics WHERE metric='induction';
                  INSERT INTO curves SELECT run_id, '$m1', 1, 1, 0.5 FROM runs;
                  INSERT INTO curves SELECT run_id, '$m1', 2, 2, 0.7 FROM runs;" ||
        bad "sqlite3 insert failed" || return 1
    hs plot scores --db r.db --metric "$EVIL" --out s1.svg
    no_x "plot scores --metric $EVIL" || return 1
    expect_rc 0 "plot scores --metric $EVIL" || return 1
    hs plot scores --db r.db --metric "$EVIL2" --out s2.svg
    no_x "plot scores --metric $EVIL2" || return 1
    expect_rc 0 "plot scores --metric $EVIL2" || return 1
    hs plot curve --db r.db --curve "$EVIL" --out c.svg
    no_x "plot curve --curve $EVIL" || return 1
    expect_rc 0 "plot curve --curve $EVIL" || return 1
    cp r.db "$EVIL.db"
    hs plot scores --db "$EVIL.db" --metric induction --out s3.svg
    no_x "plot scores --db $EVIL.db" || return 1
    expect_rc 0 "plot scores --db $EVIL.db" || return 1
    hs report --db r.db --out "$EVIL"
    no_x "report --out $EVIL" || return 1
    expect_rc 0 "report --out $EVIL" || return 1
    expect_file "$EVIL/index.html" || return 1
}

# ---- a file size limit: writes fail with EFBIG ----------------------------------------

# limited KB ARGS...: the command under `ulimit -f KB` (SIGXFSZ ignored, so a
# write past the limit fails instead of killing); like hs.
limited() {
    local kb=$1
    shift
    (trap '' XFSZ; ulimit -f "$kb"; exec "$HS" "$@") >out.txt 2>err.txt
    RC=$?
    OUT=$(cat out.txt)
}
# after_fault WHAT DB: exit 0, or exit 1 with one line on stderr; DB sound, no
# run left `running`, no temp file, no artifact claiming a file it lacks.
after_fault() {
    local what=$1 db=$2
    [ "$RC" -eq 0 ] || [ "$RC" -eq 1 ] || bad "$what: exit $RC: $(head -c 300 err.txt)" || return 1
    if [ "$RC" -eq 1 ]; then
        FAULTS=$((FAULTS + 1))
        # progress lines (train's validations) aside, one line: the error, last
        [ "$(grep -c '^headscope: ' err.txt)" -eq 1 ] && tail -n1 err.txt | grep -q '^headscope: ' ||
            bad "$what: not one error line: $(tail -c 600 err.txt)" || return 1
    elif grep -q '^headscope: ' err.txt; then
        bad "$what: exit 0 with: $(grep '^headscope: ' err.txt | head -c 300)"; return 1
    fi
    [ -e "$db" ] || return 0
    expect_eq "$(sqlite3 "$db" 'PRAGMA integrity_check')" ok "$what: integrity_check" || return 1
    # an index whose creation failed holds no table
    [ "$(sqlite3 "$db" "SELECT count(*) FROM sqlite_master WHERE name='runs'")" = 1 ] || return 0
    if [ "$RC" -eq 1 ]; then
        expect_eq "$(sqlite3 "$db" "SELECT count(*) FROM runs WHERE status='complete'")" 0 \
            "$what: a failed command's run marked complete" || return 1
    fi
    if [ "$(sqlite3 "$db" "SELECT count(*) FROM runs WHERE status='running'")" != 0 ]; then
        # the final status could not be written either: the next open fails the run
        REAPED=$((REAPED + 1))
        "$HS" induction --model "$GPT2" --db "$db" --seq-len 6 --samples 2 >/dev/null 2>&1 ||
            bad "$what: a later command on $db failed" || return 1
    fi
    expect_eq "$(sqlite3 "$db" "SELECT count(*) FROM runs WHERE status='running'")" 0 \
        "$what: runs left running" || return 1
    local p
    while IFS= read -r p; do
        [ -z "$p" ] || [ -s "$p" ] || bad "$what: artifact $p claimed complete but missing" || return 1
    done < <(sqlite3 "$db" 'SELECT path FROM artifacts WHERE complete=1')
    if compgen -G '*.tmp.*' >/dev/null || compgen -G 'm/*.tmp*' >/dev/null; then
        bad "$what: temp file left: $(ls -- *.tmp.* m/*.tmp* 2>/dev/null)"; return 1
    fi
}

FAULTS=0 REAPED=0
disk_full() {
    local kb
    for kb in 4 24 40 64 96; do
        rm -rf r.db* m.h5 m
        limited "$kb" ablate --model "$GPT2" --data "$EVAL" --db r.db "${SMALL[@]}"
        after_fault "ablate --db under ulimit -f $kb" r.db || return 1
        rm -rf r.db* m.h5 m
        limited "$kb" train --preset attn-only n_layer=1 n_head=2 d_model=16 n_ctx=16 --data "$EVAL" \
            --val "$EVAL" --out m --steps 200 --batch 1 --seq-len 8 --val-every 20 --db r.db
        after_fault "train --db under ulimit -f $kb" r.db || return 1
        rm -rf r.db* m.h5 m
        limited "$kb" capture --model "$GPT2" --data "$EVAL" --out m.h5 "${SMALL[@]}" --db r.db
        after_fault "capture --db under ulimit -f $kb" r.db || return 1
        done
    [ "$FAULTS" -gt 0 ] || bad "no command failed: the limits are too large" || return 1
    echo "disk_full: $FAULTS commands failed on the file size limit, $REAPED runs failed at the next open" >&2
}

# ---- runs whose process is gone; the schema migration --------------------------------

has_running() { [ "$(sqlite3 r.db "SELECT count(*) FROM runs WHERE status='running'" 2>/dev/null)" = 1 ]; }
orphan_run() {
    start_bg "$HS" train --preset attn-only n_layer=1 n_head=2 d_model=16 n_ctx=16 --data "$EVAL" \
        --out m --steps 100000 --batch 1 --seq-len 8 --db r.db
    wait_until 300 "the train run in r.db" has_running || return 1
    stop_bg KILL || return 1
    expect_eq "$(sqlite3 r.db "SELECT status FROM runs")" running "the killed run, before" || return 1
    hs induction --model "$GPT2" --db r.db --seq-len 6 --samples 2
    expect_rc 0 "induction on r.db" || return 1
    expect_eq "$(sqlite3 r.db "SELECT group_concat(kind||' '||status, ', ') FROM runs")" \
        "train failed, induction complete" "the killed run after the next open" || return 1
    # an index of schema version 1 gains runs.pid and runs.host, its rows kept (the
    # schema exactly as headscope wrote it: the open refuses any other)
    sqlite3 old.db "CREATE TABLE runs(run_id INTEGER PRIMARY KEY, kind TEXT NOT NULL, model_path TEXT, model_sha256 TEXT, data_path TEXT, data_sha256 TEXT, args TEXT, started_at TEXT, finished_at TEXT, status TEXT NOT NULL CHECK(status IN ('running','complete','failed')));
        CREATE TABLE head_metrics(run_id INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE, layer INTEGER NOT NULL, head INTEGER NOT NULL, metric TEXT NOT NULL, value REAL, stderr REAL, n INTEGER, PRIMARY KEY(run_id, layer, head, metric));
        CREATE TABLE curves(run_id INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE, curve TEXT NOT NULL, step INTEGER, x REAL, y REAL);
        CREATE INDEX curves_run ON curves(run_id, curve, step);
        CREATE TABLE artifacts(run_id INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE, path TEXT NOT NULL, sha256 TEXT, bytes INTEGER, complete INTEGER);
        INSERT INTO runs(kind, status) VALUES('ablate', 'complete'); PRAGMA user_version=1;" ||
        bad "could not make old.db" || return 1
    hs induction --model "$GPT2" --db old.db --seq-len 6 --samples 2
    expect_rc 0 "induction on a version 1 index" || return 1
    expect_eq "$(sqlite3 old.db 'PRAGMA user_version')" 6 "user_version after the migration" || return 1
    expect_eq "$(sqlite3 old.db "SELECT count(*) FROM sqlite_master WHERE name IN ('position_metrics', 'head_pair_metrics')")" \
        2 "SPEC §11 tables after the migration" || return 1
    expect_eq "$(sqlite3 old.db "SELECT count(*) FROM sqlite_master WHERE name IN ('feature_metrics', 'feature_examples', 'feature_dfa')")" \
        3 "SPEC §19 tables after the migration" || return 1
    expect_eq "$(sqlite3 old.db "SELECT group_concat(kind||' '||status||' '||(pid IS NOT NULL), ', ') FROM runs")" \
        "ablate complete 0, induction complete 1" "runs after the migration" || return 1
}

# ---- an I/O error at every write of the index ------------------------------------------

# rows DB RUN: the run's head metrics, one per line, as printed numbers.
rows() { sqlite3 "$1" "SELECT layer, head, metric, printf('%.9g %.9g %d', value, stderr, n)
                        FROM head_metrics WHERE run_id=$2 ORDER BY layer, head, metric"; }

# The index's writes of a short ablate fail from the N-th on (tests/fault_write.c,
# LD_PRELOAD), for every N (FAULT_STEP=K: every K-th; 4 s in all): the
# command fails with one line (or, when only the checkpoint at close failed,
# succeeds with everything in the WAL), the index stays sound, no run stays `running` past the next open, and
# `ablate --resume` finishes the run with the numbers of an uninterrupted one.
write_faults() {
    if under_asan; then echo "write_faults: skipped under ASan (LD_PRELOAD)" >&2; return 0; fi
    command -v cc >/dev/null || { echo "write_faults: skipped: no C compiler" >&2; return 0; }
    cc -shared -fPIC -O1 -o fault_write.so "$TESTS/fault_write.c" -ldl ||
        bad "cannot build fault_write.so" || return 1
    local abl=(ablate --model "$GPT2" --data "$EVAL" "${SMALL[@]}")
    HS_FAULT_COUNT=count.txt LD_PRELOAD=$PWD/fault_write.so "$HS" "${abl[@]}" --db ref.db >/dev/null 2>&1 ||
        bad "ablate under the counting shim failed" || return 1
    local total ref step=${FAULT_STEP:-1} n injected=0 corrupt=0 running=0 claims=0 stuck=0 id
    total=$(cat count.txt)
    [ "$total" -gt 10 ] || bad "only $total writes counted" || return 1
    ref=$(rows ref.db 1)
    [ -n "$ref" ] || bad "no rows in ref.db" || return 1
    for ((n = 1; n <= total; n += step)); do
        rm -f f.db f.db-wal f.db-shm
        HS_FAULT_AT=$n LD_PRELOAD=$PWD/fault_write.so "$HS" "${abl[@]}" --db f.db >out.txt 2>err.txt
        RC=$?
        injected=$((injected + 1))
        if [ "$RC" -eq 0 ]; then # only the checkpoint at close failed: the WAL holds all
            expect_eq "$(sqlite3 f.db 'PRAGMA integrity_check')" ok "N=$n: integrity" || return 1
            expect_eq "$(sqlite3 f.db "SELECT status FROM runs")" complete "N=$n: exit 0" || return 1
            [ "$(rows f.db 1)" = "$ref" ] || bad "N=$n: exit 0 with other numbers" || return 1
            continue
        fi
        [ "$RC" -eq 1 ] || bad "N=$n: exit $RC, expected 1 or 0" || return 1
        [ "$(wc -l <err.txt)" -eq 1 ] || bad "N=$n: not one line: $(head -c 400 err.txt)" || return 1
        [ -e f.db ] || continue
        [ "$(sqlite3 f.db 'PRAGMA integrity_check' 2>&1)" = ok ] || { corrupt=$((corrupt + 1)); continue; }
        id=$(sqlite3 f.db "SELECT max(run_id) FROM runs" 2>/dev/null)
        claims=$((claims + $(sqlite3 f.db "SELECT count(*) FROM runs WHERE status='complete'" 2>/dev/null || echo 0)))
        if [ "$(sqlite3 f.db "SELECT count(*) FROM runs WHERE status='running'" 2>/dev/null)" != 0 ]; then
            stuck=$((stuck + 1)) # its final write failed too: the next open fails it
            "$HS" induction --model "$GPT2" --db f.db --seq-len 6 --samples 2 >/dev/null 2>&1 ||
                bad "N=$n: a later command on f.db failed" || return 1
            running=$((running + $(sqlite3 f.db "SELECT count(*) FROM runs WHERE status='running'")))
        fi
        if [ -n "$id" ]; then
            hs "${abl[@]}" --db f.db --resume "$id"
        else # the run itself could not be recorded: the index is empty
            hs "${abl[@]}" --db f.db
            id=$(sqlite3 f.db "SELECT max(run_id) FROM runs")
        fi
        expect_rc 0 "N=$n: ablate --resume $id" || return 1
        expect_eq "$(sqlite3 f.db 'PRAGMA integrity_check')" ok "N=$n: integrity after the resume" || return 1
        [ "$(rows f.db "$id")" = "$ref" ] || bad "N=$n: the resumed run's numbers differ" || return 1
    done
    echo "write_faults: $total writes, $injected injected failures, $corrupt corrupt indexes," \
         "$running runs left running ($stuck failed at the next open), $claims failed runs" \
         "claiming complete" >&2
    [ "$corrupt" -eq 0 ] && [ "$running" -eq 0 ] && [ "$claims" -eq 0 ] ||
        bad "$corrupt corrupt, $running running, $claims complete" || return 1
}
# The slow tier (HEADSCOPE_SLOW=1, test_faults_slow): the write failure
# injected at every one of a run's writes (~40 s), and the full disk of every
# writer (~4 s).
SLOW_CHECKS="write_faults disk_full"
run_checks gnuplot_out gnuplot_index disk_full orphan_run write_faults
