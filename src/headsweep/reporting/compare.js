// The parallel-coordinates view of every experiment (reports/compare.html): one line per experiment across its
// settings to its test BLEU and PPL. Drag along an axis to keep the lines inside that range (brushes on several
// axes combine); double-click an axis to clear its brush. Plain SVG and DOM, no library: the page works offline,
// from the folder it is in. The data is the page's own <script id="pc-data"> (written by `make report`).
(function () {
  const data = JSON.parse(document.getElementById("pc-data").textContent);
  const host = document.getElementById("pc");
  const W = Math.min(1180, host.clientWidth || 1180), H = 420, top = 40, bottom = 30, left = 50, right = 50;
  const NS = "http://www.w3.org/2000/svg";
  const el = (name, attrs, parent) => {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  };
  const axes = data.axes.map((a, i) => {
    const values = data.rows.map(r => r.values[i]).filter(v => v !== null);
    let lo, hi, pos;
    if (a.kind === "category") {
      const cats = [...new Set(values)].sort();
      pos = v => (cats.length === 1 ? 0.5 : cats.indexOf(v) / (cats.length - 1));
      return { ...a, cats, pos, ticks: cats.map(c => [c, pos(c)]) };
    }
    const f = a.kind === "log" ? Math.log2 : x => x;
    lo = Math.min(...values.map(f));
    hi = Math.max(...values.map(f));
    pos = v => (hi === lo ? 0.5 : (f(v) - lo) / (hi - lo));
    const uniq = [...new Set(values)].sort((x, y) => x - y);
    const shown = uniq.length <= 8 ? uniq : [uniq[0], uniq[Math.floor(uniq.length / 2)], uniq[uniq.length - 1]];
    // a rate as the tables write it (2e-3, 1.41e-3): three digits at most, no rounding two values into one
    const rate = v => { const [m, e] = Number(v).toExponential(2).split("e"); return `${parseFloat(m)}e${parseInt(e)}`; };
    return { ...a, pos, ticks: shown.map(v => [a.format ? rate(v) : +Number(v).toFixed(2), pos(v)]) };
  });
  const x = i => left + (i * (W - left - right)) / (axes.length - 1);
  const y = p => H - bottom - p * (H - top - bottom);
  const svg = el("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img",
    "aria-label": "parallel coordinates of every experiment" }, host);
  const colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf"];
  const questions = [...new Set(data.rows.map(r => r.question))];
  const lines = data.rows.map(r => {
    const pts = r.values.map((v, i) => (v === null ? null : `${x(i)},${y(axes[i].pos(v))}`)).filter(Boolean);
    const line = el("polyline", { points: pts.join(" "), fill: "none", "stroke-width": 1.2, "stroke-opacity": 0.6,
      stroke: colours[questions.indexOf(r.question) % colours.length] }, svg);
    el("title", {}, line).textContent = `${r.name} (${r.question}): BLEU ${r.bleu}`;
    return line;
  });
  const brushes = axes.map(() => null);
  const shownBox = el("rect", { x: 0, y: 0, width: 0, height: 0, fill: "rgba(0,0,0,0.08)" }, svg);
  const marks = axes.map((_, i) => el("rect", { x: x(i) - 8, width: 16, y: 0, height: 0,
    fill: "rgba(255,140,0,0.25)", stroke: "#c60" }, svg));
  axes.forEach((a, i) => {
    el("line", { x1: x(i), x2: x(i), y1: top, y2: H - bottom, stroke: "#333" }, svg);
    const label = el("text", { x: x(i), y: top - 22, "text-anchor": "middle", "font-size": 12,
      "font-weight": "bold" }, svg);
    label.textContent = a.name;
    el("title", {}, label).textContent = a.definition || a.name;
    a.ticks.forEach(([text, p]) => {
      const t = el("text", { x: x(i) + 5, y: y(p) + 4, "font-size": 10, fill: "#444" }, svg);
      t.textContent = text;
    });
    const grab = el("rect", { x: x(i) - 10, y: top, width: 20, height: H - top - bottom, fill: "transparent",
      style: "cursor:ns-resize" }, svg);
    let start = null;
    const at = ev => {
      const box = svg.getBoundingClientRect();
      return Math.max(top, Math.min(H - bottom, ((ev.clientY - box.top) * H) / box.height));
    };
    grab.addEventListener("mousedown", ev => { start = at(ev); ev.preventDefault(); });
    window.addEventListener("mousemove", ev => {
      if (start === null) return;
      const now = at(ev);
      brushes[i] = [Math.min(start, now), Math.max(start, now)];
      update();
    });
    window.addEventListener("mouseup", () => {
      if (start === null) return; // not this axis's drag: leave the list (and a click on it) alone
      if (brushes[i] && brushes[i][1] - brushes[i][0] < 2) brushes[i] = null;
      start = null;
      update();
    });
    grab.addEventListener("dblclick", () => { brushes[i] = null; update(); });
  });
  shownBox.remove();
  const count = document.getElementById("pc-count"), list = document.getElementById("pc-list");
  function update() {
    let shown = 0;
    const kept = [];
    data.rows.forEach((r, k) => {
      const ok = r.values.every((v, i) => {
        if (!brushes[i]) return true;
        if (v === null) return false;
        const py = y(axes[i].pos(v));
        return py >= brushes[i][0] - 2 && py <= brushes[i][1] + 2; // a point on the brush's edge is in it
      });
      lines[k].setAttribute("stroke-opacity", ok ? 0.75 : 0.04);
      if (ok) { shown += 1; kept.push(r); }
    });
    marks.forEach((m, i) => {
      m.setAttribute("y", brushes[i] ? brushes[i][0] : 0);
      m.setAttribute("height", brushes[i] ? brushes[i][1] - brushes[i][0] : 0);
    });
    if (count) count.textContent = `${shown} of ${data.rows.length} experiments`;
    if (list) {
      list.innerHTML = "";
      kept.sort((a, b) => (b.bleu ?? -1) - (a.bleu ?? -1)).slice(0, 40).forEach(r => {
        const li = document.createElement("li");
        const box = document.createElement("input");
        box.type = "checkbox";
        box.checked = ticked.has(r.name);
        box.disabled = !(r.curves || []).some(c => c.points.length);
        box.setAttribute("aria-label", `learning curves of ${r.name}`);
        box.addEventListener("change", () => { box.checked ? ticked.add(r.name) : ticked.delete(r.name); curves(); });
        li.appendChild(box);
        const a = document.createElement("a");
        a.href = r.href;
        a.textContent = r.name;
        li.appendChild(a);
        li.appendChild(document.createTextNode(` (${r.question}): BLEU ${r.bleu ?? "—"}, PPL ${r.ppl ?? "—"}`));
        list.appendChild(li);
      });
    }
  }
  // learning curves of the ticked experiments: val BLEU against step, one line per seed, one colour each
  const ticked = new Set(data.rows.slice().sort((a, b) => (b.bleu ?? -1) - (a.bleu ?? -1)).slice(0, 3).map(r => r.name));
  const plot = document.getElementById("pc-curves");
  function curves() {
    if (!plot) return;
    plot.innerHTML = "";
    const rows = data.rows.filter(r => ticked.has(r.name));
    const pts = rows.flatMap(r => (r.curves || []).flatMap(c => c.points));
    if (!pts.length) { plot.textContent = "No experiment ticked (or none recorded its validations)."; return; }
    const CW = Math.min(900, W), CH = 300, m = 45;
    const xs = pts.map(p => p[0]), ys = pts.map(p => p[1]);
    const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
    const px = v => m + ((v - x0) / (x1 - x0 || 1)) * (CW - 2 * m), py = v => CH - m - ((v - y0) / (y1 - y0 || 1)) * (CH - 2 * m);
    const g = el("svg", { width: CW, height: CH, role: "img", "aria-label": "learning curves of the ticked experiments" }, plot);
    el("line", { x1: m, x2: CW - m, y1: CH - m, y2: CH - m, stroke: "#333" }, g);
    el("line", { x1: m, x2: m, y1: m, y2: CH - m, stroke: "#333" }, g);
    [[x0, y0, "x"], [x1, y0, "x"], [x0, y0, "y"], [x0, y1, "y"]].forEach(([vx, vy, axis]) => {
      const t = el("text", axis === "x" ? { x: px(vx), y: CH - m + 15, "font-size": 10, "text-anchor": "middle" }
        : { x: m - 5, y: py(vy) + 3, "font-size": 10, "text-anchor": "end" }, g);
      t.textContent = axis === "x" ? vx : vy.toFixed(1);
    });
    el("text", { x: CW / 2, y: CH - 8, "font-size": 11, "text-anchor": "middle" }, g).textContent = "training step";
    el("text", { x: 12, y: m - 12, "font-size": 11 }, g).textContent = "val BLEU (greedy)";
    const key = document.createElement("p");
    rows.forEach((r, i) => {
      const colour = colours[i % colours.length];
      (r.curves || []).forEach(c => {
        if (!c.points.length) return;
        const line = el("polyline", { points: c.points.map(p => `${px(p[0])},${py(p[1])}`).join(" "), fill: "none",
          stroke: colour, "stroke-width": 1.5 }, g);
        el("title", {}, line).textContent = `${r.name}, seed ${c.seed}`;
      });
      key.insertAdjacentHTML("beforeend", `<span style="color:${colour}">■</span> ${r.name} &nbsp; `);
    });
    plot.appendChild(key);
  }
  const legend = document.getElementById("pc-legend");
  if (legend) legend.innerHTML = questions.map((q, i) =>
    `<span style="color:${colours[i % colours.length]}">■</span> ${q}`).join(" &nbsp; ");
  update();
  curves();
})();
