#!/usr/bin/env python3
"""The README's SAE study: which of an SAE's features fire on the second copy
of a repeated segment, and how they are attributed to heads.

    /usr/bin/python3 scripts/sae_features.py FEATS.h5 INDEX.db PERIOD

FEATS.h5 is `headscope features --out` over sequences whose planted segment
of PERIOD tokens is repeated right after itself (`tokens --repeat-len P:P`);
INDEX.db holds that features run and an `induction` run, whose highest
scoring head is the induction head. A token is in a second copy when it and
the token before it equal the tokens PERIOD positions earlier. For each
feature active on at least 1% of the tokens: the share of its activation mass
on second copies. Printed: how many features put >= 90% of their mass there,
their mean head share on the induction head against the other features',
and for the one with the largest such share its examples' direct feature
attribution: the share of the DFA sum on (induction head, source t - PERIOD
+ 1), the token after the earlier occurrence of the current one, where an
induction head looks. numpy, h5py and sqlite3."""
import sqlite3
import sys

import h5py
import numpy as np

feats, db, period = sys.argv[1], sys.argv[2], int(sys.argv[3])
f = h5py.File(feats, "r")
tok = f["tokens"][()]
N, T = tok.shape
indptr, idx, val = (f["features/" + k][()] for k in ("indptr", "indices", "values"))
d, run = int(f["features"].attrs["d_sae"]), int(f["features"].attrs["run_id"])
P = period
second = np.zeros_like(tok, dtype=bool)
second[:, P + 1:] = (tok[:, P + 1:] == tok[:, 1:-P]) & (tok[:, P:-1] == tok[:, :-P - 1])
rows = np.repeat(np.arange(N * T), np.diff(indptr))
mass, on_second, count = np.zeros(d), np.zeros(d), np.zeros(d)
np.add.at(mass, idx, val)
np.add.at(on_second, idx, val * second.reshape(-1)[rows])
np.add.at(count, idx, 1)
live = count >= 0.01 * N * T
share = np.where(live, on_second / np.maximum(mass, 1e-30), 0)

q = sqlite3.connect(db).execute
L, H = q("SELECT layer, head FROM head_metrics WHERE metric = 'induction' AND run_id ="
         " (SELECT max(run_id) FROM head_metrics WHERE metric = 'induction')"
         " ORDER BY value DESC, layer, head LIMIT 1").fetchone()
hs = np.zeros(d)
for feature, v in q("SELECT feature, value FROM feature_metrics WHERE run_id = ? AND"
                    " metric = 'head_share' AND head = ? AND layer = ?", (run, H, L)):
    hs[feature] = v
rep = np.where(live & (share >= 0.9))[0]
other = np.where(live & (share < 0.9))[0]
heads = q("SELECT count(DISTINCT head) FROM feature_metrics WHERE run_id = ? AND"
          " metric = 'head_share'", (run,)).fetchone()[0]
print(f"induction head L{L}H{H}; {second.mean():.3f} of the tokens are second copies; "
      f"{int(live.sum())} features active on >= 1% of the tokens")
print(f"{len(rep)} put >= 90% of their activation on second copies: mean L{L}H{H} head share "
      f"{hs[rep].mean():.3f}, against {hs[other].mean():.3f} for the other {len(other)} "
      f"(uniform: {1 / heads:.3f})")
best = int(rep[np.argmax(hs[rep])])
total = hit = 0.0
for seq, pos in q("SELECT seq, position FROM feature_examples WHERE run_id = ? AND feature = ?",
                  (run, best)).fetchall():
    for head, src, v in q("SELECT head, source, value FROM feature_dfa WHERE run_id = ? AND"
                          " feature = ? AND seq = ? AND position = ?", (run, best, seq, pos)):
        total += v
        hit += v if head == H and src == pos - P + 1 else 0
print(f"feature {best}: {share[best]:.3f} of its mass on second copies, L{L}H{H} head share "
      f"{hs[best]:.3f}; its top examples' DFA: {hit / total:.3f} of the sum through L{L}H{H} "
      f"from the token after the earlier occurrence (t - {P - 1})")
