#!/usr/bin/env bash
# End-to-end checks of what a newcomer meets first: OpenMP threads that wait
# passively by default, KEY=VALUE overrides in any order, what scripts/setup
# installs, and a .gitignore for what the documented commands write.
#
# usage: tests/test_newcomer.sh HEADSCOPE_BINARY FIXTURE_DIR
# Prints "ok NAME" or "FAIL NAME: reason" per check, then "N passed, M failed";
# exits 1 if any check failed.
set -u

SUITE=newcomer
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/tests/lib.sh"

# ---- helpers -------------------------------------------------------------------

# display VAR ARGS...: run the binary with OMP_DISPLAY_ENV=verbose (libgomp
# prints its settings to stderr as it starts, once per program image) and
# print the value of libgomp's VAR in the last image, the one that ran.
display() {
    local var=$1
    shift
    env OMP_DISPLAY_ENV=verbose "$@" "$HS" version 2>display.txt >/dev/null
    grep -E "^ *$var = " display.txt | tail -n 1 | sed -E "s/.*= '?([^']*)'?.*/\1/"
}


# config_of DIR PRESET KEY=VALUE...: train one step and leave DIR/config.json.
config_of() {
    local dir=$1 preset=$2
    shift 2
    shard text 400 || return 1
    hs train --preset "$preset" "$@" --data text.bin --out "$dir" --steps 1 --batch 2 \
        --seq-len 16 --threads 1
    expect_rc 0 "train --preset $preset $*" || return 1
    expect_file "$dir/config.json"
}

# ---- 1. threads that wait passively ----------------------------------------------

# libgomp reads OMP_WAIT_POLICY before main(); headscope must still end up
# with spin count 0 (passive) when the user set nothing. Not a timing test:
# libgomp reports the setting it runs with.
passive_by_default() {
    local spin policy
    spin=$(display GOMP_SPINCOUNT env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT)
    policy=$(display OMP_WAIT_POLICY env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT)
    [ -n "$spin" ] || bad "no GOMP_SPINCOUNT in OMP_DISPLAY_ENV output: $(head -c 300 display.txt)" ||
        return 1
    expect_eq "$spin" 0 "GOMP_SPINCOUNT with OMP_WAIT_POLICY unset" || return 1
    expect_eq "$policy" PASSIVE "OMP_WAIT_POLICY with nothing set" || return 1
}

# A policy the user chose is kept, and the program then runs once, as is.
user_policy_respected() {
    local policy images
    policy=$(display OMP_WAIT_POLICY env OMP_WAIT_POLICY=active)
    expect_eq "$policy" ACTIVE "OMP_WAIT_POLICY=active" || return 1
    images=$(grep -c "OPENMP DISPLAY ENVIRONMENT BEGIN" display.txt)
    expect_eq "$images" 1 "program images started with OMP_WAIT_POLICY=active" || return 1
    [ "$(display GOMP_SPINCOUNT env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=1234)" = 1234 ] ||
        bad "GOMP_SPINCOUNT=1234 was not kept" || return 1
}

# Re-executing keeps the arguments and standard input, and the exit status.
reexec_keeps_arguments_and_stdin() {
    printf 'abcdef' | env -u OMP_WAIT_POLICY "$HS" tokens --in /dev/stdin --out six.bin \
        >out.txt 2>err.txt
    RC=$?
    expect_rc 0 "tokens from a pipe, OMP_WAIT_POLICY unset" || return 1
    expect_grep "$(cat out.txt)" "wrote 6 tokens" "tokens from a pipe" || return 1
    env -u OMP_WAIT_POLICY "$HS" help train >unset.txt 2>&1
    OMP_WAIT_POLICY=passive "$HS" help train >set.txt 2>&1
    cmp -s unset.txt set.txt || bad "help train differs with OMP_WAIT_POLICY unset" || return 1
    env -u OMP_WAIT_POLICY "$HS" nosuch >/dev/null 2>&1
    expect_eq $? 2 "exit status of an unknown command, OMP_WAIT_POLICY unset" || return 1
}

# ---- 2. KEY=VALUE overrides in any order -----------------------------------------

# Derived keys (n_kv_head, head_dim, gpt2's d_ff) follow their source only
# while not given: both orders give the same config.json.
overrides_any_order() {
    config_of mqa1 llama n_kv_head=1 n_head=8 || return 1
    config_of mqa2 llama n_head=8 n_kv_head=1 || return 1
    expect_eq "$(jget mqa1/config.json num_attention_heads)" 8 "llama n_kv_head=1 n_head=8: heads" ||
        return 1
    expect_eq "$(jget mqa1/config.json num_key_value_heads)" 1 \
        "llama n_kv_head=1 n_head=8: KV heads" || return 1
    cmp -s mqa1/config.json mqa2/config.json || bad "llama: the two orders differ" || return 1
    config_of hd1 attn-only head_dim=32 'n_head=[1,8]' || return 1
    config_of hd2 attn-only 'n_head=[1,8]' head_dim=32 || return 1
    expect_eq "$(jget hd1/config.json head_dim)" 32 "attn-only head_dim=32 n_head=[1,8]" || return 1
    cmp -s hd1/config.json hd2/config.json || bad "attn-only: the two orders differ" || return 1
    config_of ff1 gpt2 d_ff=100 d_model=128 || return 1
    config_of ff2 gpt2 d_model=128 d_ff=100 || return 1
    expect_eq "$(jget ff1/config.json n_inner)" 100 "gpt2 d_ff=100 d_model=128" || return 1
    cmp -s ff1/config.json ff2/config.json || bad "gpt2: the two orders differ" || return 1
    # without a value of its own a derived key still follows its source
    config_of mha llama n_head=8 || return 1
    expect_eq "$(jget mha/config.json num_key_value_heads)" 8 "llama n_head=8: KV heads" || return 1
}

help_train_documents_order() {
    hs help train
    expect_rc 0 "help train" || return 1
    expect_grep "$OUT" "any order" "help train" || return 1
    expect_grep "$OUT" "n_kv_head=1 n_head=8" "help train" || return 1
}

# ---- 3. setup and .gitignore -----------------------------------------------------

# --demo installs what building and the demo run, not the tests' PyTorch,
# h5py or valgrind; the plain list (scripts/test) has everything the tests use.
setup_lists() {
    local demo full p
    demo=" $("$SRC/scripts/setup" --list --demo) "
    full=" $("$SRC/scripts/setup" --list) "
    for p in build-essential cmake libopenblas-openmp-dev libcunit1-dev libhdf5-dev gnuplot-nox \
        sqlite3 fortunes chromium; do
        expect_grep "$demo" " $p " "setup --list --demo" || return 1
    done
    for p in python3-torch python3-h5py python3-numpy valgrind; do
        case "$demo" in *" $p "*) bad "setup --demo installs $p, which the demo never runs"; return 1 ;; esac
        expect_grep "$full" " $p " "setup --list" || return 1
    done
    for p in build-essential cmake libcunit1-dev gnuplot-nox sqlite3 hdf5-tools; do
        expect_grep "$full" " $p " "setup --list" || return 1
    done
}

# Every file the study by hand (docs/guide.md, "A study by hand") writes in the
# repository root is ignored by git, and so are the README's worked study's
# outputs under demo/ and the example program (skipped outside a git checkout).
gitignore_covers_readme_outputs() {
    git -C "$SRC" rev-parse --is-inside-work-tree >/dev/null 2>&1 || return 0
    local f
    for f in licenses.txt train.bin val.bin runs/tiny/config.json runs.db runs.db-wal runs.db-shm \
        maps.h5 head.png grid.svg loss.png report/index.html demo/demo.db bench/out/x.json \
        build/float/headscope head_entropy; do
        git -C "$SRC" check-ignore -q --no-index "$f" || bad "$f is not in .gitignore" || return 1
    done
    for f in README.md model/config.c tests/fixtures/x.bin; do
        ! git -C "$SRC" check-ignore -q --no-index "$f" || bad "$f is ignored" || return 1
    done
}

run_checks passive_by_default user_policy_respected reexec_keeps_arguments_and_stdin \
    overrides_any_order help_train_documents_order setup_lists gitignore_covers_readme_outputs
