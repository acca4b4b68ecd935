"""hs.show and cache.show: the viewer's head view as one self-contained
piece of HTML for notebooks. The HTML's data equals the cached pattern
(rounded to its 4 decimals), token strings stay text (a token
"</script>" cannot end the script), Jupyter's _repr_html_ gives it, bad
shapes are refused; and, where chromium and playwright-core are installed,
the HTML as a notebook shows it (inside a page of other cells) draws every
head's lines, a hovered query keeps its lines alone, a head's chip hides
its colour."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import numpy as np

from util import MODELS, ROOT, hs

NODE_PATH = os.environ.get("HS_NPM_DIR") or os.path.join(ROOT, "build", "npm", "node_modules")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def data_of(html):
    """The JSON the head view's script carries."""
    start = html.index("const D = ") + len("const D = ")
    end = html.index(", root = document.getElementById(")
    return json.loads(html[start:end].replace("<\\/", "</"))


class Show(unittest.TestCase):
    def setUp(self):
        self.m = hs.Model.open(os.path.join(MODELS, "gpt2_tiny"))
        self.addCleanup(self.m.close)
        self.ids = [[3, 9, 14, 3, 9, 14, 27, 5]]
        _, self.cache = self.m.run_with_cache(self.ids, names=["blocks.1.attn.hook_pattern"])
        self.tokens = ["a", "</script><b>x</b>", "c", "a", '"q"', "c", "\n", "end"]

    def test_the_html_carries_the_pattern(self):
        v = self.cache.show(1, self.tokens)
        self.assertIsInstance(v, hs.HeadView)
        self.assertEqual(v._repr_html_(), v.html)
        self.assertEqual(str(v), v.html)
        d = data_of(v.html)
        self.assertEqual(d, v.data)
        want = self.cache["pattern", 1][0]
        self.assertEqual(d["heads"], list(range(want.shape[0])))
        self.assertEqual(d["queries"], self.tokens)
        self.assertEqual(d["keys"], self.tokens)
        np.testing.assert_allclose(np.array(d["w"]), want, atol=5.1e-5)
        # a token's text never ends the script or becomes markup
        self.assertNotIn("</script><b>", v.html)
        self.assertEqual(v.html.count("<script>"), 1)
        self.assertEqual(v.html.count("</script>"), 1)

    def test_keys_of_their_own_and_head_ids(self):
        p = np.full((2, 3, 5), 0.2)
        v = hs.show(p, ["t0", "t1", "t2"], key_tokens=list("abcde"), heads=[4, 7])
        self.assertEqual(v.data["keys"], list("abcde"))
        self.assertEqual(v.data["heads"], [4, 7])
        self.assertEqual(hs.show(p).data["queries"], ["0", "1", "2"])
        # two views on one page do not share an element id
        self.assertNotEqual(hs.show(p).html.split('"')[1], hs.show(p).html.split('"')[1])

    def test_refusals(self):
        with self.assertRaisesRegex(ValueError, r"\[head, query, key\]"):
            hs.show(np.zeros((3, 4)))
        with self.assertRaisesRegex(ValueError, "2 query and 3 key strings"):
            hs.show(np.zeros((1, 3, 3)), ["a", "b"], key_tokens=["x", "y", "z"])
        with self.assertRaisesRegex(ValueError, "not finite"):
            hs.show(np.full((1, 2, 2), np.nan))
        with self.assertRaisesRegex(ValueError, "3 head ids for 1 heads"):
            hs.show(np.zeros((1, 2, 2)), heads=[0, 1, 2])

    @unittest.skipUnless(shutil.which("node") and os.path.exists(CHROMIUM) and
                         os.path.isdir(os.path.join(NODE_PATH, "playwright-core")),
                         "node, chromium or playwright-core missing (scripts/setup --browser)")
    def test_it_draws_in_a_notebook_page(self):
        v = self.cache.show(1, self.tokens)
        with tempfile.TemporaryDirectory() as d:
            page = os.path.join(d, "notebook.html")
            with open(page, "w") as f:   # as a notebook's output area holds it, among other cells
                f.write("<!DOCTYPE html><html><body><div class='cell'>In [3]:</div>"
                        "<div class='output'>%s</div><div class='cell'>In [4]:</div></body></html>"
                        % v._repr_html_())
            script = os.path.join(d, "check.js")
            with open(script, "w") as f:
                f.write(CHECK_JS)
            out = subprocess.run(["node", script, page], capture_output=True, text=True,
                                 env=dict(os.environ, NODE_PATH=NODE_PATH), timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr[-2000:])
        r = json.loads(out.stdout)
        heads = len(v.data["heads"])
        self.assertEqual(r["heads_drawn"], heads)
        self.assertTrue(r["lines"] > 0 and r["hover_ok"] and r["toggle_ok"], r)
        self.assertEqual(r["errors"], [])


CHECK_JS = r"""
const { chromium } = require("playwright-core");
(async () => {
  const b = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
                                    headless: true, args: ["--no-sandbox", "--disable-gpu"] });
  const p = await b.newPage({ viewport: { width: 900, height: 900 } });
  const errors = [];
  p.on("pageerror", (e) => errors.push(String(e)));
  await p.goto("file://" + process.argv[2]);
  const lines = () => p.evaluate(() => document.querySelector(".hs-headview").hsLines);
  const all = await lines();
  const box = await p.$eval(".hs-headview canvas", (c) => { const r = c.getBoundingClientRect(); return [r.left, r.top]; });
  await p.mouse.move(box[0] + 40, box[1] + 4 + 3 * 16 + 8);  // query 3
  const mine = await lines();
  await p.mouse.move(1, 1);
  await p.click('.hs-headview span[data-i="0"]');
  const off = await lines();
  console.log(JSON.stringify({
    lines: all.length, heads_drawn: new Set(all.map((x) => x[0])).size,
    hover_ok: mine.length > 0 && mine.every((x) => x[1] === 3),
    toggle_ok: off.length > 0 && off.every((x) => x[0] !== 0), errors }));
  await b.close();
})().catch((e) => { process.stderr.write(String(e.stack || e)); process.exit(1); });
"""

if __name__ == "__main__":
    unittest.main()
