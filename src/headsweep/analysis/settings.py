"""The head analysis's settings, one object: filled by Hydra from `analysis=default` (conf/analysis/
default.yaml, after training) or by `make analyze`'s command line, whose defaults are that same file."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from headsweep.config import option
from headsweep.schema import integer, items, number, text


class AnalysisError(ValueError):
    """A bad argument for the analysis; the message says what to pass instead."""


# What each setting of conf/analysis/ may hold, checked with the rest of the config before anything is read
# (training.schema); AnalysisSettings checks its own for `make analyze`'s command line.
ANALYSIS_SETTINGS = {
    "split": text(pattern=r"\S+", pattern_text="a split name"),
    "max_sentences": integer(0, 10**6),
    "random_orders": integer(0, 1000),
    "step": number(0.0, 1.0, lo_open=True, fix="e.g. analysis.step=0.2"),
    "sentences": items(),
    "pos_threshold": number(0.0, 1.0),
    "rare_threshold": number(0.0, 1.0),
    "tolerance": number(0.0, 100.0),
    "seed": integer(0, 2**32 - 1),
    "redundancy_threshold": number(0.0, 1.0),
}


@dataclass(frozen=True)
class AnalysisSettings:
    """What the keys mean: conf/analysis/default.yaml and `python -m headsweep.analysis.analyze --help`."""

    split: str
    max_sentences: int
    random_orders: int
    step: float
    sentences: tuple[str, ...]
    pos_threshold: float
    rare_threshold: float
    tolerance: float
    seed: int
    redundancy_threshold: float

    def __post_init__(self):
        object.__setattr__(self, "sentences", tuple(str(s) for s in self.sentences))
        if not 0 < self.step <= 1:
            raise AnalysisError(f"--step must be in (0, 1], got {self.step}")
        if self.random_orders < 0 or self.max_sentences < 0:
            raise AnalysisError("--random-orders and --max-sentences must be >= 0")
        for name in ("pos_threshold", "rare_threshold", "redundancy_threshold"):
            if not 0 <= getattr(self, name) <= 1:
                raise AnalysisError(f"--{name.replace('_', '-')} must be in [0, 1], got {getattr(self, name)}")

    @classmethod
    def defaults(cls, **changes) -> AnalysisSettings:
        """conf/analysis/default.yaml, with `changes`."""
        values = option("analysis")
        if unknown := set(values) ^ {f.name for f in dataclasses.fields(cls)}:
            raise AnalysisError(f"conf/analysis/default.yaml and AnalysisSettings disagree on {sorted(unknown)}")
        return cls(**{**values, **changes})

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)
