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
      if (start !== null && brushes[i] && brushes[i][1] - brushes[i][0] < 2) brushes[i] = null;
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
        const a = document.createElement("a");
        a.href = r.href;
        a.textContent = r.name;
        li.appendChild(a);
        li.appendChild(document.createTextNode(` (${r.question}): BLEU ${r.bleu ?? "—"}, PPL ${r.ppl ?? "—"}`));
        list.appendChild(li);
      });
    }
  }
  const legend = document.getElementById("pc-legend");
  if (legend) legend.innerHTML = questions.map((q, i) =>
    `<span style="color:${colours[i % colours.length]}">■</span> ${q}`).join(" &nbsp; ");
  update();
})();
