#!/usr/bin/env bash
# End-to-end checks of headscope capture / maps / plot (SPEC §6): map values
# against the PyTorch oracle (tests/fixtures/maps_oracle.txt, read with h5py),
# the documented HDF5 layout, selections, crash safety (SIGKILL, SIGINT), exit
# codes and messages, flat memory, and the plots.
#
# usage: tests/test_capture.sh HEADSCOPE_BINARY FIXTURE_DIR
# Prints "ok NAME" or "FAIL NAME: reason" per check, then "N passed, M failed";
# exits 1 if any check failed. Needs /usr/bin/python3 with h5py and numpy,
# h5dump, and gnuplot (plots).
set -u

SUITE=capture
TESTS=$(cd "$(dirname "$0")" && pwd) # before lib.sh moves to the scratch directory
. "$TESTS/lib.sh"
CHECK="$TESTS/check_maps_h5py.py"
ORACLE="$FIX/maps_oracle.txt"
EVAL="$FIX/models/gpt2_tiny/eval.bin"
py -c 'import h5py, numpy' 2>/dev/null || { echo "$PY lacks h5py or numpy" >&2; exit 2; }
command -v h5dump >/dev/null || { echo "h5dump is required" >&2; exit 2; }
[ -s "$ORACLE" ] || { echo "no oracle $ORACLE (scripts/oracle/gen_maps.py)" >&2; exit 2; }

# ---- helpers -------------------------------------------------------------------

# tmps PATH: the temporary files capture leaves next to PATH (PATH.tmp.PID.XXXXXX), one a line.
tmps() { ls -d "$1".tmp.* 2>/dev/null; }
expect_notmp() {
    local t
    t=$(tmps "$1")
    [ -z "$t" ] || bad "$2: temporary file left: $t"
}

# shard_of FILE TOKEN...: an llm.c shard (SPEC §4) holding exactly these tokens.
shard_of() {
    local f=$1
    shift
    py - "$f" "$@" <<'EOF'
import struct, sys
toks = [int(t) for t in sys.argv[2:]]
hdr = struct.pack("<3i", 20240520, 1, len(toks)) + b"\0" * (1024 - 12)
open(sys.argv[1], "wb").write(hdr + struct.pack("<%dH" % len(toks), *toks))
EOF
}
# first_tokens N: the first N tokens of eval.bin, space separated.
first_tokens() {
    py -c 'import struct, sys
b = open(sys.argv[1], "rb").read()
print(" ".join(map(str, struct.unpack("<%dH" % int(sys.argv[2]), b[1024:1024 + 2 * int(sys.argv[2])]))))' \
        "$EVAL" "$1"
}

SMALL=(--batch 2 --seq-len 8 --max-batches 1)

# A long byte-level shard and an attn-only model with n_ctx 512 (once, in $TMP/shared):
# captures on it run for many seconds unless limited.
LONG_BIN="$TMP/shared/long.bin"
LONG_MODEL="$TMP/shared/am"
long_setup() {
    [ -s "$LONG_MODEL/model.safetensors" ] && return 0
    mkdir -p "$TMP/shared" || return 1
    yes 'The quick brown fox jumps over the lazy dog; 0123456789 pack my box.' |
        head -c 3000000 >"$TMP/shared/long.txt"
    "$HS" tokens --in "$TMP/shared/long.txt" --out "$LONG_BIN" >/dev/null 2>&1 ||
        bad "tokens could not make long.bin" || return 1
    "$HS" train --preset attn-only n_layer=4 n_head=8 d_model=64 n_ctx=512 --steps 1 --batch 2 \
        --seq-len 64 --data "$LONG_BIN" --out "$LONG_MODEL" >/dev/null 2>&1 ||
        bad "train could not make the attn-only model" || return 1
}
# A capture that runs for ~20 s on an idle machine (1464 batches of 4 x 512, one
# map row kept): forwards dominate, the file stays small.
LONG_CAPTURE=(capture --data "$LONG_BIN" --batch 4 --seq-len 512 --layers 0 --heads 0 --queries 0:1)

# start_long OUT: starts the long capture in the background (BG_PID), waits until
# its temporary file exists (outer limit 10 minutes).
has_tmp() { [ -n "$(tmps "$1")" ]; }
has_glob() { compgen -G "$1" >/dev/null; }
start_long() {
    start_bg "$HS" "${LONG_CAPTURE[@]}" --model "$LONG_MODEL" --out "$1"
    wait_until 600 "$1.tmp.*" has_tmp "$1"
}


# ---- 1. values against the torch oracle, read with h5py ------------------------------

oracle_h5py() {
    # eval.bin holds 33 tokens; exact.bin exactly one batch of 2 x 8 (+1).
    # shellcheck disable=SC2046
    shard_of exact.bin $(first_tokens 17) || bad "could not write exact.bin" || return 1
    local m d
    for m in gpt2_tiny llama_gqa; do
        for d in f32 f16; do
            hs capture --model "$FIX/models/$m" --data "$EVAL" --out "$m.$d.h5" "${SMALL[@]}" --dtype "$d" --json
            expect_rc 0 "capture $m --dtype $d" || return 1
            expect_eq "$(jget out.txt sequences)" 2 "$m $d: --json sequences" || return 1
            # the exact shard, whole (no --max-batches), compressed
            hs capture --model "$FIX/models/$m" --data exact.bin --out "$m.$d.z.h5" --batch 2 --seq-len 8 \
                --dtype "$d" --compress 4
            expect_rc 0 "capture $m --dtype $d --compress 4 on exact.bin" || return 1
        done
        py "$CHECK" "$m.f32.h5" "$m.f16.h5" "$ORACLE" "$m" >check.txt 2>&1 ||
            bad "check_maps_h5py $m: $(grep -v '^ok' check.txt | head -c 600)" || return 1
        py "$CHECK" "$m.f32.z.h5" "$m.f16.z.h5" "$ORACLE" "$m" >check.txt 2>&1 ||
            bad "check_maps_h5py $m (--compress 4, exact shard): $(grep -v '^ok' check.txt | head -c 600)" ||
            return 1
        py - "$m.f32.z.h5" "$m.f16.z.h5" <<'EOF' || bad "$m: --compress 4 files are not shuffle + deflate 4" || return 1
import sys, h5py
for p in sys.argv[1:]:
    with h5py.File(p, "r") as f:
        for k in f:
            if k.startswith("layer_"):
                d = f[k]["attn"]
                assert (d.compression, d.compression_opts, d.shuffle) == ("gzip", 4, True), (p, k)
                assert d.chunks == (1, 1) + d.shape[2:], (p, k, d.chunks)
EOF
    done
    expect_notmp gpt2_tiny.f32.h5 "after the captures" || return 1
}

# ---- 2. h5dump sees the documented names ---------------------------------------------

h5dump_layout() {
    hs capture --model "$FIX/models/gpt2_tiny" --data "$EVAL" --out f32.h5 "${SMALL[@]}"
    expect_rc 0 "capture f32" || return 1
    hs capture --model "$FIX/models/gpt2_tiny" --data "$EVAL" --out f16.h5 "${SMALL[@]}" --dtype f16
    expect_rc 0 "capture f16" || return 1
    local f dump a
    for f in f32.h5 f16.h5; do
        dump=$(h5dump -H "$f" 2>&1) || bad "h5dump -H $f failed: $(printf '%s' "$dump" | head -c 300)" || return 1
        for a in format version model_sha256 model_config data_path data_sha256 seq_len tool_version complete; do
            expect_grep "$dump" "ATTRIBUTE \"$a\"" "h5dump -H $f" || return 1
        done
        for a in 'DATASET "tokens"' 'GROUP "layer_00"' 'GROUP "layer_01"' 'DATASET "attn"' \
            'ATTRIBUTE "DIMENSION_LABELS"' 'ATTRIBUTE "layer"' 'ATTRIBUTE "heads"' 'ATTRIBUTE "query_start"' \
            'SIMPLE { ( 2, 4, 8, 8 ) / ( H5S_UNLIMITED, 4, 8, 8 ) }' 'SIMPLE { ( 2, 8 ) / ( H5S_UNLIMITED, 8 ) }'; do
            expect_grep "$dump" "$a" "h5dump -H $f" || return 1
        done
    done
    dump=$(h5dump -H f32.h5)
    expect_grep "$dump" "H5T_IEEE_F32LE" "f32 map type" || return 1
    dump=$(h5dump -H f16.h5)
    expect_grep "$dump" "16-bit little-endian floating-point" "f16 map type" || return 1
    printf '%s' "$dump" | grep -q "H5T_IEEE_F32LE" && bad "f16.h5 still holds a float32 dataset" && return 1
    dump=$(h5dump -A -a /layer_00/attn/DIMENSION_LABELS f32.h5 2>&1)
    for a in '"seq"' '"head"' '"query"' '"key"'; do
        expect_grep "$dump" "$a" "DIMENSION_LABELS" || return 1
    done
    dump=$(h5dump -a /format f32.h5 2>&1)
    expect_grep "$dump" '"headscope-maps"' "format attribute" || return 1
}

# ---- 3. maps ----------------------------------------------------------------------------

maps_command() {
    hs capture --model "$FIX/models/llama_gqa" --data "$EVAL" --out m.h5 --batch 2 --seq-len 8 \
        --max-batches 2 --dtype f16
    expect_rc 0 "capture" || return 1
    hs maps m.h5 --json
    expect_rc 0 "maps --json" || return 1
    expect_eq "$(jget out.txt complete)" 1 "maps complete" || return 1
    expect_eq "$(jget out.txt version)" 1 "maps version" || return 1
    expect_eq "$(jget out.txt sequences)" 4 "maps sequences (2 batches of 2)" || return 1
    expect_eq "$(jget out.txt seq_len)" 8 "maps seq_len" || return 1
    expect_eq "$(jget out.txt model_sha256)" "$(sha "$FIX/models/llama_gqa/model.safetensors")" "maps model_sha256" || return 1
    expect_eq "$(jget out.txt data_sha256)" "$(sha "$EVAL")" "maps data_sha256" || return 1
    expect_eq "$(py -c 'import json,sys; l=json.load(open("out.txt"))["layers"]; print(len(l), sorted({x["dtype"] for x in l}), [x["heads"] for x in l][0], l[1]["layer"], l[1]["queries"], l[1]["keys"])')" \
        "2 ['float16'] [0, 1, 2, 3] 1 8 8" "maps layers" || return 1
    hs maps m.h5
    expect_rc 0 "maps (text)" || return 1
    expect_grep "$OUT" "complete" "maps text" || return 1
    expect_grep "$OUT" "float16" "maps text" || return 1

    printf 'just some text\n' >notmaps.txt
    hs maps notmaps.txt
    expect_rc 1 "maps on a text file" || return 1
    expect_grep "$ERR" "headscope: maps: " "message prefix" || return 1
    expect_grep "$ERR" "notmaps.txt" "message names the file" || return 1
    hs maps missing.h5
    expect_rc 1 "maps on a missing file" || return 1
    expect_grep "$ERR" "missing.h5" "message names the file" || return 1
    # An HDF5 file that is not a map file.
    py -c 'import h5py; h5py.File("other.h5", "w").create_dataset("x", data=[1, 2, 3])'
    hs maps other.h5
    expect_rc 1 "maps on an HDF5 file without the map layout" || return 1
    expect_grep "$ERR" "other.h5" "message names the file" || return 1
    # A map file not marked complete.
    cp m.h5 incomplete.h5
    py -c 'import h5py, numpy; f = h5py.File("incomplete.h5", "r+"); f.attrs.modify("complete", numpy.int32(0))'
    hs maps incomplete.h5
    expect_rc 1 "maps on a file with complete=0" || return 1
    expect_grep "$ERR" "incomplete.h5" "message names the file" || return 1
    hs maps
    expect_rc 2 "maps without a file" || return 1
}

# ---- 4. selection -----------------------------------------------------------------------

selection() {
    local M="$FIX/models/gpt2_tiny"
    hs capture --model "$M" --data "$EVAL" --out full.h5 --batch 2 --seq-len 8 --max-batches 2
    expect_rc 0 "full capture" || return 1
    hs capture --model "$M" --data "$EVAL" --out sel.h5 --batch 2 --seq-len 8 --max-batches 2 \
        --layers 1 --heads 0,2 --queries 2:6
    expect_rc 0 "capture --layers 1 --heads 0,2 --queries 2:6" || return 1
    py - full.h5 sel.h5 >check.txt 2>&1 <<'EOF' || bad "$(tail -c 500 check.txt)" || return 1
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as full, h5py.File(sys.argv[2], "r") as sel:
    groups = sorted(sel.keys())
    assert groups == ["layer_01", "tokens"], f"sel.h5 holds {groups}, expected layer_01 and tokens"
    d = sel["layer_01/attn"]
    assert d.shape == (4, 2, 4, 8), f"layer_01/attn shape {d.shape}, expected (4, 2, 4, 8)"
    assert [x.label for x in d.dims] == ["seq", "head", "query", "key"]
    assert list(d.attrs["heads"]) == [0, 2], f"heads attribute {d.attrs['heads']}"
    assert d.attrs["query_start"] == 2, f"query_start {d.attrs['query_start']}"
    assert d.attrs["layer"] == 1
    assert sel.attrs["complete"] == 1 and sel.attrs["seq_len"] == 8
    assert np.array_equal(sel["tokens"][...], full["tokens"][...]), "tokens differ"
    want = full["layer_01/attn"][:, [0, 2], 2:6, :]
    got = d[...]
    assert np.array_equal(got, want), f"maps differ from the full capture's slice by {np.abs(got - want).max()}"
EOF
    hs maps sel.h5 --json
    expect_rc 0 "maps sel.h5" || return 1
    expect_eq "$(jget out.txt layers)" \
        '[{"layer":1,"heads":[0,2],"query_start":2,"queries":4,"keys":8,"dtype":"float32"}]' "maps of the selection" || return 1
}

# ---- 5. SIGKILL never leaves a file marked complete ---------------------------------

sigkill_never_complete() {
    long_setup || return 1
    local delay t
    for delay in 0 0.7 2; do
        rm -f k.h5 k.h5.tmp.*
        start_long k.h5 || return 1
        sleep "$delay"
        kill -0 "$BG_PID" 2>/dev/null || bad "capture ended before the kill at +${delay}s (stderr: $(head -c 300 err.txt))" || return 1
        stop_bg KILL || return 1
        expect_eq "$RC" 137 "exit status after SIGKILL at +${delay}s" || return 1
        expect_nofile k.h5 "after SIGKILL at +${delay}s" || return 1
        for t in $(tmps k.h5); do
            py - "$t" >check.txt 2>&1 <<'EOF' || bad "SIGKILL at +${delay}s: $(tail -c 300 check.txt)" || return 1
import sys, h5py
try:
    f = h5py.File(sys.argv[1], "r")
except OSError as e:  # a truncated HDF5 file that fails to open is fine
    print("does not open (%s)" % str(e).split("(")[-1].rstrip(")"))
    sys.exit(0)
with f:
    c = f.attrs.get("complete")
    assert c == 0, f"{sys.argv[1]} opens with complete={c!r}"
    print("opens with complete=0, %d sequences" % f["tokens"].shape[0])
EOF
            echo "  SIGKILL at +${delay}s: leftover $t $(tail -n 1 check.txt)"
            hs maps "$t"
            expect_rc 1 "maps on the leftover $t (SIGKILL at +${delay}s)" || return 1
        done
    done
}

# ---- 5b. a checkpoint that changes under the run ----------------------------------------

# The weights are mapped while the capture runs. Rewritten in place (same
# size), the run once finished `complete` with a mix of both versions;
# truncated, it died of SIGBUS ("Bus error", exit 135) with the run left
# `running`. Now either is one line naming the file, exit 1, the run failed,
# no map file.
checkpoint_changes_under_the_run() {
    long_setup || return 1
    local how
    for how in rewrite truncate; do
        rm -rf cm && cp -r "$LONG_MODEL" cm || return 1
        start_bg "$HS" "${LONG_CAPTURE[@]}" --model cm --out "$how.h5" --db "$how.db" \
            --max-batches 200
        wait_until 600 "$how.h5.tmp.*" has_tmp "$how.h5" || return 1
        py - "$how" <<'PYEOF' || return 1
import os, sys
p = "cm/model.safetensors"
if sys.argv[1] == "rewrite":  # the same bytes, written again in place
    d = open(p, "rb").read()
    with open(p, "r+b") as f:
        f.write(d)
else:
    os.truncate(p, os.path.getsize(p) // 2)
PYEOF
        wait_until 600 "the end of the capture" bg_ended || return 1
        wait "$BG_PID"
        RC=$?
        BG_PID=""
        ERR=$(cat err.txt)
        expect_rc 1 "capture with its checkpoint changed ($how)" || return 1
        expect_grep "$ERR" "headscope: capture: cm/model.safetensors changed while it was read" \
            "the message ($how)" || return 1
        [ "$(wc -l <err.txt)" -eq 1 ] || bad "more than one line on stderr: $ERR" || return 1
        expect_eq "$(sqlite3 "$how.db" 'select status from runs')" failed "the run ($how)" ||
            return 1
        expect_nofile "$how.h5" "a map file from a changed checkpoint ($how)" || return 1
    done
}

# ---- 6. SIGINT stops cleanly --------------------------------------------------------

sigint_clean() {
    long_setup || return 1
    start_long i.h5 || return 1
    sleep 0.5 # past the file's creation: the handler is installed and batches run
    kill -0 "$BG_PID" 2>/dev/null || bad "capture ended before SIGINT (stderr: $(head -c 300 err.txt))" || return 1
    stop_bg INT || return 1
    expect_rc 1 "capture after SIGINT" || return 1
    expect_grep "$ERR" "headscope: capture: " "message prefix" || return 1
    expect_grep "$ERR" "interrupted" "message" || return 1
    expect_grep "$ERR" "i.h5" "message names the output" || return 1
    expect_nofile i.h5 "after SIGINT" || return 1
    expect_notmp i.h5 "after SIGINT" || return 1
}

# SIGINT at the earliest moment a temporary file can be seen ("Ctrl-C stops cleanly
# and leaves nothing" holds from the file's creation on): a tight poll sends it as
# soon as OUT.tmp.* exists, 10 times. Each run must end with status 1 ("interrupted")
# or finish (0), and leave no OUT.tmp.*.
sigint_early() {
    long_setup || return 1
    py - "$HS" "$LONG_MODEL" "$LONG_BIN" >check.txt 2>&1 <<'EOF' || bad "$(tail -c 600 check.txt)" || return 1
import glob, os, signal, subprocess, sys
hs, model, data = sys.argv[1:4]
bad = []
for i in range(10):
    for p in glob.glob("e.h5*"):
        os.unlink(p)
    pr = subprocess.Popen([hs, "capture", "--model", model, "--data", data, "--out", "e.h5", "--batch", "4",
                           "--seq-len", "512", "--max-batches", "20", "--layers", "0", "--heads", "0",
                           "--queries", "0:1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while not glob.glob("e.h5.tmp.*") and pr.poll() is None:
        pass
    pr.send_signal(signal.SIGINT)
    err = pr.communicate()[1].decode()
    left = glob.glob("e.h5.tmp.*")
    if pr.returncode not in (0, 1) or left or (pr.returncode == 1 and "interrupted" not in err):
        bad.append("status %d, left %s" % (pr.returncode, left or "nothing"))
if bad:
    sys.exit("%d of 10 captures sent SIGINT as e.h5.tmp.* appeared failed (negative status: killed by "
             "the signal): %s" % (len(bad), "; ".join(bad[:3])))
EOF
}

# ---- 7. bad input -------------------------------------------------------------------

# refuse RC WHAT PATTERN OUTFILE ARGS...: capture ARGS exits RC with a 'headscope:
# capture:' message containing PATTERN, and leaves neither OUTFILE nor OUTFILE.tmp.*.
refuse() {
    local want=$1 what=$2 pat=$3 outf=$4
    shift 4
    hs capture "$@"
    expect_rc "$want" "$what" || return 1
    expect_grep "$ERR" "headscope: capture: " "$what: message prefix" || return 1
    expect_grep "$ERR" "$pat" "$what: message" || return 1
    expect_nofile "$outf" "$what" || return 1
    expect_notmp "$outf" "$what" || return 1
}

bad_input() {
    local M="$FIX/models/gpt2_tiny"
    local D=(--data "$EVAL" "${SMALL[@]}")
    refuse 1 "missing model dir" "nodir" o.h5 --model nodir "${D[@]}" --out o.h5 || return 1
    refuse 1 "missing data file" "nofile.bin" o.h5 --model "$M" --data nofile.bin --out o.h5 || return 1
    # shellcheck disable=SC2046
    shard_of short.bin $(first_tokens 16) || return 1 # one token short of 2 x 8 (+1)
    refuse 1 "data shorter than one batch" "short.bin" o.h5 --model "$M" --data short.bin --batch 2 --seq-len 8 \
        --out o.h5 || return 1
    expect_grep "$ERR" "fewer than one batch" "short data message" || return 1
    refuse 1 "output in a missing directory" "nodir/o.h5" nodir/o.h5 --model "$M" "${D[@]}" --out nodir/o.h5 || return 1
    printf 'a regular file\n' >afile
    local before
    before=$(sha afile)
    refuse 1 "output whose parent is a regular file" "afile/o.h5" afile/o.h5 --model "$M" "${D[@]}" \
        --out afile/o.h5 || return 1
    expect_eq "$(sha afile)" "$before" "the regular file after the refusal" || return 1
    refuse 2 "--layers 99" "--layers" o.h5 --model "$M" "${D[@]}" --out o.h5 --layers 99 || return 1
    expect_grep "$ERR" "2 layers" "--layers 99 message" || return 1
    local layers_err=$ERR
    refuse 2 "--layers 2 (one past the last)" "--layers" o.h5 --model "$M" "${D[@]}" --out o.h5 --layers 2 || return 1
    refuse 2 "--heads 99" "--heads" o.h5 --model "$M" "${D[@]}" --out o.h5 --heads 99 || return 1
    refuse 2 "--heads 4" "--heads" o.h5 --model "$M" "${D[@]}" --out o.h5 --heads 4 || return 1
    refuse 2 "--queries 5:2" "--queries" o.h5 --model "$M" "${D[@]}" --out o.h5 --queries 5:2 || return 1
    refuse 2 "--queries 0:9 (past seq-len 8)" "--queries" o.h5 --model "$M" "${D[@]}" --out o.h5 --queries 0:9 || return 1
    refuse 2 "--queries 3:3 (empty)" "--queries" o.h5 --model "$M" "${D[@]}" --out o.h5 --queries 3:3 || return 1
    refuse 2 "--dtype f64" "f64" o.h5 --model "$M" "${D[@]}" --out o.h5 --dtype f64 || return 1
    refuse 2 "--compress 10" "--compress" o.h5 --model "$M" "${D[@]}" --out o.h5 --compress 10 || return 1
    refuse 2 "--seq-len past n_ctx" "--seq-len" o.h5 --model "$M" --data "$EVAL" --batch 1 --seq-len 17 --out o.h5 || return 1
    refuse 2 "no --out" "--out" o.h5 --model "$M" "${D[@]}" || return 1
    refuse 2 "unknown option" "--bogus" o.h5 --model "$M" "${D[@]}" --out o.h5 --bogus || return 1

    # an existing output: refused without --force (unchanged), replaced with it
    hs capture --model "$M" "${D[@]}" --out keep.h5
    expect_rc 0 "capture into keep.h5" || return 1
    before=$(sha keep.h5)
    hs capture --model "$M" "${D[@]}" --out keep.h5 --dtype f16
    expect_rc 1 "capture over an existing output without --force" || return 1
    expect_grep "$ERR" "headscope: capture: keep.h5" "message names the file" || return 1
    expect_grep "$ERR" "--force" "message suggests --force" || return 1
    expect_eq "$(sha keep.h5)" "$before" "keep.h5 after the refusal" || return 1
    expect_notmp keep.h5 "after the refusal" || return 1
    hs capture --model "$M" "${D[@]}" --out keep.h5 --dtype f16 --force
    expect_rc 0 "capture --force over keep.h5" || return 1
    [ "$(sha keep.h5)" != "$before" ] || bad "--force did not replace keep.h5" || return 1
    hs maps keep.h5 --json
    expect_rc 0 "maps on the replaced file" || return 1
    expect_grep "$(jget out.txt layers)" '"dtype":"float16"' "the replaced file's dtype" || return 1
    expect_notmp keep.h5 "after --force" || return 1

    # The --layers 99 message describes the model (2 layers of 4 heads): any head
    # count it gives must be 4, not a placeholder for "no layer selected".
    local counts
    counts=$(printf '%s' "$layers_err" | grep -oE '[0-9]+ heads' | sort -u | tr '\n' ' ')
    [ -z "$counts" ] || [ "$counts" = "4 heads " ] ||
        bad "--layers 99: message gives '${counts% }' for a 4-head model: $layers_err" || return 1
}

# ---- 8. memory stays flat as batches grow ---------------------------------------------

# peak_kb N: peak RSS (KiB) of a capture of N batches of 4 x 128, all layers and heads.
peak_kb() {
    "$PY" -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
if r.returncode:
    sys.exit("capture exit %d: %s" % (r.returncode, r.stderr.decode()[:300]))
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' \
        "$HS" capture --model "$LONG_MODEL" --data "$LONG_BIN" --out "mem$1.h5" --batch 4 --seq-len 128 \
        --max-batches "$1" --force
}

memory_flat() {
    # AddressSanitizer keeps freed memory in quarantine, so its RSS says
    # nothing about ours; the plain builds measure it.
    if [ -n "${ASAN_OPTIONS:-}" ]; then
        echo "  (not measured under AddressSanitizer: its quarantine holds freed memory)"
        return 0
    fi
    long_setup || return 1
    local p1 p50
    p1=$(peak_kb 1 2>err.txt) || bad "capture of 1 batch: $(cat err.txt)" || return 1
    p50=$(peak_kb 50 2>err.txt) || bad "capture of 50 batches: $(cat err.txt)" || return 1
    echo "  peak RSS: 1 batch $p1 KiB, 50 batches $p50 KiB (4 x 128, 4 layers x 8 heads)"
    rm -f mem1.h5 mem50.h5
    [ "$p50" -le $((p1 * 110 / 100 + 4096)) ] ||
        bad "peak RSS grows with the batches: $p50 KiB for 50 vs $p1 KiB for 1 (limit 1.10 x + 4 MiB)" || return 1
}

# ---- 9. plots -----------------------------------------------------------------------


plot_outputs() {
    command -v gnuplot >/dev/null || bad "gnuplot is required" || return 1
    hs capture --model "$FIX/models/gpt2_tiny" --data "$EVAL" --out p.h5 "${SMALL[@]}"
    expect_rc 0 "capture" || return 1
    hs plot map --maps p.h5 --layer 1 --head 2 --seq 1 --out map.png
    expect_rc 0 "plot map .png" || return 1
    png_ok map.png || return 1
    hs plot map --maps p.h5 --layer 1 --head 2 --out map.svg
    expect_rc 0 "plot map .svg" || return 1
    expect_file map.svg || return 1
    grep -q '<svg' map.svg || bad "map.svg has no <svg" || return 1
    hs plot grid --maps p.h5 --out grid.png
    expect_rc 0 "plot grid" || return 1
    png_ok grid.png || return 1

    local what args
    for what in "--layer 99" "--head 99" "--seq 99"; do
        # shellcheck disable=SC2086
        hs plot map --maps p.h5 $what --out bad.png
        expect_rc 1 "plot map $what" || return 1
        expect_grep "$ERR" "headscope: plot: " "plot map $what: message prefix" || return 1
        expect_grep "$ERR" "p.h5" "plot map $what: message names the file" || return 1
        expect_nofile bad.png "plot map $what" || return 1
    done
    printf 'not a map\n' >notmaps.txt
    hs plot map --maps notmaps.txt --out bad.png
    expect_rc 1 "plot map on a text file" || return 1
    expect_grep "$ERR" "notmaps.txt" "message names the file" || return 1
    expect_nofile bad.png "plot map on a text file" || return 1

    long_setup || return 1
    hs train --preset attn-only n_layer=1 n_head=2 d_model=16 --data "$LONG_BIN" --out run --steps 8 \
        --batch 2 --seq-len 16 --db runs.db
    expect_rc 0 "train --db" || return 1
    hs plot curve --db runs.db --curve train_loss --out curve.png
    expect_rc 0 "plot curve" || return 1
    png_ok curve.png || return 1
    args=(plot curve --db runs.db --curve no_such_curve --out nocurve.png)
    hs "${args[@]}"
    expect_rc 1 "plot curve --curve no_such_curve" || return 1
    expect_grep "$ERR" "no_such_curve" "message names the curve" || return 1
    expect_nofile nocurve.png "plot curve --curve no_such_curve" || return 1
}

# ---- 10. hostile map files, a full disk, signals and leftovers ----------------------------

# mutate SRC KIND...: for each KIND, h_KIND.h5 is SRC with one attribute or dataset
# made hostile (h5py; one interpreter for all, as starting one costs ~0.3 s).
mutate() {
    py - "$@" <<'EOF'
import shutil, sys, h5py, numpy as np
def make(dst, kind):
    with h5py.File(dst, "r+") as f:
        a, l0 = f.attrs, f["layer_00/attn"].attrs
        def put(attrs, name, value, dtype=None):
            del attrs[name]
            attrs.create(name, value, dtype=dtype)
        vlen = h5py.string_dtype("utf-8")
        {
            "qs_neg": lambda: put(l0, "query_start", np.int32(-1)),
            "qs_neg_big": lambda: put(l0, "query_start", np.int32(-2**31)),
            "qs_big": lambda: put(l0, "query_start", np.int32(5)),
            "qs_huge": lambda: put(l0, "query_start", np.int32(2**31 - 1)),
            "qs_int64": lambda: put(l0, "query_start", np.int64(2**40)),
            "qs_string": lambda: put(l0, "query_start", "0", dtype=vlen),
            "qs_two": lambda: put(l0, "query_start", np.array([0, 0], dtype=np.int32)),
            "heads_dup": lambda: put(l0, "heads", np.array([0, 0, 1, 2], dtype=np.int32)),
            "heads_range": lambda: put(l0, "heads", np.array([0, 1, 2, 70000], dtype=np.int32)),
            "heads_neg": lambda: put(l0, "heads", np.array([0, 1, 2, -1], dtype=np.int32)),
            "heads_short": lambda: put(l0, "heads", np.array([0, 1, 2], dtype=np.int32)),
            "layer_attr": lambda: put(l0, "layer", np.int32(1)),
            "seq_len_big": lambda: put(a, "seq_len", np.int32(2**30)),
            "seq_len_neg": lambda: put(a, "seq_len", np.int32(-8)),
            "seq_len_float": lambda: put(a, "seq_len", np.float64(8.0)),
            "seq_len_vlen": lambda: put(a, "seq_len", "8", dtype=vlen),
            "version_str": lambda: put(a, "version", "1", dtype=vlen),
            "complete_2": lambda: put(a, "complete", np.int32(2)),
            "format_int": lambda: put(a, "format", np.int32(7)),
            "format_list": lambda: put(a, "format", ["headscope-maps", "x"], dtype=vlen),
            "tokens_float": lambda: (f.__delitem__("tokens"), f.create_dataset("tokens", data=np.zeros((2, 8)))),
            "attn_int": lambda: (f.__delitem__("layer_01/attn"),
                                 f.create_dataset("layer_01/attn", data=np.zeros((2, 4, 8, 8), dtype=np.int32))),
            "attn_f64": lambda: (f.__delitem__("layer_01/attn"),
                                 f.create_dataset("layer_01/attn", data=np.zeros((2, 4, 8, 8)))),
            "attn_f16be": lambda: (f.__delitem__("layer_01/attn"),
                                   f.create_dataset("layer_01/attn", data=np.zeros((2, 4, 8, 8), dtype=">f2"))),
            "attn_group": lambda: (f.__delitem__("layer_01/attn"), f.create_group("layer_01/attn")),
            # accepted: a fixed-length ASCII string; a quote, a backslash and an escape sequence
            "ok_fixed": lambda: put(a, "format", np.bytes_(b"headscope-maps")),
            "ok_quote": lambda: put(a, "tool_version", 'x"y\\z\x1b[31m', dtype=vlen),
        }[kind]()

src = sys.argv[1]
for kind in sys.argv[2:]:
    shutil.copy(src, "h_%s.h5" % kind)
    make("h_%s.h5" % kind, kind)
EOF
}

# Map files with one attribute or dataset out of the layout (query_start < 0 or past
# seq_len, heads out of range or repeated, wrong types and counts): maps, plot and
# patterns refuse them with one line naming the file (query_start < 0 overflowed a
# heap buffer in plot and patterns); strings are escaped in --json.
hostile_maps() {
    hs capture --model "$FIX/models/gpt2_tiny" --data "$EVAL" --out good.h5 "${SMALL[@]}"
    expect_rc 0 "capture good.h5" || return 1
    local k kinds=(qs_neg qs_neg_big qs_big qs_huge qs_int64 qs_string qs_two heads_dup heads_range heads_neg
        heads_short layer_attr seq_len_big seq_len_neg seq_len_float seq_len_vlen version_str complete_2
        format_int format_list tokens_float attn_int attn_f64 attn_f16be attn_group)
    mutate good.h5 "${kinds[@]}" ok_fixed ok_quote >check.txt 2>&1 ||
        bad "could not make the hostile files: $(tail -c 300 check.txt)" || return 1
    # every file through maps; every third through plot map and patterns --maps too
    # (the same open and checks, hs_maps_open, under each command's message)
    local i=0
    for k in "${kinds[@]}"; do
        hs maps "h_$k.h5"
        expect_rc 1 "maps on h_$k.h5" || return 1
        expect_grep "$ERR" "headscope: maps: h_$k.h5" "maps h_$k.h5: message" || return 1
        expect_eq "$(wc -l <err.txt)" 1 "maps h_$k.h5: lines of stderr" || return 1
        ((i++ % 3 == 0)) || continue
        hs plot map --maps "h_$k.h5" --out "h_$k.png"
        expect_rc 1 "plot map on h_$k.h5" || return 1
        expect_nofile "h_$k.png" "plot map on h_$k.h5" || return 1
        hs patterns --maps "h_$k.h5" --db h.db
        expect_rc 1 "patterns --maps h_$k.h5" || return 1
    done
    hs maps h_ok_fixed.h5
    expect_rc 0 "maps on a file whose format is a fixed-length string" || return 1
    hs maps h_ok_quote.h5 --json
    expect_rc 0 "maps --json on a tool_version holding a quote" || return 1
    expect_eq "$(jget out.txt tool_version)" 'x"y\z?[31m' "tool_version through --json" || return 1
}

# The disk fills during a capture (a file size limit, SIGXFSZ ignored so that writes
# fail with EFBIG; and a 64 KiB tmpfs where mount is allowed): exit 1, one line of
# error naming the file, no crash at exit, no output, no temporary file.
full_disk() {
    local how
    for how in "-S -f 8" "-S -f 24" "-f 8" "-f 24"; do
        # shellcheck disable=SC2086
        # (libhdf5 keeps some buffers of a failed write: not a leak of ours under ASan)
        (trap '' XFSZ; ulimit $how; ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" exec "$HS" capture --model "$FIX/models/gpt2_tiny" --data "$EVAL" \
            --out fd.h5 --batch 2 --seq-len 16) >out.txt 2>err.txt
        RC=$?
        ERR=$(cat err.txt)
        expect_rc 1 "capture under ulimit $how" || return 1
        expect_grep "$ERR" "headscope: capture: fd.h5" "ulimit $how: message" || return 1
        expect_eq "$(wc -l <err.txt)" 1 "ulimit $how: lines of stderr ($(head -c 300 err.txt))" || return 1
        expect_nofile fd.h5 "ulimit $how" || return 1
        expect_notmp fd.h5 "ulimit $how" || return 1
    done
    mkdir -p small
    if mount -t tmpfs -o size=64k tmpfs small 2>/dev/null; then
        local k=0
        while [ $k -lt 3 ]; do # fill it: llama_gqa's maps (~80 KB) cannot fit beside these
            head -c 16384 /dev/zero >"small/fill$k"
            k=$((k + 1))
        done
        ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" hs capture --model "$FIX/models/llama_gqa" \
            --data "$EVAL" --out small/fd.h5 --batch 2 --seq-len 16
        local tmp
        tmp=$(tmps small/fd.h5)
        umount small
        expect_rc 1 "capture onto a full tmpfs" || return 1
        expect_eq "$(wc -l <err.txt)" 1 "full tmpfs: lines of stderr ($(head -c 300 err.txt))" || return 1
        [ -z "$tmp" ] || bad "temporary file left on the tmpfs: $tmp" || return 1
    else
        echo "  (mount not permitted: tmpfs part skipped)"
    fi
}

sigterm_clean() {
    long_setup || return 1
    start_long t.h5 || return 1
    sleep 0.5
    stop_bg TERM || return 1
    expect_rc 1 "capture after SIGTERM" || return 1
    expect_grep "$ERR" "interrupted" "message" || return 1
    expect_nofile t.h5 "after SIGTERM" || return 1
    expect_notmp t.h5 "after SIGTERM" || return 1
}

# The temporary file a SIGKILL leaves is removed by the next capture into the same
# output (its pid is dead); a running capture's is not.
sigkill_swept() {
    long_setup || return 1
    start_long s.h5 || return 1
    stop_bg KILL || return 1
    local orphan live
    orphan=$(tmps s.h5)
    [ -n "$orphan" ] || bad "no temporary file after SIGKILL" || return 1
    start_bg "$HS" "${LONG_CAPTURE[@]}" --model "$LONG_MODEL" --out s.h5
    wait_until 600 "s.h5.tmp.$BG_PID.*" has_glob "s.h5.tmp.$BG_PID.*" || return 1
    [ ! -e "$orphan" ] || bad "the orphan $orphan is still there after the next capture began" || return 1
    live=$(tmps s.h5)
    hs capture --model "$FIX/models/gpt2_tiny" --data "$EVAL" --out s.h5 "${SMALL[@]}"
    expect_rc 0 "a second capture into s.h5 while one runs" || return 1
    [ -n "$live" ] && [ -e "$live" ] || bad "the running capture's temporary file ($live) was removed" || return 1
    stop_bg INT || return 1
}

# Three captures into one --out at once, without --force: the output is created only
# where nothing is, at the moment it is moved into place, so exactly one succeeds and
# the others fail naming it ("exists"), leaving no temporary; the index holds one
# complete artifact, and its sha256 and size are the file's. (Before, all three exited
# 0 and recorded three artifacts, two with the digest of a file that was not there.)
concurrent_out() {
    long_setup || return 1
    local i pids=() rcs="" ok=0 failed=0
    for i in 1 2 3; do
        "$HS" "${LONG_CAPTURE[@]}" --model "$LONG_MODEL" --out c.h5 --max-batches 150 --db c.db \
            >"c$i.out" 2>"c$i.err" &
        pids+=($!)
    done
    for i in 0 1 2; do
        wait "${pids[$i]}"
        RC=$?
        rcs+="$RC "
        if [ "$RC" = 0 ]; then
            ok=$((ok + 1))
        elif [ "$RC" = 1 ]; then
            failed=$((failed + 1))
            expect_grep "$(cat "c$((i + 1)).err")" "c.h5 exists" "the losing capture's message" || return 1
        fi
    done
    expect_eq "$ok $failed" "1 2" "successes and failures of three captures into c.h5 (statuses $rcs)" ||
        return 1
    expect_notmp c.h5 "after three captures" || return 1
    expect_eq "$(sqlite3 c.db "SELECT count(*) FROM artifacts")" 1 "artifacts recorded" || return 1
    expect_eq "$(sqlite3 c.db "SELECT sha256 || ' ' || bytes || ' ' || complete FROM artifacts")" \
        "$(sha c.h5) $(fsize c.h5) 1" "the artifact's sha256, size, complete" || return 1
    expect_eq "$(sqlite3 c.db "SELECT group_concat(status, ',') FROM (SELECT status FROM runs ORDER BY status)")" \
        "complete,failed,failed" "the runs' statuses" || return 1
    hs maps c.h5 --json
    expect_rc 0 "maps on c.h5" || return 1
    expect_eq "$(jget out.txt complete)" 1 "c.h5 complete" || return 1
}

# Map files a fuzzer made crash or hang libhdf5 1.10 (tests/fixtures/maps_hostile:
# an attribute message, a variable-length string's heap index; and a global heap
# object whose size runs past its collection, made here): refused with one line,
# exit 1, for maps, plot and patterns (they crashed with SIGSEGV).
fuzzed_maps() {
    hs capture --model "$FIX/models/gpt2_tiny" --data "$EVAL" --out good.h5 "${SMALL[@]}"
    expect_rc 0 "capture good.h5" || return 1
    py - <<'EOF' || bad "could not make heap_size.h5" || return 1
import struct
b = bytearray(open("good.h5", "rb").read())
at = b.index(b"GCOL\x01\x00\x00\x00")
b[at + 24:at + 32] = struct.pack("<Q", 2**31)  # the first object's size
open("heap_size.h5", "wb").write(b)
EOF
    cp "$FIX"/maps_hostile/attr_message.h5 "$FIX"/maps_hostile/heap_index.h5 . || return 1
    local f
    for f in heap_size.h5 attr_message.h5 heap_index.h5; do
        hs maps "$f"
        expect_rc 1 "maps on $f" || return 1
        expect_grep "$ERR" "headscope: maps: $f" "maps $f: message" || return 1
        expect_eq "$(wc -l <err.txt)" 1 "maps $f: lines of stderr" || return 1
        hs plot map --maps "$f" --out x.png
        expect_rc 1 "plot map on $f" || return 1
        hs patterns --maps "$f" --db h.db
        expect_rc 1 "patterns --maps $f" || return 1
    done
}

# One that hangs libhdf5: refused after the probe's 20 s limit.
fuzzed_maps_hang() {
    local t0=$SECONDS
    hs maps "$FIX/maps_hostile/hang.h5"
    expect_rc 1 "maps on hang.h5" || return 1
    expect_grep "$ERR" "did not get through" "maps hang.h5: message" || return 1
    ((SECONDS - t0 < 60)) || bad "maps on hang.h5 took $((SECONDS - t0)) s" || return 1
}

# The slow tier (HEADSCOPE_SLOW=1, test_capture_slow): the hang probe, and the
# robustness checks that take seconds (three racing captures, SIGKILL at
# every stage of a capture, SIGINT as ten captures start).
SLOW_CHECKS="fuzzed_maps_hang concurrent_out sigkill_never_complete sigint_early"

run_checks oracle_h5py h5dump_layout maps_command selection sigkill_never_complete \
    checkpoint_changes_under_the_run sigint_clean \
    sigint_early bad_input memory_flat plot_outputs hostile_maps full_disk sigterm_clean sigkill_swept \
    concurrent_out fuzzed_maps fuzzed_maps_hang
