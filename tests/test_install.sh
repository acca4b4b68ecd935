#!/usr/bin/env bash
# Installation: `cmake --install` of the build that made HEADSCOPE_BINARY into a
# scratch prefix, then the README's C example (examples/head_entropy.c) built
# against the installed library with pkg-config alone, and its entropy checked
# against `headscope patterns` on the same tokens; the installed command finds
# its installed gnuplot scripts.
#
# usage: tests/test_install.sh HEADSCOPE_BINARY FIXTURE_DIR
set -u

SUITE=install
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
SRC=$(cd "$FIX/../.." && pwd)
BUILD=$(dirname "$HS")
MODEL="$FIX/models/gpt2_tiny" # vocabulary 48, n_ctx 16: the text below is 15 bytes in 33..47

installed_example() {
    cmake --install "$BUILD" --prefix "$TMP/prefix" >install.log 2>&1 || bad "cmake --install: $(tail -c 300 install.log)" || return 1
    local pc="$TMP/prefix/lib/pkgconfig"
    [ -d "$pc" ] || pc=$(dirname "$(find "$TMP/prefix" -name headscope.pc | head -1)")
    # the prefix is found from the .pc file's own place: move it, and it still works
    mv "$TMP/prefix" "$TMP/moved"
    pc=${pc/$TMP\/prefix/$TMP\/moved}
    local flags
    flags=$(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs headscope) || bad "pkg-config --cflags --libs headscope failed" || return 1
    # shellcheck disable=SC2086
    cc "$SRC/examples/head_entropy.c" $flags -o head_entropy 2>cc.log || bad "example does not build: $(head -c 400 cc.log)" || return 1
    local text='!#$%&()*+,-./!#' T=15
    ./head_entropy "$MODEL" 1 1 "$text" >ex.txt 2>&1 || bad "example failed: $(cat ex.txt)" || return 1
    local got
    got=$(sed -n 's/.*mean attention entropy \([0-9.]*\) nats.*/\1/p' ex.txt)
    [ -n "$got" ] || bad "no entropy in: $(cat ex.txt)" || return 1
    expect_grep "$(cat ex.txt)" "has no tokenizer: the text's bytes are its tokens" "the example says so" ||
        return 1
    # a byte the vocabulary does not hold (48 ids) is refused, not wrapped around
    ! ./head_entropy "$MODEL" 1 1 "xyz" >bad.txt 2>&1 || bad "a byte beyond the vocabulary ran" || return 1
    expect_grep "$(cat bad.txt)" "byte 120 of the text is no id of the model's vocabulary of 48" \
        "the refusal" || return 1
    # the same tokens (+1 for the target) through `patterns`
    printf '%s!' "$text" >text.txt
    hs tokens --in text.txt --out t.bin
    expect_rc 0 "tokens" || return 1
    "$TMP/moved/bin/headscope" patterns --model "$MODEL" --data t.bin --db p.db --batch 1 --seq-len $T --json >out.txt 2>err.txt
    RC=$?
    expect_rc 0 "installed headscope patterns" || return 1
    local want
    want=$(sqlite3 p.db "select value from head_metrics where metric='entropy' and layer=1 and head=1")
    close "$got" "$want" 1e-4 || bad "example entropy $got, patterns $want" || return 1
    # the installed command draws with its installed scripts
    HEADSCOPE_SCRIPTS= "$TMP/moved/bin/headscope" plot scores --db p.db --metric entropy --out e.png >out.txt 2>err.txt
    RC=$?
    expect_rc 0 "installed headscope plot" || return 1
    png_ok e.png || return 1
}

# the man pages, generated from the command records, are installed: `man
# headscope-patch` shows patch's help
installed_man_pages() {
    cmake --install "$BUILD" --prefix "$TMP/mprefix" >install.log 2>&1 ||
        bad "cmake --install: $(tail -c 300 install.log)" || return 1
    local dir
    dir=$(dirname "$(find "$TMP/mprefix" -name headscope-patch.1 | head -1)")
    [ -f "$dir/headscope-patch.1" ] || bad "no headscope-patch.1 installed" || return 1
    MANWIDTH=100 man -M "$(dirname "$dir")" headscope-patch >man.txt 2>err.txt
    RC=$?
    expect_rc 0 "man headscope-patch" || return 1
    hs help patch
    expect_grep "$(cat man.txt)" "$(printf '%s' "$OUT" | head -n 1)" "man page's usage" || return 1
    expect_grep "$(cat man.txt)" "--noising" "man page's options" || return 1
    [ -f "$dir/headscope.1" ] || bad "no headscope.1 installed"
}

run_checks installed_example installed_man_pages
