"""The numbers of a sweep's page, apart from its writing (page.py): each cell's numbers and its paper row, the
reference each cell is compared with, the early-loss pool the stuck threshold is chosen from, the summary (Δ BLEU
with its Welch interval over seeds, Holm across the cells, the paired bootstrap as test-set noise), the ranking's
stability across seeds and the verdict lines (significance: Table 3's rule)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from headsweep.identity import COLUMNS, follows_width
from headsweep.reporting.stats import mean_sd, ranking_agreement
from headsweep.reports.site.experiments import run_identity
from headsweep.reports.sweep import stuck as report_stuck
from headsweep.reports.sweep.cells import Cell, Run, group_cells, learning_curve, load_runs, varied_keys
from headsweep.reports.sweep.lr import split_grid_runs
from headsweep.reports.sweep.per_length import LENGTH, length_of, same_length
from headsweep.reports.sweep.significance import holm_verdicts, paired_bootstrap, seed_comparison, verdict_line
from headsweep.reports.sweep.table import display
from headsweep.sizes import attention_flops, flops_context
from headsweep.store import RUNS, stopped_short
from headsweep.sweeps.paper import table3

SIZES = ("N", "d_model", "d_ff", "d_k", "d_v")  # compared with the paper relative to the base cell
SCALE = ("N", "d_model", "d_ff")  # a model size; a cell of another size is compared with the base scaled to it
# another task length (sentence pairs per example): a cell at another length is compared with the base at its length
METRICS = (
    ("val_ppl", "val/ppl"),
    ("val_bleu", "val/bleu"),
    ("test_bleu", "test/bleu"),
    ("test_chrf", "test/chrf"),
    ("test_ppl", "test/ppl"),
)


def settings(flat: dict) -> dict:
    """A run's Table 3 columns."""
    s = {col: flat[key] for key, col in COLUMNS.items()}
    s["pos"] = "learned" if s["pos"] == "learned" else "sinusoid"
    return s


def paper_row(ours: dict, base: dict | None, rows: list[dict]) -> dict | None:
    """The Table 3 row with the same settings, sizes compared relative to the base cell (a small model's
    d_model 128 at a base of 256 is the paper's 256 at its base of 512)."""
    paper_base = next(r for r in rows if r["row"] == "base")
    want = {k: (v * paper_base[k] / base[k] if base and k in SIZES else v) for k, v in ours.items()}
    for row in rows:
        if row["row"] == "big":
            continue
        if all(abs(row[k] - v) < 1e-6 if isinstance(v, (int, float)) else row[k] == v for k, v in want.items()):
            return row
    return None


# ----------------------------------------------------------------------------- the numbers


def compile_setting(config: dict) -> str:
    """How a run's model was compiled: a `compile` key of module or trainer (newer runs), else eager."""
    for where in (config.get("module") or {}, config.get("trainer") or {}, config):
        if "compile" in where:
            value = where["compile"]
            return (
                "eager (not compiled)"
                if value in (None, False)
                else "compiled"
                if value is True
                else f"compiled ({value})"
            )
    return "eager (not compiled)"


def cell_numbers(c: Cell) -> dict:
    """What a cell is and scores, seeds pooled, before any comparison with the base."""
    first = c.runs[0]
    flops = attention_flops(first.results["config"]["model"], flops_context(first.results["config"]))
    row = {
        **settings(first.flat),
        "params_M": first.results["params"]["total"] / 1e6,
        "params": dict(first.results["params"]),
        "attn_mflops": flops["attention_per_token"] / 1e6,
        "flops_context": flops["context"],
        "n": len(c.runs),
        "seeds": [r.seed for r in c.runs],
        "steps": statistics.fmean(r.results["metrics"].get("train/steps", 0) for r in c.runs),
        "max_steps": first.results["config"]["trainer"]["max_steps"],
        "stopped_short": [f"seed {r.seed}: {why}" for r in c.runs if (why := stopped_short(r.results))],
        "precision": " / ".join(sorted({str(r.results["config"]["trainer"].get("precision")) for r in c.runs})),
        "compile": " / ".join(sorted({compile_setting(r.results["config"]) for r in c.runs})),
        "test_bleu_seeds": c.values("test/bleu"),
    }
    for name, metric in METRICS:
        row[name], row[name + "_sd"] = mean_sd(c.values(metric))
    return row


def scaled_settings(c: Cell, other_keys: list[str]) -> tuple:
    """A cell's settings with its size and length taken out: d_k and d_v relative to d_model, the rest as they
    are (other_keys: the off-table varied settings, those that follow the length left out by free_keys)."""
    flat = c.runs[0].flat
    s = settings(flat)
    rest = sorted((k, repr(v)) for k, v in s.items() if k not in (*SCALE, "d_k", "d_v"))
    return (s["d_k"] / s["d_model"], s["d_v"] / s["d_model"], *rest, *(repr(flat.get(k)) for k in other_keys))


def stratum(c: Cell) -> tuple:
    """What a cell is compared within: its model size (N, d_model, d_ff) and its length (data.join; runs from
    before the setting joined nothing)."""
    flat = c.runs[0].flat
    return (*(settings(flat)[k] for k in SCALE), flat.get(LENGTH, 1))


def free_keys(cells: list[Cell], other_keys: list[str]) -> list[str]:
    """The off-table varied settings a cell is matched on across strata: not the length, nor a setting that
    takes one value per length (data.max_len, raised with data.join by the lengths sweep)."""
    if LENGTH not in other_keys:
        return other_keys
    per_length: dict[str, dict] = {}
    for c in cells:
        for k in other_keys:
            per_length.setdefault(k, {}).setdefault(c.runs[0].flat.get(LENGTH, 1), set()).add(
                repr(c.runs[0].flat.get(k))
            )
    return [k for k in other_keys if k != LENGTH and any(len(v) > 1 for v in per_length[k].values())]


def reference(c: Cell, cells: list[Cell], base: Cell | None, other_keys: list[str]) -> Cell | None:
    """What a cell is compared with: the base, but a cell of another model size (N, d_model, d_ff) or length
    (data.join) is compared with the base at its size and length (the same h, d_k / d_model, d_v / d_model
    and other settings: heads_by_width's h = 8 at d_model 512, lengths' h = 8 at join 8) where the sweep has
    that cell; that cell itself with the base at a size, with nothing at a length (None, as the base: BLEU
    over joined segments is another test set). Row A's question at each width or length is which h is best
    there, not how a wider model or a longer task compares with the base's."""
    if base is None or c is base:
        return None
    if stratum(c) == stratum(base):
        return base
    free = free_keys(cells, other_keys)
    like_base = scaled_settings(base, free)
    found = next(
        (o for o in cells if o is not c and stratum(o) == stratum(c) and scaled_settings(o, free) == like_base), None
    )
    if found is None and stratum(c)[-1] != stratum(base)[-1]:
        return None  # the base at another length: another test set (joined segments), so no Δ across lengths
    return found or base


def reference_words(ref: Cell, base: Cell) -> str:
    """'the base at its size', '... at its length' or '... at its size and length': how ref stands for the base."""
    (*size, length), (*base_size, base_length) = stratum(ref), stratum(base)
    return "the base at its " + " and ".join(["size"] * (size != base_size) + ["length"] * (length != base_length))


def off_table_keys(cells: list[Cell], base: Cell | None) -> list[str]:
    """The varied settings Table 3 has no column for (head dropout, say): a cell that differs from the base in
    one has no paper row, even when its Table 3 columns equal the base's."""
    flats = [r.flat for c in cells for r in c.runs]
    return (
        [k for k in varied_keys(cells) if k not in COLUMNS and not follows_width(k, flats)]
        if base and len(cells) > 1
        else []
    )


def early_references(cells: list[Cell]) -> dict[str, Cell]:
    """Each cell's reference for early val loss (report_stuck): the base, or the base at the cell's model size
    and length where the sweep has it (the cell `reference` compares it with), that cell itself included; with
    no cell tagged base, the first cell stands in."""
    base = next((c for c in cells if c.base), cells[0])
    other_keys = off_table_keys(cells, base)
    free = free_keys(cells, other_keys)
    like_base = scaled_settings(base, free)
    refs = {}
    for c in cells:
        if c is not base and stratum(c) != stratum(base) and scaled_settings(c, free) == like_base:
            refs[c.label] = c  # the base at its size and length: its own runs set the normal early loss there
        else:
            refs[c.label] = reference(c, cells, base, other_keys) or base
    return refs


def early_of(cells: list[Cell], grid_runs: list[Run], refs: dict[str, Cell] | None = None) -> dict:
    """Each run's Early as this sweep reads it (report_stuck.early_losses): against its reference at its own rate,
    a size's own reference also against the base net of its final gap. refs: early_references(cells), if at hand."""
    refs = early_references(cells) if refs is None else refs
    return report_stuck.early_losses(
        cells, report_stuck.same_rate_references(cells, refs, grid_runs), report_stuck.size_bases(cells, grid_runs)
    )


def early_pool(root: Path, sweeps: list[str] | None = None) -> dict:
    """What the stuck-run threshold is chosen from: the early excess of every distinct run of every sweep
    under root (or of `sweeps`) but a learning-rate grid's, a run copied into several sweeps once (the same seed,
    early val loss and test BLEU); the base runs' (runs of a cell that is its own reference) apart; early loss and
    test BLEU. Of every sweep under root, with the calibration sweeps' own pool ("calibration", the threshold's:
    report_stuck's docstring) where root holds them all, from the same reading of their runs. And "early": each
    run's one Early (report_index.run_identity -> Early), the one every page that shows the run flags it by, so a
    run flagged on one page is flagged on every page (stuck_runs)."""
    names = sweeps_in(root) if sweeps is None else list(sweeps)
    read = {sweep: sweep_early_entries(root, sweep) for sweep in names}
    entries = {sweep: got["entries"] for sweep, got in read.items()}
    pool = pooled(entries, names)
    calibration = list(report_stuck.CALIBRATION_SWEEPS)
    if sweeps is None and all(s in entries for s in calibration):
        pool["calibration"] = pooled(entries, calibration)
    # one reference per run: its home sweep's reading (the sweep that trained it, beside its own base at its rate),
    # else, where the home reads it as no seed of a cell (a grid run there), the first sweep by name
    pool["early"], pool["early_sweep"] = {}, {}  # the sweep whose reading it is: a page of another names it
    for sweep in names:
        for identity, (home, e) in read[sweep]["early"].items():
            if home == sweep or identity not in pool["early"]:
                pool["early"][identity], pool["early_sweep"][identity] = e, sweep
    return pool


def sweep_early_entries(root: Path, sweep: str) -> dict:
    """One sweep's pooled runs: {"entries": [((seed, early loss, test BLEU), (name, excess, is a base run, early
    loss, BLEU))], "early": {run identity: (its home sweep, Early)}}."""
    # a learning-rate grid's runs start slowly at a small rate by design: no seeds of a cell, not pooled
    runs, grid_runs = split_grid_runs(load_runs(root / sweep, sweep)[0])
    if not runs:
        return {"entries": [], "early": {}}
    cells = group_cells(runs)
    refs = early_references(cells)
    early = early_of(cells, grid_runs, refs)
    out, by_run = [], {}
    for c in cells:
        for r in c.runs:
            if r.dir in early:
                e, bleu = early[r.dir], r.results["metrics"]["test/bleu"]
                out.append(
                    ((r.seed, e.loss, bleu), (f"{sweep}/{r.dir.name}", e.excess, refs[c.label] is c, e.loss, bleu))
                )
                home = (r.results.get("shared_from") or {}).get("sweep") or sweep
                by_run[run_identity(r)] = (home, e)
    return {"entries": out, "early": by_run}


def pooled(entries: dict[str, list], names: list[str]) -> dict:
    """The pool of the named sweeps' entries, a run several of them show once (the first sweep's view)."""
    seen: dict[tuple, tuple[str, float, bool, float, float]] = {}
    used = set()
    for sweep in names:
        for key, value in entries[sweep]:
            seen.setdefault(key, value)
            used.add(sweep)
    values = list(seen.values())
    return {
        "runs": [v[0] for v in values],
        "excesses": [v[1] for v in values],
        "base_excesses": [v[1] for v in values if v[2]],
        "pairs": [(v[3], v[4]) for v in values],
        "n_sweeps": len(used),
    }


def pooled_threshold(pool: dict) -> report_stuck.Threshold:
    """The stuck threshold chosen by report_stuck's rule: on the calibration sweeps' runs where the pool has
    them, else on every pooled run."""
    chosen = pool.get("calibration") or pool
    return report_stuck.choose_threshold(
        chosen["excesses"], chosen["base_excesses"], chosen["n_sweeps"], calibration="calibration" in pool
    )


def summarize(cells: list[Cell], n_samples: int = 1000) -> dict:
    """Fill each cell's row; return what the report says around the table."""
    base = next((c for c in cells if c.base), None)
    rows = table3()
    paper_base = next(r for r in rows if r["row"] == "base")
    for c in cells:
        c.row.update(cell_numbers(c))
    signature = None
    floor = 1 / (n_samples + 1)  # sacreBLEU's p = (resamples favouring the base + 1) / (n + 1)
    other_keys = off_table_keys(cells, base)
    for c in cells:
        row = c.row
        ref = reference(c, cells, base, other_keys)
        row.update(
            delta=None,
            interval=None,
            p_welch=None,
            n_base=None,
            cross_class=None,
            p_bootstrap=None,
            p_bootstrap_note=None,
            against=None if ref is None or ref is base else ref.label,
            against_words=None if ref is None or ref is base else reference_words(ref, base),
            own_base=ref is None and c is not base,  # the base at another length: compared with nothing
        )
        if ref is not None:
            row.update(seed_comparison(ref, c))  # the verdict's numbers: over seeds, within one machine class
            test = paired_bootstrap(ref, c, n_samples)  # test-set noise within a seed: no verdict
            row["p_bootstrap"], row["p_bootstrap_note"] = test["p"], test.get("note")
            signature = test.get("signature") or signature
        row["p_bootstrap_bound"] = row["p_bootstrap"] is not None and row["p_bootstrap"] <= floor * (1 + 1e-9)
        off_table = length_of(c) != 1 or (
            base is not None and any(c.runs[0].flat.get(k) != base.runs[0].flat.get(k) for k in other_keys)
        )
        # sizes relative to what the cell is compared with: h = 32 at d_model 512 is row A's h = 32 (d_k 16)
        scale = settings((ref if ref is not None and ref is not base else base or c).runs[0].flat) if base else None
        paper = None if off_table else paper_row(settings(c.runs[0].flat), scale, rows)
        row["paper"] = paper
        row["paper_delta"] = paper["dev_bleu"] - paper_base["dev_bleu"] if paper and paper is not paper_base else None
    holm_verdicts([c.row for c in cells])  # Holm over the Welch p-values of the page's cells
    return {
        "base": base,
        "signature": signature,
        "ranking": ranking_stability(same_length(cells, base)),  # one length's order: BLEU by length differs
        "n_samples": n_samples,
        "other_keys": other_keys,
    }


def ranking_stability(cells: list[Cell]) -> dict | None:
    """Kendall's tau between the cells' mean val BLEU at the validation nearest half the budget and at the
    end: does a cell that ends worse only learn slower, or is it worse throughout?"""
    curves = [[learning_curve(r) for r in c.runs] for c in cells]
    steps = set.intersection(*[{s for curve in cs for s, v in curve.items() if "val/bleu" in v} for cs in curves])
    if len(cells) < 2 or len(steps) < 2:
        return None
    last = max(steps)
    half = min(steps, key=lambda s: abs(s - last / 2))
    at = lambda step: [statistics.fmean(curve[step]["val/bleu"] for curve in cs if step in curve) for cs in curves]  # noqa: E731
    early, late = at(half), at(last)
    return {
        "half_step": half,
        "last_step": last,
        "tau": ranking_agreement(early, late),
        "order_half": [c.label for _, c in sorted(zip(early, cells), key=lambda t: -t[0])],
        "order_last": [c.label for _, c in sorted(zip(late, cells), key=lambda t: -t[0])],
    }


def verdicts(cells: list[Cell]) -> list[str]:
    """Each compared cell against its reference in words, by Table 3's rule (significance.holm_verdicts): better
    or worse with the Welch interval, Welch p and Holm p where Holm p < 0.05, else inconclusive."""
    lines = []
    for c in cells:
        r = c.row
        if c.base or (r["delta"] is None and not r.get("cross_class")):
            continue
        ref = f"{r['against']} ({r['against_words']})" if r.get("against") else "the base"
        lines.append(verdict_line(display(c), ref, r))
    return lines


def ranking_words(ranking: dict | None, cells: list[Cell]) -> list[str]:
    if not ranking or ranking["tau"] is None:
        return []
    name = {c.label: display(c) for c in cells}
    order = lambda labels: ", ".join(name[label] for label in labels)  # noqa: E731
    return [
        f"Ranking over training: Kendall's tau {ranking['tau']:.2f} between the cells' order by mean val BLEU at "
        f"step {ranking['half_step']} ({order(ranking['order_half'])}) and at step {ranking['last_step']} "
        f"({order(ranking['order_last'])}); 1 means the order was already settled at half the budget."
    ]


def budget_store(sweep_dir: Path) -> bool:
    """A sweep of `make budgets`' trunks and branches (its runs record budgets.role): one cell per budget of one
    trunk, read on the budgets page (`make budgets-report`), not as a sweep page of cells against a base."""
    for path in sorted(sweep_dir.glob("*/results.json"))[:1]:
        try:
            return bool((json.loads(path.read_text()).get("config") or {}).get("budgets", {}).get("role"))
        except (OSError, ValueError, AttributeError):
            return False
    return False


def sweeps_in(root: Path) -> list[str]:
    """The sweeps with a run under root (results/<sweep>/<run>/results.json; results/runs/ is the store, whose
    runs the sweeps show)."""
    return (
        sorted(d.name for d in root.iterdir() if d.is_dir() and d.name != RUNS and any(d.glob("*/results.json")))
        if root.is_dir()
        else []
    )
