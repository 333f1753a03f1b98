// The package report's renderer. Everything it draws comes from the JSON
// block in the page (`#report-data`), which `cargo xtask report` writes;
// the page loads nothing else. When it is done it records what it drew
// and every error it met in `#selfcheck`, so that a headless browser
// (`chromium --dump-dom`) can tell a page that rendered from one that did
// not.
"use strict";

const problems = [];
window.addEventListener("error", (e) => problems.push("error: " + e.message));
window.addEventListener("securitypolicyviolation", (e) =>
  problems.push("blocked by the page's policy: " + e.blockedURI + " (" + e.violatedDirective + ")"));
const consoleError = console.error.bind(console);
console.error = (...args) => {
  problems.push("console.error: " + args.join(" "));
  consoleError(...args);
};

const SVG = "http://www.w3.org/2000/svg";
const COLOURS = { compute: "#3b7dd8", exchange: "#e08a2e", sync: "#9aa0a6" };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "style") node.setAttribute("style", v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : String(c));
  return node;
}

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  return node;
}

const int = (n) => Math.round(n).toLocaleString("en-US");
const pct = (a, b) => (b > 0 ? (100 * a) / b : 0).toFixed(1) + "%";
const bytes = (n) => (n >= 1024 ? (n / 1024).toFixed(1) + " KiB" : n + " B");

function table(node, header, rows, leftColumns) {
  node.textContent = "";
  const left = new Set(leftColumns || [0]);
  const head = el("tr");
  header.forEach((h, i) => head.append(el("th", { class: left.has(i) ? "l" : "" }, h)));
  node.append(el("thead", {}, head));
  const body = el("tbody");
  for (const r of rows) {
    const tr = el("tr");
    r.forEach((c, i) => tr.append(el("td", { class: left.has(i) ? "l" : "" }, c)));
    body.append(tr);
  }
  node.append(body);
  return rows.length;
}

function bar(fraction, colour) {
  const w = Math.max(1, Math.round(160 * Math.min(1, fraction)));
  return el("span", { class: "bar", style: `width:${w}px;background:${colour}` });
}

const data = JSON.parse(document.getElementById("report-data").textContent);
const drawn = {};

function us(cycles) {
  return (cycles * 1e6) / data.clock_hz;
}

function renderSummary() {
  const t = data.totals;
  document.getElementById("pkg-name").textContent = data.name;
  document.getElementById("subtitle").textContent =
    `${data.tiles} tiles of ${data.target} at ${(data.clock_hz / 1e9).toFixed(2)} GHz, ` +
    `${data.items} items per run; sync ${data.sync_per_step} cycles per step`;
  const cards = [
    ["run", `${int(t.cycles)} cycles`, `${us(t.cycles).toFixed(1)} µs`],
    ["throughput", `${data.derived.items_per_s.toFixed(1)} /s`, "items (images) per second"],
    ["compute", pct(t.compute, t.cycles), `${int(t.compute)} cycles`],
    ["exchange", pct(t.exchange, t.cycles), `${int(t.exchange)} cycles`],
    ["sync", pct(t.sync, t.cycles), `${int(t.sync)} cycles`],
    ["AMP utilisation", (100 * data.derived.amp_util).toFixed(1) + "%", "over the whole run"],
    ["roofline", (100 * data.derived.roofline_ratio).toFixed(1) + "%", `${int(data.roofline_cycles)} cycles at peak`],
    ["FP8 roofline", (100 * data.derived.fp8_roofline_ratio).toFixed(1) + "%", `${int(data.fp8_roofline_cycles)} cycles`],
  ];
  const box = document.getElementById("cards");
  for (const [k, v, sub] of cards) {
    box.append(el("div", { class: "card" }, el("div", { class: "k" }, k), el("div", { class: "v" }, v), el("div", { class: "k" }, sub)));
  }
  drawn.cards = cards.length;
  // The whole run in segments: steps outside repeats, and each repeat.
  const runBar = document.getElementById("run-bar");
  const segments = [];
  let pending = 0;
  let i = 0;
  while (i < data.steps.length) {
    const s = data.steps[i];
    if (s.repeat === null) {
      pending += s.cycles;
      i += 1;
      continue;
    }
    const r = data.repeats[s.repeat];
    if (pending > 0) segments.push(["outside repeats", pending, "#6e7781"]);
    pending = 0;
    segments.push([`${r.name} ×${r.count}`, r.cycles * r.count, "#3b7dd8"]);
    i = r.first + r.steps;
  }
  if (pending > 0) segments.push(["outside repeats", pending, "#6e7781"]);
  for (const [label, cycles, colour] of segments) {
    runBar.append(el("div", {
      style: `flex:${cycles} 0 0;background:${colour}`,
      title: `${label}: ${int(cycles)} cycles, ${pct(cycles, t.cycles)} of the run`,
    }, `${label} ${pct(cycles, t.cycles)}`));
  }
  document.getElementById("model-note").textContent =
    `Model MACs ${int(data.model_macs)} (attention ${int(data.attention_macs)}); ` +
    `AMP MACs done ${int(t.amp_macs)} on padded shards. The roofline is the model's MACs at each one's AMP peak rate on every tile.`;
}

function renderTimeline() {
  const box = document.getElementById("timeline");
  // Rows: runs of steps outside repeats, and each repeat's body once.
  const rows = [];
  let current = null;
  for (const s of data.steps) {
    const key = s.repeat === null ? "outside" : "repeat" + s.repeat;
    if (!current || current.key !== key) {
      current = { key, steps: [], repeat: s.repeat };
      rows.push(current);
    }
    current.steps.push(s);
  }
  const widest = Math.max(1, ...rows.map((r) => r.steps.reduce((a, s) => a + s.cycles, 0)));
  const width = 1180;
  let rects = 0;
  for (const row of rows) {
    const total = row.steps.reduce((a, s) => a + s.cycles, 0);
    const title = row.repeat === null
      ? "steps outside repeats"
      : `${data.repeats[row.repeat].name}: one iteration, runs ${data.repeats[row.repeat].count}×`;
    const label = el("div", { class: "tl-label" }, title + " ", el("span", {}, `${int(total)} cycles, ${us(total).toFixed(1)} µs per pass`));
    const svg = svgEl("svg", { width, height: 34, role: "img" });
    let x = 0;
    for (const s of row.steps) {
      const w = (width * s.work) / widest;
      const ws = (width * s.sync) / widest;
      const r = svgEl("rect", { x, y: 4, width: Math.max(w, 0.5), height: 22, fill: COLOURS[s.kind] });
      const tip = svgEl("title");
      tip.textContent = `${s.name} (${s.kind}): ${int(s.cycles)} cycles, floor ${int(s.floor)}` +
        (s.busiest !== null ? `, busiest tile ${s.busiest}` : "") +
        (s.x ? `, horizon ${int(s.x.horizon)} vs bound ${int(s.x.bound)}` : "");
      r.append(tip);
      svg.append(r);
      rects += 1;
      if (ws > 0) svg.append(svgEl("rect", { x: x + w, y: 4, width: Math.max(ws, 0.3), height: 22, fill: COLOURS.sync }));
      if (w > 70) {
        const text = svgEl("text", { x: x + 4, y: 19, fill: "#fff" });
        text.textContent = `${s.op_kind} ${s.op}`.slice(0, Math.floor(w / 6.5));
        svg.append(text);
      }
      x += w + ws;
    }
    box.append(el("div", { class: "tl-row" }, label, svg));
  }
  drawn.timeline_rects = rects;
  const maxCycles = Math.max(1, ...data.steps.map((s) => s.cycles));
  drawn.step_rows = table(
    document.getElementById("step-table"),
    ["step", "name", "kind", "runs", "cycles", "", "floor", "work / floor", "busiest tile", "active tiles", "mean tile cycles"],
    data.steps.map((s) => [
      s.i, s.name, s.kind, s.runs, int(s.cycles), bar(s.cycles / maxCycles, COLOURS[s.kind]),
      int(s.floor), s.floor > 0 ? (s.work / s.floor).toFixed(2) : "–",
      s.busiest === null ? "–" : s.busiest, s.active, s.kind === "compute" ? int(s.mean) : "–",
    ]),
    [1, 2, 5],
  );
}

function renderOps() {
  const r = data.repeats[0];
  const box = document.getElementById("op-table");
  if (!r) {
    box.textContent = "";
    drawn.op_rows = 0;
    return;
  }
  document.getElementById("op-caption").textContent =
    `Per op of one ${r.name} iteration (${int(r.cycles)} cycles; roofline ${int(r.roofline)} cycles, ${pct(r.roofline, r.cycles)}).`;
  const ops = new Map();
  for (const s of data.steps.slice(r.first, r.first + r.steps)) {
    const key = s.op;
    const e = ops.get(key) || { steps: 0, compute: 0, exchange: 0, sync: 0, floor: 0, kinds: new Set() };
    e.steps += 1;
    e[s.kind] += s.work;
    e.floor += s.floor;
    e.sync += s.sync;
    e.kinds.add(s.op_kind);
    ops.set(key, e);
  }
  const top = Math.max(1, ...[...ops.values()].map((e) => e.compute + e.exchange + e.sync));
  drawn.op_rows = table(
    box,
    ["op", "steps", "compute", "exchange", "sync", "floor", "work / floor", "share", ""],
    [...ops.entries()].map(([op, e]) => {
      const total = e.compute + e.exchange + e.sync;
      const work = e.compute + e.exchange;
      return [`${op} (${[...e.kinds].join(", ")})`, e.steps, int(e.compute), int(e.exchange), int(e.sync),
        int(e.floor), e.floor > 0 ? (work / e.floor).toFixed(2) : "–", pct(total, r.cycles),
        el("span", {}, bar(e.compute / top, COLOURS.compute), bar(e.exchange / top, COLOURS.exchange), bar(e.sync / top, COLOURS.sync))];
    }),
    [0, 8],
  );
}

function renderBreakdown() {
  const t = data.totals;
  const kinds = data.op_kinds.map((k) => [k, k.compute + k.exchange + k.sync]);
  const top = Math.max(1, ...kinds.map(([, v]) => v));
  drawn.opkind_rows = table(
    document.getElementById("opkind-table"),
    ["op kind", "step runs", "compute", "exchange", "sync", "share", ""],
    kinds.map(([k, total]) => [k.kind, int(k.runs), int(k.compute), int(k.exchange), int(k.sync), pct(total, t.cycles),
      el("span", {}, bar(k.compute / top, COLOURS.compute), bar(k.exchange / top, COLOURS.exchange))]),
    [0, 6],
  );
  const work = t.compute + t.exchange;
  const used = data.codelets.filter((c) => c.calls > 0);
  const topc = Math.max(1, ...used.map((c) => c.cycles));
  drawn.codelet_rows = table(
    document.getElementById("codelet-table"),
    ["kind", "calls", "cycles", "share of work", ""],
    used.map((c) => [c.kind, int(c.calls), int(c.cycles), pct(c.cycles, work), bar(c.cycles / topc, COLOURS.compute)]),
    [0, 4],
  );
}

// Viridis, sampled: a sequential scale that stays readable in grey and
// tells 80 % from 90 % full.
const VIRIDIS = [
  [68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142],
  [31, 158, 137], [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37],
];

function heatColour(f) {
  if (!(f > 0)) return [255, 255, 255];
  if (f > 1) return [220, 0, 0];
  const x = f * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const t = x - i;
  return VIRIDIS[i].map((c, k) => Math.round(c + t * (VIRIDIS[i + 1][k] - c)));
}

let selectTile = () => {};

function renderHeatmap() {
  const m = data.memory;
  const canvas = document.getElementById("heatmap");
  const steps = Math.max(1, m.steps);
  const cell = Math.max(3, Math.min(14, Math.floor(1040 / steps)));
  const rowsShown = Math.min(m.tiles, 300);
  const group = Math.max(1, Math.ceil(m.tiles / Math.max(1, rowsShown)));
  const rows = Math.ceil(m.tiles / group);
  const rowH = Math.max(1, Math.min(8, Math.floor(600 / Math.max(1, rows))));
  const left = 48;
  const bottom = 30;
  canvas.width = left + steps * cell + 4;
  canvas.height = rows * rowH + bottom + 4;
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  const image = ctx.createImageData(steps * cell, rows * rowH);
  const pick = []; // per row and step: the fullest tile of the group
  let painted = 0;
  for (let r = 0; r < rows; r++) {
    pick.push(new Int32Array(steps));
    for (let s = 0; s < steps; s++) {
      let best = -1;
      let bestTile = r * group;
      for (let t = r * group; t < Math.min(m.tiles, (r + 1) * group); t++) {
        const v = m.live[t][s] || 0;
        if (v > best) { best = v; bestTile = t; }
      }
      pick[r][s] = bestTile;
      const [cr, cg, cb] = heatColour(best / data.usable_bytes);
      if (best > 0) painted += 1;
      for (let y = r * rowH; y < (r + 1) * rowH; y++) {
        for (let x = s * cell; x < (s + 1) * cell; x++) {
          const o = 4 * (y * image.width + x);
          image.data[o] = cr; image.data[o + 1] = cg; image.data[o + 2] = cb; image.data[o + 3] = 255;
        }
      }
    }
  }
  ctx.putImageData(image, left, 0);
  // Axes: tiles on the left, steps below, repeat bodies bracketed.
  ctx.fillStyle = "#59636e";
  ctx.font = "10px system-ui, sans-serif";
  ctx.textAlign = "right";
  const tileStep = Math.max(1, Math.ceil(m.tiles / 8));
  for (let t = 0; t < m.tiles; t += tileStep) ctx.fillText(String(t), left - 4, Math.floor(t / group) * rowH + 9);
  ctx.fillText("tile", left - 4, rows * rowH + 12);
  ctx.textAlign = "center";
  const stepTick = Math.max(1, Math.ceil(steps / 16));
  for (let s = 0; s < steps; s += stepTick) ctx.fillText(String(s), left + s * cell + cell / 2, rows * rowH + 12);
  for (const r of data.repeats) {
    const x0 = left + r.first * cell;
    const x1 = left + (r.first + r.steps) * cell;
    ctx.fillRect(x0, rows * rowH + 17, x1 - x0, 1);
    ctx.fillText(`${r.name} body (×${r.count})`, (x0 + x1) / 2, rows * rowH + 28);
  }
  // The fullest tile at its fullest step.
  if (m.peak_tile !== null) {
    const r = Math.floor(m.peak_tile / group);
    const x = left + m.peak_step * cell;
    ctx.lineWidth = 2;
    ctx.strokeStyle = "#ffffff";
    ctx.strokeRect(x - 3, r * rowH - 3, cell + 6, rowH + 6);
    ctx.strokeStyle = "#d00000";
    ctx.strokeRect(x - 5, r * rowH - 5, cell + 10, rowH + 10);
  }
  const check = ctx.getImageData(left, 0, steps * cell, rows * rowH).data;
  let coloured = 0;
  for (let o = 0; o < check.length; o += 4) if (check[o] < 250 || check[o + 2] < 250) coloured += 1;
  drawn.heatmap_cells = painted;
  drawn.heatmap_coloured_pixels = coloured;
  const scale = document.getElementById("heat-scale");
  const gradient = [0, 0.25, 0.5, 0.75, 1].map((f) => {
    const [r, g, b] = heatColour(Math.max(f, 0.001));
    return `rgb(${r},${g},${b}) ${100 * f}%`;
  });
  scale.style.background = `linear-gradient(to top, ${gradient.join(",")})`;
  scale.style.height = Math.max(60, rows * rowH) + "px";
  for (const f of [0, 0.5, 1]) {
    scale.append(el("span", { style: `bottom:${100 * f}%` }, `${Math.round(100 * f)}%`));
  }
  const peakName = m.peak_tile === null ? "" : data.steps[m.peak_step] ? data.steps[m.peak_step].name : "";
  document.getElementById("heat-caption").textContent =
    `${m.tiles} tiles × ${m.steps} steps (rows of ${group} tile${group > 1 ? "s" : ""}; usable ${bytes(data.usable_bytes)} per tile). ` +
    (m.peak_tile === null ? "" : `Fullest (red box): tile ${m.peak_tile} at step ${m.peak_step} (${peakName}), ${bytes(m.peak_bytes)} live.`);
  canvas.addEventListener("click", (e) => {
    const rect = canvas.getBoundingClientRect();
    const px = ((e.clientX - rect.left) * canvas.width) / rect.width - left;
    const py = ((e.clientY - rect.top) * canvas.height) / rect.height;
    if (px < 0 || py < 0) return;
    const s = Math.min(steps - 1, Math.floor(px / cell));
    const r = Math.min(rows - 1, Math.floor(py / rowH));
    selectTile(pick[r][s]);
  });
}

function renderBuffers() {
  const b = data.buffers;
  const input = document.getElementById("tile-input");
  input.max = String(data.tiles - 1);
  selectTile = (tile) => {
    const t = Math.max(0, Math.min(data.tiles - 1, Number(tile) | 0));
    input.value = String(t);
    const step = data.memory.tile_peak_step[t];
    const live = data.memory.live[t] ? data.memory.live[t][step] || 0 : 0;
    const stepName = data.steps[step] ? data.steps[step].name : "";
    document.getElementById("buffer-caption").textContent =
      `step ${step} (${stepName}), ${bytes(live)} live of ${bytes(data.usable_bytes)}`;
    const rows = (b.tiles[t] || []).map(([name, size, first, last, interleaved, address]) => [
      b.names[name], bytes(size), address === null ? "–" : "0x" + address.toString(16),
      interleaved ? "interleaved" : "standard", `${first}–${last}`, pct(size, data.usable_bytes),
    ]);
    rows.push(["support memory (runtime, code, exchange rows)", bytes(b.support[t] || 0), "–", "reserved", "all", pct(b.support[t] || 0, data.usable_bytes)]);
    drawn.buffer_rows = table(document.getElementById("buffer-table"),
      ["buffer", "bytes", "address", "class", "steps live", "of tile"], rows, [0, 3]);
  };
  input.addEventListener("change", () => selectTile(input.value));
  selectTile(data.default_tile);
}

function renderPhases() {
  const phases = data.steps.filter((s) => s.x);
  const width = 1100;
  const rowH = 14;
  const top = Math.max(1, ...phases.map((s) => s.x.horizon));
  const svg = svgEl("svg", { width, height: phases.length * rowH + 8, role: "img" });
  phases.forEach((s, i) => {
    const y = 4 + i * rowH;
    const label = svgEl("text", { x: 0, y: y + 10 });
    label.textContent = `${s.name}${s.runs > 1 ? " ×" + s.runs : ""}`.slice(0, 40);
    svg.append(label);
    const scale = (width - 300) / top;
    const r = svgEl("rect", { x: 260, y: y + 1, width: Math.max(1, s.x.horizon * scale), height: rowH - 3, fill: COLOURS.exchange });
    const tip = svgEl("title");
    tip.textContent = `${s.name}: horizon ${int(s.x.horizon)}, endpoint bound ${int(s.x.bound)}, stronger bound ${int(s.x.stronger)}`;
    r.append(tip);
    svg.append(r);
    svg.append(svgEl("rect", { x: 260 + s.x.bound * scale - 1, y, width: 2, height: rowH - 1, fill: "#000" }));
    const v = svgEl("text", { x: 264 + s.x.horizon * scale, y: y + 10, fill: "#59636e" });
    v.textContent = `${int(s.x.horizon)} (${(s.x.bound > 0 ? s.x.horizon / s.x.bound : 1).toFixed(3)}× bound)`;
    svg.append(v);
  });
  document.getElementById("phase-chart").append(svg);
  drawn.phase_bars = phases.length;
  table(
    document.getElementById("phase-table"),
    ["phase", "step", "runs", "horizon", "endpoint bound", "stronger bound", "horizon / bound", "longest row (tile)", "copy cycles (tile)"],
    phases.map((s) => [
      s.x.phase, s.name, s.runs, int(s.x.horizon), int(s.x.bound), int(s.x.stronger),
      (s.x.bound > 0 ? s.x.horizon / s.x.bound : 1).toFixed(3),
      s.x.row_tile === null ? "–" : `${int(s.x.row_cycles)} (${s.x.row_tile})`,
      s.x.copy_tile === null ? "–" : `${int(s.x.copy)} (${s.x.copy_tile})`,
    ]),
    [1],
  );
}

function renderKernels() {
  const c = data.kernel_check;
  document.getElementById("kernel-check").textContent =
    `Cycles per call from the kernel cost model; utilisation = MACs / (cycles × AMP peak). ` +
    `The AMP programs in the package's objects agree with the cost model for ${c.agreeing} of ${c.entries} entries.`;
  const rows = [];
  for (const k of data.kernels) {
    for (const e of k.entries) {
      if (e.calls === 0) continue;
      rows.push([k.name, k.instruction, `${k.blocks[0]}×${k.blocks[1]}`, `${e.rows}${e.accumulate ? " acc" : ""}`,
        int(e.cycles), int(e.macs), (e.util_ppm / 1e4).toFixed(1) + "%", int(e.calls), bar(e.util_ppm / 1e6, COLOURS.compute)]);
    }
  }
  drawn.kernel_rows = table(
    document.getElementById("kernel-table"),
    ["kernel", "instruction", "k×c", "rows", "cycles", "MACs", "utilisation", "calls", ""],
    rows,
    [0, 1, 8],
  );
}

function main() {
  for (const [name, f] of [
    ["summary", renderSummary], ["timeline", renderTimeline], ["ops", renderOps], ["breakdown", renderBreakdown],
    ["heatmap", renderHeatmap], ["buffers", renderBuffers], ["phases", renderPhases], ["kernels", renderKernels],
  ]) {
    try {
      f();
    } catch (e) {
      problems.push(`${name}: ${e && e.stack ? e.stack : e}`);
    }
  }
  const check = document.getElementById("selfcheck");
  check.setAttribute("data-figures", JSON.stringify(drawn));
  check.setAttribute("data-problems", JSON.stringify(problems));
  check.setAttribute("data-status", problems.length === 0 ? "ok" : "errors");
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", main);
else main();
