#!/usr/bin/env bash
# The architecture the code promises (SPEC §1, STYLE.md), checked on the
# source tree: commands are plumbing (no function in cli/ over 80 lines, no
# command body over 40 besides its option table, cli/ at most 3400 lines), the
# index's SQL lives in store/ only, one Welford implementation and one head
# limit, and no room includes a header of a room above it (ROOMS below),
# which a planted include shows the check catching.
#
# usage: tests/test_architecture.sh SOURCE_ROOT
# Prints "ok NAME" or "FAIL NAME: reason" per check, then "N passed, M failed".
set -u
[ $# -eq 1 ] || { echo "usage: $0 SOURCE_ROOT" >&2; exit 2; }
ROOT=$(cd "$1" && pwd) || exit 2
cd "$ROOT" || exit 2
PASSED=0
FAILED=0
REASON=""
bad() { REASON="$*"; return 1; }

# A function body runs from a '{' in column 0 to the next '}' in column 0.
cli_functions_short() {
    local long
    long=$(awk '/^\{/ { start = FNR; name = prev }
                /^\}/ && start { if (FNR - start + 1 > 80) printf "%s:%d %s; ", FILENAME, start, name; start = 0 }
                { prev = $0 }' cli/*.c)
    [ -z "$long" ] || bad "over 80 lines: $long"
}

sql_only_in_store() {
    local hits
    hits=$(grep -rln 'sqlite3' base/ model/ tokenizer/ capture/ analyze/ api/ cli/ 2>/dev/null | tr '\n' ' ')
    [ -z "$hits" ] || bad "SQLite used outside store/: $hits"
}

one_welford() {
    local hits
    hits=$(grep -rln 'sumsq\|sum_sq' analyze/ api/ cli/ | tr '\n' ' ')
    [ -z "$hits" ] || bad "a sum of squares for a variance in: $hits (use analyze/stats.h)" || return
    hits=$(grep -rlnE '(^|[^A-Za-z0-9_])m2 \+=' base/ model/ capture/ store/ analyze/ cli/ | grep -v '^analyze/stats\.[ch]$' | tr '\n' ' ')
    [ -z "$hits" ] || bad "a second Welford update in: $hits"
}

one_head_limit() {
    local hits
    hits=$(grep -rn 'HS_SCORE_MAX_HEADS\|HS_IMP_MAX_HEADS\|HS_PAT_MAX_HEADS\|HS_MAX_HEADS_ON\|heads\[1024\]' \
        base/ model/ capture/ store/ analyze/ api/ cli/ | head -3)
    [ -z "$hits" ] || bad "another head limit than HS_MAX_HEADS: $hits"
}

# The rooms from below: base/ (errors, files, memory, JSON, UTF-8, dtypes,
# the RNG) under everything; model/ as four rooms (kernels/: free functions
# over arrays; the network itself; families/: config.json and each family's
# layout; checkpoint/: the files); then the folders of SPEC §1. api/ is the
# flat interface of the shared library, which the command does not use.
ROOMS=(base model/kernels model model/families model/checkpoint tokenizer capture store analyze
       render api cli)

# Each header belongs to the room it lies in; a file may include headers of
# its own room and of the rooms below it.
layering() {
    local owners dup bad_inc
    # "header room rank" for every header of every room
    owners=$(for i in "${!ROOMS[@]}"; do
                 for f in "${ROOMS[$i]}"/*.h; do
                     [ -e "$f" ] && printf '%s %s %d\n' "${f##*/}" "${ROOMS[$i]}" "$i"
                 done
             done)
    dup=$(awk '$1 in room { print "header " $1 " in both " room[$1] "/ and " $2 "/"; exit }
               { room[$1] = $2 }' <<<"$owners")
    [ -z "$dup" ] || bad "$dup" || return
    # every quoted include of the tree in one pass, against its owner's rank
    bad_inc=$(for i in "${ROOMS[@]}"; do printf '%s\n' "$i"/*.[ch]; done |
        xargs awk -v owners="$owners" -v rooms="${ROOMS[*]}" '
            BEGIN {
                n = split(owners, line, "\n")
                for (i = 1; i <= n; i++) { split(line[i], w, " "); own[w[1]] = w[2] }
                n = split(rooms, r, " ")
                for (i = 1; i <= n; i++) rank[r[i]] = i
            }
            match($0, /^#include "[^"]*"/) {
                h = substr($0, 11, RLENGTH - 11)
                if (!(h in own)) next
                room = FILENAME; sub(/\/[^\/]*$/, "", room)
                if (rank[own[h]] > rank[room]) printf "%s includes %s/%s; ", FILENAME, own[h], h
            }')
    [ -z "$bad_inc" ] || bad "$bad_inc"
}

# The layering check itself fails on an upward include: planted in a copy of
# the rooms (base/ reaching the network, a kernel reaching a family, the
# network reaching the checkpoint reader), each copy must be refused.
layering_catches_upward_include() {
    local tmp plant got
    tmp=$(mktemp -d) || return
    (cd "$ROOT" && tar cf - "${ROOMS[@]}") | (cd "$tmp" && tar xf -)
    for plant in 'base/common.c transformer.h' 'model/kernels/gemm.c family.h' \
                 'model/transformer.c checkpoint.h' 'model/families/family.c tokenizer.h'; do
        set -- $plant
        printf '#include "%s"\n' "$2" >>"$tmp/$1"
        got=$(cd "$tmp" && REASON="" && layering && echo passed)
        cp "$ROOT/$1" "$tmp/$1" # the plant removed: the next one alone
        [ "$got" != passed ] || { rm -rf "$tmp"; bad "a planted include of $2 in $1 passed"; return; }
    done
    rm -rf "$tmp"
}

# No include circle among base/'s and model/'s modules (a module: NAME.c
# with NAME.h), inside a room or across: each can be read, built and tested
# on the ones below it.
no_model_circles() {
    local loop
    loop=$(awk 'FNR == 1 { m = FILENAME; sub(/.*\//, "", m); sub(/\.[ch]$/, "", m) }
                match($0, /^#include "[^"]*\.h"/) {
                    h = substr($0, 11, RLENGTH - 13)
                    if (h != m) print m, h
                }' base/*.[ch] model/*.[ch] model/*/*.[ch] |
           tsort 2>&1 >/dev/null | sed -n 's/^tsort: \([a-z0-9_]*\)$/\1/p' | tr '\n' ' ')
    [ -z "$loop" ] || bad "an include circle through: $loop"
}

# The command is plumbing over the library: no SQLite, hashing or index
# call in cli/ (runs open through analyze/run.h, figures and reports read
# the index through render/).
no_index_in_cli() {
    local hits
    hits=$(grep -nE 'sqlite3_|hs_sha256|sha256\.h|hs_index_|"index\.h"|hs_study_record' cli/*.c cli/*.h |
        head -5)
    [ -z "$hits" ] || bad "cli/ calls the index or hashes: $hits"
}

# A metric's name is spelled once, in analyze/metrics.c: the figures, the
# report and the commands name it through its descriptor (HS_METRIC(...)).
# A command record's .name (a command called like a metric) is not a use.
no_metric_literals() {
    local names hits="" n
    names=$(sed -n 's/^ *\[HS_M_[A-Z0-9_]*\] = { "\([a-z0-9_]*\)".*/\1/p' analyze/metrics.c)
    [ -n "$names" ] || bad "no metric names found in analyze/metrics.c" || return
    hits=$(printf '"%s"\n' $names | grep -nF -f - cli/*.c render/*.c api/*.c | grep -v '\.name = "' |
        head -5)
    [ -z "$hits" ] || bad "metric names spelled outside analyze/metrics.c: $hits"
}

# cli/ holds parsing and printing only.
cli_is_small() {
    local total
    total=$(cat cli/*.c | wc -l)
    [ "$total" -le 3400 ] || bad "cli/*.c is $total lines (at most 3400)"
}

# A command is its option table and a short body over the study driver
# (cli_study_run) or the library: at most 40 lines besides the table.
command_bodies_short() {
    local long
    long=$(awk '/^(static )?int (cmd_|cli_experiment)[a-z_]*\(int argc, char \*\*argv\)$/ {
                    start = FNR; name = $0; table = 0; intable = 0 }
                start && /^\{/ { open = FNR }
                start && /opt o\[\] = \{/ { intable = 1 }
                start && intable { table++ }
                start && intable && /^    \};/ { intable = 0 }
                start && /^\}/ { if (FNR - open - 1 - table > 40)
                                     printf "%s:%d (%d lines); ", FILENAME, start, FNR - open - 1 - table
                                 start = 0 }' cli/*.c)
    [ -z "$long" ] || bad "command bodies over 40 lines besides the option table: $long"
}

# Output files are created exclusively under unpredictable names
# (hs_tmp_create / hs_tmp_fopen, and hs_plot_file in a private folder):
# nothing opens a predictable name for writing, which a planted link would
# redirect. The one H5Fcreate truncates the exclusive temporary it was
# handed (store/maps_write.c).
no_predictable_writes() {
    local hits
    hits=$(grep -nE 'fopen\([^)]*"[wa]b?"|"%s\.tmp|\.tmp\.%d"|H5Fcreate' \
        base/*.c model/*.c model/*/*.c tokenizer/*.c capture/*.c store/*.c analyze/*.c render/*.c \
        api/*.c cli/*.c |
        grep -v '^store/maps_write\.c:[0-9]*: *w->file = H5Fcreate(w->tmp,' |
        grep -v '^base/common\.c:[0-9]*:.*XXXXXX' | head -5)
    [ -z "$hits" ] || bad "a predictable name opened for writing: $hits"
}

for check in cli_functions_short sql_only_in_store one_welford one_head_limit layering \
    layering_catches_upward_include no_model_circles no_index_in_cli command_bodies_short no_metric_literals cli_is_small no_predictable_writes; do
    REASON=""
    if "$check"; then
        echo "ok $check"; PASSED=$((PASSED + 1))
    else
        echo "FAIL $check: $REASON"; FAILED=$((FAILED + 1))
    fi
done
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
