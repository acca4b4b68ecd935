#!/usr/bin/env bash
# The reference pages: docs/commands/ is exactly what scripts/gen-docs writes
# from the command records (so each page equals `headscope help COMMAND`),
# one page per command, and the README's command table lists every command
# with the summary its record gives.
#
# usage: tests/test_docs.sh HEADSCOPE_BINARY FIXTURE_DIR
set -u

SUITE=docs
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
SRC=$(cd "$FIX/../.." && pwd)

pages_are_generated() {
    "$SRC/scripts/gen-docs" "$HS" gen >gen.log 2>&1 || bad "gen-docs: $(tail -c 300 gen.log)" ||
        return 1
    local d
    d=$(diff -r gen "$SRC/docs/commands") ||
        bad "docs/commands differs from the records (run scripts/gen-docs build/float/headscope): $(printf '%s' "$d" | head -c 600)"
}

each_page_is_the_help() {
    local name
    for name in $("$HS" help | sed -n '/^commands:$/,/^$/p' | sed -n 's/^  \([a-z-]*\) .*/\1/p'); do
        hs help "$name"
        expect_rc 0 "help $name" || return 1
        # the page's code block, exactly
        sed -n '/^```$/,/^```$/p' "$SRC/docs/commands/$name.md" | sed '1d;$d' >page.txt
        printf '%s\n' "$OUT" >help.txt
        cmp -s page.txt help.txt || bad "docs/commands/$name.md is not 'headscope help $name'" ||
            return 1
    done
}

readme_lists_every_command() {
    local name summary
    sed 's/\\\*/*/g' "$SRC/README.md" >readme.txt # Markdown's \* is a *
    while IFS=$'\t' read -r name summary; do
        grep -qF -- "\`$name\`" readme.txt || bad "README's command table lacks $name" || return 1
        grep -qF -- "$summary" readme.txt ||
            bad "README's command table: the summary of $name differs from its record: $summary" ||
            return 1
    done < <("$HS" help | sed -n '/^commands:$/,/^$/p' | sed -n 's/^  \([a-z-]*\) *\(.*\)$/\1\t\2/p')
}

# The README is the front door: at most 400 lines (the reference is in docs/).
readme_is_short() {
    local n
    n=$(wc -l <"$SRC/README.md")
    [ "$n" -le 400 ] || bad "README.md is $n lines (at most 400)"
}

run_checks pages_are_generated each_page_is_the_help readme_lists_every_command readme_is_short
