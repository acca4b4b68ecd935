#!/bin/bash
# Local/global window heads end to end: the `window` override per head and
# per layer, info and config.json showing it, refusals naming the position;
# captured maps (read with h5py) exactly 0 outside each head's window; generate's
# cache bytes equal to kv-bytes with per-head windows; experiment windows' table,
# index rows and report figure.
# Usage: tests/test_windows.sh HEADSCOPE_BINARY FIXTURE_DIR [ONLY=checks]
SUITE=windows
. "$(dirname "$0")/lib.sh"

WIN='window=[[0,3,5,0],[2,0,4,4]]'

# A two-layer attn-only model with per-head windows, trained two steps.
win_model() {
    shard train 80 || return 1
    [ -s wm/model.safetensors ] && return 0
    hs train --preset attn-only d_model=32 n_ctx=32 "$WIN" --data train.bin --out wm --steps 2 \
        --batch 2 --seq-len 16
    expect_rc 0 "train with $WIN" || return 1
}

window_override_info_and_refusals() {
    win_model || return 1
    expect_grep "$(tr -d ' \n\t' <wm/config.json)" '"window":[[0,3,5,0],[2,0,4,4]]' "config.json" || return 1
    hs info --model wm --json
    expect_rc 0 "info --json" || return 1
    expect_eq "$(jget out.txt windows)" "[[0,3,5,0],[2,0,4,4]]" "info windows" || return 1
    hs info --model wm
    expect_grep "$OUT" "windows per layer [[0,3,5,0],[2,0,4,4]]" "info text" || return 1
    expect_refused 2 train '"window"[1][3] must be a non-negative integer' --preset attn-only \
        'window=[[0,3,5,0],[2,0,4,-1]]' --data train.bin --out bad --steps 1 || return 1
    expect_refused 2 train "\"window\"[0] has 2 entries for layer 0's 4 heads" --preset attn-only \
        'window=[[0,3],[2,0,4,4]]' --data train.bin --out bad --steps 1 || return 1
    expect_nofile bad "refused train" || return 1
}

capture_maps_zero_outside_windows() {
    win_model || return 1
    hs capture --model wm --data train.bin --out maps.h5 --batch 2 --seq-len 16 --max-batches 2
    expect_rc 0 "capture" || return 1
    py - maps.h5 >check.txt 2>&1 <<'PYEOF' || bad "h5py check: $(head -c 600 check.txt)" || return 1
import sys
import h5py
import numpy as np
windows = [[0, 3, 5, 0], [2, 0, 4, 4]]
with h5py.File(sys.argv[1], "r") as f:
    for l, ws in enumerate(windows):
        a = f["layer_%02d/attn" % l][...].astype(np.float64)  # (N, H, Q, S)
        N, H, Q, S = a.shape
        assert H == 4 and Q == S == 16, a.shape
        t = np.arange(Q)[:, None]
        s = np.arange(S)[None, :]
        for h, W in enumerate(ws):
            inside = (s <= t) & ((W == 0) | (s > t - W))
            out = a[:, h][:, ~inside]
            assert np.all(out == 0), (l, h, "nonzero outside the window", np.abs(out).max())
            assert np.all(a[:, h][:, inside] > 0), (l, h, "zero inside the window")
            assert np.allclose(a[:, h].sum(-1), 1, atol=1e-5), (l, h, "rows")
print("ok")
PYEOF
}

generate_cache_bytes_with_head_windows() {
    win_model || return 1
    hs generate --model wm --prompt-ids 1,2,3 --max-new 9 --json
    expect_rc 0 "generate --json" || return 1
    local cb e1
    cb=$(jget out.txt cache_bytes)
    hs kv-bytes --model wm --seq-len 12 --bytes 1 --json
    e1=$(jget out.txt kv_bytes)
    # layers of mixed windows keep every position: 2 layers x 4 kv heads x 12 x 8 x 2
    expect_eq "$e1" 1536 "kv-bytes of mixed layers" || return 1
    [ "$cb" = $((e1 * 4)) ] || [ "$cb" = $((e1 * 8)) ] ||
        bad "cache_bytes $cb is not kv-bytes $e1 x 4 or 8" || return 1
    # one shared window per layer: a ring of W positions
    hs train --preset attn-only d_model=32 n_ctx=32 'window=[3,0]' --data train.bin --out wl \
        --steps 1 --batch 2 --seq-len 16
    hs kv-bytes --model wl --seq-len 12 --bytes 1 --json
    expect_eq "$(jget out.txt kv_bytes)" $((2 * 4 * 8 * (3 + 12))) "kv-bytes with a ring" || return 1
}

experiment_windows_table() {
    shard train 80 || return 1
    hs experiment windows --preset attn-only d_model=32 n_ctx=32 --data train.bin --db runs.db \
        --window 4 --seq-len 16 --batch 2 --steps 2 --seeds 1,2 --json
    expect_rc 0 "experiment windows" || return 1
    local names
    names=$(py -c 'import sqlite3
c = sqlite3.connect("runs.db")
print(",".join(r[0] for r in c.execute("select metric from head_metrics where layer = -1 and metric like \"val_loss_windows_%\" order by metric")))')
    expect_eq "$names" "val_loss_windows_global,val_loss_windows_half,val_loss_windows_local" "index rows" || return 1
    # 2 layers x 4 kv heads x 8 dims x K and V, E bytes (4 float, 8 double): global keeps
    # 16 positions per kv head, half keeps 4 of 16 for 2 of them, local 4 for all
    expect_eq "$(py -c 'import json; r = json.load(open("out.txt"))["results"]
g = r[0]["kv_bytes_per_token"]
print(g in (512, 1024), r[1]["kv_bytes_per_token"] / g, r[2]["kv_bytes_per_token"] / g)')" \
        "True 0.625 0.25" "kv bytes per token" || return 1
    hs report --db runs.db --out rep
    expect_rc 0 "report" || return 1
    expect_grep "$(cat rep/index.html)" 'id="windows"' "report section" || return 1
    ls rep/windows_run*.png >/dev/null 2>&1 || bad "no windows figure" || return 1
    expect_refused 2 experiment "--window 16 is not shorter than --seq-len 16" windows \
        --preset attn-only --data train.bin --db r2.db --window 16 --seq-len 16 || return 1
    expect_nofile r2.db "refused experiment" || return 1
}

run_checks window_override_info_and_refusals capture_maps_zero_outside_windows \
    generate_cache_bytes_with_head_windows experiment_windows_table
