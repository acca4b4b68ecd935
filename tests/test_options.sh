#!/usr/bin/env bash
# End-to-end checks of how every headscope command reads its options (SPEC §8):
# --opt=value as --opt value, options that do not apply refused (exit 2, nothing
# written or recorded), and --json printing exactly one JSON object on stdout
# while errors stay on stderr.
#
# usage: tests/test_options.sh HEADSCOPE_BINARY FIXTURE_DIR
# Prints "ok NAME" or "FAIL NAME: reason" per check, then "N passed, M failed";
# exits 1 if any check failed. Needs sqlite3.
set -u

SUITE=options
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
GPT2="$FIX/models/gpt2_tiny"
EVAL="$GPT2/eval.bin"
command -v sqlite3 >/dev/null || { echo "sqlite3 is required" >&2; exit 2; }

# ---- helpers -------------------------------------------------------------------

SMALL=(--batch 2 --seq-len 8) # eval.bin: 33 tokens, 2 batches of 2 x 8 (+1)

runs() { sqlite3 "$1" 'select count(*) from runs' 2>/dev/null || echo 0; }

# one_object WHAT: the last hs call exited 0 and its stdout is exactly one JSON
# object (nothing before or after it).
one_object() {
    expect_rc 0 "$1" || return 1
    py -c 'import json,sys
v = json.loads(open(sys.argv[1]).read())
sys.exit(0 if isinstance(v, dict) else 1)' out.txt 2>/dev/null ||
        bad "$1 --json: stdout is not one JSON object: $(head -c 300 out.txt)"
}


# maps_file: m.h5, every map of gpt2_tiny on eval.bin (once).
maps_file() {
    [ -s m.h5 ] && return 0
    "$HS" capture --model "$GPT2" --data "$EVAL" --out m.h5 "${SMALL[@]}" >/dev/null 2>&1 ||
        bad "capture could not make m.h5"
}

# refused_clean DB CMD PATTERN ARGS...: refused with exit 2 and PATTERN in the
# message (expect_refused), and DB not created.
refused_clean() {
    local db=$1
    shift
    expect_refused 2 "$@" || return 1
    expect_nofile "$db" "$1 refused" || return 1
}

# ---- 1. --opt=value ------------------------------------------------------------

# --opt=value means --opt value, in every command's parser
equals_value() {
    hs info --model "$GPT2" --json
    expect_rc 0 "info --model DIR" || return 1
    local spaced=$OUT
    hs info --model="$GPT2" --json
    expect_rc 0 "info --model=DIR" || return 1
    expect_eq "$OUT" "$spaced" "info --model=DIR output" || return 1
    hs eval --model "$GPT2" --data "$EVAL" --batch 2 --seq-len 8 --json
    expect_rc 0 "eval" || return 1
    spaced=$OUT
    hs eval --model="$GPT2" --data="$EVAL" --batch=2 --seq-len=8 --max-batches=0 --json
    expect_rc 0 "eval --opt=value" || return 1
    expect_eq "$OUT" "$spaced" "eval --opt=value output" || return 1
    hs kv-bytes --layers=80 --kv-heads=8 --head-dim=128 --seq-len=2048 --json
    expect_rc 0 "kv-bytes --opt=value" || return 1
    expect_eq "$(jget out.txt kv_bytes)" 671088640 "kv-bytes --opt=value kv_bytes" || return 1
    # a value may hold '=' itself
    printf 'a=b' >in=1.txt
    hs tokens --in=in=1.txt --out=t.bin --json
    expect_rc 0 "tokens --in=in=1.txt" || return 1
    expect_eq "$(jget out.txt tokens)" 3 "tokens of in=1.txt" || return 1
    # KEY=VALUE overrides are not options: still the preset's overrides
    shard corpus 120 || return 1
    hs train --preset=attn-only n_layer=1 d_model=16 --data=corpus.bin --out=run --steps=1 \
        --batch=2 --seq-len=8 --json
    expect_rc 0 "train --opt=value KEY=VALUE" || return 1
    hs info --model run --json
    expect_eq "$(jget out.txt n_layer)" 1 "n_layer=1 override with --opt=value" || return 1
    expect_eq "$(jget out.txt d_model)" 16 "d_model=16 override with --opt=value" || return 1
}

# an empty value, a flag given a value and an unknown --name=value are usage errors
equals_errors() {
    expect_refused 2 info "option --model needs a value (DIR)" --model= || return 1
    expect_refused 2 eval "option --batch needs a value" --model "$GPT2" --data "$EVAL" --batch= || return 1
    expect_refused 2 info "option --json takes no value" --model "$GPT2" --json=1 || return 1
    expect_refused 2 tokens "option --force takes no value" --in x --out y --force=yes || return 1
    expect_refused 2 info "unknown option '--nosuch'" --model "$GPT2" --nosuch=3 || return 1
    expect_refused 2 eval "option --batch: 'x' is not an integer" --model "$GPT2" --data "$EVAL" --batch=x || return 1
}

# a resumed run matches its original however either spelt its options
equals_resume() {
    hs ablate --model "$GPT2" --data "$EVAL" --db a.db "${SMALL[@]}" --method zero --json
    expect_rc 0 "ablate" || return 1
    local id
    id=$(jget out.txt run_id)
    hs ablate --model="$GPT2" --data="$EVAL" --db=a.db --batch=2 --seq-len=8 --method=zero \
        --resume="$id" --threads=1 --json
    expect_rc 0 "ablate --resume=$id with --opt=value" || return 1
    expect_eq "$(jget out.txt run_id)" "$id" "run_id of the resumed run" || return 1
    expect_eq "$(runs a.db)" 1 "runs after --resume" || return 1
    expect_refused 1 ablate "other options" --model="$GPT2" --data="$EVAL" --db=a.db --batch=2 \
        --seq-len=8 --method=mean --resume="$id" || return 1
}

# ---- 2. options that do not apply ------------------------------------------------

refuse_patterns() {
    maps_file || return 1
    local m=(--maps m.h5 --db p.db)
    refused_clean p.db patterns "--model does not apply with --maps" "${m[@]}" --model "$GPT2" || return 1
    refused_clean p.db patterns "--model does not apply with --maps" "${m[@]}" --model="$GPT2" || return 1
    refused_clean p.db patterns "--data does not apply with --maps" "${m[@]}" --data "$EVAL" || return 1
    local o
    for o in "--batch 2" "--seq-len 8" "--max-batches 1" "--threads 1" "--seed 3"; do
        # shellcheck disable=SC2086
        refused_clean p.db patterns "${o%% *} does not apply with --maps" "${m[@]}" $o || return 1
    done
    refused_clean p.db patterns "--control does not apply with --maps" "${m[@]}" --control || return 1
    refused_clean p.db patterns "--seed needs --control" --model "$GPT2" --data "$EVAL" \
        "${SMALL[@]}" --db p.db --seed 3 || return 1
    # what applies still runs
    hs patterns "${m[@]}" --json
    one_object "patterns --maps" || return 1
    hs patterns --model "$GPT2" --data "$EVAL" "${SMALL[@]}" --db p.db --control --seed 3 --json
    one_object "patterns --control --seed" || return 1
}

refuse_model_commands() {
    shard corpus 120 || return 1
    refused_clean x.bin tokens "--seq-len needs --repeat-share" --in corpus.txt --out x.bin --seq-len 32 || return 1
    refused_clean x.bin tokens "--seed needs --repeat-share" --in corpus.txt --out x.bin --seed 3 || return 1
    refused_clean x.bin tokens "--random-share needs --repeat-share" --in corpus.txt --out x.bin \
        --random-share 0.5 || return 1
    refused_clean x.bin tokens "--repeat-len needs --repeat-share" --in corpus.txt --out x.bin \
        --repeat-len 2:4 || return 1
    local t=(--data corpus.bin --out run --steps 1 --batch 2 --seq-len 8)
    local g=(--init "$GPT2" --data "$EVAL" --out run --steps 1 "${SMALL[@]}")
    # --seed with --init: accepted (SPEC §8 lists it for train; sweeps pass it to every
    # run), with a note that it seeds nothing there; the run is the same as without it
    hs train "${g[@]}" --seed 5 --db t.db
    expect_rc 0 "train --init --seed" || return 1
    expect_grep "$ERR" "--seed seeds nothing with --init" "train --init --seed's note" || return 1
    rm -rf run t.db*
    refused_clean run train "--val-every needs --val" --preset attn-only "${t[@]}" --val-every 1 || return 1
    refused_clean run train "--val-batches needs --val" --preset attn-only "${t[@]}" --val-batches 1 || return 1
    expect_refused 2 kv-bytes "--mla-rope needs --mla-latent" --layers 2 --kv-heads 2 --head-dim 4 \
        --seq-len 8 --mla-rope 4 || return 1
}

refuse_analyses() {
    local a=(--model "$GPT2" --data "$EVAL" --db a.db "${SMALL[@]}")
    refused_clean a.db ablate "--stack does not apply with --naive" "${a[@]}" --naive --stack 2 || return 1
    refused_clean a.db prune "--force needs --out" "${a[@]}" --force || return 1
    refused_clean a.db prune "--structural needs --out" "${a[@]}" --structural || return 1
    local i=(--model "$GPT2" --db a.db --seq-len 6 --samples 8)
    refused_clean a.db induction "--early needs --data" "${i[@]}" --early 1 || return 1
    refused_clean a.db induction "--late needs --data" "${i[@]}" --late 6 || return 1
    refused_clean a.db induction "--icl-seq-len needs --data" "${i[@]}" --icl-seq-len 8 || return 1
    shard corpus 120 || return 1
    refused_clean a.db experiment "n_head=2 does not apply with --heads" head-count \
        --preset attn-only d_model=16 n_head=2 --data corpus.bin --db a.db --heads 1,2 --seeds 1 \
        --steps 1 --batch 2 --seq-len 16 || return 1
}

# plot's kinds take different options: one that a kind would ignore is refused
# and nothing is written
refuse_plot() {
    local -A base=([map]="--maps m.h5" [grid]="--maps m.h5" [scores]="--db x.db --metric induction"
                   [curve]="--db x.db --curve c" [causal]="--db x.db")
    local k
    for k in "map --db x.db" "grid --layer 1" "grid --head 1" "scores --maps m.h5" "scores --curve c" \
             "curve --metric m" "curve --control" "causal --metric m" "causal --seq 2"; do
        set -- $k
        # shellcheck disable=SC2086
        refused_clean p.png plot "$2 does not apply to plot $1" "$1" ${base[$1]} --out p.png $2 ${3:-} ||
            return 1
    done
}

# the help lists which options apply together, and the general help --opt=value
help_rules() {
    hs help
    expect_grep "$OUT" "--model=DIR" "help" || return 1
    hs help patterns
    expect_grep "$OUT" "--model, --data, --pairs: not with --maps" "help patterns" || return 1
    hs help train
    expect_grep "$OUT" "--val-every, --val-batches: only with --val" "help train" || return 1
    hs help version
    expect_grep "$OUT" "--json" "help version" || return 1
}

# ---- 3. --json ----------------------------------------------------------------------

# every command but help prints exactly one JSON object with --json
json_everywhere() {
    hs version --json
    one_object version || return 1
    expect_grep "$(jget out.txt version)" "." "version's version" || return 1
    hs info --model "$GPT2" --json
    one_object info || return 1
    hs kv-bytes --layers 2 --kv-heads 2 --head-dim 4 --seq-len 8 --mla-latent 4 --mla-rope 2 --json
    one_object kv-bytes || return 1
    shard corpus 120 || return 1
    hs tokens --in corpus.txt --out r.bin --repeat-share 0.5 --seq-len 32 --json
    one_object tokens || return 1
    hs eval --model "$GPT2" --data "$EVAL" "${SMALL[@]}" --json
    one_object eval || return 1
    hs train --preset attn-only n_layer=1 d_model=16 --data corpus.bin --val corpus.bin --out run \
        --steps 2 --batch 2 --seq-len 8 --val-every 1 --db j.db --json
    one_object train || return 1
    hs capture --model "$GPT2" --data "$EVAL" --out c.h5 "${SMALL[@]}" --db j.db --json
    one_object capture || return 1
    hs maps c.h5 --json
    one_object maps || return 1
    local a=(--model "$GPT2" --data "$EVAL" --db j.db "${SMALL[@]}")
    hs ablate "${a[@]}" --json
    one_object ablate || return 1
    hs importance "${a[@]}" --json
    one_object importance || return 1
    hs head-norms "${a[@]}" --json
    one_object head-norms || return 1
    hs prune "${a[@]}" --step-percent 50 --json
    one_object prune || return 1
    hs induction --model "$GPT2" --db j.db --seq-len 6 --samples 8 --json
    one_object induction || return 1
    hs patterns "${a[@]}" --json
    one_object patterns || return 1
    hs patterns --maps c.h5 --db j.db --json
    one_object "patterns --maps" || return 1
    hs experiment head-count --preset attn-only d_model=16 --data corpus.bin --db j.db --heads 1,2 \
        --seeds 1 --steps 2 --batch 2 --seq-len 16 --json
    one_object experiment || return 1
}

# with --json, errors still go to stderr only, with their exit codes
json_errors() {
    expect_refused 1 info "nosuch" --model nosuch --json || return 1
    expect_refused 2 eval "are required" --model "$GPT2" --json || return 1
    expect_refused 2 version "unexpected argument" extra --json || return 1
    expect_refused 1 maps "nosuch.h5" nosuch.h5 --json || return 1
    expect_refused 2 patterns "--model does not apply with --maps" --maps x.h5 --model "$GPT2" \
        --db x.db --json || return 1
    expect_refused 1 ablate "nosuch.bin" --model "$GPT2" --data nosuch.bin --db x.db --json || return 1
}

run_checks equals_value equals_errors equals_resume refuse_patterns refuse_model_commands \
    refuse_analyses refuse_plot help_rules json_everywhere json_errors
