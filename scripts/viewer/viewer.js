/* headscope's attention viewer: reads HS_DATA (data.js, the index of the
 * export) and the map blocks (maps.bin over http, maps.js's base64 strings
 * from file://, where browsers refuse fetch; a long map's rows from
 * rows/I_C.js files loaded as they are needed), and draws the token view,
 * the matrix, the layer x head thumbnails and the head panel. Every string
 * from the data goes into the page as textContent, never as HTML. */
"use strict";
(function () {
  const D = window.HS_DATA;
  const $ = (id) => document.getElementById(id);
  const status = (s) => { $("status").textContent = s; };
  if (!D || D.format !== "headscope-viewer") {
    status("data.js is missing or not a headscope viewer index");
    return;
  }
  if (D.mode === "features") return; // features.js draws that page

  /* ---- data: blocks, decoded on first use; a second file's (view
   * --compare: compare/data.js, HS_DATA_B) the same way ---- */
  const U8 = D.dtype === "u8";
  function dataset(data, b64, bin) {
    const index = new Map(); // "s,l,h" (export indices) -> block
    data.blocks.forEach((b, i) => { b.i = i; index.set(b.s + "," + b.l + "," + b.h, b); });
    const ds = { data, index, b64, bin, binary: null, cache: new Map(),
                 dir: bin.replace(/maps\.bin$/, ""), files: new Map(), waiting: new Map() };
    window[b64.replace("MAPS_B64", "ROWS")] = (name, text) => { ds.files.set(name, decodeB64(text)); };
    return ds;
  }
  function decodeB64(text) {
    const s = atob(text), out = new Uint8Array(s.length);
    for (let k = 0; k < s.length; k++) out[k] = s.charCodeAt(k);
    return out;
  }
  /* ---- a long map's files (view writes maps over 2048 x 2048 cells to
   * rows/: 16 query rows a file, and a pooled overview), each a <script>
   * calling HS_ROWS<var>; loaded once, the oldest dropped past FILES_KEPT ---- */
  const FILES_KEPT = 768;
  let inflight = 0, idleWaiters = [];
  function settle() {
    if (inflight) return;
    const w = idleWaiters; idleWaiters = [];
    w.forEach((f) => f());
  }
  function fetchFile(ds, name, then) {
    if (ds.waiting.has(name)) { ds.waiting.get(name).push(then); return; }
    ds.waiting.set(name, [then]);
    inflight++;
    const sc = document.createElement("script");
    const done = () => {
      const cbs = ds.waiting.get(name) || [];
      ds.waiting.delete(name);
      sc.remove();
      inflight--;
      if (ds.files.has(name)) {
        while (ds.files.size > FILES_KEPT) ds.files.delete(ds.files.keys().next().value);
        cbs.forEach((f) => f());
      } else status(sc.src + " could not be loaded");
      settle();
    };
    sc.src = ds.dir + "rows/" + name + ".js";
    sc.onload = done; sc.onerror = done;
    document.body.appendChild(sc);
  }
  /* true when every named file is loaded; else loads the missing ones and
   * calls then() once they all are */
  function needFiles(ds, names, then) {
    const missing = names.filter((n) => !ds.files.has(n));
    let left = missing.length;
    missing.forEach((n) => fetchFile(ds, n, () => { if (--left === 0) then(); }));
    return !missing.length;
  }
  const A = dataset(D, "HS_MAPS_B64", "maps.bin");
  let B = null; // the compare file's, once compare/data.js is loaded (D.compare)

  const HALF = new Float32Array(65536);
  if (!U8) {
    for (let h = 0; h < 65536; h++) {
      const s = h >> 15, e = (h >> 10) & 31, f = h & 1023;
      let v = e === 0 ? f * Math.pow(2, -24) : e === 31 ? (f ? NaN : Infinity)
            : (1 + f / 1024) * Math.pow(2, e - 15);
      HALF[h] = s ? -v : v;
    }
  }

  function bytesOf(b, ds) {
    if (ds.binary) return new Uint8Array(ds.binary.slice(b.offset, b.offset + b.bytes));
    const s = atob(window[ds.b64][b.i]);
    const out = new Uint8Array(s.length);
    for (let k = 0; k < s.length; k++) out[k] = s.charCodeAt(k);
    return out;
  }

  /* A long map's block: rows r0..r1 are there once need(r0, r1, then) is
   * true (else then() is called when they arrive); get is NaN, row null for
   * a row not loaded; col is null (a column would read every row file). */
  function longBlock(b, ds, L) {
    const R = b.rows, nq = L.nq, S = L.S, parts = new Map();
    const len = (r) => (b.packed ? Math.min(S, L.q0 + r + 1) : S);
    const name = (c) => b.i + "_" + c;
    function part(r) {
      const c = Math.floor(r / R), raw = ds.files.get(name(c));
      if (!raw) { parts.delete(c); return null; }
      let x = parts.get(c);
      if (x && x.raw === raw) return x;
      const r0 = c * R, n = Math.min(nq, r0 + R) - r0, start = new Int32Array(n + 1);
      for (let k = 0; k < n; k++) start[k + 1] = start[k] + len(r0 + k);
      x = U8 ? { raw, r0, start, scale: new Float32Array(raw.buffer, 0, n), v: new Uint8Array(raw.buffer, 4 * n) }
             : { raw, r0, start, v: new Uint16Array(raw.buffer, 0, raw.length >> 1) };
      parts.set(c, x);
      return x;
    }
    function get(r, s) {
      const x = part(r);
      if (!x) return NaN;
      const k = r - x.r0;
      if (s >= len(r)) return 0;
      return U8 ? x.v[x.start[k] + s] * x.scale[k] : HALF[x.v[x.start[k] + s]];
    }
    let ovCanvas = null, ovScale = "";
    return {
      L, nq, S, get, long: true,
      scaleOf(r) { const x = part(r); return x && U8 ? x.scale[r - x.r0] : NaN; },
      row(r) {
        const x = part(r);
        if (!x) return null;
        const o = new Float64Array(S), k = r - x.r0, n = len(r), st0 = x.start[k];
        for (let s = 0; s < n; s++) o[s] = U8 ? x.v[st0 + s] * x.scale[k] : HALF[x.v[st0 + s]];
        return o;
      },
      col() { return null; },
      need(r0, r1, then) {
        const names = [];
        for (let c = Math.floor(r0 / R); c <= Math.floor((r1 - 1) / R); c++) names.push(name(c));
        return needFiles(ds, names, then);
      },
      /* the pooled overview (max of each cell, 0..1) as a canvas, or null
       * until it arrives (then then()) */
      overview(then) {
        if (ovCanvas && ovScale === st.scale) return ovCanvas;
        if (!needFiles(ds, [b.i + "_ov"], then)) return null;
        const v = ds.files.get(b.i + "_ov"), c = document.createElement("canvas");
        c.width = b.ov_cols; c.height = b.ov_rows;
        const ctx = c.getContext("2d"), img = ctx.createImageData(c.width, c.height);
        for (let k = 0; k < v.length; k++) {
          const a = Math.round(255 * level(v[k] / 255, 1)) * 3;
          img.data[4 * k] = RAMP[a]; img.data[4 * k + 1] = RAMP[a + 1]; img.data[4 * k + 2] = RAMP[a + 2];
          img.data[4 * k + 3] = 255;
        }
        ctx.putImageData(img, 0, 0);
        ovScale = st.scale;
        return (ovCanvas = c);
      },
    };
  }

  /* A block as {get(r, s), row(r) -> Float64Array(S), col(s), need(r0, r1,
   * then) -> true when rows r0..r1 are there}. */
  function block(si, li, hi, ds) {
    ds = ds || A;
    const b = ds.index.get(si + "," + li + "," + hi), cache = ds.cache;
    if (!b) return null;
    if (cache.has(b.i)) return cache.get(b.i);
    const L = D.layers[li], nq = L.nq, S = L.S;
    if (b.rows) {
      const lb = longBlock(b, ds, L);
      cache.set(b.i, lb);
      return lb;
    }
    const start = new Int32Array(nq + 1), len = new Int32Array(nq);
    for (let r = 0; r < nq; r++) {
      len[r] = b.packed ? Math.min(S, L.q0 + r + 1) : S;
      start[r + 1] = start[r] + len[r];
    }
    const raw = bytesOf(b, ds);
    let get;
    if (U8) {
      const scale = new Float32Array(raw.buffer, 0, nq), v = new Uint8Array(raw.buffer, 4 * nq);
      get = (r, s) => (s < len[r] ? v[start[r] + s] * scale[r] : 0);
      var scaleOf = (r) => scale[r];
    } else {
      const v = new Uint16Array(raw.buffer, 0, raw.length >> 1);
      get = (r, s) => (s < len[r] ? HALF[v[start[r] + s]] : 0);
    }
    const blk = {
      L, nq, S, get, scaleOf: U8 ? scaleOf : null, long: false, need: () => true,
      row(r) { const o = new Float64Array(S); for (let s = 0; s < len[r]; s++) o[s] = get(r, s); return o; },
      col(s) { const o = new Float64Array(nq); for (let r = 0; r < nq; r++) o[r] = get(r, s); return o; },
    };
    cache.set(b.i, blk);
    if (cache.size > 64) cache.delete(cache.keys().next().value);
    return blk;
  }

  /* ---- state and the URL fragment ---- */
  const st = { s: 0, l: 0, h: 0, q: -1, held: false, dir: "q", scale: "lin", cmp: "a" };
  const T = D.seq_len;
  /* an encoder-decoder's layers are its maps of each type (L.attn: enc, dec,
   * cross), each with its layer within the stack */
  function layerIdx(layer, attn) {
    return D.layers.findIndex((L) => L.layer === layer && (!attn || L.attn === attn));
  }
  function layerName(L) { return L.attn ? L.attn + " " + L.layer : String(L.layer); }
  /* the token sides of a layer's queries and keys: "src" (an encoder-decoder's
   * source) or "tgt" (the decoder's inputs; a one-stack model's tokens) */
  function sides(L) { return L.attn === "enc" ? ["src", "src"] : L.attn === "cross" ? ["tgt", "src"] : ["tgt", "tgt"]; }
  function textOf(side) { const q = D.sequences[st.s]; return side === "src" ? q.src_text : q.text; }
  function idsOf(side) { const q = D.sequences[st.s]; return side === "src" ? q.src_tokens : q.tokens; }
  function readHash() {
    const p = new URLSearchParams(location.hash.slice(1));
    const num = (k) => (p.has(k) && /^-?\d+$/.test(p.get(k)) ? parseInt(p.get(k), 10) : null);
    let s = num("s"), l = num("l"), h = num("h"), q = num("q");
    const a = p.get("a");
    const focus = D.focus || [];
    if (l === null && h === null && focus.length) [l, h] = focus[0]; // view --heads: the first
    if (s !== null) { const i = D.sequences.findIndex((x) => x.seq === s); if (i >= 0) st.s = i; }
    if (l !== null) { const i = layerIdx(l, a); if (i >= 0) st.l = i; }
    if (h !== null) { const i = D.layers[st.l].heads.indexOf(h); if (i >= 0) st.h = i; }
    if (st.h >= D.layers[st.l].heads.length) st.h = 0;
    if (q !== null && q >= 0 && q < T) { st.q = q; st.held = true; }
  }
  function writeHash() {
    const L = D.layers[st.l];
    let h = "l=" + L.layer + (L.attn ? "&a=" + L.attn : "") + "&h=" + L.heads[st.h] + "&s=" + D.sequences[st.s].seq;
    if (st.q >= 0) h += "&q=" + st.q;
    if (location.hash.slice(1) !== h) history.replaceState(null, "", "#" + h);
  }

  /* ---- colour ---- */
  function level(p, rowMax) {
    if (!(p > 0)) return 0;
    if (st.scale === "sqrt") return Math.sqrt(Math.min(1, p));
    if (st.scale === "row") return rowMax > 0 ? p / rowMax : 0;
    return Math.min(1, p);
  }
  // token view: red with alpha = level; the matrix: white -> dark blue
  const TOKEN_RGBA = [""]; // by level in thousandths, made as needed
  function tokenColour(k) {
    if (TOKEN_RGBA[k] === undefined) TOKEN_RGBA[k] = "rgba(214, 39, 40, " + (k / 1000).toFixed(3) + ")";
    return TOKEN_RGBA[k];
  }
  const RAMP = new Uint8Array(256 * 3);
  for (let i = 0; i < 256; i++) {
    const t = i / 255;
    RAMP[3 * i] = Math.round(255 - t * (255 - 8));
    RAMP[3 * i + 1] = Math.round(255 - t * (255 - 48));
    RAMP[3 * i + 2] = Math.round(255 - t * (255 - 107));
  }

  /* ---- token view: the tokens, an encoder-decoder's source above its
   * decoder inputs; the selected token's side is its layer's query side
   * (dir q) or key side (dir k), the other side coloured ---- */
  const spans = { src: [], tgt: [] }, painted = { src: null, tgt: null }; // each span's level (thousandths)
  function showToken(t) {
    return t.replace(/\n/g, "\u21b5\n").replace(/\t/g, "\u21e5").replace(/\r/g, "\u240d");
  }
  function buildTokens() {
    for (const side of ["tgt", "src"]) {
      const box = $(side === "src" ? "srctokens" : "tokens"), text = textOf(side) || [];
      box.textContent = "";
      box.className = D.token_source === "ids" ? "ids" : "";
      spans[side].length = 0;
      painted[side] = new Int16Array(text.length);
      const frag = document.createDocumentFragment();
      const mask = side === "tgt" ? D.sequences[st.s].mask : null; // a task's or --lines' padding
      for (let t = 0; t < text.length; t++) {
        const sp = document.createElement("span");
        sp.textContent = showToken(text[t]);
        sp.dataset.t = t;
        sp.dataset.side = side;
        if (mask && !mask[t]) { sp.dataset.pad = 1; sp.className = "pad"; }
        spans[side].push(sp);
        frag.appendChild(sp);
      }
      box.appendChild(frag);
    }
  }
  let lastValues = null; // Float64Array: what the token colours show (the painted side)
  let lastSel = -1, marked = null; // the span marked held, sel or nocap
  function repaint() { paintTokens(); drawMatrix(); }
  function paintTokens() {
    const blk = block(st.s, st.l, st.h), L = D.layers[st.l], [qs, ks] = sides(L);
    const paint = st.dir === "q" ? ks : qs, held = st.dir === "q" ? qs : ks;
    if (marked) marked.classList.remove("held", "sel", "nocap");
    marked = null;
    const n = spans[paint].length, vals = new Float64Array(n);
    const q = st.q < spans[held].length ? st.q : -1;
    let missing = false; // a long map's column (not drawn)
    if (blk && q >= 0) {
      if (st.dir === "q") {
        const r = q - L.q0;
        if (r >= 0 && r < L.nq && !blk.need(r, r + 1, repaint)) { // its row file: painted when it arrives
          marked = spans[held][q]; marked.classList.add(st.held ? "held" : "sel");
          lastValues = null; lastSel = q;
          return;
        }
        if (r >= 0 && r < L.nq) vals.set(blk.row(r).subarray(0, Math.min(n, L.S)));
        else { marked = spans[held][q]; marked.classList.add("nocap"); }
      } else if (q < L.S && blk.long) {
        missing = true;
        status("a long map shows the attention a token gives, not what it receives (its column " +
               "would read every row file)");
      } else if (q < L.S) {
        const c = blk.col(q);
        for (let r = 0; r < L.nq; r++) if (L.q0 + r < n) vals[L.q0 + r] = c[r];
      }
    }
    let mx = 0;
    for (let t = 0; t < n; t++) mx = vals[t] > mx ? vals[t] : mx;
    for (const side of ["src", "tgt"]) {
      const was = painted[side], sp = spans[side];
      for (let t = 0; t < sp.length; t++) {
        const k = side === paint ? Math.round(1000 * level(vals[t], mx)) : 0;
        if (was[t] !== k) { was[t] = k; sp[t].style.backgroundColor = tokenColour(k); }
      }
    }
    if (q >= 0) { marked = spans[held][q]; marked.classList.add(st.held ? "held" : "sel"); }
    lastValues = missing ? null : vals;
    lastSel = q;
  }
  /* A token of `side` chosen: with queries and keys on different sides (cross
   * attention) the side says the direction; a side the layer does not read
   * is not selectable. */
  function choose(side) {
    const [qs, ks] = sides(D.layers[st.l]);
    if (qs !== ks) { st.dir = side === qs ? "q" : "k"; $("dir").value = st.dir; }
    return side === qs || side === ks;
  }
  function tokenEvents() {
    for (const id of ["tokens", "srctokens"]) {
      const box = $(id);
      box.addEventListener("mouseover", (ev) => {
        const t = ev.target.dataset ? ev.target.dataset.t : undefined;
        if (t === undefined) return;
        const i = +t, side = ev.target.dataset.side;
        if (!st.held && choose(side)) { st.q = i; paintTokens(); drawMatrix(); writeHash(); }
        tokenTip(ev, i, side);
      });
      box.addEventListener("mousemove", (ev) => { if (ev.target.dataset && ev.target.dataset.t !== undefined) moveTip(ev); });
      box.addEventListener("mouseleave", hideTip);
      box.addEventListener("click", (ev) => {
        const t = ev.target.dataset ? ev.target.dataset.t : undefined;
        if (t === undefined) return;
        const i = +t, side = ev.target.dataset.side;
        if (!choose(side)) return;
        st.held = !(st.held && st.q === i);
        st.q = i;
        paintTokens(); drawMatrix(); drawHeadView(); writeHash();
        tokenTip(ev, i, side);
      });
    }
  }
  function precision() {
    return U8 ? "stored as u8 with a scale per query row; shown dequantised" : "stored as f16; shown exactly";
  }
  function tokLabel(t, side) { return JSON.stringify((textOf(side || "tgt") || [])[t]); }
  function headName(L) { return (L.attn ? L.attn + " " : "") + "L" + L.layer + " H" + L.heads[st.h]; }
  function tokenTip(ev, i, side) {
    const L = D.layers[st.l], head = headName(L), [qs, ks] = sides(L);
    let s = (D.seq2seq ? (side === "src" ? "source " : "target ") : "") + "token " + i + " " +
            tokLabel(i, side) + "  id " + idsOf(side)[i];
    const painted = st.dir === "q" ? ks : qs;
    if (lastSel >= 0 && lastValues && side === painted) {
      const p = lastValues[i];
      s += "\n" + head + (st.dir === "q" ? ": query " + lastSel + " \u2192 key " + i
                                          : ": query " + i + " \u2192 key " + lastSel);
      s += "\np = " + p.toPrecision(6) + "\n" + precision();
    }
    showTip(ev, s);
  }

  /* ---- head view (bertviz's): the layer's heads as coloured lines from
   * each query token (left column) to the keys it attends to (right
   * column), opacity the weight on the colour scale; a hovered token keeps
   * its lines alone; a head's chip hides or shows it; heads that share a
   * key/value head (GQA) carry its group on their chips. Long sequences:
   * the 96 positions around the selected token (or the start); a long
   * map's rows of those positions are loaded first. ---- */
  const HV_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                      "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39",
                      "#7b4173", "#3182bd"];
  const HV_ROW = 16, HV_W = 560, HV_TEXT = 150, HV_MAX = 96;
  const hv = { off: new Set(), layer: -1, hover: null, lines: [], q0: 0, k0: 0, nq: 0, nk: 0 };
  function hvColour(i) { return HV_COLOURS[i % HV_COLOURS.length]; }
  function hvChips() {
    const L = D.layers[st.l], box = $("hvheads"), gqa = L.n_kv_head && L.n_kv_head < L.n_head;
    if (hv.layer !== st.l) { hv.off.clear(); hv.layer = st.l; }
    box.textContent = "";
    L.heads.forEach((h, i) => {
      const c = document.createElement("span");
      c.className = "hvchip" + (hv.off.has(i) ? " off" : "");
      c.dataset.i = i;
      c.textContent = "H" + h + (gqa ? " kv" + L.kv_group[i] : "");
      c.style.borderColor = hvColour(i);
      c.style.background = hv.off.has(i) ? "" : hvColour(i);
      c.addEventListener("click", () => { hv.off.has(i) ? hv.off.delete(i) : hv.off.add(i); hvChips(); drawHeadView(); });
      box.appendChild(c);
    });
  }
  /* the positions shown of a side of n tokens: all, or HV_MAX around `at` */
  function hvWindow(n, at) {
    if (n <= HV_MAX) return [0, n];
    const c = at >= 0 ? at : 0, lo = Math.max(0, Math.min(n - HV_MAX, c - HV_MAX / 2));
    return [lo, lo + HV_MAX];
  }
  function drawHeadView() {
    const L = D.layers[st.l], [qs, ks] = sides(L), qt = textOf(qs) || [], kt = textOf(ks) || [];
    const [q0, q1] = hvWindow(Math.min(qt.length, L.q0 + L.nq), st.q >= 0 && st.dir === "q" ? st.q : -1);
    const [k0, k1] = hvWindow(Math.min(kt.length, L.S), st.q >= 0 && st.dir === "k" ? st.q : (qs === ks ? q0 + HV_MAX / 2 : -1));
    Object.assign(hv, { q0, k0, nq: q1 - q0, nk: k1 - k0 });
    const c = $("headview"), rows = Math.max(q1 - q0, k1 - k0);
    c.width = HV_W; c.height = rows * HV_ROW + 8;
    const ctx = c.getContext("2d");
    ctx.font = "12px 'DejaVu Sans Mono', monospace";
    ctx.textBaseline = "middle";
    const y = (i) => 4 + i * HV_ROW + HV_ROW / 2, xl = HV_TEXT, xr = HV_W - HV_TEXT;
    const on = (side, t) => hv.hover && hv.hover.side === side && hv.hover.t === t;
    ctx.fillStyle = "#222";
    ctx.textAlign = "right";
    for (let t = q0; t < q1; t++) {
      ctx.font = on("q", t) ? "bold 12px 'DejaVu Sans Mono', monospace" : "12px 'DejaVu Sans Mono', monospace";
      ctx.fillText(shortTok(t, qs), xl - 6, y(t - q0));
    }
    ctx.textAlign = "left";
    for (let s = k0; s < k1; s++) {
      ctx.font = on("k", s) ? "bold 12px 'DejaVu Sans Mono', monospace" : "12px 'DejaVu Sans Mono', monospace";
      ctx.fillText(shortTok(s, ks), xr + 6, y(s - k0));
    }
    hv.lines = [];
    ctx.lineWidth = 2;
    /* a long map's rows of the window: every shown head's, or none drawn yet */
    const r0 = Math.max(q0, L.q0) - L.q0, r1 = Math.min(q1 - L.q0, L.nq);
    let ready = true;
    L.heads.forEach((_, hi) => {
      const blk = block(st.s, st.l, hi);
      if (blk && !hv.off.has(hi) && r1 > r0) ready = blk.need(r0, r1, drawHeadView) && ready;
    });
    if (!ready) return;
    L.heads.forEach((_, hi) => {
      if (hv.off.has(hi)) return;
      const blk = block(st.s, st.l, hi);
      if (!blk) return;
      ctx.strokeStyle = hvColour(hi);
      for (let t = Math.max(q0, L.q0); t < q1; t++) {
        if (hv.hover && hv.hover.side === "q" && hv.hover.t !== t) continue;
        const row = blk.row(t - L.q0);
        let mx = 0;
        for (let s = k0; s < k1; s++) mx = row[s] > mx ? row[s] : mx;
        for (let s = k0; s < k1; s++) {
          if (hv.hover && hv.hover.side === "k" && hv.hover.t !== s) continue;
          const a = level(row[s], mx);
          if (!(a >= 0.01)) continue;
          ctx.globalAlpha = a;
          ctx.beginPath(); ctx.moveTo(xl, y(t - q0)); ctx.lineTo(xr, y(s - k0)); ctx.stroke();
          hv.lines.push([L.heads[hi], t, s, row[s]]);
        }
      }
    });
    ctx.globalAlpha = 1;
  }
  function headViewEvents() {
    const c = $("headview");
    c.addEventListener("mousemove", (ev) => {
      const r = c.getBoundingClientRect(), x = ev.clientX - r.left, i = Math.floor((ev.clientY - r.top - 4) / HV_ROW);
      const side = x < HV_W / 2 ? "q" : "k", t = (side === "q" ? hv.q0 : hv.k0) + i;
      const ok = i >= 0 && i < (side === "q" ? hv.nq : hv.nk);
      const next = ok ? { side, t } : null;
      if (JSON.stringify(next) !== JSON.stringify(hv.hover)) { hv.hover = next; drawHeadView(); }
    });
    c.addEventListener("mouseleave", () => { hv.hover = null; drawHeadView(); });
  }

  /* ---- tooltip ---- */
  function showTip(ev, text) { const t = $("tooltip"); t.textContent = text; t.style.display = "block"; moveTip(ev); }
  function moveTip(ev) {
    const t = $("tooltip");
    t.style.left = Math.min(ev.clientX + 14, innerWidth - t.offsetWidth - 4) + "px";
    t.style.top = Math.min(ev.clientY + 14, innerHeight - t.offsetHeight - 4) + "px";
  }
  function hideTip() { $("tooltip").style.display = "none"; }

  /* ---- matrix view: the map as an image, drawn with zoom and pan, the
   * tokens on both axes (queries left, keys above), every k-th where the
   * cells are smaller than a line of text ---- */
  const view = { zoom: 1, x: 0, y: 0 }; // image pixel (0,0) at (ML + x, MT + y); zoom px per cell
  let image = null, imageKey = "";
  const MSIZE = 480, ML = 110, MT = 90, LINE = 12; // the map's side, the label margins
  let axis = { rows: [], cols: [] }; // the labels drawn last: [index, text]
  function shortTok(t, side) {
    const s = showToken(textOf(side)[t]).replace(/\n/g, "");
    return s.length > 14 ? s.slice(0, 13) + "\u2026" : s;
  }
  /* Row r of the selected head as the matrix shows it: A's, B's, or A - B
   * (null: a long map's row not loaded). */
  function shownRow(blk, r) {
    if (st.cmp === "a" || !B) return blk.row(r);
    const b = block(st.s, st.l, st.h, B).row(r);
    if (st.cmp === "b" || !b) return b;
    const a = blk.row(r);
    for (let s = 0; a && s < a.length; s++) a[s] -= b[s];
    return a;
  }
  /* Rows [r0, r1) x keys [c0, c1) of the shown map as a canvas of one
   * pixel a cell. */
  function cellsImage(blk, r0, r1, c0, c1) {
    const c = document.createElement("canvas"), w = c1 - c0;
    c.width = w; c.height = r1 - r0;
    const ctx = c.getContext("2d"), img = ctx.createImageData(w, r1 - r0), px = img.data;
    const diff = B && st.cmp === "d";
    for (let r = r0; r < r1; r++) {
      const row = shownRow(blk, r);
      let mx = 0;
      if (st.scale === "row") for (let s = 0; s < blk.S; s++) mx = Math.abs(row[s]) > mx ? Math.abs(row[s]) : mx;
      for (let s = c0, o = 4 * (r - r0) * w; s < c1; s++, o += 4) {
        if (diff) { /* diverging about a white 0: red where A > B, blue where A < B */
          const a = level(Math.abs(row[s]), mx), pos = row[s] > 0;
          px[o] = pos ? 255 : Math.round(255 - a * 224); px[o + 1] = Math.round(255 - a * (pos ? 216 : 136));
          px[o + 2] = pos ? Math.round(255 - a * 215) : 255; px[o + 3] = 255;
          continue;
        }
        const k = Math.round(255 * level(row[s], mx)) * 3;
        px[o] = RAMP[k]; px[o + 1] = RAMP[k + 1]; px[o + 2] = RAMP[k + 2]; px[o + 3] = 255;
      }
    }
    ctx.putImageData(img, 0, 0);
    return c;
  }
  /* The whole map as an image (S x nq): every cell; a long map's pooled
   * overview (none for A - B, which has no pooled form) */
  function mapImage() {
    const blk = block(st.s, st.l, st.h), key = [st.s, st.l, st.h, st.scale, st.cmp].join();
    if (!blk) return null;
    if (blk.long) {
      const ov = st.cmp === "b" && B ? block(st.s, st.l, st.h, B) : st.cmp === "d" && B ? null : blk;
      return ov ? ov.overview(drawMatrix) : null;
    }
    if (key === imageKey) return image;
    image = cellsImage(blk, 0, blk.nq, 0, blk.S); imageKey = key;
    return image;
  }
  /* A long map zoomed in to at most DETAIL rows: the visible cells exactly,
   * over the overview, once their row files are there. */
  const DETAIL = 512;
  let detail = null, detailKey = "";
  function drawDetail(ctx, blk, L) {
    const z = view.zoom, r0 = Math.max(0, Math.floor(-view.y / z)), r1 = Math.min(L.nq, Math.ceil((MSIZE - view.y) / z));
    const c0 = Math.max(0, Math.floor(-view.x / z)), c1 = Math.min(L.S, Math.ceil((MSIZE - view.x) / z));
    if (r1 <= r0 || c1 <= c0 || r1 - r0 > DETAIL) return;
    let ok = blk.need(r0, r1, drawMatrix);
    if (B && st.cmp !== "a") ok = block(st.s, st.l, st.h, B).need(r0, r1, drawMatrix) && ok;
    if (!ok) return;
    const key = [st.s, st.l, st.h, st.scale, st.cmp, r0, r1, c0, c1].join();
    if (key !== detailKey) { detail = cellsImage(blk, r0, r1, c0, c1); detailKey = key; }
    ctx.drawImage(detail, ML + view.x + c0 * z, MT + view.y + r0 * z, (c1 - c0) * z, (r1 - r0) * z);
  }
  function resetView() {
    const L = D.layers[st.l];
    view.zoom = MSIZE / Math.max(L.S, L.nq); view.x = 0; view.y = 0;
  }
  function drawAxes(ctx, L) {
    const step = Math.max(1, Math.ceil(LINE / view.zoom)), [qs, ks] = sides(L);
    const TQ = textOf(qs).length, TK = textOf(ks).length;
    axis = { rows: [], cols: [] };
    ctx.fillStyle = "#222";
    ctx.font = "11px sans-serif";
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let r = 0; r < L.nq; r += step) {
      const y = MT + view.y + (r + 0.5) * view.zoom, q = L.q0 + r;
      if (y < MT || y > MT + MSIZE || q >= TQ) continue;
      ctx.fillText(shortTok(q, qs), ML - 4, y);
      axis.rows.push([q, shortTok(q, qs)]);
    }
    for (let s = 0; s < L.S; s += step) {
      const x = ML + view.x + (s + 0.5) * view.zoom;
      if (x < ML || x > ML + MSIZE || s >= TK) continue;
      ctx.save();
      ctx.translate(x, MT - 4);
      ctx.rotate(-Math.PI / 3);
      ctx.textAlign = "left";
      ctx.fillText(shortTok(s, ks), 0, 0);
      ctx.restore();
      axis.cols.push([s, shortTok(s, ks)]);
    }
  }
  function drawMatrix() {
    const cv = $("matrix"), ctx = cv.getContext("2d"), img = mapImage(), L = D.layers[st.l];
    const blk = block(st.s, st.l, st.h);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, cv.width, cv.height);
    ctx.fillStyle = "#eee";
    ctx.fillRect(ML, MT, MSIZE, MSIZE);
    if (!blk) return;
    ctx.save();
    ctx.beginPath();
    ctx.rect(ML, MT, MSIZE, MSIZE);
    ctx.clip();
    ctx.imageSmoothingEnabled = false;
    if (img) ctx.drawImage(img, ML + view.x, MT + view.y, L.S * view.zoom, L.nq * view.zoom);
    if (blk.long) drawDetail(ctx, blk, L);
    if (st.q >= 0) {
      ctx.strokeStyle = "rgba(214,39,40,0.9)";
      ctx.lineWidth = 1;
      if (st.dir === "q") {
        const y = MT + view.y + (st.q - L.q0) * view.zoom;
        ctx.strokeRect(ML + view.x - 0.5, y - 0.5, L.S * view.zoom + 1, Math.max(1, view.zoom) + 1);
      } else {
        const x = ML + view.x + st.q * view.zoom;
        ctx.strokeRect(x - 0.5, MT + view.y - 0.5, Math.max(1, view.zoom) + 1, L.nq * view.zoom + 1);
      }
    }
    ctx.restore();
    drawAxes(ctx, L);
  }
  function matrixEvents() {
    const cv = $("matrix");
    cv.width = ML + MSIZE; cv.height = MT + MSIZE;
    let drag = null;
    cv.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const f = ev.deltaY < 0 ? 1.25 : 0.8, r = cv.getBoundingClientRect();
      const mx = ev.clientX - r.left - ML, my = ev.clientY - r.top - MT;
      view.x = mx - (mx - view.x) * f; view.y = my - (my - view.y) * f; view.zoom *= f;
      drawMatrix();
    }, { passive: false });
    cv.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, y: ev.clientY, vx: view.x, vy: view.y }; });
    addEventListener("mouseup", () => { drag = null; });
    cv.addEventListener("dblclick", () => { resetView(); drawMatrix(); });
    cv.addEventListener("mouseleave", hideTip);
    cv.addEventListener("mousemove", (ev) => {
      if (drag) {
        view.x = drag.vx + ev.clientX - drag.x; view.y = drag.vy + ev.clientY - drag.y;
        drawMatrix();
        return;
      }
      const r = cv.getBoundingClientRect(), blk = block(st.s, st.l, st.h), L = D.layers[st.l];
      const s = Math.floor((ev.clientX - r.left - ML - view.x) / view.zoom);
      const row = Math.floor((ev.clientY - r.top - MT - view.y) / view.zoom);
      if (!blk || s < 0 || s >= L.S || row < 0 || row >= L.nq) { hideTip(); return; }
      const q = L.q0 + row, p = blk.get(row, s), [qs, ks] = sides(L), bb = B && block(st.s, st.l, st.h, B);
      let txt = headName(L) + "  query " + q + " " + tokLabel(q, qs) + " \u2192 key " + s + " " + tokLabel(s, ks);
      if (!blk.need(row, row + 1, () => {}) || (bb && !bb.need(row, row + 1, () => {}))) {
        showTip(ev, txt + "\n(loading this query's row)");
        return;
      }
      txt += "\np = " + p.toPrecision(6) + "\n" + precision();
      if (B) {
        const pb = bb.get(row, s);
        txt = txt.replace("\np = ", "\nA: p = ") + "\nB: p = " + pb.toPrecision(6) +
              "\nA \u2212 B = " + (p - pb).toPrecision(6);
      }
      if (U8) txt += " (\u00b1" + (blk.scaleOf(row) / 2).toPrecision(2) + ")";
      showTip(ev, txt);
    });
  }

  /* ---- the layer x head grid of thumbnails ---- */
  const CELL = 44, PAD = 4, LEFT = D.seq2seq ? 52 : 30, TOP = 16;
  let gridHeads = 0;
  /* the score the model view writes under each thumbnail: index gridMetric
   * of D.metrics (-1: none); value[layer][head] by the model's ids */
  let gridMetric = -1, gridShown = [];
  function gridScore(L, hi) {
    const m = D.metrics[gridMetric];
    if (!m || L.attn) return null;
    const row = m.value[L.layer];
    return row && row[L.heads[hi]] !== undefined ? row[L.heads[hi]] : null;
  }
  function drawGrid() {
    gridHeads = Math.max(...D.layers.map((L) => L.heads.length));
    const SCORE = gridMetric >= 0 ? 12 : 0; // a line of text under each row of cells
    const cv = $("grid"), w = LEFT + gridHeads * (CELL + PAD), h = TOP + D.layers.length * (CELL + PAD + SCORE);
    if (cv.width !== w || cv.height !== h) { cv.width = w; cv.height = h; }
    const ctx = cv.getContext("2d");
    ctx.clearRect(0, 0, w, h);
    ctx.fillStyle = "#333"; ctx.font = "11px sans-serif"; ctx.textBaseline = "middle";
    for (let hi = 0; hi < gridHeads; hi++) ctx.fillText(String(hi), LEFT + hi * (CELL + PAD) + CELL / 2 - 4, TOP / 2);
    gridShown = [];
    D.layers.forEach((L, li) => {
      const y = TOP + li * (CELL + PAD + SCORE);
      ctx.fillStyle = "#333";
      ctx.fillText(L.attn ? layerName(L) : "L" + L.layer, 2, y + CELL / 2);
      L.heads.forEach((head, hi) => {
        const x = LEFT + hi * (CELL + PAD), b = A.index.get(st.s + "," + li + "," + hi);
        if (b) ctx.drawImage(thumb(b), x, y, CELL, CELL);
        // heads sharing a kv head: a bar under the cell, one colour per group
        if (L.n_kv_head > 0 && L.n_kv_head < L.n_head) {
          ctx.fillStyle = L.kv_group[hi] % 2 ? "#888" : "#cfa52c";
          ctx.fillRect(x, y + CELL, CELL, 2);
        }
        if (li === st.l && hi === st.h) {
          ctx.strokeStyle = "#d62728"; ctx.lineWidth = 2; ctx.strokeRect(x - 1, y - 1, CELL + 2, CELL + 2);
        }
        const v = SCORE ? gridScore(L, hi) : null;
        if (v !== null) {
          ctx.fillStyle = "#333"; ctx.font = "10px sans-serif";
          ctx.fillText(Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(1) : fmt(v).slice(0, 7),
                       x, y + CELL + 2 + SCORE / 2);
          ctx.font = "11px sans-serif";
          gridShown.push([L.layer, L.heads[hi], v]);
        }
      });
    });
  }
  const thumbs = new Map();
  function thumb(b) {
    if (thumbs.has(b.i)) return thumbs.get(b.i);
    const c = document.createElement("canvas");
    c.width = b.thumb_cols; c.height = b.thumb_rows;
    const ctx = c.getContext("2d"), img = ctx.createImageData(c.width, c.height), s = atob(b.thumb);
    for (let k = 0; k < s.length; k++) {
      const v = s.charCodeAt(k), a = Math.round(255 * Math.sqrt(v / 255)) * 3;
      img.data[4 * k] = RAMP[a]; img.data[4 * k + 1] = RAMP[a + 1]; img.data[4 * k + 2] = RAMP[a + 2];
      img.data[4 * k + 3] = 255;
    }
    ctx.putImageData(img, 0, 0);
    thumbs.set(b.i, c);
    return c;
  }
  function gridRow() { return CELL + PAD + (gridMetric >= 0 ? 12 : 0); }
  function gridEvents() {
    const cv = $("grid"), sel = $("gridm");
    sel.textContent = "";
    const none = document.createElement("option");
    none.value = -1; none.textContent = "none";
    sel.appendChild(none);
    D.metrics.forEach((m, i) => {
      const o = document.createElement("option");
      o.value = i; o.textContent = m.name + " (run " + m.run + ")";
      sel.appendChild(o);
    });
    gridMetric = D.metrics.length ? 0 : -1;
    sel.value = gridMetric;
    sel.addEventListener("change", () => { gridMetric = +sel.value; drawGrid(); });
    cv.addEventListener("click", (ev) => {
      const r = cv.getBoundingClientRect();
      const hi = Math.floor((ev.clientX - r.left - LEFT) / (CELL + PAD));
      const li = Math.floor((ev.clientY - r.top - TOP) / gridRow());
      if (li >= 0 && li < D.layers.length && hi >= 0 && hi < D.layers[li].heads.length) select(li, hi);
    });
    cv.addEventListener("mousemove", (ev) => {
      const r = cv.getBoundingClientRect();
      const hi = Math.floor((ev.clientX - r.left - LEFT) / (CELL + PAD));
      const li = Math.floor((ev.clientY - r.top - TOP) / gridRow());
      if (li >= 0 && li < D.layers.length && hi >= 0 && hi < D.layers[li].heads.length) {
        const L = D.layers[li], v = gridScore(L, hi);
        showTip(ev, (L.attn ? L.attn + " " : "") + "layer " + L.layer + " head " + L.heads[hi] + kvText(L, hi) +
                (v !== null ? "\n" + D.metrics[gridMetric].name + " " + fmt(v) : ""));
      } else hideTip();
    });
    cv.addEventListener("mouseleave", hideTip);
  }
  function kvText(L, hi) {
    if (!(L.n_kv_head > 0 && L.n_kv_head < L.n_head)) return "";
    const g = L.kv_group[hi], mates = L.heads.filter((h, i) => L.kv_group[i] === g);
    return "\nkv head " + g + ", shared by heads " + mates.join(", ");
  }

  /* ---- the head panel: the index's scores ---- */
  function fmt(v) { return v === null || v === undefined ? "" : Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(3) : v.toFixed(4); }
  function drawPanel() {
    const L = D.layers[st.l], head = L.heads[st.h], panel = $("panel");
    $("headname").textContent = (L.attn ? L.attn + " " : "") + "L" + L.layer + " H" + head;
    panel.textContent = "";
    const p = document.createElement("p");
    p.textContent = kvText(L, st.h).trim();
    panel.appendChild(p);
    if ((D.focus || []).length) { // view --heads: links to each
      const f = document.createElement("p");
      f.id = "focus";
      f.appendChild(document.createTextNode("heads of interest: "));
      for (const [l, h] of D.focus) {
        const a = document.createElement("a");
        a.textContent = "L" + l + "H" + h;
        a.addEventListener("click", () => { const li = layerIdx(l); select(li, D.layers[li].heads.indexOf(h)); });
        f.appendChild(a); f.appendChild(document.createTextNode(" "));
      }
      panel.appendChild(f);
    }
    if (!D.metrics.length) {
      const n = document.createElement("p");
      n.className = "hint";
      n.textContent = "No scores: pass --db with an index holding runs on this model.";
      panel.appendChild(n);
      return;
    }
    const tb = document.createElement("table");
    tb.className = "scores";
    const hr = tb.insertRow();
    for (const h of ["score", "value", "\u00b1 se", "rank", "top heads"]) {
      const th = document.createElement("th"); th.textContent = h; hr.appendChild(th);
    }
    for (const m of D.metrics) {
      const row = m.value[L.layer], v = row ? row[head] : null;
      const tr = tb.insertRow();
      tr.dataset.metric = m.name;
      const all = [];
      m.value.forEach((r, l) => r.forEach((x, h) => { if (x !== null) all.push([x, l, h]); }));
      all.sort((a, b) => b[0] - a[0] || a[1] - b[1] || a[2] - b[2]);
      const rank = all.findIndex((a) => a[1] === L.layer && a[2] === head);
      const twice = D.metrics.filter((x) => x.name === m.name).length > 1;
      const se = m.stderr[L.layer] ? m.stderr[L.layer][head] : null;
      const cells = [m.name + (twice ? " (" + m.kind + ")" : ""), fmt(v), se === null ? "" : se.toPrecision(2),
                     rank >= 0 ? rank + 1 + "/" + all.length : ""];
      cells.forEach((c, i) => { const td = tr.insertCell(); td.textContent = c; if (i >= 1) td.className = "num"; });
      tr.cells[0].title = m.kind + " run " + m.run;
      const td = tr.insertCell();
      td.className = "top";
      all.slice(0, 3).forEach(([, l, h]) => {
        const a = document.createElement("a");
        a.textContent = "L" + l + "H" + h;
        a.title = "show layer " + l + " head " + h;
        a.addEventListener("click", () => { const li = layerIdx(l); if (li >= 0 && D.layers[li].heads.indexOf(h) >= 0) select(li, D.layers[li].heads.indexOf(h)); });
        td.appendChild(a); td.appendChild(document.createTextNode(" "));
      });
    }
    panel.appendChild(tb);
  }

  /* ---- selection ---- */
  /* ---- find: the sequences whose tokens hold the text (case-insensitive)
   * stay in the sequence menu, the first is shown, its matching tokens
   * outlined; an empty box lists every sequence ---- */
  let found = [];
  function matches(si, text) {
    const q = D.sequences[si], real = (q.text || []).filter((_, t) => !q.mask || q.mask[t]);
    const toks = real.concat(q.src_text || []);
    const joined = toks.join("").toLowerCase();
    return joined.indexOf(text) >= 0;
  }
  function find() {
    const text = $("find").value.trim().toLowerCase();
    found = D.sequences.map((_, i) => i).filter((i) => !text || matches(i, text));
    const sel = $("seq");
    sel.textContent = "";
    for (const i of found) {
      const o = document.createElement("option");
      o.value = i; o.textContent = "#" + D.sequences[i].seq;
      sel.appendChild(o);
    }
    if (found.length && found.indexOf(st.s) < 0) select(st.l, st.h, found[0]);
    else if (found.length) sel.value = st.s;
    outlineFound(text);
    status(text ? found.length + " of " + D.sequences.length + " sequences hold " + JSON.stringify(text)
                : D.sequences.length + " sequence(s)");
  }
  /* the tokens of the shown sequence that belong to a match of text */
  function outlineFound(text) {
    for (const side of ["tgt", "src"]) {
      const toks = textOf(side) || [], ends = [];
      let all = "";
      toks.forEach((t) => { all += t; ends.push(all.length); });
      const hit = new Uint8Array(toks.length), low = all.toLowerCase();
      for (let at = text ? low.indexOf(text) : -1; at >= 0; at = low.indexOf(text, at + 1))
        for (let t = 0, start = 0; t < toks.length; start = ends[t], t++)
          if (ends[t] > at && start < at + text.length) hit[t] = 1;
      spans[side].forEach((sp, t) => sp.classList.toggle("found", !!hit[t]));
    }
  }
  function fillSelect(sel, items, cur) {
    sel.textContent = "";
    items.forEach((txt, i) => { const o = document.createElement("option"); o.value = i; o.textContent = txt; sel.appendChild(o); });
    sel.value = cur;
  }
  function syncControls() {
    const L = D.layers[st.l];
    fillSelect($("head"), L.heads.map((h, i) => h + (L.n_kv_head && L.n_kv_head < L.n_head ? " (kv " + L.kv_group[i] + ")" : "")), st.h);
    $("layer").value = st.l; $("seq").value = st.s;
    $("kvinfo").textContent = L.n_kv_head && L.n_kv_head < L.n_head
      ? "GQA: " + L.n_head + " query heads share " + L.n_kv_head + " kv heads" : "";
  }
  function select(li, hi, si) {
    const seqChanged = si !== undefined && si !== st.s;
    if (si !== undefined) st.s = si;
    const layerChanged = li !== st.l;
    st.l = li; st.h = Math.min(hi, D.layers[li].heads.length - 1);
    if (seqChanged) { buildTokens(); outlineFound($("find").value.trim().toLowerCase()); }
    if (layerChanged) resetView();
    syncControls(); paintTokens(); drawMatrix(); drawGrid(); drawPanel(); hvChips(); drawHeadView(); writeHash();
  }
  function keys() {
    addEventListener("keydown", (ev) => {
      if (ev.target.tagName === "SELECT" || ev.altKey || ev.ctrlKey || ev.metaKey) return;
      const n = D.layers.length;
      if (ev.key === "ArrowRight" || ev.key === "ArrowLeft") {
        const d = ev.key === "ArrowRight" ? 1 : -1, H = D.layers[st.l].heads.length;
        let li = st.l, hi = st.h + d;
        if (hi >= H) { li = (li + 1) % n; hi = 0; }
        if (hi < 0) { li = (li + n - 1) % n; hi = D.layers[li].heads.length - 1; }
        select(li, hi);
      } else if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {
        select((st.l + (ev.key === "ArrowDown" ? 1 : n - 1)) % n, st.h);
      } else if (ev.key === "]" || ev.key === "[") {
        const [qs, ks] = sides(D.layers[st.l]), n = spans[st.dir === "q" ? qs : ks].length;
        st.q = Math.max(0, Math.min(n - 1, (st.q < 0 ? 0 : st.q) + (ev.key === "]" ? 1 : -1)));
        st.held = true;
        paintTokens(); drawMatrix(); drawHeadView(); writeHash();
      } else return;
      ev.preventDefault();
    });
    addEventListener("hashchange", () => {
      const s0 = st.s, l0 = st.l;
      readHash();
      if (st.s !== s0) buildTokens();
      if (st.l !== l0) resetView();
      syncControls(); paintTokens(); drawMatrix(); drawGrid(); drawPanel(); hvChips(); drawHeadView();
    });
  }

  function start() {
    const m = D.model || {};
    $("about").textContent = [m.family ? m.family + " model" : "model", m.sha256 ? m.sha256.slice(0, 12) : "",
      "T = " + T, D.dtype === "u8" ? "u8 maps" : "f16 maps", "tokens: " + D.token_source, D.source].filter(Boolean).join(" \u00b7 ");
    fillSelect($("seq"), D.sequences.map((s) => "#" + s.seq), 0);
    fillSelect($("layer"), D.layers.map(layerName), 0);
    if (D.seq2seq) { $("srcwrap").hidden = false; $("tgthead").textContent = "Target tokens (the decoder's inputs)"; }
    $("seq").addEventListener("change", (e) => select(st.l, st.h, +e.target.value));
    $("find").addEventListener("input", find);
    $("layer").addEventListener("change", (e) => select(+e.target.value, st.h));
    $("head").addEventListener("change", (e) => select(st.l, +e.target.value));
    $("dir").addEventListener("change", (e) => { st.dir = e.target.value; paintTokens(); drawMatrix(); });
    $("scale").addEventListener("change", (e) => { st.scale = e.target.value; paintTokens(); drawMatrix(); });
    if (B) {
      $("cmpwrap").hidden = false;
      $("cmp").addEventListener("change", (e) => { st.cmp = e.target.value; drawMatrix(); });
    }
    readHash();
    buildTokens(); tokenEvents(); matrixEvents(); gridEvents(); headViewEvents(); keys();
    resetView(); syncControls(); paintTokens(); drawMatrix(); drawGrid(); drawPanel();
    hvChips(); drawHeadView(); writeHash();
    status(D.blocks.length + " maps \u00b7 " + D.sequences.length + " sequence(s) \u00b7 " + D.layers.length + " layer(s)");
    window.HS_READY = performance.now();
  }

  /* the viewer's state and data, for tests and the console */
  window.hsViewer = {
    state: st,
    row(si, li, hi, r) { const b = block(si, li, hi), x = b && b.row(r); return x ? Array.from(x) : null; },
    /* resolves once no row file is loading (at once when none is) */
    idle() { return new Promise((res) => { idleWaiters.push(res); settle(); }); },
    /* the row files loaded or loading: [name], of A's rows/ */
    rowFiles() { return Array.from(A.files.keys()).concat(Array.from(A.waiting.keys())); },
    /* the matrix zoomed to px pixels a cell with cell (r, s) of the shown
     * map at its centre: that cell's centre on the canvas, [x, y] */
    zoomTo(r, s, px) {
      const L = D.layers[st.l];
      view.zoom = px; view.x = MSIZE / 2 - (s + 0.5) * px; view.y = MSIZE / 2 - (r - L.q0 + 0.5) * px;
      drawMatrix();
      return [ML + MSIZE / 2, MT + MSIZE / 2];
    },
    shown() { return lastValues ? Array.from(lastValues) : null; },
    pads() { return spans.tgt.filter((x) => x.dataset.pad).length; },
    /* find's sequences (export indices) and the outlined tokens of the shown one */
    found() { return { sequences: found.slice(), tokens: spans.tgt.filter((x) => x.classList.contains("found")).map((x) => +x.dataset.t) }; },
    matrixOrigin: [ML, MT],  // the map's cell (0, 0) on the canvas, before zoom and pan
    axisLabels() { return axis; },
    /* the matrix's value of cell (r, s) of the selected head in mode m: "a",
     * "b" or "d" (A - B), and the compare file's presence */
    cell(m, r, s) { const k = st.cmp; st.cmp = m; const x = shownRow(block(st.s, st.l, st.h), r); st.cmp = k; return x ? x[s] : null; },
    /* loads row r of the selected head (and of the compare file's) */
    need(r) {
      const a = block(st.s, st.l, st.h), b = B && block(st.s, st.l, st.h, B);
      a.need(r, r + 1, () => {}); if (b) b.need(r, r + 1, () => {});
      return this.idle();
    },
    get compare() { return !!B; },
    /* the model view's scores under the thumbnails: [[layer, head, value]], and its metric */
    gridScores() { return { metric: gridMetric >= 0 ? D.metrics[gridMetric].name : null, run: gridMetric >= 0 ? D.metrics[gridMetric].run : null, values: gridShown.map((x) => x.slice()) }; },
    /* the head view's drawn lines [head, query, key, p], and where token t of
     * side "q" (left) or "k" (right) sits on the page */
    headLines() { return hv.lines.map((x) => x.slice()); },
    headTokenAt(side, t) {
      const r = $("headview").getBoundingClientRect(), i = t - (side === "q" ? hv.q0 : hv.k0);
      return { x: r.left + (side === "q" ? HV_TEXT / 2 : HV_W - HV_TEXT / 2), y: r.top + 4 + i * HV_ROW + HV_ROW / 2 };
    },
    select,
  };

  /* each dataset's blocks: maps.bin over http, maps.js's base64 from file:// */
  function load(ds, then) {
    const script = () => {
      const s = document.createElement("script");
      s.src = ds.bin.replace(/bin$/, "js");
      s.onload = then;
      s.onerror = () => status(s.src + " could not be loaded");
      document.body.appendChild(s);
    };
    if (location.protocol === "http:" || location.protocol === "https:")
      fetch(ds.bin).then((r) => (r.ok ? r.arrayBuffer() : Promise.reject(r.status)))
        .then((b) => { ds.binary = b; then(); }, script);
    else script();
  }
  /* a compare file's index (compare/data.js), then its blocks */
  function loadCompare(then) {
    const s = document.createElement("script");
    s.src = "compare/data.js";
    s.onload = () => {
      const DB = window.HS_DATA_B;
      if (DB && DB.format === "headscope-viewer" && DB.blocks && DB.blocks.length === D.blocks.length)
        B = dataset(DB, "HS_MAPS_B64_B", "compare/maps.bin");
      B ? load(B, then) : then();
    };
    s.onerror = () => { status("compare/data.js could not be loaded"); then(); };
    document.body.appendChild(s);
  }
  load(A, () => (D.compare ? loadCompare(start) : start()));
})();
