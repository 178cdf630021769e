"""The report site on fixture runs: bad runs named and left out with results/ untouched, pages rendered from
markdown with reader-named columns and captioned figures, bootstrap floors as bounds, missing validation
points, precision and compile, the index; and (slow) every page opened in headless Chromium."""

import gzip
import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import write_results
from headsweep.reports import build as B
from headsweep.reports.site import check as report_check
from headsweep.reports.sweep import page as R
from headsweep.reports.sweep import summary as N
from test_compare import analysis
from test_report import CELLS, REFS, make_run, write_curve


def references(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    with gzip.open(data / "test.en.gz", "wt", encoding="utf-8") as f:
        f.write("".join(r + "\n" for r in REFS))
    return data


def table3_a(root: Path, data: Path) -> Path:
    for h, cell in CELLS.items():
        for seed, bleu in enumerate(cell["bleu"], start=1):
            make_run(root / "table3_a", data, h, seed, bleu, cell["hyps"])
    return root / "table3_a"


def edit_results(run: Path, change) -> None:
    results = json.loads((run / "results.json").read_text())
    change(results)
    write_results(run, results)


def heads_specialise(root: Path, data: Path) -> Path:
    """Head dropout 0 and 0.1, two seeds each, every run analysed (analysis/analysis.json)."""
    sweep = root / "heads_specialise"
    for hd, bleus in ((0.0, (30.0, 32.0)), (0.1, (28.0, 29.0))):
        for seed, bleu in enumerate(bleus, start=1):
            run = make_run(sweep / "tmp", data, 8, seed, bleu, CELLS[8 if hd == 0 else 4]["hyps"])
            moved = run.rename(sweep / f"h8-dk32-dv32-head_dropout{hd:g}-s{seed}")

            def change(results, hd=hd, moved=moved):
                results["config"].update(
                    sweep="heads_specialise",
                    tags=[f"cell-h8-dk32-dv32-head_dropout{hd:g}"] + (["base"] if hd == 0 else []),
                )
                results["config"]["model"]["head_dropout"] = hd
                results["hypotheses"]["test.beam"] = str(moved / "hypotheses" / "test.beam.en")

            edit_results(moved, change)
            (moved / "analysis").mkdir()
            (moved / "analysis" / "analysis.json").write_text(json.dumps(analysis(hd, curve=(30.0, 10 + seed, 0.0))))
    (sweep / "tmp").rmdir()
    return sweep


def tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_bad_runs_are_named_in_one_line_left_out_of_every_number_and_results_untouched(tmp_path, capsys):
    data = references(tmp_path)
    sweep = table3_a(tmp_path / "results", data)
    half = sweep / "h4-dk64-dv64-s2" / "results.json"
    half.write_text(half.read_text()[:200])  # a half-written job
    stray = make_run(sweep, data, 8, 3, 99.0, CELLS[8]["hyps"])  # another sweep's job, in this sweep's folder
    edit_results(stray, lambda r: r["config"].update(sweep="table3_b"))
    no_csv = make_run(sweep, data, 4, 3, 99.0, CELLS[4]["hyps"])
    (no_csv / "metrics.csv").unlink()
    before = tree_digest(tmp_path / "results")

    assert (
        B.main(
            [
                "--sweep",
                "table3_a",
                "--root",
                str(tmp_path / "results"),
                "--out",
                str(tmp_path / "r"),
                "--samples",
                "50",
            ]
        )
        == 0
    )
    err = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(err) == 3, err  # one line per job, naming it and what is wrong
    assert any("h4-dk64-dv64-s2: unreadable results.json (half-written?)" in line for line in err)
    assert any("h8-dk32-dv32-s3: a run of sweep 'table3_b'" in line for line in err)
    assert any("h4-dk64-dv64-s3: no metrics CSV" in line for line in err)
    md = (tmp_path / "r" / "table3_a.md").read_text()
    assert "Left out of the table and of every number (3):" in md and "  - `h8-dk32-dv32-s3`: a run of sweep" in md
    # none of the 99 BLEU runs counts: the base is seeds 1-2 (31.00 ± 1.41), h4 seed 1 alone (29.00)
    assert "| h8-dk32-dv32 (base) | 8 | 32 | 32 | 5.020 | 31.00 ± 1.41 |" in md
    assert "| h4-dk64-dv64 | 4 | 64 | 64 | 5.017 | 29.00 | -2.00 |" in md
    assert tree_digest(tmp_path / "results") == before  # nothing under results/ rewritten


def test_page_renders_markdown_names_columns_and_hides_empty_paper_columns(tmp_path):
    sweep = heads_specialise(tmp_path / "results", references(tmp_path))
    R.write_report("heads_specialise", sweep.parent, tmp_path / "r", n_samples=50)
    html = (tmp_path / "r" / "heads_specialise.html").read_text()
    assert "<title>heads_specialise: test BLEU by head dropout</title>" in html
    heading = (
        '<h2 id="head-analysis-importance-pruning-redundancy-by-cell">'
        "Head analysis: importance, pruning, redundancy by cell</h2>"
    )
    assert "<pre" not in html and heading in html
    # the section's rows and words name the cells as the table above does, the base first
    section = html[html.index(">Head analysis: importance") :]
    base, other = (section.index(f"<td>h8-dk32-dv32-head_dropout{hd}</td>") for hd in ("0 (base)", "0.1"))
    assert base < other
    assert "h8-dk32-dv32-head_dropout0.1 against h8-dk32-dv32-head_dropout0 (base) (2 seeds vs 2 seeds): " in section
    assert (tmp_path / "r" / "heads_specialise_pruning.png").is_file()
    assert "<strong>Prunable</strong>" in html and "**" not in html and "![" not in html and "|---" not in html
    assert "<code>" in html and "`" not in html  # inline code rendered, no backtick left
    header = html[html.index("<thead>") : html.index("</thead>")]
    assert ">head dropout</th>" in header and "model.head_dropout" not in header
    assert "paper" not in header  # only the base has a Table 3 row: nothing to compare with
    assert html.count("<img ") == html.count("<figcaption>") == 2  # BLEU plot and pruning curves, captioned
    assert "Every cell has 7.58 M parameters: no plot against parameters." in html
    assert '<details id="cell-h8-dk32-dv32-head_dropout0.1">' in html
    precision = json.loads(next(sweep.glob("*/results.json")).read_text())["config"]["trainer"]["precision"]
    assert f"precision {precision}; eager (not compiled)" in html  # a run without a compile key ran eager


def test_bootstrap_floor_is_printed_as_a_bound(tmp_path):
    data = references(tmp_path)
    sweep = table3_a(tmp_path / "results", data)
    runs, _ = R.load_runs(sweep)
    cells = R.group_cells(runs)
    N.summarize(cells, n_samples=100)
    h2 = next(c for c in cells if c.label == "h2-dk128-dv128").row
    h4 = next(c for c in cells if c.label == "h4-dk64-dv64").row
    assert h2["p_bootstrap"] == pytest.approx(1 / 101) and h2["p_bootstrap_bound"]  # no resample favoured the base
    assert h4["p_bootstrap"] > 1 / 101 and not h4["p_bootstrap_bound"]
    # shown in each cell's details as test-set noise; no verdict, and not the table's p Holm (Welch's, issue 69)
    details = "\n".join(R.cell_details(next(c for c in cells if c.label == "h2-dk128-dv128"), 100))
    assert "test-set noise within a seed, not a verdict: sacreBLEU's paired bootstrap" in details
    assert f"p <= {1 / 101:.3f}" in details
    _, body = R.table(cells, R.varied_keys(cells))
    assert "<=" not in " ".join(next(r for r in body if r[0] == "h2-dk128-dv128"))
    assert not any("bootstrap" in w or "<=" in w for w in N.verdicts(cells))


def test_missing_validation_points_params_plot_precision_and_compile(tmp_path):
    data = references(tmp_path)
    sweep = table3_a(tmp_path / "results", data)
    write_curve(sweep / "h8-dk32-dv32-s1", {800: (30.0, 2.0)})  # no validation at step 400
    write_curve(sweep / "h8-dk32-dv32-s2", {400: (10.0, 4.0), 800: (32.0, 1.8)})
    for run in sweep.iterdir():  # h4 with fewer parameters, in bf16 and compiled; the others in fp32, eager

        def change(r, h4=run.name.startswith("h4-")):
            r["params"]["total"] = 6_000_000 if h4 else r["params"]["total"]
            r["config"]["trainer"]["precision"] = "bf16-mixed" if h4 else "32-true"
            r["config"]["module"]["compile"] = True if h4 else None

        edit_results(run, change)
    paths = R.write_report("table3_a", sweep.parent, tmp_path / "r", n_samples=50)
    assert (tmp_path / "r" / "table3_a-params.png") in paths  # parameters differ: the plot is drawn
    md = paths[0].read_text()
    assert (
        "h8-dk32-dv32 (base): seed 1 has no validation at step 400 (no such row in its metrics CSV); the "
        "learning curve there is the mean of 1 of 2 seeds"
    ) in md
    from headsweep.reports.sweep.plots import cell_curve

    base = next(c for c in R.group_cells(R.load_runs(sweep)[0]) if c.base)
    assert cell_curve(base, "val/bleu") == ([400, 800], [10.0, 31.0], [0.0, 2**0.5])
    assert "- precision bf16-mixed; compiled" in md and "- precision 32-true; eager (not compiled)" in md
    assert "precision 32-true" not in md.split("\n| cell |")[0]  # not the same in every cell: no such note


def test_index_links_every_sweep_and_prune_report(tmp_path):
    data = references(tmp_path)
    root = tmp_path / "results"
    table3_a(root, data)
    heads_specialise(root, data)
    out = tmp_path / "reports"
    (out / "prune-x").mkdir(parents=True)
    (out / "prune-x" / "prune.md").write_text("# Pruning heads\n\n| lambda | kept |\n|---|---|\n| 0 | 72 |\n")
    shutil.copy(Path(__file__).parents[1] / "reports" / "table3_a-bleu.png", out / "prune-x" / "prune.png")
    assert B.main(["--sweep", "table3_a", "--root", str(root), "--out", str(out), "--samples", "50"]) == 0
    index = (out / "index.html").read_text()
    # the sweeps are listed on a page of their own, which the index links (with how many wait for a report)
    assert 'href="sweeps.html"' in index and 'href="prune-x/prune.html"' in index
    assert "1 with runs but no report yet" in index
    sweeps = (out / "sweeps.html").read_text()
    assert 'href="table3_a.html"' in sweeps and '<a href="index.html">' in sweeps
    unreported = next(line for line in sweeps.splitlines() if "Runs but no report yet" in line)
    assert "heads_specialise" in unreported  # in results/, not yet reported
    prune = (out / "prune-x" / "prune.html").read_text()
    assert "<td>72</td>" in prune and '<img src="prune.png"' in prune and "<figcaption>" in prune

    assert B.main(["--sweep", "all", "--root", str(root), "--out", str(out), "--samples", "50"]) == 0
    index, sweeps = (out / "index.html").read_text(), (out / "sweeps.html").read_text()
    assert 'href="heads_specialise.html"' in sweeps and "no report yet" not in index + sweeps
    # the table of every experiment is its own page, linked from the index, which holds no table of cells
    assert '<div id="cells">' not in index and 'href="cells.html"' in index and 'href="glossary.html"' in index
    page = (out / "cells.html").read_text()
    cells = page[page.index('<div id="cells">') :]
    # its name column keeps each name on one line (the table scrolls sideways instead): the second column
    assert "#cells td:nth-child(2),#cells th:nth-child(2){white-space:nowrap}" in page
    assert re.search(r"<thead>\s*<tr>\s*<th[^>]*>question</th>\s*<th[^>]*>cell</th>", cells)
    # the header, table3_a's cells, heads_specialise's head dropout 0.1: its head dropout 0 has the settings of
    # table3_a's h = 8, so it is the same experiment, one row holding both sweeps' runs (seeds 1 and 2 twice)
    assert cells.count("<tr>") == 1 + 3 + 1
    same = next(row for row in cells.split("<tr>") if 'href="table3_a.html#cell-h8-dk32-dv32"' in row)
    assert 'href="heads_specialise.html#cell-h8-dk32-dv32-head_dropout0"' in same
    assert "4 (seed 1 ×2, 2 ×2)" in same
    assert 'href="table3_a.html#cell-h4-dk64-dv64"' in cells and 'id="filter"' in page
    links = re.findall(r'(?:href|src)="([^"]+)"', index + (out / "table3_a.html").read_text())
    assert links and not [
        link for link in links if ":" in link or link.startswith("/")
    ]  # relative: the folder can move


FACTS = {"broken": [], "uncaptioned": [], "pre": [], "width": 1280, "height": 900, "wide_tables": []}


def test_check_names_what_a_reader_would_see_wrong():
    assert report_check.problems(FACTS) == []
    bad = {**FACTS, "broken": ["a.png"], "uncaptioned": ["b.png"], "pre": ["## Heads\n**Prunable**"], "width": 1900}
    found = report_check.problems(bad)
    assert len(found) == 4 and "broken image a.png" in found and any("markdown left in a <pre>" in f for f in found)
    assert report_check.problems({**FACTS, "pre": ["plain log output\n  indented"]}) == []
    # the index reads in three screens at 1,280 px: 2,700 px tall passes, a pixel more fails
    assert report_check.problems({**FACTS, "height": 2700}, max_height=3 * 900) == []
    tall = report_check.problems({**FACTS, "height": 2701}, max_height=3 * 900)
    assert tall == [
        "the page is 2701 px tall at 1280 px wide, over 2700 (3 screens): move a long part to a page of its own"
    ]
    assert report_check.problems({**FACTS, "height": 9000}) == []  # any other page may be long


@pytest.mark.slow  # headless Chromium: a few seconds a page
def test_every_page_looks_right_in_chromium_after_the_folder_moves(tmp_path):
    pytest.importorskip("playwright")
    if not shutil.which("chromium"):
        pytest.skip("no chromium (apt-get install chromium)")
    data = references(tmp_path)
    root = tmp_path / "results"
    table3_a(root, data)
    heads_specialise(root, data)
    assert B.main(["--sweep", "all", "--root", str(root), "--out", str(tmp_path / "built"), "--samples", "50"]) == 0
    site = tmp_path / "moved" / "reports"
    shutil.move(tmp_path / "built", site)
    found = report_check.check_site(site, tmp_path / "shots")
    assert sorted(p.name for p in found) == [
        "cells.html",
        "compare.html",
        "glossary.html",
        "heads_specialise.html",
        "index.html",
        "table3_a.html",
    ]
    assert all(issues == [] for issues in found.values()), found
    assert (tmp_path / "shots" / "index.png").read_bytes()[:4] == b"\x89PNG"

    tall = tmp_path / "tall"  # an index of many screens fails; a page beside it may be as long
    tall.mkdir()
    (tall / "index.html").write_text("<html><body>" + "<p>a line</p>" * 200 + '<a href="b.html">b</a></body></html>')
    (tall / "b.html").write_text("<html><body>" + "<p>a line</p>" * 200 + "</body></html>")
    measured = report_check.check_site(tall)
    assert [i.split(" px")[1] for i in measured[tall / "index.html"]] == [" tall at 1280"]
    assert measured[tall / "b.html"] == []
    (site / "bad.html").write_text("<html><body><pre>## Heads\n**Prunable**</pre><img src='gone.png'></body></html>")
    bad = report_check.check_site(site)[site / "bad.html"]
    assert any("broken image gone.png" in b for b in bad) and any("markdown left in a <pre>" in b for b in bad)

    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:  # the table of every experiment sorts on a click and filters as one types
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page()
        page.goto((site / "cells.html").as_uri())
        column = page.evaluate("[...document.querySelectorAll('#cells th')].map(th => th.textContent).indexOf('BLEU')")
        first = lambda: page.locator("#cells tbody tr").first.locator("td").nth(column).text_content()  # noqa: E731
        page.click("#cells th:has-text('BLEU')")
        assert first().startswith("27.00")  # ascending: table3_a's h2
        page.click("#cells th:has-text('BLEU')")
        assert first().startswith("31.00")
        page.fill("#filter", "heads_specialise 0.1")
        assert page.locator("#shown").text_content() == "1"
        # the parallel coordinates: a drag along the BLEU axis keeps only the experiments in that range
        page.goto((site / "compare.html").as_uri())
        total = page.locator("#pc-count").text_content()
        grabs = page.locator("#pc svg rect[fill='transparent']")
        box = grabs.nth(grabs.count() - 2).bounding_box()  # BLEU, then PPL
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 1)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 4, steps=4)
        page.mouse.up()
        kept = page.locator("#pc-count").text_content()
        assert (
            kept != total and int(kept.split()[0]) >= 1 and page.locator("#pc-list li").count() == int(kept.split()[0])
        )
        browser.close()


# issue 39: what a reader sees on the pages


def test_an_incomplete_sweep_says_so_at_the_top_of_its_page(tmp_path):
    from headsweep.reports.sweep.complete import incomplete
    from test_report import seed_cell

    data = references(tmp_path)
    root = tmp_path / "results"
    table3_a(root, data)  # 5 runs of sweeps/table3_a.yaml's 6 cells x 3 seeds
    out = tmp_path / "reports"
    assert B.main(["--sweep", "table3_a", "--root", str(root), "--out", str(out), "--samples", "50"]) == 0
    md = (out / "table3_a.md").read_text()
    top = md.split("\n- ")[0]  # the heading and what comes before the notes
    assert "**Incomplete: 5 of 18 planned runs** (`sweeps/table3_a.yaml`: 6 cells x 3 seeds)" in top
    assert "3 of its cells not run yet" in top and "h2-dk128-dv128 (1 of 2)" in top

    cells = [seed_cell("a", 3), seed_cell("b", 1)]
    specs = tmp_path / "sweeps"
    specs.mkdir()
    (specs / "two.yaml").write_text(
        "method: grid\nparameters:\n  model.heads:\n    values: [8, 4]\n  seed:\n    values: [1, 2, 3]\n"
    )
    # run under another name than its spec's (make sweep NAME=): matched to the spec it extends
    assert "**Incomplete: 4 of 6 planned runs** (`sweeps/two.yaml`" in incomplete("two_h200", cells, specs)
    assert incomplete("two", [seed_cell("a", 3), seed_cell("b", 3)], specs) is None
    # a name that extends no spec: the note make sweep NAME= leaves beside its runs says which spec it is
    for c in cells:
        for r in c.runs:
            r.dir = root / "renamed" / f"{c.label}-s{r.seed}"
    assert incomplete("renamed", cells, specs).startswith("**Incomplete:** cells with fewer seeds")  # no note yet
    (root / "renamed").mkdir()
    (root / "renamed" / ".sweep.json").write_text('{"sweep": "renamed", "spec": "two"}')
    assert "**Incomplete: 4 of 6 planned runs** (`sweeps/two.yaml`" in incomplete("renamed", cells, specs)
    # no spec to count from: the cells with fewer seeds are named
    assert incomplete("unknown", cells, specs) == (
        "**Incomplete:** cells with fewer seeds than the others: b (1 of 3). Every number below is of the runs here."
    )
    assert incomplete("unknown", [seed_cell("a", 2), seed_cell("b", 2)], specs) is None


def test_a_link_to_a_cell_opens_its_details():
    """The page's own script, run by node on a stand-in for the page: the <details> the hash names opens
    on load and on a change of the hash (a browser alone only scrolls to it)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node to run the page's script")
    from headsweep.reporting.html import page

    html = page("t", '<details id="cell-h4"><summary>h4</summary>\n\nx\n\n</details>\n')
    script = html[html.index("<script>") + len("<script>") : html.index("</script>")]
    harness = (
        """
const details={tagName:"DETAILS",open:false,parentElement:null,scrollIntoView(){}};
const inner={tagName:"P",parentElement:details,scrollIntoView(){}};
const handlers={};
globalThis.location={hash:"#cell-h4"};
globalThis.window={addEventListener:(name,f)=>{handlers[name]=f}};
globalThis.document={querySelectorAll:()=>[],querySelector:()=>null,
 getElementById:id=>({"cell-h4":details,"inside":inner})[id]||null};
"""
        + script
        + """
const onLoad=details.open;details.open=false;location.hash="#inside";handlers.hashchange();
console.log(JSON.stringify([onLoad,details.open]));
"""
    )
    import subprocess

    out = subprocess.run([node, "-e", harness], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [True, True]


def test_every_view_links_back_to_the_index_and_the_index_links_every_view(tmp_path):
    data = references(tmp_path)
    root = tmp_path / "results"
    table3_a(root, data)
    out = tmp_path / "reports"
    (out / "prune-x").mkdir(parents=True)
    (out / "prune-x" / "prune.md").write_text("# Pruning heads\n\ntext\n")
    # the views across sweeps, as their commands write them (explain and lengths: markdown only before issue 39)
    (out / "explain.md").write_text("# Heads or head width?\n\ntext\n")
    (out / "lengths.md").write_text("# Narrow heads and sentence length\n\ntext\n")
    (out / "table3_a-budget.md").write_text("# table3_a at 1x and 2x the steps\n\ntext\n")
    assert B.main(["--sweep", "table3_a", "--root", str(root), "--out", str(out), "--samples", "50"]) == 0
    index = (out / "index.html").read_text()
    views = (
        "sweeps.html",
        "explain.html",
        "lengths.html",
        "table3_a-budget.html",
        "prune-x/prune.html",
        "compare.html",
    )
    for view in views:
        assert f'href="{view}"' in index, view
        back = "../index.html" if "/" in view else "index.html"
        assert f'href="{back}"' in (out / view).read_text(), view
    # the markdown twins link back too, to the index's twin, so the links work on GitHub
    # and to the glossary beside the index (one source, docs/glossary.md), from their first line
    first = "[← all reports](index.md) · [glossary: the words these pages use](glossary.md)\n"
    for view in (
        "table3_a.md",
        "explain.md",
        "lengths.md",
        "table3_a-budget.md",
        "cells.md",
        "compare.md",
        "sweeps.md",
    ):
        assert (out / view).read_text().startswith(first), view
    assert (out / "prune-x" / "prune.md").read_text().startswith(first.replace("(", "(../"))
    glossary = (out / "glossary.html").read_text()
    assert '<h2 id="stuck">stuck</h2>' in glossary and '<a href="index.html">' in glossary
    for view in views:  # every page links the glossary
        assert re.search(r'href="(\.\./)?glossary\.html"', (out / view).read_text()), view
    # a sweep's page is reached through the page of every sweep, and links back to the index and the glossary
    assert 'href="table3_a.html"' in (out / "sweeps.html").read_text()
    assert re.search(r'href="index\.html".*href="glossary\.html"', (out / "table3_a.html").read_text(), re.S)
    index_md, sweeps_md = (out / "index.md").read_text(), (out / "sweeps.md").read_text()
    assert "](sweeps.md)" in index_md and "](prune-x/prune.md)" in index_md and ".html" not in index_md
    assert "](table3_a.md" in sweeps_md and ".html" not in sweeps_md
    # the site check, from the files: every page reached from the index and linking back, no p of 0.000, and
    # every figure the report drew has its tick labels recorded, none repeated
    found, unrecorded = report_check.site_problems(out)
    assert sorted(p.relative_to(out).as_posix() for p in found) == [
        "cells.html",
        "compare.html",
        "explain.html",
        "glossary.html",
        "index.html",
        "lengths.html",
        "prune-x/prune.html",
        "sweeps.html",
        "table3_a-budget.html",
        "table3_a.html",
    ]
    assert not any(found.values()), found
    assert unrecorded == [] and (out / "table3_a-bleu.ticks.json").is_file()
    # a reader is told what a change was about, never the number of the ticket that asked for it
    said = [
        f"{f.name}: {m}" for f in out.rglob("*.*") if f.suffix in (".html", ".md") for m in ISSUE.findall(f.read_text())
    ]
    assert said == []


ISSUE = re.compile(r"\bissues? #?\d+", re.I)


class Killed(BaseException):
    """What a kill looks like to the writer: nothing after it runs (not an Exception a handler would catch)."""


def test_a_report_killed_while_writing_leaves_every_previous_page_and_figure_whole(tmp_path, monkeypatch):
    from headsweep.data import files
    from headsweep.reporting import plots

    data, root, out = references(tmp_path), tmp_path / "results", tmp_path / "reports"
    table3_a(root, data)
    assert B.main(["--sweep", "table3_a", "--root", str(root), "--out", str(out), "--samples", "50"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert {"table3_a.md", "table3_a.html", "index.html", "table3_a-bleu.png"} <= set(before)

    real_fdopen = files.os.fdopen

    def half_then_killed(fd, *args, **kwargs):  # every page write stops half-way through its text
        f = real_fdopen(fd, *args, **kwargs)

        class Half:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                f.close()

            def write(self, text):
                f.write(text[: len(text) // 2])
                f.flush()
                raise Killed

        return Half()

    def no_rename(*args):  # a figure is drawn in full, then the process dies before it is put in place
        raise Killed

    def pages(folder):
        return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and not p.name.endswith(".tmp")}

    edit_results(next(p for p in (root / "table3_a").iterdir()), lambda r: r["metrics"].update({"test/bleu": 1.0}))
    with monkeypatch.context() as m:  # killed while writing the first page
        m.setattr(files.os, "fdopen", half_then_killed)
        with pytest.raises(Killed):
            R.write_report("table3_a", root, out, n_samples=50)
    after = pages(out)
    figure = (".png", ".ticks.json")  # drawn before the pages, so new in `after`: the second kill is theirs
    assert {k: after[k] for k in before if not k.endswith(figure)} == {
        k: v for k, v in before.items() if not k.endswith(figure)
    }
    edit_results(next(p for p in (root / "table3_a").iterdir()), lambda r: r["metrics"].update({"test/bleu": 50.0}))
    with monkeypatch.context() as m:  # killed while putting the first figure in place
        m.setattr(plots.os, "replace", no_rename)
        with pytest.raises(Killed):
            R.write_report("table3_a", root, out, n_samples=50)
    assert pages(out) == after  # every page and figure as it was
    assert not any(p.name.endswith(".tmp") for p in out.iterdir() if not p.name.startswith("."))


def test_the_reproduce_line_gives_a_cells_extra_seed_its_own_command(tmp_path):
    # heads_identical's base has a 4th seed (the run with the head-similarity log): "SEEDS=4" alone would also
    # train a 4th seed of every other cell
    data = references(tmp_path)
    root = tmp_path / "results"
    table3_a(root, data)
    make_run(root / "table3_a", data, 8, 3, 31.0, CELLS[8]["hyps"])
    out = tmp_path / "reports"
    assert B.main(["--sweep", "table3_a", "--root", str(root), "--out", str(out), "--samples", "50"]) == 0
    line = next(x for x in (out / "table3_a.md").read_text().splitlines() if x.startswith("- **Reproduce:**"))
    assert line == (
        "- **Reproduce:** `make sweep SWEEP=table3_a SEEDS=2 BUDGET=ablation`, then "
        "`make sweep SWEEP=table3_a SEEDS=3 BUDGET=ablation ONLY='h8-dk32-dv32-s3'`"
    )


def test_every_sweep_page_opens_with_its_question_protocol_command_and_banner(tmp_path, capsys, bf16_cpu):
    data = references(tmp_path)
    root = tmp_path / "results"
    sweep = table3_a(root, data)
    out = tmp_path / "reports"
    assert B.main(["--sweep", "table3_a", "--root", str(root), "--out", str(out), "--samples", "50"]) == 0
    md = (out / "table3_a.md").read_text()
    top = md.split("\n- 5 runs")[0]  # what the page says before its notes
    assert "- **Question:** [Table 3 row A: how many heads" in top and "(../index.md" not in top
    assert "(index.md#q-row_a)" in top
    assert "- **Protocol:** d_model 256; N 3; d_ff 1024; 800 steps; precision bf16-mixed; device CPU" in top
    assert "peak rate 2e-3, common to every cell" in top
    assert "- **Reproduce:** `make sweep SWEEP=table3_a SEEDS=2 BUDGET=ablation`" in top
    assert (
        "table3_a_h200 (H200, bf16" in top and "; no page yet)" in top
    )  # its other page, not written here  # the same question's other page, not written here
    assert "- **Contents:** [What the numbers say](#what-the-numbers-say)" in top
    html = (out / "table3_a.html").read_text()
    assert '<h2 id="what-the-numbers-say">' in html

    # a run whose protocol cannot be read: one line, and no page of that sweep written at all
    capsys.readouterr()
    for run in sweep.iterdir():
        edit_results(run, lambda r: r["config"]["module"].pop("warmup_steps"))
    shutil.rmtree(out)
    assert B.main(["--sweep", "table3_a", "--root", str(root), "--out", str(out), "--samples", "50"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the protocol cannot be read from run" in err[0] and "module.warmup_steps" in err[0]
    assert not out.exists() or not list(out.iterdir())


def test_a_superseded_page_opens_with_a_banner_linking_what_replaced_it(tmp_path):
    from headsweep.reports.site import questions as Q

    questions = Q.load()
    out = tmp_path / "reports"
    out.mkdir()
    for page in ("kv_heads_init", "kv_heads_lr"):
        (out / f"{page}.md").write_text(f"# {page}\n")
    (banner,) = [line for line in Q.banner(questions, "kv_heads", out) if line]
    assert banner.startswith("> **Earlier protocol, superseded by [kv_heads_init](kv_heads_init.md)**")
    assert "[kv_heads_lr](kv_heads_lr.md), the current answer" in banner


def test_a_sweeps_edge_sits_on_its_line_and_an_edge_alone_keeps_its_own():
    """The index lists a grid-edge sweep (<sweep>_edge) on its sweep's line, linked; without its sweep among the
    question's, on a line of its own."""
    from headsweep.reports.site.index import with_edges

    def rec(name, runs):
        return {
            "sweep": name,
            "title": f"{name}: t",
            "page": f"{name}.html",
            "runs": runs,
            "cells": [{}],
            "left_out": [],
        }

    both = with_edges([rec("a", 9), rec("a_edge", 3), rec("b_edge", 2)], {}, {}, {})
    assert len(both) == 2
    assert both[0].startswith("- [a](a.md") and both[0].endswith('; [edge](a_edge.md "a_edge: t"): 3 runs')
    assert both[1].startswith("- [b_edge](b_edge.md") and "; [edge]" not in both[1]


def test_grid_only_sweeps_are_no_unreported_sweeps_and_an_edge_sits_on_its_sweeps_line(tmp_path):
    """A sweep of learning-rate grid runs only gets no page (`make report` refuses it, PhaseOneOnly): the sweeps
    page must not ask for one. An edge (<sweep>_edge) sits on its sweep's line, read on that page; another grid is
    named with its runs; a sweep with cells and no page still waits for its report."""
    data = references(tmp_path)
    root = tmp_path / "results"
    table3_a(root, data)
    heads_specialise(root, data)
    grid = {"phase": "grid", "grid": [0.001, 0.002, 0.004], "select_on": "val/loss"}
    for name, runs in (("table3_a_edge", 1), ("rates", 2)):
        for seed in range(1, runs + 1):
            run = make_run(root / name, data, 8, seed, 30.0, CELLS[8]["hyps"])
            edit_results(run, lambda r, name=name: r["config"].update(sweep=name, lr_select=grid))
    with pytest.raises(R.PhaseOneOnly):
        R.write_report("rates", root, tmp_path / "x", n_samples=20)
    out = tmp_path / "reports"
    assert B.main(["--sweep", "table3_a", "--root", str(root), "--out", str(out), "--samples", "50"]) == 0
    sweeps = (out / "sweeps.md").read_text()
    line = next(line for line in sweeps.splitlines() if line.lstrip().startswith("- [table3_a]"))
    assert line.endswith("; edge: 1 grid run past its grid (read on this page; `table3_a_edge`)")
    waiting = next(line for line in sweeps.splitlines() if "Runs but no report yet" in line)
    assert waiting.endswith(": heads_specialise")  # cells, no page: it waits; the grids do not
    grids = next(line for line in sweeps.splitlines() if "grid runs only" in line)
    assert grids.endswith(": rates (2 runs)")
    assert "1 with runs but no report yet" in (out / "index.md").read_text()


def test_a_views_about_block_is_the_same_on_a_fresh_page_and_on_one_rendered_before():
    """A view builder writes its page fresh, the index adds the block after; the next index replaces it. Both
    must give the same page (once: a blank line more on the fresh one), and no block leaves the heading whole."""
    from headsweep.reports.site.index import with_about

    fresh = "[← all reports](index.md)\n\n# A view\n\nFirst paragraph.\n\n## Part\n\ntext\n"
    once = with_about(fresh, ["- **Question:** q"])
    assert once == with_about(once, ["- **Question:** q"])
    assert "# A view\n\n<!-- about:begin -->\n\n- **Question:** q\n\n<!-- about:end -->\n\nFirst paragraph." in once
    assert with_about(once, []) == fresh
