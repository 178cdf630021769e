// The parallel-coordinates view of every experiment (reports/compare.html): one line per experiment across its
// settings to its test BLEU and PPL. Drag along an axis to keep the lines inside that range (brushes on several
// axes combine); double-click an axis to clear its brush; the lines and the learning curves brushed out turn grey.
// The axes drawn first are the data's `shown` ones (at most 10: more crowd the labels); the boxes above the plot
// draw or hide any other. Plain SVG and DOM, no library: the page works offline, from the folder it is in. The
// data is the page's own <script id="pc-data"> (written by `make report`), a colour per question included.
(function () {
  const data = JSON.parse(document.getElementById("pc-data").textContent);
  const host = document.getElementById("pc");
  const W = Math.min(1180, host.clientWidth || 1180), H = 440, top = 52, bottom = 30, left = 50, right = 60;
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
  const y = p => H - bottom - p * (H - top - bottom);
  // one colour per question (the data's; a page written before it had them: ten colours, repeated)
  const ten = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
    "#17becf"];
  const questions = [...new Set(data.rows.map(r => r.question))].sort();
  const colour = q => (data.colours || {})[q] || ten[questions.indexOf(q) % ten.length];
  const chosen = new Set(axes.map((a, i) => (a.shown === false ? -1 : i)).filter(i => i >= 0));
  const brushes = axes.map(() => null);
  let drag = null, lines = [], marks = {}, kept = new Set(), svg = null;

  const at = ev => {
    const box = svg.getBoundingClientRect();
    return Math.max(top, Math.min(H - bottom, ((ev.clientY - box.top) * H) / box.height));
  };
  window.addEventListener("mousemove", ev => {
    if (drag === null) return;
    const now = at(ev);
    brushes[drag.axis] = [Math.min(drag.start, now), Math.max(drag.start, now)];
    update();
  });
  window.addEventListener("mouseup", () => {
    if (drag === null) return; // not a drag on an axis: leave the list (and a click on it) alone
    const b = brushes[drag.axis];
    if (b && b[1] - b[0] < 2) brushes[drag.axis] = null;
    drag = null;
    update();
  });

  // an axis's name as wide as the room it has (the full name and its definition on hover)
  const fit = (name, chars) => (name.length <= chars ? name : name.slice(0, Math.max(1, chars - 1)) + "…");

  function draw() {
    host.innerHTML = "";
    const order = [...chosen].sort((a, b) => a - b);
    const step = order.length > 1 ? (W - left - right) / (order.length - 1) : 0;
    const x = j => (order.length > 1 ? left + j * step : W / 2);
    svg = el("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img",
      "aria-label": "parallel coordinates of every experiment" }, host);
    const group = el("g", {}, svg); // the lines, beneath the axes and their grab areas
    lines = data.rows.map(r => {
      const pts = order.map((i, j) => (r.values[i] === null ? null : `${x(j)},${y(axes[i].pos(r.values[i]))}`));
      const line = el("polyline", { points: pts.filter(Boolean).join(" "), fill: "none", "stroke-width": 1.2 }, group);
      el("title", {}, line).textContent = `${r.name} (${r.question}): BLEU ${r.bleu}`;
      return line;
    });
    // names alternate between two heights, so each has two gaps' room; longer ones are cut, whole on hover
    const room = order.length > 1 ? Math.floor((2 * step) / 7.5) : 40;
    marks = {};
    order.forEach((i, j) => {
      const a = axes[i];
      marks[i] = el("rect", { x: x(j) - 8, width: 16, y: 0, height: 0, fill: "rgba(255,140,0,0.25)", stroke: "#c60" },
        svg);
      el("line", { x1: x(j), x2: x(j), y1: top, y2: H - bottom, stroke: "#333" }, svg);
      const label = el("text", { x: x(j), y: top - (j % 2 ? 12 : 30), "text-anchor": "middle", "font-size": 12,
        "font-weight": "bold", class: "pc-axis" }, svg);
      label.textContent = fit(a.name, room);
      el("title", {}, label).textContent = `${a.name}: ${a.definition || a.name}`;
      a.ticks.forEach(([text, p]) => {
        el("text", { x: x(j) + 5, y: y(p) + 4, "font-size": 10, fill: "#444" }, svg).textContent = text;
      });
      const grab = el("rect", { x: x(j) - 10, y: top, width: 20, height: H - top - bottom, fill: "transparent",
        style: "cursor:ns-resize" }, svg);
      grab.addEventListener("mousedown", ev => { drag = { axis: i, start: at(ev) }; ev.preventDefault(); });
      grab.addEventListener("dblclick", () => { brushes[i] = null; update(); });
    });
    update();
  }

  const count = document.getElementById("pc-count"), list = document.getElementById("pc-list");
  function update() {
    kept = new Set();
    data.rows.forEach((r, k) => {
      const ok = r.values.every((v, i) => {
        if (!brushes[i] || !chosen.has(i)) return true;
        if (v === null) return false;
        const py = y(axes[i].pos(v));
        return py >= brushes[i][0] - 2 && py <= brushes[i][1] + 2; // a point on the brush's edge is in it
      });
      // kept: its question's colour, drawn over the rest; brushed out: grey, faint, beneath
      lines[k].setAttribute("stroke", ok ? colour(r.question) : "#bbb");
      lines[k].setAttribute("stroke-opacity", ok ? 0.8 : 0.2);
      lines[k].setAttribute("class", ok ? "pc-kept" : "pc-out");
      if (ok) kept.add(r.name);
    });
    lines.forEach((line, k) => { if (kept.has(data.rows[k].name)) line.parentNode.appendChild(line); });
    Object.entries(marks).forEach(([i, m]) => {
      m.setAttribute("y", brushes[i] ? brushes[i][0] : 0);
      m.setAttribute("height", brushes[i] ? brushes[i][1] - brushes[i][0] : 0);
    });
    if (count) count.textContent = `${kept.size} of ${data.rows.length} experiments`;
    if (list) {
      list.innerHTML = "";
      data.rows.filter(r => kept.has(r.name)).sort((a, b) => (b.bleu ?? -1) - (a.bleu ?? -1)).slice(0, 40).forEach(r => {
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
    curves();
  }

  // learning curves of the ticked experiments: val BLEU against step, one line per seed, one colour each; an
  // experiment the brushes leave out is drawn grey and dashed, beneath the others, and says so in the key
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
    const inside = rows.filter(r => kept.has(r.name)), outside = rows.filter(r => !kept.has(r.name));
    [...outside, ...inside].forEach(r => {
      const out = !kept.has(r.name);
      const c = out ? "#bbb" : ten[rows.indexOf(r) % ten.length];
      (r.curves || []).forEach(s => {
        if (!s.points.length) return;
        const line = el("polyline", { points: s.points.map(p => `${px(p[0])},${py(p[1])}`).join(" "), fill: "none",
          stroke: c, "stroke-width": 1.5, class: out ? "pc-curve-out" : "pc-curve" }, g);
        if (out) line.setAttribute("stroke-dasharray", "4 3");
        el("title", {}, line).textContent = `${r.name}, seed ${s.seed}${out ? " (brushed out)" : ""}`;
      });
    });
    rows.forEach(r => {
      const out = !kept.has(r.name);
      const c = out ? "#bbb" : ten[rows.indexOf(r) % ten.length];
      key.insertAdjacentHTML("beforeend", `<span style="color:${c}">■</span> ${r.name}${out ? " (brushed out)" : ""} &nbsp; `);
    });
    plot.appendChild(key);
  }

  // the axis chooser: a box per axis, the shown ones ticked; hiding an axis clears its brush
  const chooser = document.getElementById("pc-axes");
  if (chooser) {
    axes.forEach((a, i) => {
      const label = document.createElement("label");
      label.title = a.definition || a.name;
      const box = document.createElement("input");
      box.type = "checkbox";
      box.checked = chosen.has(i);
      box.addEventListener("change", () => {
        if (box.checked) chosen.add(i);
        else { chosen.delete(i); brushes[i] = null; }
        draw();
      });
      label.appendChild(box);
      label.appendChild(document.createTextNode(` ${a.name} `));
      chooser.appendChild(label);
    });
  }
  const legend = document.getElementById("pc-legend");
  if (legend) legend.innerHTML = questions.map(q => `<span style="color:${colour(q)}">■</span> ${q}`).join(" &nbsp; ");
  draw();
})();
