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
    sqlite3 r.db "INSERT INTO head_metrics SELECT run_id, layer, head, '$m1', value, stderr, n
                  FROM head_metrics WHERE metric='induction';
                  INSERT INTO head_metrics SELECT run_id, layer, head, '$m2', value, stderr, n
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

run_checks gnuplot_out gnuplot_index
