#!/usr/bin/env bash
# End-to-end checks of the figures of headscope plot and report: the output
# format follows --out's suffix (or is refused), colour scales are fixed by
# what a metric means (probabilities 0..1, signed metrics symmetric about 0),
# heads a layer lacks are never drawn as heads, axes and titles say what they
# show, and the report's wording (signs, plurals, command lines, the
# Jensen-Shannon matrix) reads right. Small fixture models, seconds each.
#
# usage: tests/test_figures.sh HEADSCOPE_BINARY FIXTURE_DIR
# Prints "ok NAME" or "FAIL NAME: reason" per check, then "N passed, M failed";
# exits 1 if any check failed. Needs gnuplot and /usr/bin/python3.
set -u

SUITE=figures
TESTS=$(cd "$(dirname "$0")" && pwd) # before lib.sh moves to the scratch directory
. "$TESTS/lib.sh"
GPT2="$FIX/models/gpt2_tiny"
MIXED="$FIX/models/hs_mixed" # 4 heads in layer 0, 2 in layer 1
EVAL="$GPT2/eval.bin"
command -v gnuplot >/dev/null || { echo "gnuplot is required" >&2; exit 2; }
export HEADSCOPE_SCRIPTS="${HEADSCOPE_SCRIPTS:-$TESTS/../scripts}"

SMALL=(--batch 2 --seq-len 8)

# svg_ok FILE: an SVG document.
svg_ok() {
    expect_file "$1" || return 1
    grep -q '<svg' "$1" || bad "$1 is not an SVG" || return 1
}
# scale_of FILE: the colour-box label's range "LO HI" (a minus sign may be U+2212).
scale_of() {
    py - "$1" <<'PYEOF'
import re, sys
t = open(sys.argv[1], encoding="utf-8").read().replace("\u2212", "-")
m = re.search(r"scale (-?[0-9.e+-]+) \.\. \+?([0-9.e+-]+)", t)
print("%s %s" % (m.group(1), m.group(2)) if m else "none")
PYEOF
}

# ---- output formats ------------------------------------------------------------

out_format() {
    hs capture --model "$GPT2" --data "$EVAL" --out m.h5 "${SMALL[@]}" --max-batches 1
    expect_rc 0 "capture" || return 1
    hs plot map --maps m.h5 --out m.svg
    expect_rc 0 "plot map --out m.svg" || return 1
    svg_ok m.svg || return 1
    hs plot map --maps m.h5 --out m.png
    expect_rc 0 "plot map --out m.png" || return 1
    png_ok m.png || return 1
    hs plot map --maps m.h5 --out m.pdf
    if [ "$RC" -eq 0 ]; then
        [ "$(head -c 5 m.pdf)" = "%PDF-" ] || bad "m.pdf is not a PDF" || return 1
    else # a gnuplot without pdfcairo: refused as a usage error, nothing written
        expect_rc 2 "plot map --out m.pdf" || return 1
        expect_nofile m.pdf "plot map --out m.pdf refused" || return 1
    fi
    hs plot grid --maps m.h5 --out g.pdf
    expect_rc "$RC" "plot grid --out g.pdf" || return 1
    local out
    for out in m.jpg m m.svg.txt; do
        expect_refused 2 plot ".png, .svg or .pdf" map --maps m.h5 --out "$out" || return 1
        expect_nofile "$out" "plot map --out $out" || return 1
    done
    hs induction --model "$GPT2" --db r.db --seq-len 6 --samples 4
    expect_rc 0 "induction" || return 1
    expect_refused 2 plot ".png, .svg or .pdf" scores --db r.db --metric induction --out s.gif || return 1
    expect_nofile s.gif "plot scores --out s.gif" || return 1
}

# a gnuplot without the pdfcairo terminal: .pdf is a usage error, nothing written
pdf_unsupported() {
    hs capture --model "$GPT2" --data "$EVAL" --out m.h5 "${SMALL[@]}" --max-batches 1
    expect_rc 0 "capture" || return 1
    local real
    real=$(command -v gnuplot)
    mkdir -p bin
    printf '#!/bin/sh\ncase "$*" in *pdfcairo*) exit 1;; esac\nexec "%s" "$@"\n' "$real" >bin/gnuplot
    chmod +x bin/gnuplot
    PATH="$PWD/bin:$PATH" hs plot map --maps m.h5 --out m.pdf
    expect_rc 2 "plot map --out m.pdf without pdfcairo" || return 1
    expect_grep "$ERR" "no PDF terminal" "the message says why" || return 1
    expect_nofile m.pdf "plot map --out m.pdf without pdfcairo" || return 1
    PATH="$PWD/bin:$PATH" hs plot map --maps m.h5 --out m.svg
    expect_rc 0 "plot map --out m.svg with that gnuplot" || return 1
}

# gnuplot opens the file it draws into by name: that name must lie in a
# folder only we can write (mode 700), or another user could rename a link
# over it while gnuplot runs and have the figure overwrite the link's
# target. A gnuplot in front of the real one records the folder's mode.
private_output_folder() {
    hs capture --model "$GPT2" --data "$EVAL" --out m.h5 "${SMALL[@]}" --max-batches 1
    expect_rc 0 "capture" || return 1
    local real
    real=$(command -v gnuplot)
    mkdir -p spy
    cat >spy/gnuplot <<SPY
#!/bin/bash
out=\$(printf '%s\n' "\$2" | sed -n "s/.*outfile='\\([^']*\\)'.*/\\1/p")
stat -c %a "\$(dirname "\$out")" >>"$PWD/modes.txt"
exec "$real" "\$@"
SPY
    chmod +x spy/gnuplot
    PATH="$PWD/spy:$PATH" hs plot map --maps m.h5 --out m.svg
    expect_rc 0 "plot map through the spy" || return 1
    svg_ok m.svg || return 1
    expect_eq "$(sort -u modes.txt)" 700 "the folder gnuplot draws into" || return 1
    [ -z "$(ls -d m.svg.tmp.* 2>/dev/null)" ] || bad "a private folder was left behind"
}

# ---- heads a layer lacks --------------------------------------------------------

ghost_heads() {
    hs capture --model "$MIXED" --data "$EVAL" --out m.h5 "${SMALL[@]}" --max-batches 1
    expect_rc 0 "capture of a 4 + 2 head model" || return 1
    hs plot grid --maps m.h5 --out g.svg
    expect_rc 0 "plot grid" || return 1
    svg_ok g.svg || return 1
    local t
    t=$(cat g.svg)
    expect_grep "$t" "L1H1" "the last head of layer 1 is drawn" || return 1
    if grep -qE 'L1 ?H[23]' g.svg; then bad "panels of heads layer 1 does not have"; return 1; fi
    [ "$(grep -c 'no head' g.svg)" -eq 2 ] || bad "the two missing heads are not each marked 'no head'" || return 1
    hs patterns --model "$MIXED" --data "$EVAL" "${SMALL[@]}" --db p.db
    expect_rc 0 "patterns" || return 1
    hs plot scores --db p.db --metric self --out s.svg
    expect_rc 0 "plot scores" || return 1
    expect_grep "$(cat s.svg)" "no head" "cells of heads layer 1 lacks marked" || return 1
}

# ---- colour scales -------------------------------------------------------------

fixed_scales() {
    # an untrained model: induction scores near chance, far below 1
    hs induction --model "$GPT2" --db r.db --seq-len 6 --samples 8
    expect_rc 0 "induction" || return 1
    hs plot scores --db r.db --metric induction --control --out i.svg
    expect_rc 0 "plot scores induction" || return 1
    expect_eq "$(scale_of i.svg)" "0 1" "induction's colour scale" || return 1
    hs plot scores --db r.db --metric duplicate_token --out d.svg
    expect_rc 0 "plot scores duplicate_token" || return 1
    expect_eq "$(scale_of d.svg)" "0 1" "duplicate_token's colour scale" || return 1
    hs plot scores --db r.db --metric copying --control --out c.svg
    expect_rc 0 "plot scores copying" || return 1
    expect_eq "$(scale_of c.svg)" "-1 1" "copying's colour scale" || return 1
    # entropy on 0 .. ln T, the entropy of uniform attention over T keys
    hs patterns --model "$GPT2" --data "$EVAL" --db r.db "${SMALL[@]}" --control
    expect_rc 0 "patterns" || return 1
    hs plot scores --db r.db --metric entropy --control --out e.svg
    expect_rc 0 "plot scores entropy" || return 1
    expect_grep "$(cat e.svg)" "0 .. ln T = 2.08 (T = 8)" "entropy's colour scale" || return 1
    hs ablate --model "$GPT2" --data "$EVAL" --db r.db "${SMALL[@]}"
    expect_rc 0 "ablate" || return 1
    hs plot scores --db r.db --metric loss_delta_zero --out z.svg
    expect_rc 0 "plot scores loss_delta_zero" || return 1
    local lo hi
    read -r lo hi <<<"$(scale_of z.svg)"
    [ "$lo" != none ] || bad "no stated scale for loss_delta_zero" || return 1
    close "$lo" "-$hi" 0 || bad "loss_delta_zero's scale $lo .. $hi is not symmetric about 0" || return 1
    close "$hi" 0 0 && { bad "loss_delta_zero's scale is empty"; return 1; }
    return 0
}

# ---- curves: titles and axes in words -------------------------------------------

curve_labels() {
    hs train --preset attn-only n_layer=1 n_head=2 d_model=16 n_ctx=16 --data "$EVAL" --val "$EVAL" \
        --out m --steps 4 --batch 1 --seq-len 8 --val-every 2 --db t.db
    expect_rc 0 "train" || return 1
    hs plot curve --db t.db --curve train_loss,val_loss --out c.svg
    expect_rc 0 "plot curve" || return 1
    local t
    t=$(cat c.svg)
    expect_grep "$t" "loss (nats" "the y axis says loss in nats" || return 1
    expect_grep "$t" "validation loss" "the key names the validation loss" || return 1
    expect_grep "$t" "Training and validation loss" "the title" || return 1
    if grep -q 'train_loss,val_loss' c.svg; then bad "title is the raw curve list"; return 1; fi
}

# ---- the report -----------------------------------------------------------------

report_wording() {
    hs train --preset attn-only n_layer=1 n_head=2 d_model=16 n_ctx=16 --data "$EVAL" --val "$EVAL" \
        --out m --steps 4 --batch 1 --seq-len 8 --val-every 2 --db r.db
    expect_rc 0 "train" || return 1
    hs induction --model "$GPT2" --db r.db --seq-len 6 --samples 8
    expect_rc 0 "induction" || return 1
    hs ablate --model "$GPT2" --data "$EVAL" --db r.db "${SMALL[@]}"
    expect_rc 0 "ablate" || return 1
    hs patterns --model "$GPT2" --data "$EVAL" --db r.db "${SMALL[@]}" --js-out js.csv
    expect_rc 0 "patterns --js-out" || return 1
    hs report --db r.db --out rep
    expect_rc 0 "report" || return 1
    if grep -qE '\b1 (heads|figures)\b' out.txt; then bad "plural of one: $OUT"; return 1; fi
    local page=rep/index.html
    expect_file "$page" || return 1
    if grep -q -- '+-' "$page"; then bad "'+-' on the page, not ±"; return 1; fi
    # a standard error is never printed as 0.000 when it is not 0 (two significant digits)
    if grep -qE '&plusmn; 0\.0+</td>' "$page"; then bad "a standard error printed as 0"; return 1; fi
    if grep -qE 'raises[^.<]* by (-|−|&minus;)' "$page"; then bad "a negative rise of the loss"; return 1; fi
    if grep -qE '\b1 heads\b' "$page"; then bad "'1 heads' on the page"; return 1; fi
    if grep -q "head's its" "$page"; then bad "\"head's its\" on the page"; return 1; fi
    if grep -q '\[&quot;' "$page"; then bad "a command line shown as JSON"; return 1; fi
    expect_grep "$(cat "$page")" "headscope patterns --model $GPT2" "a readable command line" || return 1
    expect_grep "$(cat "$page")" "different data" "the training caption explains the two losses" || return 1
    local js
    js=$(grep -o 'src="js_run[0-9]*\.png"' "$page" | head -n1 | sed 's/src="//; s/"$//')
    [ -n "$js" ] || bad "no Jensen-Shannon figure on the page" || return 1
    png_ok "rep/$js" || return 1
}

# rows_in PAGE ID: the body rows (<tr><td>) of the table of section ID of a report page.
rows_in() {
    py - "$1" "$2" <<'PYEOF'
import re, sys
t = open(sys.argv[1], encoding="utf-8").read()
m = re.search(r'<h2 id="%s">.*?</table>' % re.escape(sys.argv[2]), t, re.S)
print(len(re.findall(r"<tr><td>", m.group(0))) if m else "none")
PYEOF
}

# experiment head-count, gqa and windows are all runs of kind experiment: the
# head-count table shows the latest head-count run whichever ran last, and the
# GQA uptraining run has a table of its own.
report_experiment_tables() {
    shard train 80 || return 1
    hs experiment head-count --preset attn-only d_model=16 --data train.bin --db r.db --heads 1,2 \
        --seeds 1 --steps 2 --batch 2 --seq-len 16
    expect_rc 0 "experiment head-count" || return 1
    hs train --preset gpt2 d_model=32 n_ctx=48 --data train.bin --out g --steps 1 --batch 2 --seq-len 16
    expect_rc 0 "train" || return 1
    hs experiment gqa --model g --data train.bin --db r.db --original-steps 20 --kv-heads 2,1 \
        --batch 2 --seq-len 16 --max-batches 2
    expect_rc 0 "experiment gqa" || return 1
    hs report --db r.db --out rep
    expect_rc 0 "report" || return 1
    expect_eq "$(rows_in rep/index.html head-count)" 2 "head-count rows after a gqa run" || return 1
    grep -q "Head-count experiment (run 1)" rep/index.html || bad "the head-count section is not run 1's" || return 1
    expect_eq "$(rows_in rep/index.html gqa)" 3 "GQA rows: MHA, 2 and 1 key/value heads" || return 1
    hs experiment windows --preset attn-only d_model=32 n_ctx=32 --data train.bin --db r.db \
        --window 4 --seq-len 16 --batch 2 --steps 1 --seeds 1
    expect_rc 0 "experiment windows" || return 1
    hs report --db r.db --out rep
    expect_rc 0 "report" || return 1
    expect_eq "$(rows_in rep/index.html head-count)" 2 "head-count rows after a windows run" || return 1
    expect_eq "$(rows_in rep/index.html windows)" 3 "windows rows" || return 1
}

run_checks out_format pdf_unsupported private_output_folder ghost_heads fixed_scales curve_labels report_wording \
    report_experiment_tables
