"""Table 3's page rendered from its record (reports/table3.json, table3_record): the paper, the earlier protocol
and the new start side by side per cell, the verdicts that moved, then each protocol's full table and rows, and a
figure. Nothing here computes a verdict: every verdict word is the record's."""

from __future__ import annotations

import math
from pathlib import Path

from headsweep.reporting.markdown import figure, fmt_p
from headsweep.reporting.markdown import table as markdown_table
from headsweep.reports.pages.table3_budget import AT
from headsweep.reports.pages.table3_paper import f, setting_strings
from headsweep.reports.pages.table3_record import NOT_RUN
from headsweep.reports.pages.verdicts import interval_text
from headsweep.sweeps.table3 import ROWS

ROW_COLOURS = {"A": "tab:blue", "B": "tab:orange", "C": "tab:green", "D": "tab:red", "E": "tab:purple"}
MARKERS = ("o", "s", "^")
# Rows shipped under protocols before these: their own reports, never rows of this table.
OLDER = (
    "Older protocols keep their own pages, never rows of this table: [table3_a](table3_a.md) and "
    "[table3_b](table3_b.md) (xavier init, one peak rate for every cell), [table3_a_h200](table3_a_h200.md)."
)


def short_class(cls: str | None) -> str:
    """'H200', 'H100', 'CPU AMX', 'CPU AVX512-BF16', 'CPU AVX2': a machine class in a few characters (the record
    and the row's lines name it in full)."""
    if not cls:
        return "—"
    for unit in ("AMX", "AVX512-BF16", "AVX2"):  # a CPU's class, by the widest unit it names
        if unit in cls:
            return f"CPU {unit}"
    words = [w for w in cls.replace("NVIDIA", "").split() if any(ch.isdigit() for ch in w)]
    return words[0] if words else cls


def classes_text(c: dict) -> str:
    if c.get("cell_class") is None:
        return ""
    if c["cell_class"] == c["base_class"]:
        return short_class(c["cell_class"])
    return f"{short_class(c['cell_class'])} / base {short_class(c['base_class'])}"


def side_text(c: dict | None) -> str:
    """One protocol's side of a cell in the verdicts table: 'Δ [interval], n 3/3, class'."""
    if c is None or c["verdict"] is None:
        return NOT_RUN if c is None else c["state"]
    if c.get("delta") is None:
        return f"{f(c.get('all_mean'))} BLEU, {classes_text(c)}"
    return f"{c['delta']:+.2f} {interval_text(c['interval'])}, n {c['n']}/{c['n_base']}, {classes_text(c)}"


def at_text(c: dict | None) -> list[str]:
    """A new-start cell's two columns at 4x (table3_budget): its side and its verdict."""
    a = (c or {}).get("at_4x") or {"state": NOT_RUN}
    if a["state"] != "read":
        return [a["state"], "—"]
    n = f"n {a['n']}/{a['n_base']}, {short_class(a['cell_class'])}"
    side = n if a["delta"] is None else f"{a['delta']:+.2f} {interval_text(a['interval'])}, {n}"
    return [side, f"**{a['verdict']}**"]


def at_words(record: dict) -> list[str]:
    """How the 4x columns are read, under the table that has them."""
    if not any("at_4x" in c for c in record["cells"]):
        return []
    read = sum(1 for c in record["cells"] if (c.get("at_4x") or {}).get("state") == "read")
    return [
        f"**At {AT}x** ({read} cell{'s' * (read != 1)} read so far): each new-start cell's cooldown branch at "
        f"{AT} times the steps ({AT * 1150:,}; `make budgets`, one warmup-stable-decay trunk per cell, "
        f"[budgets](budgets.md)) against the base's {AT}x branches of its class, by the same rule, Holm across "
        f"the cells of its budgets sweep. A branch is no 1x run: its verdict sits beside the 1x one.",
        "",
    ]


def verdicts_table(record: dict) -> list[str]:
    protocols = list(record["protocols"])
    by = {(c["row"], c["cell"], c["protocol"]): c for c in record["cells"]}
    keys = list(dict.fromkeys((c["row"], c["cell"]) for c in record["cells"]))
    header = ["row", "cell", "paper Δ BLEU"]
    for p in protocols:
        header += [f"{record['protocols'][p]['title']}: Δ [95% CI], n cell/base, class", "verdict"]
    at = any("at_4x" in c for c in record["cells"])
    header += [f"new start at {AT}x (WSD branches): Δ [95% CI], n", f"verdict at {AT}x"] if at else []
    body = []
    for row, name in keys:
        first = next(by[(row, name, p)] for p in protocols if (row, name, p) in by)
        pd = first.get("paper_delta")
        line = [
            row,
            name,
            "no paper cell" if first.get("paper_index") is None else f"{pd:+.1f} ({first['paper_effect']})",
        ]
        for p in protocols:
            c = by.get((row, name, p))
            line += [side_text(c), "—" if c is None or c["verdict"] is None else f"**{c['verdict']}**"]
        line += at_text(by.get((row, name, "start"))) if at else []
        body.append(line)
    return markdown_table(header, body)


def moved_lines(record: dict) -> list[str]:
    if not any(c["protocol"] != "earlier" and c["verdict"] for c in record["cells"]):
        return ["No cell has run under the new start yet, so no verdict can have moved."]
    if not record["moved"]:
        return ["No verdict moved: every cell run under both protocols reads the same under each."]
    return [f"- {m['row']}, {m['cell']}: {m['earlier']} → {m['start']}" for m in record["moved"]]


HEADER = [
    "",
    "paper PPL (dev)",
    "paper BLEU (dev)",
    "paper params ×10⁶",
    "our val PPL (every seed)",
    "our test BLEU (every seed)",
    "our params ×10⁶",
    "Δ PPL paper / ours",
    "Δ BLEU paper / ours",
    "95% CI",
    "Welch p",
    "Holm p",
    "class",
    "stuck",
    "rate",
    "verdict",
]


PAPER_COLUMNS = ["paper PPL (dev)", "paper BLEU (dev)", "paper params ×10⁶", "our params ×10⁶"]


def pick(line: list[str], header: list[str], columns: list[str]) -> list[str]:
    """The entries of one wide row (in `header`'s order) under `columns`."""
    return [line[header.index(h)] for h in columns]


def wide_row(c: dict, ref: dict, label: str) -> list[str]:
    p = c.get("paper") or {}
    if c["verdict"] is None:
        return [label, *setting_strings(c["settings"], ref), f(p.get("dev_ppl")), f(p.get("dev_bleu"), "{:.1f}"),
                f(p.get("params_M"), "{:.0f}"), c["state"], *[""] * (len(HEADER) - 5)]  # fmt: skip
    # the cell as trained (every seed); its Δs are the compared seeds' (one machine class, the verdict's)
    dppl = None if c.get("val_ppl") is None or c.get("base_val_ppl") is None else c["val_ppl"] - c["base_val_ppl"]
    sd = f" ± {c['all_sd']:.2f}" if c.get("all_sd") is not None else ""
    return [
        label,
        *setting_strings(c["settings"], ref),
        f(p.get("dev_ppl")),
        f(p.get("dev_bleu"), "{:.1f}"),
        f(p.get("params_M"), "{:.0f}"),
        f(c.get("all_val_ppl")),
        f"{f(c.get('all_mean'))}{sd} (n={c['seeds']})",
        f(c.get("params_M"), "{:.1f}"),
        f"{f(c.get('paper_dppl'), '{:+.2f}')} / {f(dppl, '{:+.2f}')}",
        f"{f(c.get('paper_delta'), '{:+.1f}')} / {f(c.get('delta'), '{:+.2f}')}",
        interval_text(c.get("interval")),
        fmt_p(c.get("p")),
        fmt_p(c.get("p_holm")),
        classes_text(c),
        ", ".join(map(str, c.get("stuck_seeds") or [])),
        c.get("rate", ""),
        c["verdict"],
    ]


def base_classes(b: dict) -> str:
    return ", ".join(f"{short_class(k)} (seed {', '.join(map(str, s))})" for k, s in b["classes"].items())


def base_row(b: dict, paper: dict, label: str) -> list[str]:
    sd = f" ± {b['sd']:.2f}" if b.get("sd") is not None else ""
    return [label, *setting_strings(b["settings"], None), f(paper.get("dev_ppl")), f(paper.get("dev_bleu"), "{:.1f}"),
            f(paper.get("params_M"), "{:.0f}"), f(b.get("val_ppl")), f"{f(b['mean'])}{sd} (n={b['n']})",
            f(b.get("params_M"), "{:.1f}"), "", "", "", "", "", base_classes(b), "", b["rate"], ""]  # fmt: skip


def calibration_lines(cal: dict | None) -> list[str]:
    """The base on each machine class its rows trained on, and how far apart (table3_record.calibration)."""
    if not cal:
        return []

    def delta(k: dict, metric: str, fmt: str) -> str:
        if k["class"] == cal["reference"]:
            return "reference"
        interval = k[f"interval_{metric}"]
        spread = "—" if interval is None else f"[{interval[0]:{fmt}}, {interval[1]:{fmt}}]"
        return f"{k[f'delta_{metric}']:{fmt}} {spread}"

    body = [
        [
            k["class"],
            f"{k['n']} ({', '.join(map(str, k['seeds']))})",
            f(k["bleu"]),
            delta(k, "bleu", "+.2f"),
            f(k["val_loss"], "{:.3f}"),
            delta(k, "val_loss", "+.3f"),
        ]  # fmt: skip
        for k in cal["classes"]
    ]
    return [
        "**The base on each machine class** (the base runs of every row above; Welch 95% interval over seeds "
        "against the reference class): bf16 kernels differ between classes, which is why no Δ crosses them.",
        "",
        *markdown_table(["class", "seeds", "test BLEU", "Δ BLEU", "val loss", "Δ val loss"], body),
        "",
    ]


def protocol_section(record: dict, protocol: str) -> list[str]:
    p = record["protocols"][protocol]
    ref = record["reference_settings"]
    rows = {row: record["rows"][row][protocol] for row in ROWS}
    cells = [c for c in record["cells"] if c["protocol"] == protocol]
    md = [f"## {p['title'][0].upper() + p['title'][1:]}", "", f"Protocol: {p['words']}.", ""]
    if not any(r["base"] for r in rows.values()):
        sweeps = ", ".join(f"`{s}`" for r in rows.values() for s in r["sweeps"])
        return [*md, f"No row has run under it yet (its sweeps: {sweeps}): every cell {NOT_RUN}.", ""]
    summary = [[row, ", ".join(r["sweeps"]), r["state"], "; ".join(r["devices"]) or "—"] for row, r in rows.items()]
    md += markdown_table(["row", "sweeps", "state", "precision, device"], summary)
    header = [HEADER[0], *record["setting_columns"], *HEADER[1:]]
    body, names = [], []
    for row, r in rows.items():
        if r["base"]:
            body.append(base_row(r["base"], record["paper_base"], f"{row}: base"))
            names.append(f"{row}: base")
        for c in cells:
            if c["row"] == row:
                body.append(wide_row(c, ref, row))
                names.append(f"{row}: {c['cell']}")
    # two tables, not one of 25 columns (wider than a 1,280 px page): the paper's layout, then ours against it
    paper_cols = [*record["setting_columns"], *PAPER_COLUMNS]
    ours_cols = [h for h in HEADER[1:] if h not in PAPER_COLUMNS]
    md += ["", "The paper's cells (a blank setting is the base's) and our model's size:", ""]
    md += [*markdown_table(["", *paper_cols], [[line[0], *pick(line, header, paper_cols)] for line in body]), ""]
    md += ["Ours against the row's base (one machine class):", ""]
    md += [*markdown_table(["", *ours_cols], [[n, *pick(line, header, ours_cols)] for n, line in zip(names, body)]), ""]
    md += calibration_lines(record.get("calibration", {}).get(protocol))
    for row, r in rows.items():
        md += [
            f"### Row {row}, {p['title']}",
            "",
            f"- Sweeps: {', '.join(f'`{s}`' for s in r['sweeps'])}; state: {r['state']}.",
        ]
        if r["base"]:
            md.append(f"- Base: `{r['base']['label']}` in `{r['base']['sweep']}`, on {base_classes(r['base'])}.")
        for c in cells:
            if c["row"] == row and c["verdict"] is not None:
                left = f" Left out (another machine class): {', '.join(c['left_out'])}." if c["left_out"] else ""
                left += f" Left out (stopped short): {', '.join(c['stopped_out'])}." if c.get("stopped_out") else ""
                md.append(f"- {c['cell']}: **{c['verdict']}**: {c['reason']}.{left}")
        md += [f"- {line}" for line in r["notes"]]
        md.append("")
    return md


def markdown(record: dict, png: Path | None) -> str:
    md = [
        "# Table 3 (Vaswani et al. 2017) at our scale: the paper, the earlier protocol and the new start",
        "",
        "Each cell of rows A-E beside the paper's. The paper's numbers are its own, at its scale (transformer base, "
        "WMT14 EN-DE, 100k steps; dev PPL per wordpiece and dev BLEU on newstest2013); ours are the small model "
        "(N 3, d_model 256, d_ff 1024, h 8) on Multi30k DE-EN at 1,150 steps: val PPL per subword of plain NLL, "
        "test BLEU by beam search on test_2016_flickr, over seeds. Sizes compare relative to each base (our "
        "d_model 128 is the paper's 256, N 1 its 2). Run or resume the earlier protocol: `make table3`.",
        "",
        f"**The verdict rule**, applied once (reports/table3.json holds every verdict; the index and README render "
        f"them from it): {record['rule']} Δ is the cell's mean test BLEU minus its row's base's, both on one machine "
        "class (the GPU model, else the CPU class each run recorded): a cell whose base ran on another class is not "
        "compared at all. sacreBLEU's paired bootstrap over sentences (on each sweep's own page) is test-set noise "
        "within a seed only; no verdict rests on it.",
        "",
        "## Verdicts",
        "",
        *verdicts_table(record),
        "",
        *at_words(record),
        "## What moved between protocols",
        "",
        *moved_lines(record),
        "",
    ]
    for protocol in record["protocols"]:
        md += protocol_section(record, protocol)
    md += [f"{OLDER}", ""]
    if png is not None:
        md += [
            "## Figure",
            "",
            figure(
                png.name,
                "Figure 1. Our Δ test BLEU against the paper's Δ dev BLEU, one point per compared cell (named beside "
                "it), coloured by row, one marker per protocol; bars: our 95% Welch interval over seeds (none with "
                "fewer than 2 seeds a side). Points in the upper right and lower left quadrants move the paper's "
                "way; on the dashed diagonal y = x, by as much as the paper's.",
            ),
            "",
        ]
    return "\n".join(md) + "\n"


def scatter(record: dict):
    """Our Δ against the paper's per compared cell, with our interval as the bar, per protocol: each point named
    (its cell), the diagonal y = x (a cell on it moves as the paper's did), the legend outside the axes."""
    from headsweep.reporting.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.6, 5.2))
    shown = 0
    for marker, (protocol, p) in zip(MARKERS, record["protocols"].items()):
        for row in ROWS:
            mine = [
                c
                for c in record["cells"]
                if c["protocol"] == protocol
                and c["row"] == row
                and c.get("delta") is not None
                and c["paper_delta"] is not None
            ]
            if not mine:
                continue
            shown += len(mine)
            lo = [c["delta"] - c["interval"][0] if c["interval"] else 0.0 for c in mine]
            hi = [c["interval"][1] - c["delta"] if c["interval"] else 0.0 for c in mine]
            ax.errorbar(
                [c["paper_delta"] for c in mine],
                [c["delta"] for c in mine],
                yerr=[lo, hi],
                fmt=marker,
                color=ROW_COLOURS[row],
                capsize=3,
                label=f"row {row}, {p['title']}",
            )
            for c in mine:  # which cell each point is, beside it (the colour says the row)
                ax.annotate(
                    c["cell"],
                    (c["paper_delta"], c["delta"]),
                    xytext=(4, 3),
                    textcoords="offset points",
                    fontsize=6.5,
                    color=ROW_COLOURS[row],
                )
    ax.axhline(0, color="grey", lw=0.8)
    ax.axvline(0, color="grey", lw=0.8)
    if shown:
        ax.axline((0, 0), slope=1, color="0.3", ls="--", lw=0.9, label="y = x: our Δ equals the paper's")
    ax.set_xlabel("paper's Δ BLEU against its base (dev, newstest2013)")
    ax.set_ylabel("our Δ BLEU against our base (test, mean over seeds)")
    ax.set_title("Table 3: our Δ BLEU against the paper's, per cell")
    if shown:
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7)  # outside: it covers no point
    else:
        ax.text(0.5, 0.5, "no compared cell yet", ha="center", va="center", transform=ax.transAxes)
    if not math.isfinite(ax.get_ylim()[0]):
        ax.set_ylim(-1, 1)
    fig.tight_layout()
    return fig


def plot(record: dict, path: Path) -> Path:
    """The scatter of our Δ against the paper's as a PNG at path."""
    from headsweep.reporting.plots import pyplot, save_figure

    fig = scatter(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=100)
    pyplot().close(fig)
    return path
