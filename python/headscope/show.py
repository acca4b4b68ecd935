"""The head view in a notebook: hs.show(pattern, tokens) returns the
viewer's head view (bertviz's: every head a colour, lines from each query
token to the keys it attends to, opacity the weight; hover a token for its
lines alone, click a head to hide it) as one self-contained piece of HTML,
as CircuitsVis does: Jupyter shows it (_repr_html_), str() gives the HTML.
No network, no library: the data and a small script travel inside it.

    logits, cache = m.run_with_cache(ids, names=["blocks.1.attn.hook_pattern"])
    hs.show(cache["pattern", 1][0], tokens)      # [head, query, key]
    cache.show(1, tokens)                        # the same for the first sequence
"""
import itertools
import json

import numpy as np

_ids = itertools.count()

_SCRIPT = r"""
(function () {
  const D = @DATA@, root = document.getElementById(@ID@);
  const C = ["#1f77b4","#ff7f0e","#2ca02c","#d62728","#9467bd","#8c564b","#e377c2","#7f7f7f",
             "#bcbd22","#17becf","#393b79","#637939","#8c6d31","#843c39","#7b4173","#3182bd"];
  const ROW = 16, TEXT = 150, W = 560, off = new Set();
  let hover = null;
  const chips = root.querySelector(".hs-chips"), cv = root.querySelector("canvas");
  const short = (s) => (s.length > 14 ? s.slice(0, 13) + "\u2026" : s).replace(/\n/g, "\u21b5");
  D.heads.forEach((h, i) => {
    const c = document.createElement("span");
    c.textContent = "H" + h;
    c.dataset.i = i;
    c.style.cssText = "border:2px solid " + C[i % 16] + ";border-radius:3px;padding:0 5px;" +
                      "margin-right:4px;cursor:pointer;font:12px sans-serif;color:#fff;background:" + C[i % 16];
    c.onclick = () => {
      off.has(i) ? off.delete(i) : off.add(i);
      c.style.background = off.has(i) ? "" : C[i % 16];
      c.style.color = off.has(i) ? "#555" : "#fff";
      draw();
    };
    chips.appendChild(c);
  });
  function draw() {
    const nq = D.queries.length, nk = D.keys.length, rows = Math.max(nq, nk);
    cv.width = W; cv.height = rows * ROW + 8;
    const x = cv.getContext("2d"), y = (i) => 4 + i * ROW + ROW / 2, xl = TEXT, xr = W - TEXT;
    x.font = "12px monospace"; x.textBaseline = "middle"; x.fillStyle = "#222";
    x.textAlign = "right";
    D.queries.forEach((t, i) => x.fillText(short(t), xl - 6, y(i)));
    x.textAlign = "left";
    D.keys.forEach((t, i) => x.fillText(short(t), xr + 6, y(i)));
    const lines = [];
    x.lineWidth = 2;
    D.w.forEach((m, hi) => {
      if (off.has(hi)) return;
      x.strokeStyle = C[hi % 16];
      m.forEach((row, q) => {
        if (hover && hover.side === "q" && hover.t !== q) return;
        row.forEach((p, k) => {
          if (!(p >= 0.01) || (hover && hover.side === "k" && hover.t !== k)) return;
          x.globalAlpha = Math.min(1, p);
          x.beginPath(); x.moveTo(xl, y(q)); x.lineTo(xr, y(k)); x.stroke();
          lines.push([D.heads[hi], q, k, p]);
        });
      });
    });
    x.globalAlpha = 1;
    root.hsLines = lines;
  }
  cv.onmousemove = (ev) => {
    const r = cv.getBoundingClientRect(), i = Math.floor((ev.clientY - r.top - 4) / ROW);
    const side = ev.clientX - r.left < W / 2 ? "q" : "k";
    const n = side === "q" ? D.queries.length : D.keys.length;
    const next = i >= 0 && i < n ? side + i : "";
    if (next !== (hover ? hover.side + hover.t : "")) { hover = next ? { side, t: i } : null; draw(); }
  };
  cv.onmouseleave = () => { hover = null; draw(); };
  draw();
})();
"""


class HeadView:
    """The HTML of a head view: shown by Jupyter (_repr_html_), str() the
    HTML itself, .data what it draws."""

    def __init__(self, html, data):
        self.html = html
        self.data = data

    def _repr_html_(self):
        return self.html

    def __str__(self):
        return self.html


def _script_json(obj):
    """JSON that is safe inside <script>: no '</' (a token '</script>' stays text)."""
    return json.dumps(obj, ensure_ascii=True).replace("</", "<\\/")


def show(pattern, tokens=None, key_tokens=None, heads=None, title=None, decimals=4):
    """The head view of pattern [head, query, key] (one sequence's maps of
    one layer, e.g. cache["pattern", L][0]), tokens the queries' strings
    (default: their positions), key_tokens the keys' (default: tokens; a
    cross-attention map's source), heads the head ids (default 0..H-1).
    Weights are rounded to `decimals`; lines under 0.01 are left out."""
    w = np.asarray(pattern, dtype=np.float64)
    if w.ndim == 4 and w.shape[0] == 1:
        w = w[0]
    if w.ndim != 3:
        raise ValueError("pattern must be [head, query, key] (or [1, head, query, key]), not %s"
                         % (w.shape,))
    H, Q, K = w.shape
    if not np.all(np.isfinite(w)):
        raise ValueError("pattern holds a value that is not finite")
    queries = [str(t) for t in tokens] if tokens is not None else [str(i) for i in range(Q)]
    keys = [str(t) for t in key_tokens] if key_tokens is not None else (
        queries if tokens is not None and K == Q else [str(i) for i in range(K)])
    if len(queries) != Q or len(keys) != K:
        raise ValueError("%d query and %d key strings for a pattern of %d queries and %d keys"
                         % (len(queries), len(keys), Q, K))
    heads = [int(h) for h in heads] if heads is not None else list(range(H))
    if len(heads) != H:
        raise ValueError("%d head ids for %d heads" % (len(heads), H))
    data = {"heads": heads, "queries": queries, "keys": keys,
            "w": np.round(w, decimals).tolist()}
    div = "hs-headview-%d" % next(_ids)
    head = (title or "head view") + ": hover a token for its lines, click a head to hide it"
    html = ('<div id="%s" class="hs-headview"><div style="font:13px sans-serif;margin:4px 0">%s'
            '</div><div class="hs-chips" style="margin-bottom:4px"></div><canvas></canvas>'
            "<script>%s</script></div>"
            % (div, _escape(head),
               _SCRIPT.replace("@DATA@", _script_json(data)).replace("@ID@", json.dumps(div))))
    return HeadView(html, data)


def _escape(s):
    return (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))
