"""matplotlib for files only: every plot of headsweep is written to a PNG, never shown."""

from __future__ import annotations

import json
import os
from pathlib import Path


def pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


# Beside every figure: the tick labels as drawn, so the site check (experiments.report_check) can fail on a
# figure whose ticks repeat a label or overlap, which no browser can see in a PNG.
TICKS_SUFFIX = ".ticks.json"


def ticks_path(png) -> Path:
    return Path(png).with_suffix(TICKS_SUFFIX)


def drawn_ticks(fig) -> list[dict]:
    """For each axes of a drawn figure: its title, and per axis the labels of the ticks inside the view (in
    order) and the pairs of labels whose boxes overlap."""
    renderer = fig.canvas.get_renderer()
    found = []
    for ax in fig.axes:
        entry = {"title": ax.get_title()}
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            lo, hi = sorted(axis.get_view_interval())
            pad = (hi - lo) * 1e-9
            shown = []
            for minor in (False, True):
                locs, labels = axis.get_ticklocs(minor=minor), axis.get_ticklabels(minor=minor)
                shown += [
                    (loc, label)
                    for loc, label in zip(locs, labels)
                    if lo - pad <= loc <= hi + pad and label.get_visible() and label.get_text().strip()
                ]
            shown.sort(key=lambda t: t[0])
            boxes = [label.get_window_extent(renderer) for _, label in shown]
            entry[name] = [label.get_text() for _, label in shown]
            entry[name + "_overlaps"] = [
                [shown[i][1].get_text(), shown[j][1].get_text()]
                for i in range(len(shown))
                for j in range(i + 1, len(shown))
                if boxes[i].x0 < boxes[j].x1 - 1
                and boxes[j].x0 < boxes[i].x1 - 1
                and boxes[i].y0 < boxes[j].y1 - 1
                and boxes[j].y0 < boxes[i].y1 - 1
            ]
        found.append(entry)
    return found


def save_figure(fig, path, dpi: int = 110) -> None:
    """The figure as a PNG at path, and its tick labels as drawn beside it (path with .ticks.json)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")  # a report killed mid-write leaves the previous figure whole
    fig.savefig(tmp, dpi=dpi, format=path.suffix.lstrip(".") or "png")  # draws it: labels and boxes are final
    os.replace(tmp, path)
    ticks = ticks_path(path).with_name(f".{ticks_path(path).name}.tmp")
    ticks.write_text(json.dumps({"figure": path.name, "axes": drawn_ticks(fig)}, indent=1))
    os.replace(ticks, ticks_path(path))
