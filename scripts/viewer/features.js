/* headscope's feature page (SPEC §19): when data.js holds a features run
 * (HS_DATA.mode "features", written by `view` from a `features --out` file
 * and its index), this draws the list of features, the selected feature's
 * head shares, its top examples with each token tinted by the feature's
 * activation, and the direct feature attribution of a chosen example over
 * its source tokens (summed over heads, per head on hover). viewer.js leaves
 * such a page alone. Every string from the data goes in as textContent. */
"use strict";
(function () {
  const D = window.HS_DATA;
  if (!D || D.mode !== "features") return;
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const fmt = (v, d) => (v === null || v === undefined || Number.isNaN(v) ? "\u2013" : (+v).toFixed(d));
  const st = { f: 0, e: 0 };
  const F = D.features;

  function readHash() {
    const m = /f=(\d+)/.exec(location.hash), n = /e=(\d+)/.exec(location.hash);
    const i = m ? F.findIndex((x) => x.id === +m[1]) : -1;
    st.f = i >= 0 ? i : 0;
    st.e = n ? +n[1] : 0;
  }
  function writeHash() { history.replaceState(null, "", "#f=" + F[st.f].id + "&e=" + st.e); }

  /* green for an activation on 0 .. max; blue to red for a signed attribution */
  const actColour = (v, max) => "rgba(30,150,60," + (max > 0 ? Math.min(1, v / max) * 0.85 : 0).toFixed(3) + ")";
  const dfaColour = (v, max) => {
    const a = max > 0 ? Math.min(1, Math.abs(v) / max) * 0.85 : 0;
    return v >= 0 ? "rgba(200,40,30," + a.toFixed(3) + ")" : "rgba(30,80,200," + a.toFixed(3) + ")";
  };
  const tip = (e, text) => {
    const t = $("tooltip");
    t.textContent = text;
    t.style.display = text ? "block" : "none";
    t.style.left = e.clientX + 12 + "px";
    t.style.top = e.clientY + 12 + "px";
  };

  function tokenLine(ex, values, colour, max, label) {
    const line = el("div", "fexample");
    ex.tokens.forEach((s, i) => {
      const span = el("span", i + ex.start === ex.pos ? "fpos" : "", s);
      span.style.background = colour(values[i], max);
      span.dataset.t = i + ex.start;
      span.addEventListener("mousemove", (e) => tip(e, label(i)));
      span.addEventListener("mouseleave", (e) => tip(e, ""));
      line.appendChild(span);
    });
    return line;
  }

  function drawList() {
    const list = $("flist");
    list.textContent = "";
    const q = $("fsearch").value.trim();
    F.forEach((f, i) => {
      if (q && String(f.id).indexOf(q) !== 0) return;
      const row = el("div", i === st.f ? "frow sel" : "frow",
                     "#" + f.id + "  freq " + fmt(f.frequency, 4) + "  mean " + fmt(f.mean_act, 3));
      row.addEventListener("click", () => { st.f = i; st.e = 0; draw(); });
      list.appendChild(row);
    });
  }

  function drawShares(f) {
    const box = $("fshare");
    box.textContent = "";
    if (!f.head_share) { box.appendChild(el("p", "hint", "not a hook_z SAE: no head shares")); return; }
    f.head_share.forEach((v, h) => {
      const row = el("div", "fbar");
      row.appendChild(el("span", "fbarlabel", "L" + (D.hook.split(".")[1] || "?") + "H" + h));
      const bar = el("span", "fbarfill");
      bar.style.width = Math.round((v || 0) * 300) + "px";
      row.appendChild(bar);
      row.appendChild(el("span", "fbarval", fmt(v, 3)));
      box.appendChild(row);
    });
  }

  function dfaTotals(ex) {
    return ex.tokens.map((_, i) => ex.dfa.reduce((s, row) => s + row[i], 0));
  }

  function drawDfa(f) {
    const box = $("fdfa");
    box.textContent = "";
    const ex = f.examples[st.e];
    if (!ex) return;
    if (!ex.dfa) { box.appendChild(el("p", "hint", "no attribution for this example (not a hook_z SAE, or left out)")); return; }
    const tot = dfaTotals(ex), max = Math.max(...tot.map(Math.abs));
    box.appendChild(el("p", "hint", "example " + st.e + ": sequence " + ex.seq + ", position " + ex.pos +
      " (outlined); red adds to the feature, blue takes away; hover a token for each head" +
      (ex.dfa_outside ? "; " + fmt(ex.dfa_outside, 4) + " through earlier tokens" : "")));
    box.appendChild(tokenLine(ex, tot, dfaColour, max, (i) =>
      "source " + (i + ex.start) + ": total " + fmt(tot[i], 4) + "\n" +
      ex.dfa.map((row, h) => "head " + h + ": " + fmt(row[i], 4)).join("\n")));
  }

  function drawExamples(f) {
    const box = $("fexamples");
    box.textContent = "";
    const max = Math.max(0, ...f.examples.map((x) => Math.max(...x.acts)));
    f.examples.forEach((ex, k) => {
      const line = tokenLine(ex, ex.acts, actColour, max, (i) =>
        "seq " + ex.seq + " pos " + (i + ex.start) + ": " + fmt(ex.acts[i], 4));
      line.classList.add(k === st.e ? "chosen" : "other");
      line.insertBefore(el("span", "fval", fmt(ex.value, 3) + " "), line.firstChild);
      line.addEventListener("click", () => { st.e = k; draw(); });
      box.appendChild(line);
    });
  }

  function draw() {
    const f = F[st.f];
    if (!f) { $("fhead").textContent = "no feature has an example"; return; }
    st.e = Math.min(st.e, Math.max(0, f.examples.length - 1));
    $("fhead").textContent = "Feature " + f.id + ": frequency " + fmt(f.frequency, 4) +
      ", mean activation " + fmt(f.mean_act, 4) + ", " + f.examples.length + " top examples";
    drawList(); drawShares(f); drawExamples(f); drawDfa(f); writeHash();
  }

  function build() {
    document.title = "headscope feature viewer";
    $("controls").style.display = "none";
    document.querySelector("main").style.display = "none";
    if (D.token_source === "ids") document.body.classList.add("fids");
    document.querySelector("h1").textContent = "headscope feature viewer";
    $("about").textContent = ["SAE on " + D.hook, D.d_sae + " features", "run " + D.run_id,
      "tokens: " + D.token_source, D.source].join(" \u00b7 ");
    const page = el("main", "fpage");
    page.innerHTML = '<section id="fside"><h2>Features <span class="hint">with examples</span></h2>' +
      '<input id="fsearch" placeholder="feature id"><div id="flist"></div></section>' +
      '<section id="fmain"><h2 id="fhead"></h2><h2>Head share <span class="hint">||W_dec[f, head]|| over the sum</span></h2>' +
      '<div id="fshare"></div><h2>Top examples <span class="hint">green: the feature\u2019s activation; click one for its attribution</span></h2>' +
      '<div id="fexamples"></div><h2>Direct feature attribution <span class="hint">att \u00b7 (v \u00b7 W_enc) by source token</span></h2>' +
      '<div id="fdfa"></div></section>';
    document.body.insertBefore(page, $("tooltip"));
    $("fsearch").addEventListener("input", drawList);
    readHash();
    draw();
    $("status").textContent = F.length + " features with examples";
    window.HS_READY = performance.now();
  }

  /* the page's state and data, for tests and the console */
  window.hsFeatures = {
    state: st,
    select(id, e) { const i = F.findIndex((x) => x.id === id); if (i >= 0) { st.f = i; st.e = e || 0; draw(); } },
    feature() { return F[st.f]; },
    dfaTotals() { const ex = F[st.f].examples[st.e]; return ex && ex.dfa ? dfaTotals(ex) : null; },
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", build);
  else build();
})();
