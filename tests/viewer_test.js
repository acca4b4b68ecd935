// The viewer in headless Chromium (playwright-core), for tests/test_viewer.sh
// and bench/viewer.sh. Prints one JSON line; exits 1 with "FAIL: reason" on
// stderr when a check fails, 3 when the browser cannot start.
//
//   node viewer_test.js check  DIR EXPECT.json SHOT.png   rows, colours, tooltips, keys
//   node viewer_test.js escape DIR TEXTS.json SHOT.png    token strings shown as text
//   node viewer_test.js gqa    DIR                         kv-head labels
//   node viewer_test.js perf   DIR [HOVERS]                interactive and hover times
//   node viewer_test.js focus  DIR L.H,L.H                 view --heads: shown and linked
//   node viewer_test.js seq2seq DIR EXPECT.json SHOT.png   cross maps: source x target
//   node viewer_test.js features DIR EXPECT.json SHOT.png  the feature page (SPEC §19)
//   node viewer_test.js headview DIR EXPECT.json SHOT.png  the head view: lines, hover, toggles
//   node viewer_test.js compare DIR A.json B.json SHOT.png view --compare: A, B and A - B
//   node viewer_test.js find    DIR TEXT SEQS.json          --sequences all and the find box
//   node viewer_test.js grid    DIR                         the model view's scores, printed
//   node viewer_test.js pads    DIR PADS.json               ragged --lines sentences' padding
//   node viewer_test.js long    DIR EXPECT.json SHOT.png   a long map's rows loaded on demand
//
// EXPECT.json (written from the HDF5 file with h5py): {"dtype": "u8"|"f16",
// "q": i, "layers": [L...], "heads": [[H...]...], "rows": {"L,H": [p...]},
// "cols": {"L,H": [p...]}} with rows = att[seq 0, H, i, :], cols = att[0, H, :, i].
"use strict";
const path = require("path");
const fs = require("fs");

function fail(msg) { process.stderr.write("FAIL: " + msg + "\n"); process.exit(1); }
function need(cond, msg) { if (!cond) fail(msg); }

let chromium;
try {
  ({ chromium } = require("playwright-core"));
} catch (e) {
  process.stderr.write("playwright-core not found (scripts/setup --browser): " + e.message + "\n");
  process.exit(3);
}

async function open(dir, hash) {
  const exe = process.env.CHROMIUM || "/usr/bin/chromium";
  let browser;
  try {
    browser = await chromium.launch({ executablePath: exe, headless: true,
                                      args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"] });
  } catch (e) {
    process.stderr.write("chromium did not start (" + exe + "): " + e.message.split("\n")[0] + "\n");
    process.exit(3);
  }
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  const url = "file://" + path.resolve(dir) + "/index.html" + (hash ? "#" + hash : "");
  await page.goto(url);
  await page.waitForFunction(() => window.HS_READY !== undefined, null, { timeout: 30000 })
    .catch(() => fail("the page never became ready: " + errors.join("; ")));
  return { browser, page, errors };
}

// |got - want| within what the stored type allows
function tol(dtype, want, scale) {
  return dtype === "u8" ? scale / 2 + 1e-6 : Math.abs(want) * 1.5e-3 + 1e-7;
}
// maxScale: the largest u8 scale an entry may have (a row's: its max / 255;
// a column's entries come from rows whose max is at most 1)
function compare(dtype, got, want, what, maxScale) {
  need(got && got.length === want.length, what + ": " + (got ? got.length : "no") + " values, expected " + want.length);
  const scale = maxScale === undefined ? Math.max(...want) / 255 : maxScale;
  for (let k = 0; k < want.length; k++)
    need(Math.abs(got[k] - want[k]) <= tol(dtype, want[k], scale),
         what + ": key " + k + " shows " + got[k] + ", the file holds " + want[k]);
}
const tipP = (txt) => { const m = /p = ([-0-9.e+]+)/.exec(txt); return m ? parseFloat(m[1]) : NaN; };

async function shownRow(page) { return page.evaluate(() => window.hsViewer.shown()); }
async function hashOf(page) { return page.evaluate(() => location.hash); }

async function check(dir, expectFile, shot) {
  const ex = JSON.parse(fs.readFileSync(expectFile, "utf8"));
  const L0 = ex.layers[0], H0 = ex.heads[0][1], q = ex.q;
  const { browser, page, errors } = await open(dir, "l=" + L0 + "&h=" + H0 + "&s=0");
  // hover token q: every token coloured by the row of (L0, H0)
  await page.hover('#tokens span[data-t="' + q + '"]');
  need((await page.evaluate(() => window.hsViewer.state.q)) === q, "hovering token " + q + " did not select it");
  const want = ex.rows[L0 + "," + H0];
  compare(ex.dtype, await shownRow(page), want, "token view of L" + L0 + "H" + H0 + " query " + q);
  const alphas = await page.$$eval("#tokens span", (sp) => sp.map((s) => {
    const m = /rgba?\(([^)]*)\)/.exec(getComputedStyle(s).backgroundColor);
    const v = m ? m[1].split(",").map(Number) : [0, 0, 0, 0];
    return v.length === 4 ? v[3] : (v[0] === 0 && v[1] === 0 && v[2] === 0 ? 0 : 1);
  }));
  const mx = Math.max(...want);
  for (let k = 0; k < want.length; k++)
    need(Math.abs(alphas[k] - Math.min(1, want[k])) <= 1 / 255 + tol(ex.dtype, want[k], mx / 255) + 1e-3,
         "token " + k + " colour alpha " + alphas[k] + " for p = " + want[k]);
  // hold query q, hover key k: the tooltip holds the stored probability
  await page.click('#tokens span[data-t="' + q + '"]');
  const k = Math.max(0, q - 1);
  await page.hover('#tokens span[data-t="' + k + '"]');
  const tip = await page.textContent("#tooltip");
  need(Math.abs(tipP(tip) - want[k]) <= tol(ex.dtype, want[k], mx / 255) + 1e-5 * want[k],
       "token tooltip '" + tip + "' for p = " + want[k]);
  need(tip.includes(ex.dtype === "u8" ? "u8" : "f16"), "token tooltip does not say how the value is stored: " + tip);
  // the matrix tooltip at cell (q, k)
  const box = await page.$eval("#matrix", (c) => { const r = c.getBoundingClientRect(); return [r.left, r.top]; });
  const origin = await page.evaluate(() => window.hsViewer.matrixOrigin);
  box[0] += origin[0], box[1] += origin[1];
  const z = 480 / ex.S;
  await page.mouse.move(box[0] + (k + 0.5) * z, box[1] + (q + 0.5) * z);
  const mtip = await page.textContent("#tooltip");
  need(mtip.includes("query " + q + " ") && mtip.includes("key " + k + " "), "matrix tooltip names the wrong cell: " + mtip);
  need(Math.abs(tipP(mtip) - want[k]) <= tol(ex.dtype, want[k], mx / 255) + 1e-5 * want[k],
       "matrix tooltip '" + mtip + "' for p = " + want[k]);
  // keyboard: ArrowRight the next head, ArrowDown the next layer; the hash follows
  const seen = [];
  await page.mouse.move(0, 0);
  await page.keyboard.press("ArrowRight");
  let h = ex.heads[0][2];
  need((await hashOf(page)).includes("l=" + L0 + "&h=" + h + "&"), "ArrowRight: hash " + (await hashOf(page)));
  compare(ex.dtype, await shownRow(page), ex.rows[L0 + "," + h], "after ArrowRight, L" + L0 + "H" + h);
  seen.push("L" + L0 + "H" + h);
  if (ex.layers.length > 1) {
    await page.keyboard.press("ArrowDown");
    const L1 = ex.layers[1];
    need((await hashOf(page)).includes("l=" + L1 + "&h=" + h + "&"), "ArrowDown: hash " + (await hashOf(page)));
    compare(ex.dtype, await shownRow(page), ex.rows[L1 + "," + h], "after ArrowDown, L" + L1 + "H" + h);
    seen.push("L" + L1 + "H" + h);
  }
  // keys <- query: the column of the held token
  await page.selectOption("#dir", "k");
  compare(ex.dtype, await shownRow(page), ex.cols[(ex.layers.length > 1 ? ex.layers[1] : L0) + "," + h],
          "column (keys <- query) of token " + q, 1 / 255);
  await page.selectOption("#dir", "q");
  // the fragment survives a reload
  const hash = await hashOf(page);
  await page.reload();
  await page.waitForFunction(() => window.HS_READY !== undefined);
  need((await hashOf(page)) === hash, "reload changed the fragment " + hash + " to " + (await hashOf(page)));
  need((await page.evaluate(() => window.hsViewer.state.q)) === q, "reload lost the query");
  await page.screenshot({ path: shot });
  need(!errors.length, "page errors: " + errors.join("; "));
  await browser.close();
  console.log(JSON.stringify({ ok: true, checked: ["L" + L0 + "H" + H0].concat(seen), q }));
}

async function escape(dir, textsFile, shot) {
  const texts = JSON.parse(fs.readFileSync(textsFile, "utf8"));
  const { browser, page, errors } = await open(dir, "");
  const got = await page.$$eval("#tokens span", (sp) => sp.map((s) => s.textContent));
  need(got.length === texts.length, got.length + " token spans, expected " + texts.length);
  for (let t = 0; t < texts.length; t++) {
    const want = texts[t].replace(/\n/g, "\u21b5\n").replace(/\t/g, "\u21e5").replace(/\r/g, "\u240d");
    need(got[t] === want, "token " + t + " shows " + JSON.stringify(got[t]) + ", expected " + JSON.stringify(want));
  }
  // the matrix's axes: the tokens (shortened to 14 characters), queries on
  // the left and keys above, every k-th where a cell is smaller than a line
  const axis = await page.evaluate(() => window.hsViewer.axisLabels());
  const short = (t) => {
    const v = t.replace(/\n/g, "\u21b5\n").replace(/\t/g, "\u21e5").replace(/\r/g, "\u240d").replace(/\n/g, "");
    return v.length > 14 ? v.slice(0, 13) + "\u2026" : v;
  };
  const step = Math.max(1, Math.ceil(12 / (480 / texts.length)));
  for (const which of ["rows", "cols"]) {
    need(axis[which].length === Math.ceil(texts.length / step),
         which + ": " + axis[which].length + " labels, expected every " + step + "th of " + texts.length);
    for (const [i, label] of axis[which])
      need(label === short(texts[i]), which + " label " + i + " is " + JSON.stringify(label) +
           ", the token " + JSON.stringify(texts[i]));
  }
  const scripts = await page.$$eval("script", (s) => s.map((x) => x.getAttribute("src")));
  need(JSON.stringify(scripts) === JSON.stringify(["data.js", "features.js", "viewer.js", "maps.js"]),
       "scripts in the page: " + JSON.stringify(scripts));
  const injected = await page.$$eval("#tokens *:not(span), #panel script, img", (e) => e.length);
  need(injected === 0, injected + " elements made from token strings");
  need((await page.evaluate(() => window.__pwned)) === undefined, "a token string ran as script");
  // the tooltip of the most markup-like token shows it as text
  let t = texts.findIndex((s) => s.includes("<script>"));
  if (t < 0) t = texts.findIndex((s) => /[<>"&]/.test(s));
  if (t >= 0) {
    await page.hover('#tokens span[data-t="' + t + '"]');
    const tip = await page.textContent("#tooltip");
    need(tip.includes(JSON.stringify(texts[t])), "tooltip does not show the token as text: " + tip);
  }
  await page.screenshot({ path: shot });
  need(!errors.length, "page errors: " + errors.join("; "));
  await browser.close();
  console.log(JSON.stringify({ ok: true, tokens: texts.length }));
}

async function gqa(dir) {
  const { browser, page, errors } = await open(dir, "");
  const info = await page.textContent("#kvinfo");
  need(/GQA: \d+ query heads share \d+ kv heads/.test(info), "no GQA line: " + info);
  const opts = await page.$$eval("#head option", (o) => o.map((x) => x.textContent));
  need(opts.every((o) => /\(kv \d+\)/.test(o)), "head options without their kv head: " + JSON.stringify(opts));
  const panel = await page.textContent("#panel");
  need(/kv head \d+, shared by heads/.test(panel), "head panel without the kv group: " + panel);
  need(!errors.length, "page errors: " + errors.join("; "));
  await browser.close();
  console.log(JSON.stringify({ ok: true, heads: opts }));
}

async function perf(dir, hovers) {
  const { browser, page, errors } = await open(dir, "");
  const ready = await page.evaluate(() => window.HS_READY);
  const T = await page.$$eval("#tokens span", (s) => s.length);
  // a hover: the mouseover handler (row decode, 2T colours), then the style
  // recalculation it causes, forced by reading a computed colour
  const times = await page.evaluate(async ([n, T]) => {
    const spans = document.querySelectorAll("#tokens span"), out = [];
    for (let k = 0; k < n; k++) {
      const t = Math.floor(((k * 7919) % 997) / 997 * T);
      const t0 = performance.now();
      spans[t].dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
      getComputedStyle(spans[T - 1]).backgroundColor;
      document.body.offsetHeight;
      out.push(performance.now() - t0);
      await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
    }
    return out;
  }, [hovers, T]);
  // a head switch (decode + T x T image) for reference
  const sw = await page.evaluate(() => {
    const t0 = performance.now();
    window.dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowRight" }));
    document.body.offsetHeight;
    return performance.now() - t0;
  });
  times.sort((a, b) => a - b);
  need(!errors.length, "page errors: " + errors.join("; "));
  await browser.close();
  console.log(JSON.stringify({ ok: true, T, interactive_ms: +ready.toFixed(1),
    hover_median_ms: +times[times.length >> 1].toFixed(2), hover_max_ms: +times[times.length - 1].toFixed(2),
    head_switch_ms: +sw.toFixed(1) }));
}

// view --heads L.H,...: a page opened without a fragment shows the first,
// and the panel links each
async function focus(dir, heads) {
  const want = heads.split(",").map((x) => x.split(".").map(Number));
  const { browser, page, errors } = await open(dir, "");
  need((await hashOf(page)).includes("l=" + want[0][0] + "&h=" + want[0][1] + "&"),
       "the first head of --heads is not shown: " + (await hashOf(page)));
  const links = await page.$$eval("#focus a", (a) => a.map((x) => x.textContent));
  need(JSON.stringify(links) === JSON.stringify(want.map(([l, h]) => "L" + l + "H" + h)),
       "the panel's heads of interest: " + JSON.stringify(links));
  if (want.length > 1) {
    await page.click("#focus a:nth-of-type(2)");
    need((await hashOf(page)).includes("l=" + want[1][0] + "&h=" + want[1][1] + "&"),
         "the second link did not show its head: " + (await hashOf(page)));
  }
  need(!errors.length, "page errors: " + errors.join("; "));
  await browser.close();
  console.log(JSON.stringify({ ok: true, heads: links }));
}

// An encoder-decoder's cross-attention map (SPEC §17): source tokens above,
// decoder inputs below; hovering a target token colours the source by its
// row (query -> keys), hovering a source token the target by its column; the
// matrix's rows are labelled by target tokens and its columns by source ones.
async function seq2seq(dir, expectFile, shot) {
  const ex = JSON.parse(fs.readFileSync(expectFile, "utf8"));
  const { browser, page, errors } = await open(dir, "l=" + ex.layer + "&a=cross&h=" + ex.head + "&s=0");
  const grid = await page.$$eval("#layer option", (o) => o.map((x) => x.textContent));
  need(JSON.stringify(grid) === JSON.stringify(ex.layer_names), "layer choices: " + JSON.stringify(grid));
  need(!(await page.$eval("#srcwrap", (e) => e.hidden)), "the source tokens are hidden");
  const nsrc = await page.$$eval("#srctokens span", (s) => s.length);
  const ntgt = await page.$$eval("#tokens span", (s) => s.length);
  need(nsrc === ex.src_text.length && ntgt === ex.tgt_text.length,
       "token strips of " + nsrc + " and " + ntgt + ", expected " + ex.src_text.length + " and " + ex.tgt_text.length);
  const coloured = (sel) => page.$$eval(sel, (sp) => sp.filter((s) => {
    const m = /rgba?\(([^)]*)\)/.exec(getComputedStyle(s).backgroundColor);
    const v = m ? m[1].split(",").map(Number) : [0, 0, 0, 0];
    return v.length === 4 ? v[3] > 0 : !(v[0] === 0 && v[1] === 0 && v[2] === 0);
  }).length);
  await page.hover('#tokens span[data-t="' + ex.q + '"]');
  need((await page.evaluate(() => window.hsViewer.state.dir)) === "q", "a target token is not a query");
  compare("u8", await shownRow(page), ex.row, "cross row of target token " + ex.q);
  need((await coloured("#tokens span")) === 0, "target tokens coloured by a cross row");
  need((await coloured("#srctokens span")) > 0, "no source token coloured by a cross row");
  const axis = await page.evaluate(() => window.hsViewer.axisLabels());
  for (const [which, texts] of [["rows", ex.tgt_text], ["cols", ex.src_text]])
    for (const [i, label] of axis[which])
      need(label === texts[i], which + " label " + i + " is " + JSON.stringify(label) + ", not " + JSON.stringify(texts[i]));
  need(axis.rows.length === ex.tgt_text.length && axis.cols.length === ex.src_text.length,
       "axes of " + axis.rows.length + " x " + axis.cols.length);
  await page.screenshot({ path: shot });
  await page.hover('#srctokens span[data-t="' + ex.k + '"]');
  need((await page.evaluate(() => window.hsViewer.state.dir)) === "k", "a source token is not a key");
  compare("u8", await shownRow(page), ex.col, "cross column of source token " + ex.k, 1 / 255);
  need(!errors.length, "page errors: " + errors.join("; "));
  await browser.close();
  console.log(JSON.stringify({ ok: true, layers: grid.length }));
}

// The feature page (SPEC §19): the list of features with examples, the
// chosen feature's examples tinted by its activation (the example's own
// token outlined, the strongest tint where the activation is largest), the
// DFA of an example summed over heads equal to the index's rows, per head
// in the hover, another example chosen by a click.
async function features(dir, expectFile, shot) {
  const ex = JSON.parse(fs.readFileSync(expectFile, "utf8"));
  const { browser, page, errors } = await open(dir, "f=" + ex.feature + "&e=0");
  const rows = await page.$$eval("#flist .frow", (r) => r.length);
  need(rows === ex.n_features, rows + " features listed, expected " + ex.n_features);
  const shown = await page.evaluate(() => window.hsFeatures.feature().id);
  need(shown === ex.feature, "feature " + shown + " shown, not " + ex.feature);
  const lines = await page.$$eval("#fexamples .fexample", (l) => l.map((x) => x.querySelectorAll("span[data-t]").length));
  need(JSON.stringify(lines) === JSON.stringify(ex.examples.map((e) => e.tokens)),
       "example lines of " + JSON.stringify(lines) + " tokens, expected " + JSON.stringify(ex.examples.map((e) => e.tokens)));
  const alpha = await page.$$eval("#fexamples .fexample:first-of-type span[data-t]", (sp) => sp.map((s) => {
    const m = /rgba\(([^)]*)\)/.exec(getComputedStyle(s).backgroundColor);
    return m ? +m[1].split(",")[3] : 0;
  }));
  const want = ex.examples[0].acts, top = want.indexOf(Math.max(...want));
  need(alpha.indexOf(Math.max(...alpha)) === top, "the strongest tint at token " + alpha.indexOf(Math.max(...alpha)) + ", the largest activation at " + top);
  for (let i = 0; i < want.length; i++)
    need((want[i] > 0) === (alpha[i] > 0), "token " + i + ": tint " + alpha[i] + " for activation " + want[i]);
  for (let k = 0; k < ex.examples.length; k++) {
    if (k) await page.click("#fexamples .fexample:nth-of-type(" + (k + 1) + ")");
    const got = await page.evaluate(() => window.hsFeatures.dfaTotals());
    const w = ex.examples[k].dfa_totals;
    need(got && got.length === w.length, "example " + k + ": DFA of " + (got && got.length) + " sources, expected " + w.length);
    for (let i = 0; i < w.length; i++)
      need(Math.abs(got[i] - w[i]) <= 1e-9 * Math.max(1, Math.abs(w[i])), "example " + k + " source " + i + ": DFA " + got[i] + ", expected " + w[i]);
  }
  await page.hover("#fdfa .fexample span.fpos");
  const tipText = await page.$eval("#tooltip", (t) => t.textContent);
  need(/head 0: /.test(tipText) && (tipText.match(/head \d+: /g) || []).length === ex.heads,
       "the DFA tooltip does not list every head: " + JSON.stringify(tipText));
  await page.screenshot({ path: shot });
  need(!errors.length, "page errors: " + errors.join("; "));
  await browser.close();
  console.log(JSON.stringify({ ok: true, features: rows }));
}

// The head view (bertviz's): every head of a layer as lines from query
// tokens to keys, each line's weight the map's (h5py's row of query q);
// hovering query q leaves only its
// lines (each within a u8 step, the row's largest over 255), hovering key
// k only the lines into k; a head's chip hides its lines and shows them again.
async function headview(dir, expectFile, shot) {
  const ex = JSON.parse(fs.readFileSync(expectFile, "utf8"));
  const L = ex.layers[ex.layers.length - 1], heads = ex.heads[ex.layers.length - 1];
  const { browser, page, errors } = await open(dir, "l=" + L + "&h=" + heads[0] + "&s=0");
  const lines = () => page.evaluate(() => window.hsViewer.headLines());
  await page.$eval("#hvheads", (e) => e.scrollIntoView());
  const at = (side, t) => page.evaluate(([sd, tt]) => window.hsViewer.headTokenAt(sd, tt), [side, t]);
  let all = await lines();
  need(all.length > 0, "the head view drew no line");
  need(new Set(all.map((x) => x[0])).size === heads.length, "lines of " + new Set(all.map((x) => x[0])).size + " heads, expected " + heads.length);
  let p = await at("q", ex.q);
  await page.mouse.move(p.x, p.y);
  const mine = await lines();
  need(mine.length > 0 && mine.every((x) => x[1] === ex.q), "hovering query " + ex.q + " left other lines: " + JSON.stringify(mine.slice(0, 3)));
  for (const [h, t, k, w] of mine) {
    const row = ex.rows[L + "," + h], want = row[k];
    need(Math.abs(w - want) <= Math.max(...row) / 255 + 1e-6, "head " + h + " query " + t + " key " + k + ": line weight " + w + ", h5py " + want);
  }
  const keyed = Math.max(...mine.map((x) => x[2]));
  p = await at("k", keyed);
  await page.mouse.move(p.x, p.y);
  const into = await lines();
  need(into.length > 0 && into.every((x) => x[2] === keyed), "hovering key " + keyed + " left other lines");
  await page.mouse.move(1, 1);
  await page.click('#hvheads .hvchip[data-i="0"]');
  all = await lines();
  need(all.length > 0 && all.every((x) => x[0] !== heads[0]), "head " + heads[0] + " toggled off still has lines");
  await page.click('#hvheads .hvchip[data-i="0"]');
  need((await lines()).some((x) => x[0] === heads[0]), "head " + heads[0] + " toggled on has no line");
  const q = await at("q", ex.q);
  await page.mouse.move(q.x, q.y);
  await page.screenshot({ path: shot, fullPage: true });
  need(!errors.length, "page errors: " + errors.join("; "));
  await browser.close();
  console.log(JSON.stringify({ ok: true, lines: all.length }));
}

// The compare view (view --compare B.h5): the matrix shows A, B or A - B;
// every cell of query q of the selected head: A's and B's values are
// h5py's (within a u8 step of each), A - B their difference; the
// difference is drawn on a diverging scale (a cell where A > B reddish).
async function compareView(dir, expA, expB, shot) {
  const ea = JSON.parse(fs.readFileSync(expA, "utf8")), eb = JSON.parse(fs.readFileSync(expB, "utf8"));
  const L = ea.layers[0], h = ea.heads[0][0], q = ea.q;
  const { browser, page, errors } = await open(dir, "l=" + L + "&h=" + h + "&s=0&q=" + q);
  need(await page.evaluate(() => window.hsViewer.compare), "the page did not load compare/data.js");
  need(!(await page.$eval("#cmpwrap", (e) => e.hidden)), "the A / B / A - B choice is hidden");
  const ra = ea.rows[L + "," + h], rb = eb.rows[L + "," + h], step = Math.max(...ra) / 255 + Math.max(...rb) / 255;
  let cells = 0;
  for (let s = 0; s < ra.length; s++) {
    const [a, b, d] = await page.evaluate(([r, k]) => ["a", "b", "d"].map((m) => window.hsViewer.cell(m, r, k)), [q, s]);
    need(Math.abs(a - ra[s]) <= Math.max(...ra) / 255 + 1e-6, "A at key " + s + ": " + a + ", h5py " + ra[s]);
    need(Math.abs(b - rb[s]) <= Math.max(...rb) / 255 + 1e-6, "B at key " + s + ": " + b + ", h5py " + rb[s]);
    need(d === a - b, "A - B at key " + s + ": " + d + ", not " + (a - b));
    need(Math.abs(d - (ra[s] - rb[s])) <= step + 1e-6, "A - B at key " + s + " against h5py's");
    cells++;
  }
  await page.selectOption("#cmp", "d");
  need((await page.evaluate(() => window.hsViewer.state.cmp)) === "d", "the choice did not switch to A - B");
  await page.screenshot({ path: shot });
  need(!errors.length, "page errors: " + errors.join("; "));
  await browser.close();
  console.log(JSON.stringify({ ok: true, cells }));
}

// Many sentences (view --sequences all): typing text into find keeps the
// sequences whose tokens hold it in the menu, shows the first, outlines its
// matching tokens; clearing it lists every sequence again.
async function findText(dir, text, want) {
  const { browser, page, errors } = await open(dir, "");
  const total = await page.$$eval("#seq option", (o) => o.length);
  await page.fill("#find", text);
  const f = await page.evaluate(() => window.hsViewer.found());
  need(JSON.stringify(f.sequences) === want, "find " + JSON.stringify(text) + ": sequences " + JSON.stringify(f.sequences) + ", expected " + want);
  const menu = await page.$$eval("#seq option", (o) => o.map((x) => +x.value));
  need(JSON.stringify(menu) === want, "the menu holds " + JSON.stringify(menu));
  const shown = await page.evaluate(() => window.hsViewer.state.s);
  need(shown === JSON.parse(want)[0], "sequence " + shown + " shown, not the first match");
  need(f.tokens.length > 0, "no token outlined");
  await page.fill("#find", "");
  need((await page.$$eval("#seq option", (o) => o.length)) === total, "clearing find did not list every sequence");
  need(!errors.length, "page errors: " + errors.join("; "));
  await browser.close();
  console.log(JSON.stringify({ ok: true, total, found: f.sequences.length }));
}

// The model view's scores: what is written under each thumbnail, printed
// for the shell to compare with the index.
async function gridScores(dir) {
  const { browser, page, errors } = await open(dir, "");
  const g = await page.evaluate(() => window.hsViewer.gridScores());
  need(g.values.length > 0, "no score under the thumbnails");
  need(!errors.length, "page errors: " + errors.join("; "));
  await browser.close();
  console.log(JSON.stringify(g));
}

// Ragged sentences (capture --text --lines): each sentence's padding dimmed,
// as many tokens as its /attention_mask has zeros; find skips padding.
async function pads(dir, wantFile) {
  const want = JSON.parse(fs.readFileSync(wantFile, "utf8"));
  const { browser, page, errors } = await open(dir, "");
  for (let i = 0; i < want.length; i++) {
    await page.selectOption("#seq", String(i));
    const n = await page.evaluate(() => window.hsViewer.pads());
    need(n === want[i], "sentence " + i + ": " + n + " tokens dimmed as padding, its mask has " + want[i]);
    const cls = await page.$$eval("#tokens span[data-pad]", (sp) => sp.every((x) => x.classList.contains("pad")));
    need(cls, "sentence " + i + ": a padded token not drawn as padding");
  }
  need(!errors.length, "page errors: " + errors.join("; "));
  await browser.close();
  console.log(JSON.stringify({ ok: true, sentences: want.length }));
}

// A long map (view writes its rows to rows/): the page is interactive within
// 2 s having loaded no more than the overview and the head view's first
// rows; hovers over tokens spread along the sequence (each needing a row
// file not yet loaded) are answered -- the row painted -- within 50 ms
// (median; the max printed); the painted row, the head view's lines of a
// held token and the zoomed matrix's tooltip equal h5py's values.
// EXPECT.json: {"layer": L, "heads": [H...], "T": T, "rows": {"H,q": [p...]},
// "hovers": [q...], "held": q, "files_at_open_max": n}.
async function longMap(dir, expectFile, shot) {
  const ex = JSON.parse(fs.readFileSync(expectFile, "utf8"));
  const { browser, page, errors } = await open(dir, "l=" + ex.layer + "&h=" + ex.heads[0] + "&s=0");
  const ready = await page.evaluate(() => window.HS_READY);
  await page.evaluate(() => window.hsViewer.idle());
  const atOpen = await page.evaluate(() => window.hsViewer.rowFiles());
  need(ready <= 2000, "interactive after " + ready.toFixed(0) + " ms (at most 2 s)");
  need(atOpen.length <= ex.files_at_open_max, "the page loaded " + atOpen.length + " row files at open (" +
       atOpen.slice(0, 8).join(", ") + " ...), at most " + ex.files_at_open_max + " expected");
  const T = await page.$$eval("#tokens span", (sp) => sp.length);
  need(T === ex.T, "the token view shows " + T + " tokens, the file holds " + ex.T);
  const times = await page.evaluate(async (qs) => {
    const spans = document.querySelectorAll("#tokens span"), out = [];
    for (const t of qs) {
      const t0 = performance.now();
      spans[t].dispatchEvent(new MouseEvent("mouseover", { bubbles: true }));
      await window.hsViewer.idle();
      getComputedStyle(spans[spans.length - 1]).backgroundColor;
      document.body.offsetHeight;
      out.push(performance.now() - t0);
      await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
    }
    return out;
  }, ex.hovers);
  const last = ex.hovers[ex.hovers.length - 1], h0 = ex.heads[0];
  compare("u8", await shownRow(page), ex.rows[h0 + "," + last], "head " + h0 + " query " + last + " (hovered)");
  times.sort((x, y) => x - y);
  const median = times[times.length >> 1];
  need(median <= 50, "a hover answered in " + median.toFixed(1) + " ms (median; at most 50)");
  // hold a token: the head view draws the window's lines of every head (on
  // the row's own scale: at this length the weights are mostly under 0.01)
  const q = ex.held;
  await page.selectOption("#scale", "row");
  await page.$eval('#tokens span[data-t="' + q + '"]', (e) => e.scrollIntoView());
  await page.click('#tokens span[data-t="' + q + '"]');
  await page.evaluate(() => window.hsViewer.idle());
  const lines = await page.evaluate(() => window.hsViewer.headLines());
  need(new Set(lines.map((x) => x[0])).size === ex.heads.length, "the head view drew lines of " +
       new Set(lines.map((x) => x[0])).size + " heads, expected " + ex.heads.length);
  let checked = 0;
  for (const [h, t, k, w] of lines) {
    const row = ex.rows[h + "," + t];
    if (!row) continue;
    need(Math.abs(w - row[k]) <= Math.max(...row) / 255 + 1e-6, "head view: head " + h + " query " + t +
         " key " + k + ": " + w + ", h5py " + row[k]);
    checked++;
  }
  need(checked > 0, "the head view drew no line of the held query " + q);
  // the matrix zoomed to 16 px a cell around (q, q - 3): its tooltip's value
  const k = q - 3;
  const at = await page.evaluate(([r, c]) => window.hsViewer.zoomTo(r, c, 16), [q, k]);
  await page.$eval("#matrix", (e) => e.scrollIntoView());
  const box = await page.$eval("#matrix", (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top]; });
  await page.mouse.move(box[0] + at[0], box[1] + at[1]);
  await page.evaluate(() => window.hsViewer.idle());
  await page.mouse.move(box[0] + at[0] + 1, box[1] + at[1]);
  const tip = await page.$eval("#tooltip", (e) => e.textContent);
  const want = ex.rows[h0 + "," + q][k];
  need(Math.abs(tipP(tip) - want) <= Math.max(...ex.rows[h0 + "," + q]) / 255 + 1e-6,
       "the zoomed matrix's tooltip at query " + q + " key " + k + ": " + tip + " (h5py " + want + ")");
  await page.screenshot({ path: shot, fullPage: false });
  need(!errors.length, "page errors: " + errors.join("; "));
  await browser.close();
  console.log(JSON.stringify({ ok: true, T, interactive_ms: +ready.toFixed(1), files_at_open: atOpen.length,
    hover_median_ms: +median.toFixed(2), hover_max_ms: +times[times.length - 1].toFixed(2) }));
}

const [mode, dir, a, b, c] = process.argv.slice(2);
const run = { check: () => check(dir, a, b), escape: () => escape(dir, a, b), gqa: () => gqa(dir),
              perf: () => perf(dir, parseInt(a || "20", 10)), focus: () => focus(dir, a),
              seq2seq: () => seq2seq(dir, a, b), features: () => features(dir, a, b),
              headview: () => headview(dir, a, b), compare: () => compareView(dir, a, b, c),
              find: () => findText(dir, a, b), grid: () => gridScores(dir),
              pads: () => pads(dir, a), long: () => longMap(dir, a, b) }[mode];
if (!run) { process.stderr.write("usage: viewer_test.js check|escape|gqa|perf|focus|seq2seq|features|headview|compare|find|grid|pads|long DIR ...\n"); process.exit(2); }
run().catch((e) => fail(String(e && e.stack || e)));
