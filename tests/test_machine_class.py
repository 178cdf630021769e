"""A sweep's base on the class its cells ran on: `make sweep` plans it there, under an identity kept apart."""

import pytest
from omegaconf import OmegaConf

from conftest import stored_run
from headsweep.config import compose
from headsweep.machine import class_slug
from headsweep.store import experiment_key, flat_key
from headsweep.sweeps import classes as C
from headsweep.sweeps import planning as P
from headsweep.training.checks import ConfigError, check_devices

XEON = {"cpu": "Intel(R) Xeon(R) Processor", "cpu_class": "AVX512 + AMX (bf16 units)", "gpu": None}
EPYC = {"cpu": "AMD EPYC 9B14", "cpu_class": "AVX512 + AVX512-BF16 (bf16 units)", "gpu": None}


def finished(sweep, job, machine):
    cfg = compose([*sweep.common, *job.overrides, f"run_name={job.name}"])
    config = OmegaConf.to_container(cfg, resolve=False)
    config["module"]["model"] = config["model"]
    stored_run(job.export, {"status": "complete", "config": config, "machine": machine})


def plan(tmp_path, here, monkeypatch, capsys):
    monkeypatch.setattr(C, "this_class", lambda on_gpu: here["cpu_class"])
    sweep = P.plan("table3_e", seeds=3, root=tmp_path / "mr", results=tmp_path / "results", jobs=1)
    return sweep, capsys.readouterr().out


def test_cells_on_a_class_without_its_base_get_the_base_planned_there_under_its_own_identity(
    tmp_path, monkeypatch, capsys
):
    sweep, _ = plan(tmp_path, XEON, monkeypatch, capsys)
    base, cells = [j for j in sweep.jobs if j.base], [j for j in sweep.jobs if not j.base]
    for j in base:
        finished(sweep, j, XEON)
    for j in cells:
        finished(sweep, j, EPYC)

    # on the Xeon: nothing to train, one line saying where the cells' base must come from
    on_xeon, out = plan(tmp_path, XEON, monkeypatch, capsys)
    assert len(on_xeon.jobs) == 6 and all(j.done for j in on_xeon.jobs)
    assert "cells ran on AVX512 + AVX512-BF16 (bf16 units), which has 0 of the base's 3 seeds" in out

    # on the EPYC: the base's 3 seeds again, named for the class, tagged as the base cell, keyed apart
    on_epyc, out = plan(tmp_path, EPYC, monkeypatch, capsys)
    added = on_epyc.jobs[6:]
    slug = class_slug(EPYC["cpu_class"])
    assert slug == "avx512-bf16"
    assert [j.name for j in added] == [f"{base[0].cell}-{slug}-s{n}" for n in (1, 2, 3)]
    assert all(j.base and not j.done and j.same_as is None for j in added)
    assert all(f"cell-{base[0].cell}" in j.tags and "base" in j.tags for j in added)
    assert "3 base job(s) planned here" in out
    flat = on_epyc.flats[base[0].cell]
    assert flat_key({**flat, "machine_class": EPYC["cpu_class"]}, 1) != flat_key(flat, 1)

    # trained there: done on both machines, listed on the Xeon, no line; the store holds both classes' bases
    for j in added:
        finished(on_epyc, j, EPYC)
    again, out = plan(tmp_path, EPYC, monkeypatch, capsys)
    assert len(again.jobs) == 9 and all(j.done for j in again.jobs) and "planned here" not in out
    listed, out = plan(tmp_path, XEON, monkeypatch, capsys)
    assert [j.name for j in listed.jobs[6:]] == [j.name for j in added] and "cells ran on" not in out
    assert len({p.resolve() for p in (tmp_path / "results" / "table3_e").iterdir()}) == 9


def test_a_cell_run_here_on_a_class_the_shared_base_is_not_of_plans_the_base_too(tmp_path, monkeypatch, capsys):
    sweep, _ = plan(tmp_path, XEON, monkeypatch, capsys)
    for j in sweep.jobs:
        if j.base:
            finished(sweep, j, XEON)
    monkeypatch.setattr(C, "this_class", lambda on_gpu: EPYC["cpu_class"])
    only = P.plan(
        "table3_e", seeds=3, root=tmp_path / "mr", results=tmp_path / "results", jobs=1, only=["*-pos-learned-s1"]
    )
    names = [j.name for j in only.jobs if only.selects(j)]
    bases = [f"h8-dk32-dv32-pos-sinusoidal-avx512-bf16-s{n}" for n in (1, 2, 3)]
    assert names == ["h8-dk32-dv32-pos-learned-s1", *bases]


def test_machine_class_is_identity_only_where_set_and_training_on_another_class_stops_with_one_line():
    cfg = compose(["trainer.accelerator=cpu"])
    plain = OmegaConf.to_container(cfg, resolve=False)
    without = {k: v for k, v in plain.items() if k != "machine_class"}
    assert plain["machine_class"] is None and experiment_key(plain) == experiment_key(without)  # old keys stand
    assert experiment_key({**plain, "machine_class": EPYC["cpu_class"]}) != experiment_key(plain)
    cfg.machine_class = "AVX1 of another age"
    with pytest.raises(ConfigError, match=r"^machine_class='AVX1 of another age' but this machine is '.*': train it"):
        check_devices(cfg)
