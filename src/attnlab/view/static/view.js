// attnlab view: draws the data inlined above (written by `attnlab view`). Plain JavaScript, no library,
// no network: each blob is zlib-deflated bytes in base 85 (attnlab.view.pack), inflated by the browser's
// DecompressionStream.
"use strict";
(async function () {
  const D = JSON.parse(document.getElementById("attnlab-data").textContent);
  const $ = (id) => document.getElementById(id);
  const T = D.T, L = D.layers, H = D.heads, HKV = D.kv_heads, GROUP = H / HKV;
  const N = (T * (T + 1)) / 2;          // entries of a causal map's lower triangle
  const PER_HEAD = Math.ceil(N / 8);    // bytes of one head's nonzero mask
  const BYTES = Math.ceil(T / 8);       // bytes of one kept-set bitset
  const esc = (s) => JSON.stringify(s); // a token, quoted, escapes visible

  // RFC 1924's base 85 alphabet with "<" written "," (pack.py says why)
  const B85 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;,=>?@^_`{|}~";
  const DIGIT = new Uint8Array(128);
  for (let i = 0; i < 85; i++) DIGIT[B85.charCodeAt(i)] = i;
  function fromBase85(s, n) { // 5 characters -> 4 bytes, big-endian; the first n bytes are the data
    const out = new Uint8Array((s.length / 5) * 4);
    for (let i = 0, o = 0; i < s.length; i += 5, o += 4) {
      let v = 0;
      for (let k = 0; k < 5; k++) v = v * 85 + DIGIT[s.charCodeAt(i + k)];
      out[o] = v >>> 24; out[o + 1] = (v >>> 16) & 255; out[o + 2] = (v >>> 8) & 255; out[o + 3] = v & 255;
    }
    return out.subarray(0, n);
  }
  async function inflate(blob) {
    const bytes = fromBase85(blob.z, blob.n);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }

  if (typeof DecompressionStream === "undefined") {
    $("meta").textContent = "This browser lacks DecompressionStream: open the file in a current browser.";
    return;
  }
  const [mask, values, accBytes, ...kept] = await Promise.all(
    [D.attention.mask, D.attention.values, D.accumulated, ...D.replays.map((r) => r.kept)].map(inflate));
  const acc = new Float32Array(L * HKV * T); // (L, H_kv, T), stored little-endian
  const accView = new DataView(accBytes.buffer);
  for (let i = 0; i < acc.length; i++) acc[i] = accView.getFloat32(4 * i, true);
  const valueStart = new Int32Array(L * H + 1); // where each head's nonzero values begin
  D.attention.counts.forEach((c, i) => { valueStart[i + 1] = valueStart[i] + c; });

  // ---- one head's map: (T, T) uint8, row = query, column = key; weight = q * scale / 255 ----------------
  function decodeHead(l, h) {
    const out = new Uint8Array(T * T);
    const idx = l * H + h;
    const m0 = idx * PER_HEAD;
    let v = valueStart[idx], n = 0;
    for (let k = 0; k < T; k++) {           // column order: key k, then its queries k .. T-1
      for (let i = k; i < T; i++, n++) {
        if (mask[m0 + (n >> 3)] & (128 >> (n & 7))) out[i * T + k] = values[v++];
      }
    }
    return out;
  }
  const cache = new Map(); // a few decoded heads (a 2,048-token map is 4 MB)
  function head(l, h) {
    const key = l * H + h;
    let m = cache.get(key);
    if (m === undefined) {
      m = decodeHead(l, h);
      if (cache.size >= 48) cache.delete(cache.keys().next().value);
      cache.set(key, m);
    }
    return m;
  }
  const scale = (l, h) => D.attention.scale[l][h] / 255;
  const weight = (l, h, i, j) => head(l, h)[i * T + j] * scale(l, h);

  // ---- colours ------------------------------------------------------------------------------------------
  const mix = (a, b, t) => a.map((x, i) => Math.round(x + (b[i] - x) * t));
  const rgb = (c) => `rgb(${c[0]},${c[1]},${c[2]})`;
  const WHITE = [255, 255, 255], INK = [11, 61, 145], SINK = [194, 65, 12], ENT = [29, 78, 216];
  const maxEntropy = Math.max(1e-9, ...D.entropy.flat());
  function statColour(l, h) {
    return $("colour-by").value === "sink" ? rgb(mix(WHITE, SINK, D.sink[l][h]))
      : rgb(mix(WHITE, ENT, D.entropy[l][h] / maxEntropy));
  }

  // ---- state --------------------------------------------------------------------------------------------
  const S = { layer: Math.floor(L / 2), head: 0, query: null, replay: 0, step: 0, zoom: 1 };
  const kvOf = (h) => Math.floor(h / GROUP);
  window.attnlab = { data: D, weight, head, timings: [], state: S };

  // ---- the grid of heads ----------------------------------------------------------------------------------
  function thumbnail(canvas, l, h) {
    const s = Math.min(T, 28), m = head(l, h), img = new Uint8Array(s * s);
    for (let i = 0; i < T; i++) {
      const a = Math.floor((i * s) / T), row = i * T;
      for (let j = 0; j <= i; j++) {
        const c = a * s + Math.floor((j * s) / T);
        if (m[row + j] > img[c]) img[c] = m[row + j];   // max-pool: a thin diagonal stays visible
      }
    }
    canvas.width = canvas.height = s;
    const ctx = canvas.getContext("2d"), data = ctx.createImageData(s, s);
    for (let c = 0; c < s * s; c++) {
      data.data[4 * c + 3] = Math.round(255 * Math.sqrt(img[c] / 255)); // ink over the cell's colour
      data.data[4 * c] = 20; data.data[4 * c + 1] = 24; data.data[4 * c + 2] = 30;
    }
    ctx.putImageData(data, 0, 0);
  }
  function buildGrid() {
    const grid = $("grid");
    grid.style.gridTemplateColumns = `auto repeat(${H}, 34px)`;
    for (let l = 0; l < L; l++) {
      const label = document.createElement("div");
      label.className = "row-label";
      label.textContent = `L${l}`;
      grid.appendChild(label);
      for (let h = 0; h < H; h++) {
        const c = document.createElement("canvas");
        c.className = "cell";
        c.dataset.layer = l; c.dataset.head = h;
        c.title = `layer ${l}, head ${h}: first-token share ${D.sink[l][h].toFixed(3)}, ` +
          `entropy ${D.entropy[l][h].toFixed(3)} nats`;
        thumbnail(c, l, h);
        c.addEventListener("click", () => selectHead(l, h));
        grid.appendChild(c);
      }
      cache.clear(); // the thumbnails' pass decodes every head once; keep memory flat
    }
    colourGrid();
  }
  function colourGrid() {
    for (const c of $("grid").querySelectorAll(".cell")) {
      const col = statColour(+c.dataset.layer, +c.dataset.head);
      c.style.background = col; c.style.borderColor = col;
      c.classList.toggle("selected", +c.dataset.layer === S.layer && +c.dataset.head === S.head);
    }
    const sink = $("colour-by").value === "sink";
    const end = rgb(sink ? SINK : ENT);
    $("legend").innerHTML = `<div class="bar" style="background:linear-gradient(90deg,#fff,${end})"></div>` +
      (sink ? "0 → 1: mean attention of a query on the first token (rows 1..T-1)"
        : `0 → ${maxEntropy.toFixed(2)} nats: mean entropy of a query's attention (rows 1..T-1)`);
  }

  // ---- one head's map -------------------------------------------------------------------------------------
  function drawMap() {
    const canvas = $("map"), m = head(S.layer, S.head);
    canvas.width = canvas.height = T;
    const ctx = canvas.getContext("2d"), img = ctx.createImageData(T, T);
    const lut = []; // q -> colour, sqrt so that weak weights show
    for (let q = 0; q < 256; q++) lut.push(mix(WHITE, INK, Math.sqrt(q / 255)));
    for (let i = 0; i < T; i++) {
      for (let j = 0; j < T; j++) {
        const p = 4 * (i * T + j), c = j <= i ? lut[m[i * T + j]] : [246, 247, 249];
        img.data[p] = c[0]; img.data[p + 1] = c[1]; img.data[p + 2] = c[2]; img.data[p + 3] = 255;
      }
    }
    ctx.putImageData(img, 0, 0);
    canvas.style.width = canvas.style.height = `${T * S.zoom}px`;
    $("map-title").textContent = `layer ${S.layer}, head ${S.head} (KV head ${kvOf(S.head)}): ` +
      `first-token share ${D.sink[S.layer][S.head].toFixed(3)}, entropy ${D.entropy[S.layer][S.head].toFixed(3)} nats`;
  }
  function cellInfo(e) {
    const r = $("map").getBoundingClientRect();
    const i = Math.floor(((e.clientY - r.top) / r.height) * T), j = Math.floor(((e.clientX - r.left) / r.width) * T);
    if (i < 0 || j < 0 || i >= T || j >= T) return;
    const info = $("cell-info");
    info.dataset.query = i; info.dataset.key = j;
    if (S.query !== i) { S.query = i; paintText(); } // the text shows the hovered query's row
    if (j > i) {
      delete info.dataset.weight;
      info.textContent = `query ${i} ${esc(D.tokens[i])}, key ${j} ${esc(D.tokens[j])}: masked (a query reads only earlier keys)`;
      return;
    }
    const w = weight(S.layer, S.head, i, j);
    info.dataset.weight = w;
    info.textContent = `query ${i} ${esc(D.tokens[i])} → key ${j} ${esc(D.tokens[j])}: weight ${w.toFixed(4)}`;
  }

  // ---- the text -------------------------------------------------------------------------------------------
  function buildText() {
    const box = $("tokens");
    D.tokens.forEach((tok, i) => {
      const s = document.createElement("span");
      s.textContent = tok;
      s.dataset.i = i;
      s.title = `token ${i}, id ${D.ids[i]}`;
      s.addEventListener("mouseenter", () => { S.query = i; paintText(); });
      box.appendChild(s);
    });
  }
  function row(i) { // the hovered token's attention row: this head's, or the mean of the layer's heads
    const out = new Float64Array(i + 1);
    const heads = document.querySelector("input[name=row-mode]:checked").value === "head" ? [S.head]
      : [...Array(H).keys()];
    for (const h of heads) for (let j = 0; j <= i; j++) out[j] += weight(S.layer, h, i, j) / heads.length;
    return out;
  }
  function paintText() {
    const spans = $("tokens").children, r = S.query === null ? null : row(S.query);
    const top = r ? Math.max(...r) : 1;
    const rep = D.replays[S.replay], shade = $("show-kept").checked && rep !== undefined;
    const end = rep ? rep.ends[S.step] : T, keptAt = rep ? keptSet() : null;
    for (let j = 0; j < T; j++) {
      const s = spans[j];
      if (r && j <= S.query) {
        s.dataset.w = r[j];
        s.style.background = `rgba(194,65,12,${Math.sqrt(r[j] / top).toFixed(3)})`;
      } else {
        delete s.dataset.w;
        s.style.background = "";
      }
      s.classList.toggle("query", j === S.query);
      s.classList.toggle("future", shade && j >= end);
      s.classList.toggle("kept", shade && j < end && keptAt[j] === 1);
      s.classList.toggle("evicted", shade && j < end && keptAt[j] === 0);
    }
    if (r) {
      const best = [...r.keys()].sort((a, b) => r[b] - r[a]).slice(0, 5);
      $("token-info").textContent = `token ${S.query} ${esc(D.tokens[S.query])} reads most: ` +
        best.map((j) => `${j} ${esc(D.tokens[j])} ${r[j].toFixed(3)}`).join(" · ") +
        " (shading: share of the row's largest weight)";
    }
  }

  // ---- heavy hitters --------------------------------------------------------------------------------------
  function drawHeavy() {
    const kv = kvOf(S.head), a = acc.subarray((S.layer * HKV + kv) * T, (S.layer * HKV + kv + 1) * T);
    const canvas = $("heavy"), w = canvas.clientWidth || 800, h = canvas.height;
    canvas.width = w;
    const ctx = canvas.getContext("2d"), top = Math.log1p(Math.max(...a));
    ctx.clearRect(0, 0, w, h);
    ctx.fillStyle = rgb(SINK);
    for (let j = 0; j < T; j++) {
      const bar = (Math.log1p(a[j]) / top) * (h - 2);
      ctx.fillRect((j * w) / T, h - bar, Math.max(1, w / T - 0.5), bar);
    }
    let big = 0;
    for (let j = 1; j < T; j++) if (a[j] > a[big]) big = j;
    const first = D.first_share[S.layer][kv];
    const info = $("heavy-info");
    info.dataset.firstShare = first;
    info.textContent = `layer ${S.layer}, KV head ${kv} (query heads ${kv * GROUP}–${(kv + 1) * GROUP - 1}): the first ` +
      `${D.n_sink} tokens hold ${(100 * first).toFixed(1)}% of the accumulated attention; the largest is token ` +
      `${big} ${esc(D.tokens[big])} (${a[big].toFixed(2)}); bars on a log(1 + x) scale`;
  }

  function heavyHover(e) {
    const r = $("heavy").getBoundingClientRect(), j = Math.floor(((e.clientX - r.left) / r.width) * T);
    if (j < 0 || j >= T) return;
    const kv = kvOf(S.head), a = acc[(S.layer * HKV + kv) * T + j];
    $("heavy-hover").textContent = `token ${j} ${esc(D.tokens[j])}: accumulated attention ${a.toFixed(3)} ` +
      `(read by ${T - j} queries: ${(a / ((T - j) * GROUP)).toFixed(4)} on average per query and head of the group)`;
  }

  // ---- eviction replay ------------------------------------------------------------------------------------
  function keptSet() { // (T,) 0/1: what the replayed policy stores after the step, for this layer and KV head
    const bits = kept[S.replay], off = ((S.step * L + S.layer) * HKV + kvOf(S.head)) * BYTES;
    const out = new Uint8Array(T);
    for (let j = 0; j < T; j++) out[j] = (bits[off + (j >> 3)] >> (7 - (j & 7))) & 1;
    return out;
  }
  function drawReplay() {
    const rep = D.replays[S.replay];
    if (rep === undefined) { $("step-info").textContent = "no policy was replayed (attnlab view --policies)"; return; }
    const k = keptSet(), end = rep.ends[S.step];
    const n = k.reduce((a, b) => a + b, 0);
    const info = $("step-info");
    info.dataset.kept = [...k.keys()].filter((j) => k[j]).join(",");
    info.textContent = `${rep.label}: step ${S.step + 1} of ${rep.ends.length}, after ${end} tokens the cache of ` +
      `layer ${S.layer}, KV head ${kvOf(S.head)} holds ${n} (chunks of ${D.chunk} tokens a step)`;
    const canvas = $("tape"), w = canvas.clientWidth || 800;
    canvas.width = w;
    const ctx = canvas.getContext("2d");
    for (let j = 0; j < T; j++) {
      ctx.fillStyle = j >= end ? "#f1f3f5" : k[j] ? "#0f766e" : "#d3d8de";
      ctx.fillRect((j * w) / T, 0, Math.max(1, w / T - 0.5), canvas.height);
    }
  }
  function buildReplay() {
    const sel = $("policy");
    D.replays.forEach((r, i) => sel.add(new Option(r.label, i)));
    sel.addEventListener("change", () => { S.replay = +sel.value; setSteps(); refresh(); });
    $("step").addEventListener("input", () => { S.step = +$("step").value; drawReplay(); paintText(); });
    setSteps();
  }
  function setSteps() {
    const rep = D.replays[S.replay], n = rep ? rep.ends.length : 1;
    $("step").max = n - 1; $("step").value = n - 1; S.step = n - 1;
  }

  // ---- wiring ---------------------------------------------------------------------------------------------
  function refresh() { drawReplay(); paintText(); }
  function selectHead(l, h) {
    const t0 = performance.now();
    S.layer = l; S.head = h;
    colourGrid(); drawMap(); drawHeavy(); refresh();
    // the switch's time: from the click to the frame that shows it
    requestAnimationFrame(() => setTimeout(() => window.attnlab.timings.push(performance.now() - t0), 0));
  }
  $("colour-by").addEventListener("change", colourGrid);
  $("map").addEventListener("mousemove", cellInfo);
  $("heavy").addEventListener("mousemove", heavyHover);
  $("zoom").addEventListener("input", () => { S.zoom = +$("zoom").value; $("map").style.width = $("map").style.height = `${T * S.zoom}px`; });
  for (const r of document.querySelectorAll("input[name=row-mode]")) r.addEventListener("change", paintText);
  $("show-kept").addEventListener("change", paintText);
  S.zoom = Math.max(1, Math.min(8, Math.floor(560 / T)));
  $("zoom").value = S.zoom;
  $("meta").textContent = `${D.model} · ${T} tokens of ${D.text} · ${L} layers × ${H} heads (${HKV} KV heads) · ` +
    `attention stored at 8 bits per layer and head`;
  buildGrid(); buildText(); buildReplay();
  selectHead(S.layer, S.head);
  document.body.dataset.ready = "1";
})();
