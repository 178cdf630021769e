"""What the tests share: where the Multi30k files are, and the overrides of a tiny training run."""

from pathlib import Path

import pytest

from headsweep.config import register_resolvers

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"Multi30k not found at {DATA}")
register_resolvers()


def tiny_overrides(out: Path, *extra: str) -> list[str]:
    """A run of a few seconds: the smoke experiment on 200 training pairs, a 300-subword vocabulary."""
    return [
        "experiment=smoke", f"paths.output_dir={out}", f"data.dir={DATA}", f"data.cache_dir={out.parent / 'cache'}",
        "data.limit_train=200", "data.limit_eval=40", "data.vocab_size=300", "data.max_tokens=1024",
        "trainer.max_steps=10", "module.warmup_steps=4", *extra,
    ]
