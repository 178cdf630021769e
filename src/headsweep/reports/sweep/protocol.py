"""What a sweep's page states at its top, read from its runs' results.json alone: the protocol (d_model, N,
d_ff, steps, precision, device, init, peak rate, schedule) and the `make sweep` command that reproduces it.
A setting common to every cell is stated once; one that differs is listed per cell. A run that does not
record a setting the protocol needs fails the page in one line (ReportError) before anything is written:
a page that cannot say how its numbers were made is not written at all."""

from __future__ import annotations

from headsweep.reports.sweep.cells import Cell, ReportError, Run
from headsweep.sweeps.specs import SweepError, sweep_names

# (the words, the dotted key of the run's config): each must be recorded by every run
NEEDED = (
    ("d_model", "model.d_model"),
    ("N", "model.n_layers"),
    ("d_ff", "model.d_ff"),
    ("steps", "trainer.max_steps"),
    ("precision", "trainer.precision"),
    ("device", "trainer.accelerator"),
    ("init", "model.init"),
    ("peak rate", "module.peak_lr"),
    ("warm-up", "module.warmup_steps"),
    ("schedule", "module.schedule"),
)


def config_value(run: Run, key: str):
    """A setting of the run as it trained: its config's value, or for a setting added since the run was made
    the old behaviour it ran with (store.ADDED_SETTINGS, which run.flat carries: model.init xavier before
    issue 42); KeyError where the run records neither."""
    if key in run.flat:
        return run.flat[key]
    here = run.results["config"]
    for part in key.split("."):
        if not isinstance(here, dict) or part not in here:
            raise KeyError(key)
        here = here[part]
    return here


def rate_text(v) -> str:
    """A peak rate in one format everywhere: 2e-3, 5e-4, 1.5e-3."""
    if not isinstance(v, (int, float)):
        return str(v)
    mantissa, exponent = f"{v:.2e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def device_text(runs: list[Run]) -> str:
    """CPU or the GPU's name, from what the runs recorded of their machine."""
    names = set()
    for r in runs:
        machine = r.results.get("machine") or {}
        accel = config_value(r, "trainer.accelerator")
        gpu = machine.get("gpu")
        names.add(
            str(gpu)
            if gpu and accel in ("gpu", "cuda", "auto")
            else f"CPU ({machine['cpu_class']})"
            if machine.get("cpu_class")
            else "CPU"  # a run from before results.json named its machine
        )
    return " / ".join(sorted(names))


def per_cell(cells: list[Cell], key: str, show=str, name_cells: bool = False) -> str:
    """A setting's value if every cell has the same; else each value with how many cells have it (a size: the
    cells' names and the table show which), or with the cells that have it (name_cells: a peak rate)."""
    by_value: dict[str, list[str]] = {}
    for c in cells:
        by_value.setdefault(show(config_value(c.runs[0], key)), []).append(c.label)
    if len(by_value) == 1:
        return next(iter(by_value))
    if name_cells:
        return "per cell: " + "; ".join(f"{v} ({', '.join(labels)})" for v, labels in by_value.items())
    return "per cell: " + ", ".join(
        f"{v} ({len(labels)} cell{'s' * (len(labels) > 1)})" for v, labels in by_value.items()
    )


def check(sweep: str, runs: list[Run]) -> None:
    """Every setting the protocol states is in every run, or one line naming the first missing."""
    for r in runs:
        for words, key in NEEDED:
            try:
                config_value(r, key)
            except KeyError:
                raise ReportError(
                    f"{sweep}: the protocol cannot be read from run {r.dir.name}: its results.json has no "
                    f"{key} ({words}); report it with a results.json written by `make sweep`"
                ) from None


def protocol_lines(sweep: str, cells: list[Cell], grid_runs: list[Run]) -> list[str]:
    """The protocol, one bullet, and the reproducing command, another."""
    runs = [r for c in cells for r in c.runs]
    check(sweep, runs + grid_runs)
    first = runs[0]
    grid = sorted({config_value(r, "module.peak_lr") for r in grid_runs})
    if grid:
        rate = (
            f"each cell's own, chosen from {', '.join(map(rate_text, grid))} by seed 1's final val loss "
            f"({per_cell(cells, 'module.peak_lr', rate_text, name_cells=True)})"
        )
    else:
        rate = per_cell(cells, "module.peak_lr", rate_text, name_cells=True)
        rate = rate if rate.startswith("per cell") else f"{rate}, common to every cell"
    decay_by = str(first.flat.get("module.decay_by") or "steps")
    schedule = (
        f"linear warm-up over {config_value(first, 'module.warmup_steps')} steps, then "
        f"{per_cell(cells, 'module.schedule')} decay by {decay_by.replace('_', ' ')}"
    )
    parts = [
        f"d_model {per_cell(cells, 'model.d_model')}",
        f"N {per_cell(cells, 'model.n_layers')}",
        f"d_ff {per_cell(cells, 'model.d_ff')}",
        f"{per_cell(cells, 'trainer.max_steps')} steps",
        f"precision {per_cell(cells, 'trainer.precision')}",
        f"device {device_text(runs)}",
        f"init {per_cell(cells, 'model.init')}",
        start_words(cells),
        f"peak rate {rate}",
        f"schedule: {schedule}",
    ]
    return [f"- **Protocol:** {'; '.join(parts)}.", f"- **Reproduce:** {command(sweep, cells, grid)}"]


def start_words(cells: list[Cell]) -> str:
    """The residual outputs' starting scale (model.residual_init): W^O's and W_2's init gains, and muP's W^O."""
    gain = lambda v: f"{v:.3g}"  # noqa: E731  (0.707, not 0.7071067811865476)
    words = (
        f"residual outputs' init gain W^O {per_cell(cells, 'model.init_wo_gain', gain)}, "
        f"W_2 {per_cell(cells, 'model.init_ff2_gain', gain)}"
    )
    mup = any(r.flat.get("model.init_wo", "fan_in") == "mup" for c in cells for r in c.runs)
    return words + (f" (W^O {per_cell(cells, 'model.init_wo')}: muP's std x sqrt(base / fan-in))" if mup else "")


def protocol_start() -> tuple[float, float]:
    """The protocol's starting scale today: conf/model's default W^O and W_2 gains (TransformerConfig's, which a
    test holds equal to conf/)."""
    from dataclasses import fields

    from headsweep.model import TransformerConfig

    defaults = {f.name: f.default for f in fields(TransformerConfig)}
    return float(defaults["init_wo_gain"]), float(defaults["init_ff2_gain"])


def start_banner(cells: list[Cell]) -> list[str]:
    """Atop a page whose every run started its residual outputs at gain 1 while the protocol's default is now
    another gain: its answers were read under the earlier, slower start, and have not been re-run."""
    wo, ff2 = protocol_start()
    if (wo, ff2) == (1.0, 1.0):
        return []
    runs = [r for c in cells for r in c.runs]
    if not all(
        r.flat.get("model.init_wo_gain", 1.0) == 1.0 and r.flat.get("model.init_ff2_gain", 1.0) == 1.0 for r in runs
    ):
        return []
    return [
        f"> **Earlier starting scale.** Every run here started W^O and the FFN's W_2 at gain 1 (as drawn); the "
        f"protocol now starts them at {wo:.3g} and {ff2:.3g}, chosen on the base's validation loss (a post-norm "
        "base trains faster from it: [the question](index.md#q-init_scale), [docs/init.md](../docs/init.md)). "
        "These answers were read under the slower start and have not been re-run.",
        "",
    ]


def command(sweep: str, cells: list[Cell], grid: list[float]) -> str:
    """The make sweep command that runs these jobs again (finished ones are skipped): the spec, the sweep's
    own name where it is not the spec's (a device's run, NAME=), the seeds, the learning-rate grid."""
    try:
        names = sweep_names()
    except SweepError:
        names = {}
    spec = sweep if sweep in names else max((n for n in names if sweep.startswith(n + "_")), key=len, default=sweep)
    # The seeds at least half the cells have; a cell with more (a base given an extra seed for a new log) gets its own
    # command, so the first does not train that seed of every other cell too.
    counts = [len({r.seed for r in c.runs}) for c in cells]
    seeds = max(n for n in counts if 2 * sum(k >= n for k in counts) >= len(counts))  # what half the cells have
    words = [f"make sweep SWEEP={spec}"]
    if spec != sweep:
        words.append(f"NAME={sweep}")
    words += [f"SEEDS={seeds}", "BUDGET=ablation"]
    if grid:
        words.append(f"LR_GRID={','.join(map(rate_text, grid))}")
    text = f"`{' '.join(words)}`"
    extra = sorted({r.dir.name for c in cells for r in c.runs if r.seed > seeds})
    if extra:
        top = max(r.seed for c in cells for r in c.runs)
        more = [f"SEEDS={top}" if w.startswith("SEEDS=") else w for w in words]
        text += f", then `{' '.join(more)} ONLY='{','.join(extra)}'`"
    if any(config_value(c.runs[0], "trainer.accelerator") in ("gpu", "cuda") for c in cells):
        text += " on a machine whose torch sees CUDA (`make sweep` then trains with trainer=gpu)"
    if spec not in names:
        text += f" (no spec named {spec} in sweeps/ on this checkout)"
    return text
