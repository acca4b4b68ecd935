# Shared by the end-to-end suites (tests/test_*.sh), sourced after their
# usage line: argument checks, a scratch directory removed on exit, the
# helpers that run the command and compare results, and the check runner.
#
# The sourcing script sets SUITE (scratch directory name) and calls
# `run_checks NAME...` at the end, which prints "ok NAME (S s)" or "FAIL NAME:
# reason (S s)" per check, then "N passed, M failed (S s)", and exits 1 on any
# failure. Checks listed in SLOW_CHECKS form the slow tier (see run_checks).

if [ $# -ne 2 ]; then
    echo "usage: $0 HEADSCOPE_BINARY FIXTURE_DIR" >&2
    exit 2
fi
abspath() { (cd "$(dirname "$1")" && printf '%s/%s\n' "$(pwd)" "$(basename "$1")"); }
HS=$(abspath "$1")
FIX=$(cd "$2" && pwd) || { echo "no fixture directory $2" >&2; exit 2; }
PY=/usr/bin/python3
[ -x "$HS" ] || { echo "not an executable: $HS" >&2; exit 2; }
[ -x "$PY" ] || PY=python3

# under_asan: the binary is built with AddressSanitizer (a few checks run
# smaller there: it runs the model ~15x slower).
# (gcc links libasan dynamically, clang its runtime into the binary; asked once)
under_asan() {
    if [ -z "${HS_UNDER_ASAN:-}" ]; then
        HS_UNDER_ASAN=0
        { ldd "$HS" 2>/dev/null | grep -q libasan || grep -qa __asan_init "$HS"; } && HS_UNDER_ASAN=1
    fi
    [ "$HS_UNDER_ASAN" = 1 ]
}

# fast_asan: under ASan in the fast tier, where a suite may leave to the slow
# tier's clang ASan build (HEADSCOPE_ASAN_ALL=1, scripts/test --slow) the checks
# whose C paths its other checks already take under the sanitizers.
fast_asan() { under_asan && [ "${HEADSCOPE_ASAN_ALL:-0}" != 1 ]; }

# Idle OpenMP threads sleep instead of spinning: on a loaded 2-core machine
# (ctest -j) spinning barriers make tiny runs 100x slower. Results are unchanged.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/headscope-$SUITE.XXXXXX") || exit 2
BG_PID=""
PY_SERVER=""
cleanup() {
    [ -n "$BG_PID" ] && { kill -KILL "$BG_PID" && wait "$BG_PID"; } 2>/dev/null
    [ -n "$PY_SERVER" ] && { kill "$PY_SERVER" && wait "$PY_SERVER"; } 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cd "$TMP" || exit 2

# py ARGS...: `python3 ARGS` (-c SRC ARGS | - ARGS <<script | FILE ARGS) run by
# one python3 kept for the suite (tests/pyserve.py), which has numpy and h5py
# loaded: a start costs 0.2-0.4 s, and the suites make hundreds of calls. Same
# stdout, stderr and exit status; stdin is /dev/null (a script that reads data
# from stdin runs as "$PY"), and one call at a time (not from background jobs).
# The server starts here, importing while the first checks run.
mkfifo "$TMP/.py-req" "$TMP/.py-ans" || exit 2
"$PY" "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/pyserve.py" <"$TMP/.py-req" >"$TMP/.py-ans" &
PY_SERVER=$!
exec {PY_REQ}>"$TMP/.py-req" {PY_ANS}<"$TMP/.py-ans"
py() {
    local o="$TMP/.py-out" e="$TMP/.py-err" rc text
    # (the shell's read and printf: a cat would be two more process starts a call)
    [ "$1" = - ] && { IFS= read -r -d '' text; printf '%s' "$text" >"$o.src"; }
    printf '%s\0' $(($# + 3)) "$PWD" "$o" "$e" "$@" >&"$PY_REQ"
    read -r rc <&"$PY_ANS" || { echo "tests/pyserve.py is not running" >&2; return 2; }
    [ -s "$o" ] && { IFS= read -r -d '' text <"$o"; printf '%s' "$text"; }
    [ -s "$e" ] && { IFS= read -r -d '' text <"$e"; printf '%s' "$text" >&2; }
    return "$rc"
}

PASSED=0
FAILED=0
REASON=""

# hs ARGS...: run the binary; stdout in $OUT (file out.txt), stderr in err.txt, status in $RC.
# ($(<file) reads in the shell itself: the suites make thousands of calls and
# a process start costs milliseconds on a virtual machine.)
hs() {
    "$HS" "$@" >out.txt 2>err.txt
    RC=$?
    OUT=$(<out.txt)
    ERR=$(<err.txt)
}
bad() { REASON="$*"; return 1; }
# expect_rc WANT WHAT: the last hs call exited with WANT.
expect_rc() {
    [ "$RC" -eq "$1" ] || bad "$2: exit $RC, expected $1 (stderr: $(head -c 300 err.txt))"
}
expect_eq() { [ "$1" = "$2" ] || bad "$3: got '$1', expected '$2'"; }
expect_file() { [ -s "$1" ] || bad "$1 is missing or empty"; }
expect_nofile() { [ ! -e "$1" ] || bad "$2: $1 exists"; }
# expect_grep TEXT PATTERN WHAT: PATTERN a fixed string in TEXT (matched by the shell)
expect_grep() { [[ "$1" == *"$2"* ]] || bad "$3: '$2' not in: ${1:0:300}"; }
# jget FILE KEY [KEY...]: one field of a JSON object (KEY KEY2: v[KEY][KEY2]; lists
# and objects as JSON); fails on invalid JSON.
jget() {
    py -c 'import json,sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2:]:
    v = v[k]
print(json.dumps(v, separators=(",", ":")) if isinstance(v, (list, dict)) else v)' "$@" 2>/dev/null
}
# close A B TOL: |A-B| <= TOL and both finite.
close() {
    py -c 'import math,sys
a, b, t = map(float, sys.argv[1:4])
sys.exit(0 if math.isfinite(a) and abs(a - b) <= t else 1)' "$1" "$2" "$3"
}
sha() { sha256sum "$1" | cut -d' ' -f1; }
fsize() { stat -c %s "$1"; }

# start_bg CMD...: runs CMD in the background (BG_PID), stdout and stderr in
# out.txt and err.txt. HEADSCOPE_TEST_START_DELAY=S starts it S seconds late,
# as a loaded machine may: the checks that wait on it must still pass (the slow
# tier's *_waits suites).
start_bg() {
    if [ -n "${HEADSCOPE_TEST_START_DELAY:-}" ]; then
        (sleep "$HEADSCOPE_TEST_START_DELAY" && exec "$@") >out.txt 2>err.txt &
    else
        "$@" >out.txt 2>err.txt &
    fi
    BG_PID=$!
}

# stop_bg SIGNAL: sends SIGNAL to the background command BG_PID (stdout/stderr in
# out.txt/err.txt) and waits for it to end (outer limit 5 minutes, then SIGKILL);
# RC is its exit status, ERR its stderr.
bg_ended() { ! kill -0 "$BG_PID" 2>/dev/null; }
stop_bg() {
    kill -0 "$BG_PID" 2>/dev/null ||
        bad "the command ended before SIG$1 (stderr: $(tail -c 300 err.txt))" || return 1
    if [ "$1" = KILL ]; then # in one block so bash prints no "Killed" notice
        { kill -KILL "$BG_PID" && wait "$BG_PID"; } 2>/dev/null
        RC=$?
        BG_PID=""
        return 0
    fi
    kill -"$1" "$BG_PID" 2>/dev/null
    if ! wait_until 300 "end of the command after SIG$1" bg_ended; then
        { kill -KILL "$BG_PID" && wait "$BG_PID"; } 2>/dev/null
        BG_PID=""
        bad "the command is still running 300 s after SIG$1"
        return 1
    fi
    wait "$BG_PID"
    RC=$?
    BG_PID=""
    ERR=$(cat err.txt)
}

# png_ok FILE: a non-empty PNG.
# expect_refused CODE CMD PATTERN ARGS...: `headscope CMD ARGS` exits CODE with
# "headscope: CMD: " first on stderr, PATTERN in it, and nothing on stdout.
expect_refused() {
    local code=$1 cmd=$2 pat=$3
    shift 3
    hs "$cmd" "$@"
    local what="$cmd $*"
    expect_rc "$code" "$what" || return 1
    expect_grep "$(head -n1 err.txt)" "headscope: $cmd: " "$what: message prefix" || return 1
    expect_grep "$ERR" "$pat" "$what: message" || return 1
    [ -z "$OUT" ] || bad "$what: wrote to stdout: $OUT" || return 1
}

png_ok() {
    expect_file "$1" || return 1
    [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || bad "$1 is not a PNG" || return 1
}

# Wall-clock microseconds since some fixed point; elapsed T0: seconds since T0, to 0.1 s.
now_s() { local t=${EPOCHREALTIME:-$(date +%s.%N | cut -c1-17)}; printf '%s' "${t/./}"; }
elapsed() { local d=$((($(now_s) - $1) / 100000)); printf '%d.%d' $((d / 10)) $((d % 10)); }

# wait_until LIMIT_S WHAT CMD...: polls CMD (every 0.05 s) until it succeeds; fails
# (REASON) when the background command BG_PID has ended without CMD succeeding, or
# after LIMIT_S seconds, an outer limit far above any idle time (minutes): the
# wait is on the event CMD tests, not on a deadline a loaded machine can miss.
wait_until() {
    local limit=$1 what=$2 start=$SECONDS
    shift 2
    while :; do
        "$@" && return 0
        if [ -n "$BG_PID" ] && ! kill -0 "$BG_PID" 2>/dev/null; then
            "$@" && return 0
            bad "the command ended before $what (stderr: $(tail -c 300 err.txt 2>/dev/null))"
            return 1
        fi
        if ((SECONDS - start >= limit)); then
            bad "no $what after $limit s (stderr: $(tail -c 300 err.txt 2>/dev/null))"
            return 1
        fi
        sleep 0.05
    done
}

# text FILE N: N lines of a sentence with numbers (about 50 bytes a line).
text() {
    local i
    for ((i = 1; i <= $2; i++)); do
        printf 'The quick brown fox %d jumps over the lazy dog %d times.\n' "$i" $((i * 7 % 97))
    done >"$1"
}
# shard NAME LINES: NAME.txt and its byte-level token shard NAME.bin (once).
shard() {
    [ -s "$1.bin" ] && return 0
    text "$1.txt" "$2"
    "$HS" tokens --in "$1.txt" --out "$1.bin" >/dev/null 2>&1 || bad "tokens could not make $1.bin"
}

# lines_equal_singles MODEL [OPTION...]: capture --text --lines of four
# sentences of different lengths (a blank line and a CRLF among them) is one
# map file whose sequence i, over its own tokens, equals the capture of
# sentence i alone (--seq-len auto: the whole text one sequence), with
# /attention_mask 1 over those tokens and every padded entry exactly 0.
# byte_bpe_model DIR: a small llama-shaped model (vocabulary 256) trained one
# step, with a byte-level BPE tokenizer.json of no merges beside it (GPT-2's
# byte alphabet, id = the byte): a tokenizer file on a model that costs
# milliseconds a forward.
byte_bpe_model() {
    [ -s "$1/tokenizer.json" ] && return 0
    py - "$1.json" <<'PY' || bad "could not write the byte tokenizer" || return 1
import json, sys
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xa1, 0xad)) + list(range(0xae, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
vocab = {chr(c): b for b, c in zip(bs, cs)}
json.dump({"version": "1.0", "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                             "use_regex": True},
           "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": False,
                                               "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False,
                     "byte_fallback": False, "vocab": vocab, "merges": []}}, open(sys.argv[1], "w"))
PY
    printf 'The quick brown fox jumps over the lazy dog.\n' >"$1.txt"
    hs train --preset llama n_layer=2 n_head=2 d_model=16 n_ctx=128 vocab_size=256 --text "$1.txt" \
        --tokenizer "$1.json" --out "$1" --steps 1 --batch 1 --seq-len 8
    expect_rc 0 "train the byte-level BPE model" || return 1
    cp "$1.json" "$1/tokenizer.json"
}

# lines_files: lines.txt, four sentences of different lengths (a blank line
# and a CRLF among them), and one_I.txt, sentence I alone (no newline).
lines_files() {
    local i=0
    printf 'Short one.\n\nA rather longer sentence, with a comma and more words in it.\r\nMid length line here.\nThe end is near.\n' >lines.txt
    while IFS= read -r line; do
        line=${line%$'\r'}
        [ -n "$line" ] || continue
        printf '%s' "$line" >"one_$i.txt"
        i=$((i + 1))
    done <lines.txt
}

lines_equal_singles() {
    local model=$1 i
    shift
    lines_files
    hs capture --model "$model" --text lines.txt --lines --out lines.h5 --batch 2 "$@"
    expect_rc 0 "capture --text --lines" || return 1
    for i in 0 1 2 3; do
        hs capture --model "$model" --text "one_$i.txt" --seq-len auto --out "one_$i.h5" --batch 1 "$@"
        expect_rc 0 "capture --seq-len auto of line $i" || return 1
    done
    i=4
    py - "$i" <<'PY' || bad "--lines maps against single captures: $(cat lines.err)" || return 1
import sys, h5py, numpy as np
n = int(sys.argv[1])
def check(f):
    am, tok = f["attention_mask"][()], f["tokens"][()]
    assert am.dtype == np.int8 and am.shape[0] == n, (am.dtype, am.shape)
    layers = [k for k in f if k.startswith("layer_")]
    worst = 0.0
    for i in range(n):
        with h5py.File("one_%d.h5" % i) as g:
            one = g["tokens"][0]
            L = len(one)
            assert list(am[i]) == [1] * L + [0] * (am.shape[1] - L), (i, am[i], L)
            assert (tok[i][:L] == one).all(), (i, tok[i], one)
            for l in layers:
                a, b = f[l]["attn"][i], g[l]["attn"][0]
                worst = max(worst, float(np.abs(a[:, :L, :L] - b).max()))
                pad = np.ones(a.shape, bool)
                pad[:, :L, :L] = False
                assert (a[pad] == 0).all(), (i, l, "a padded entry is not 0")
    assert worst < 1e-5, worst
try:
    with h5py.File("lines.h5") as f:
        check(f)
except AssertionError as e:
    open("lines.err", "w").write(repr(e.args))
    sys.exit(1)
PY
}

run_check() {
    local name=$1 t0
    REASON=""
    mkdir -p "$TMP/$name" && cd "$TMP/$name" || return
    t0=$(now_s)
    if "$name"; then
        echo "ok $name ($(elapsed "$t0") s)"
        PASSED=$((PASSED + 1))
    else
        echo "FAIL $name: ${REASON:-check returned non-zero} ($(elapsed "$t0") s)"
        FAILED=$((FAILED + 1))
    fi
    cd "$TMP" || exit 2
}

# Two tiers. A suite names its long studies (model trainings that are studies,
# not oracle checks) and its robustness checks of many seconds (kills,
# races, injected faults) in SLOW_CHECKS before calling run_checks. By default only
# the other checks run (the fast tier, scripts/test); with HEADSCOPE_SLOW=1
# only the SLOW_CHECKS run (the slow tier, scripts/test --slow).
SLOW_CHECKS=""
is_slow() { local s=" ${SLOW_CHECKS//[$'\n\t']/ } "; [[ "$s" == *" $1 "* ]]; }

# run_checks NAME...: runs each check of this tier but those named in SKIP, or,
# when ONLY is set, those named in it whatever their tier (both lists separated
# by spaces, tabs or newlines).
run_checks() {
    local check t0 skip=${SKIP:-} only=${ONLY:-}
    t0=$(now_s)
    skip=" ${skip//[$'\n\t']/ } " only=" ${only//[$'\n\t']/ } "
    for check in "$@"; do
        [[ "$skip" == *" $check "* ]] && continue
        if [ "$only" != "  " ]; then
            [[ "$only" == *" $check "* ]] || continue
        elif [ "${HEADSCOPE_SLOW:-0}" = 1 ]; then
            is_slow "$check" || continue
        else
            is_slow "$check" && continue
        fi
        run_check "$check"
    done
    echo "$PASSED passed, $FAILED failed ($(elapsed "$t0") s)"
    [ "$FAILED" -eq 0 ]
}
