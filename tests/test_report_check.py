"""The site check's reading of the files (no browser): each failure it must catch, on tiny pages; and the
tick records that save_figure writes beside each figure, from real matplotlib figures."""

import json
from pathlib import Path

from headsweep.reporting.plots import pyplot, save_figure, ticks_path
from headsweep.reports.site import check as C

BACK = '<p><a href="index.html">← all reports</a></p>'


def site(folder: Path, pages: dict[str, str]) -> Path:
    for name, body in pages.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"<!doctype html><html><body>{body}<script>var p = 0.000;</script></body></html>")
    return folder


def problems(folder: Path) -> dict[str, list[str]]:
    found, _ = C.site_problems(folder)
    return {p.relative_to(folder).as_posix(): issues for p, issues in found.items() if issues}


GOOD = {
    "index.html": '<a href="a.html">a</a> <a href="prune-x/prune.md">no</a> <a href="prune-x/prune.html#top">p</a>',
    "a.html": BACK + '<a href="b.html#cell-h4">b</a> p < 0.001, p <= 0.002, p = 0.012',
    "b.html": '<a href="index.html#cells">back</a>',  # reached through a.html only
    "prune-x/prune.html": '<a href="../index.html">back</a>',
}


def test_a_site_whose_pages_are_all_linked_and_link_back_passes(tmp_path):
    # the script's "p = 0.000" is no text a reader sees
    assert problems(site(tmp_path, GOOD)) == {}


def test_a_page_no_link_from_the_index_reaches_fails(tmp_path):
    folder = site(tmp_path, {**GOOD, "explain.html": BACK, "lone/prune.html": '<a href="../index.html">back</a>'})
    found = problems(folder)
    assert found == {
        "explain.html": ["no chain of links from index.html reaches this page"],
        "lone/prune.html": ["no chain of links from index.html reaches this page"],
    }
    # a link from a page the index does not reach does not count
    found = problems(site(tmp_path, {"explain.html": BACK + '<a href="lone/prune.html">x</a>'}))
    assert set(found) == {"explain.html", "lone/prune.html"}


def test_a_page_with_no_link_back_to_the_index_fails(tmp_path):
    folder = site(tmp_path, {**GOOD, "b.html": '<a href="a.html">a</a> <a href="https://example.org/index.html">x</a>'})
    assert problems(folder) == {"b.html": ["no link back to index.html"]}
    assert problems(site(tmp_path / "none", {"a.html": BACK})) == {
        "index.html": ["no index.html: `make report` writes it"]
    }


def test_a_p_value_printed_as_zero_fails_in_words_and_in_a_p_column(tmp_path):
    table = (
        "<table><thead><tr><th>cell</th><th>BLEU</th><th>p Holm</th></tr></thead><tbody>"
        "<tr><td>h4</td><td>0.000</td><td>&lt; 0.001</td></tr><tr><td>h2</td><td>1.0</td><td>0.000</td></tr>"
        "<tr><td>h1</td><td>1.0</td><td>&lt;= 0.000</td></tr></tbody></table>"
    )
    folder = site(
        tmp_path, {**GOOD, "a.html": BACK + "<p>significant (Welch p = 0.000); over seeds p seeds 0.00.</p>" + table}
    )
    found = problems(folder)["a.html"]
    assert found == [
        "a p-value printed as zero: 'p = 0.000'",
        "a p-value printed as zero: 'p seeds 0.00'",
        "a p-value printed as zero in column 'p Holm': '0.000'",
        "a p-value printed as zero in column 'p Holm': '<= 0.000'",
    ]  # BLEU 0.000 is no p-value


def test_a_figure_repeating_a_tick_label_or_drawing_two_over_each_other_fails(tmp_path):
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(6, 3))
    left.plot([1, 2, 3], [1, 2, 3])
    left.set_xticks([1, 2, 3], ["dm128-ff512", "dm256-ff1024", "dm128-ff512"])  # h is missing from the names
    left.set_title("repeated")
    right.plot([0, 1], [0, 1])
    right.set_xticks([0.5, 0.52], ["a long label", "another long label"])  # drawn on top of each other
    right.set_xlim(-10, 10)  # so wide that 0.5 and 0.52 are a pixel apart
    png = tmp_path / "fig.png"
    save_figure(fig, png, dpi=80)
    plt.close(fig)
    record = json.loads(ticks_path(png).read_text())
    assert record["figure"] == "fig.png" and record["axes"][0]["x"] == ["dm128-ff512", "dm256-ff1024", "dm128-ff512"]
    found = C.tick_problems(record)
    assert "fig.png (repeated): tick label 'dm128-ff512' repeated on the x axis" in found
    assert "fig.png (untitled axes): x tick labels 'a long label' and 'another long label' overlap" in found
    assert not [f for f in found if "y axis" in f or "y tick" in f]  # matplotlib's own y ticks are fine

    fine = tmp_path / "fine.png"
    fig, ax = plt.subplots()
    ax.plot([1, 2, 4, 8], [30, 31, 32, 31])
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4, 8], ["1", "2", "4", "8"])
    save_figure(fig, fine, dpi=80)
    plt.close(fig)
    assert C.tick_problems(json.loads(ticks_path(fine).read_text())) == []

    # on a page: the figure's record is read; a figure without one is named, not failed
    (tmp_path / "old.png").write_bytes(png.read_bytes())
    site(tmp_path, {**GOOD, "a.html": BACK + '<img src="fig.png"> <img src="fine.png"> <img src="old.png">'})
    found, unrecorded = C.site_problems(tmp_path)
    assert len(found[tmp_path / "a.html"]) == 2 and unrecorded == ["a.html: old.png"]


def test_main_without_a_browser_exits_1_on_a_problem_and_0_on_none(tmp_path, capsys):
    assert C.main([str(site(tmp_path / "good", GOOD)), "--no-browser"]) == 0
    assert C.main([str(site(tmp_path / "bad", {**GOOD, "c.html": BACK})), "--no-browser"]) == 1
    out = capsys.readouterr().out
    assert "c.html: 1 problems\n  no chain of links from index.html reaches this page" in out


def test_a_markdown_twin_linking_a_page_or_a_missing_file_fails(tmp_path):
    folder = site(tmp_path, GOOD)
    (folder / "fig.png").write_bytes(b"")
    (folder / "a.md").write_text(
        "[← all reports](index.md)\n\n[b](b.md#cell-h4) [web](https://example.org/x.html) "
        '[here](#top) <figure><img src="fig.png" alt="f"></figure>\n'
    )
    (folder / "index.md").write_text("[a](a.md)\n")
    (folder / "b.md").write_text("[← all reports](index.md)\n")
    assert problems(folder) == {}
    (folder / "a.md").write_text('[← all reports](index.html)\n\n[c](c.md) <img src="gone.png">\n')
    assert problems(folder) == {
        "a.md": [
            "a link to a page, not to its markdown twin: index.html",
            "a link to a file that is not there: c.md",
            "a link to a file that is not there: gone.png",
        ]
    }


def test_a_legend_covering_plotted_points_fails_and_save_figure_moves_it_off_them(tmp_path):
    plt = pyplot()

    def crowded():
        fig, ax = plt.subplots(figsize=(4, 3))
        for i in range(12):  # points everywhere, the legend in the middle of them
            ax.plot(range(10), [i + (x % 3) for x in range(10)], "o-", label=f"cell {i}")
        ax.legend(loc="center", fontsize=7)
        ax.set_title("crowded")
        return fig

    fig = crowded()
    covering = tmp_path / "covering.png"
    save_figure(fig, covering, dpi=80, move_legends=False)  # as a plot drawn without the move
    plt.close(fig)
    record = json.loads(ticks_path(covering).read_text())
    assert record["legends"][0]["points"] and record["legends"][0]["legend"]
    found = C.legend_problems(record)
    assert len(found) == 1 and found[0].startswith("covering.png (crowded): the legend covers ")

    fig = crowded()
    moved = tmp_path / "moved.png"
    save_figure(fig, moved, dpi=80)  # the default: the legend goes where it covers nothing (here: outside)
    plt.close(fig)
    assert C.legend_problems(json.loads(ticks_path(moved).read_text())) == []

    # on a page, the covering figure fails the page; the moved one passes
    pages = {**GOOD, "a.html": BACK + '<a href="b.html">b</a> <img src="covering.png">'}
    site(tmp_path, {**pages, "b.html": BACK + '<img src="moved.png">'})
    found, _ = C.site_problems(tmp_path)
    assert found[tmp_path / "a.html"] == ["covering.png (crowded): " + found[tmp_path / "a.html"][0].split(": ", 1)[1]]
    assert "legend covers" in found[tmp_path / "a.html"][0]
    assert found[tmp_path / "b.html"] == []


def test_a_legend_over_a_band_fails_and_save_figure_moves_it_off_the_band(tmp_path):
    """A band (fill_between: a seed sd's, the base's noise) is data: a legend over it hides the spread, though
    it covers no plotted point. As the budgets' curves draw: each line with its ± sd band around it."""
    plt = pyplot()

    def banded():
        fig, ax = plt.subplots(figsize=(4, 3))
        steps = [0, 100, 200, 300]
        ax.plot(steps, [1, 1, 1, 1], "o", label="cell a")  # points at the bottom only
        ax.plot(steps, [9, 9, 9, 9], "o", label="cell b")  # and the top
        ax.fill_between(steps, [2, 2, 2, 2], [8, 8, 8, 8], alpha=0.2, label="± sd")  # a band filling the middle
        ax.set_xlim(-20, 320)
        ax.set_ylim(0, 10)
        ax.legend(loc="center", fontsize=7)  # over the band, no point under it
        ax.set_title("banded")
        return fig

    fig = banded()
    over = tmp_path / "over.png"
    save_figure(fig, over, dpi=80, move_legends=False)
    plt.close(fig)
    record = json.loads(ticks_path(over).read_text())
    assert C.covered(record["legends"][0]["legend"], record["legends"][0]["points"]) == []  # no point under it
    assert C.legend_problems(record) == ["over.png (banded): the legend covers 1 band (a spread drawn as an area)"]

    fig = banded()
    moved = tmp_path / "moved.png"
    save_figure(fig, moved, dpi=80)  # the default: moved where it covers neither point nor band
    plt.close(fig)
    assert C.legend_problems(json.loads(ticks_path(moved).read_text())) == []
    # a band that runs past the view, under a legend outside the axes, is no problem (it is clipped there)
    entry = {"legend": [300, 0, 400, 50], "points": [], "bands": [[[0, 0], [500, 0], [500, 60], [0, 60]]]}
    assert C.legend_problems({"figure": "x.png", "legends": [{**entry, "axes": [0, 0, 290, 300]}]}) == []
    assert C.legend_problems({"figure": "x.png", "legends": [{**entry, "axes": [0, 0, 350, 300]}]}) != []
