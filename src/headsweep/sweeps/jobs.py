"""What a sweep is made of: its jobs (one training run each: a grid cell x a seed) and the sweep itself.
`planning.plan` builds them, `reuse` finds finished runs they can take over, `launch.run` runs the rest."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

from headsweep.store.pack import analysis_file
from headsweep.training.runs import is_complete


@dataclass
class Job:
    name: str  # run name and output directory, e.g. h8-dk32-dv32-s1
    cell: str  # the name without the seed, e.g. h8-dk32-dv32
    seed: int
    overrides: list[str]  # this job's grid values and seed, as command-line overrides
    tags: list[str]
    dir: Path
    base: bool = False
    export: Path | None = None  # results/<sweep>/<run name>: the job's view of its run in the store
    same_as: Path | None = None  # the store's run of this job's experiment (results/runs/<key>): shown, not trained
    analysis: dict | None = None  # the head analysis after training (conf/analysis), when the sweep runs one
    trained_as: Path | None = None  # a finished run of another sweep that trained this job's model

    def finished(self, run_dir: Path) -> bool:
        """Complete, and analysed where the job analyses its model: a run whose analysis was cut short
        runs again, and `train` finds it trained and only analyses it."""
        return is_complete(run_dir) and (self.analysis is None or analysis_file(run_dir) is not None)

    @property
    def done(self) -> bool:
        return self.finished(self.dir) or (self.export is not None and self.finished(self.export))

    def lr_select(self) -> dict | None:
        """The job's learning-rate selection (its `lr_select=` override: the grid, or the grid's choice), or
        None for a job of a sweep without a grid."""
        from hydra.core.override_parser.overrides_parser import OverridesParser

        o = next((o for o in self.overrides if o.startswith("lr_select=")), None)
        return None if o is None else OverridesParser.create().parse_override(o).value()


@dataclass
class Sweep:
    name: str
    spec_path: Path
    dir: Path  # multirun/<sweep>
    common: list[str]  # overrides of every job
    jobs: list[Job] = field(default_factory=list)
    threads: int | None = None  # torch threads per job (--jobs)
    only: list[str] = field(default_factory=list)  # globs on job names (--only); empty: every job
    on_gpu: bool = False  # its jobs train with trainer=gpu
    spec: str = ""  # the spec (or <spec>_<variant>) it was planned from; its name when NAME= is not given
    flats: dict[str, dict] = field(default_factory=dict)  # cell -> its composed flat settings (planning.compose_cell)

    def selects(self, job: Job) -> bool:
        return not self.only or any(fnmatch.fnmatchcase(job.name, g) for g in self.only)
