"""The shipped results travel: a GPU node takes the checkout only up to 64 MiB. Every stored run's outputs
(results/runs/<key>/) stay under store_pack.RUN_LIMIT_BYTES, with their hypotheses gzipped. A run over it
was exported or migrated without packing: `make migrate-results` packs it, numbers compared."""

import os
from pathlib import Path

import pytest

from headsweep.store import pack as store_pack

# HEADSWEEP_RESULTS: another results/ to check, e.g. a migrated copy (cp -a results /tmp/r; make
# migrate-results RESULTS=/tmp/r; HEADSWEEP_RESULTS=/tmp/r pytest tests/test_store_size.py)
RESULTS = Path(os.environ.get("HEADSWEEP_RESULTS") or Path(__file__).resolve().parents[1] / "results")
RUNS = store_pack.run_dirs(RESULTS)


@pytest.mark.skipif(not RUNS, reason=f"no stored runs in {RESULTS / 'runs'}")
def test_every_stored_run_is_under_the_size_limit_with_its_hypotheses_gzipped():
    over = store_pack.oversize(RESULTS)
    plain = [d.name for d in RUNS for p in (d / "hypotheses").glob("*") if not p.name.endswith(store_pack.GZ)]
    assert not over, (
        f"{len(over)} of {len(RUNS)} stored runs exceed {store_pack.RUN_LIMIT_BYTES / 1e6:.2f} MB, e.g. "
        f"{over[0][0]} ({over[0][1] / 1e6:.2f} MB): run `make migrate-results`"
    )
    assert not plain, f"{len(set(plain))} stored runs keep plain-text hypotheses, e.g. {plain[0]}: make migrate-results"


@pytest.mark.skipif(not RUNS, reason=f"no stored runs in {RESULTS / 'runs'}")
def test_every_stored_run_is_packed_and_the_store_fits_its_limit_on_disk():
    """Packed: no plain metrics.csv, no greedy hypotheses beside beam ones (store_pack.pack_dir); and the whole
    of results/ under RESULTS_LIMIT_BYTES as `du -s` counts it (blocks: many small files cost more than bytes)."""
    unpacked = [d.name for d in RUNS if store_pack.unpacked(d)]
    assert not unpacked, f"{len(unpacked)} stored runs are not packed, e.g. {unpacked[0]}: make migrate-results"
    disk = store_pack.disk_bytes(RESULTS)
    assert disk <= store_pack.RESULTS_LIMIT_BYTES, (
        f"{RESULTS}: {disk / 2**20:.1f} MiB on disk > {store_pack.RESULTS_LIMIT_BYTES / 2**20:.0f} MiB: the checkout "
        "no longer travels light; see store/pack.py for what is stored"
    )
