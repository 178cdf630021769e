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


def data_points(ax, renderer=None) -> list[list[float]]:
    """The plotted points of an axes in display pixels, those inside its view: every vertex of a line drawn
    in data coordinates (a curve's points, a marker, an error bar's cap) and every scatter point. A line in
    axes coordinates (axhline: the base's mean across the plot) and filled bands are no points."""
    import numpy as np

    box = ax.get_window_extent(renderer)
    found = []
    for line in ax.get_lines():
        if not line.get_visible() or line.get_transform() != ax.transData:
            continue
        xy = np.column_stack([np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)])
        if len(xy):
            found += ax.transData.transform(xy).tolist()
    for coll in ax.collections:
        offsets = coll.get_offsets()
        if (
            coll.get_visible()
            and len(offsets)
            and coll.get_offset_transform() == ax.transData
            and coll.get_sizes().size
        ):
            found += ax.transData.transform(np.asarray(offsets, float)).tolist()
    return [
        [round(x, 1), round(y, 1)]
        for x, y in found
        if np.isfinite(x) and np.isfinite(y) and box.x0 <= x <= box.x1 and box.y0 <= y <= box.y1
    ]


def covered(box, points: list[list[float]], margin: float = 1.0) -> list[list[float]]:
    """The points inside a box [x0, y0, x1, y1] (display pixels), a pixel's margin inside its edge."""
    x0, y0, x1, y1 = box
    return [p for p in points if x0 + margin < p[0] < x1 - margin and y0 + margin < p[1] < y1 - margin]


def data_bands(ax, renderer=None) -> list[list[list[float]]]:
    """The filled bands of an axes drawn in data coordinates (fill_between: a seed sd's band, a noise band), each
    as its polygon in display pixels. A band is data too: a legend over it hides where the spread lies."""
    from matplotlib.collections import PolyCollection

    found = []
    for coll in ax.collections:
        if not coll.get_visible() or not isinstance(coll, PolyCollection) or coll.get_transform() != ax.transData:
            continue
        for path in coll.get_paths():
            pixels = ax.transData.transform(path.vertices)
            found.append([[round(float(x), 1), round(float(y), 1)] for x, y in pixels])
    return found


def covered_bands(box, bands: list[list[list[float]]], view, margin: float = 1.0) -> int:
    """How many bands a box [x0, y0, x1, y1] overlaps where they are drawn: inside `view`, the axes' box (a band
    runs on past the view, clipped; a legend outside the axes covers none of it)."""
    from matplotlib.path import Path as Polygon
    from matplotlib.transforms import Bbox

    x0, y0 = max(box[0], view[0]) + margin, max(box[1], view[1]) + margin
    x1, y1 = min(box[2], view[2]) - margin, min(box[3], view[3]) - margin
    if x0 >= x1 or y0 >= y1:
        return 0
    inside = Bbox([[x0, y0], [x1, y1]])
    return sum(1 for band in bands if len(band) > 2 and Polygon(band).intersects_bbox(inside, filled=True))


def hides_data(legend, ax, renderer) -> bool:
    """Whether a legend covers a plotted point or a band of its axes."""
    box = extent(legend, renderer)
    return (
        bool(covered(box, data_points(ax, renderer)))
        or covered_bands(box, data_bands(ax, renderer), extent(ax, renderer)) > 0
    )


def extent(artist, renderer) -> list[float]:
    b = artist.get_window_extent(renderer)
    return [round(b.x0, 1), round(b.y0, 1), round(b.x1, 1), round(b.y1, 1)]


def clear_legends(fig, passes: int = 3) -> None:
    """Move each legend that covers a plotted point or a band: to the first corner or edge of its axes where it covers
    none, else outside the axes on the right. So no figure of the site hides data under its legend, whoever
    drew it; the site check (report_check) fails a figure where one still does. A legend moved outside
    re-lays the figure out, which can put another axes' points under its legend again: so pass again, up to
    `passes` times, until a pass moves nothing."""
    for _ in range(passes):
        if not _clear_legends_once(fig):
            return


def _clear_legends_once(fig) -> bool:
    """One pass of clear_legends; True when it moved a legend."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    moved = outside = False
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None or not hides_data(legend, ax, renderer):
            continue
        moved = True
        for loc in ("upper right", "upper left", "lower left", "lower right", "center right", "center left",
                    "upper center", "lower center"):  # fmt: skip
            legend.set_loc(loc)
            fig.canvas.draw()
            if not hides_data(legend, ax, renderer):
                break
        else:
            legend.set_loc("upper left")
            legend.set_bbox_to_anchor((1.01, 1.0), transform=ax.transAxes)
            outside = True
    if outside:
        fig.tight_layout()  # makes room for a legend moved outside (tight_layout counts legends)
    return moved


def drawn_legends(fig) -> list[dict]:
    """Per axes with a legend: the legend's box, the plotted points' positions, the bands' polygons and the
    axes' box, in display pixels."""
    renderer = fig.canvas.get_renderer()
    found = []
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            found.append(
                {
                    "title": ax.get_title(),
                    "legend": extent(legend, renderer),
                    "points": data_points(ax, renderer),
                    "bands": data_bands(ax, renderer),
                    "axes": extent(ax, renderer),
                }
            )
    return found


def save_figure(fig, path, dpi: int = 110, move_legends: bool = True) -> None:
    """The figure as a PNG at path, its legends moved off the data (clear_legends; move_legends=False keeps
    them where they were drawn), and its tick labels, legend boxes and plotted points as drawn beside it (path
    with .ticks.json)."""
    path = Path(path)
    fig.set_dpi(dpi)  # the pixels recorded are the PNG's
    if move_legends:
        clear_legends(fig)
    tmp = path.with_name(f".{path.name}.tmp")  # a report killed mid-write leaves the previous figure whole
    fig.savefig(tmp, dpi=dpi, format=path.suffix.lstrip(".") or "png")  # draws it: labels and boxes are final
    os.replace(tmp, path)
    ticks = ticks_path(path).with_name(f".{ticks_path(path).name}.tmp")
    record = {"figure": path.name, "axes": drawn_ticks(fig), "legends": drawn_legends(fig)}
    ticks.write_text(json.dumps(record, indent=1))
    os.replace(ticks, ticks_path(path))
