"""GPU sweeps planned on the CPU, with the card faked: jobs packed by free memory over a measured footprint,
spread over several cards, and the one-line refusals (more jobs than memory holds, a sweep that would mix
CPU and GPU runs, trainer=gpu without CUDA)."""

import re

import pytest
import torch

from headsweep.sweeps import packing
from headsweep.sweeps import planning as P
from headsweep.sweeps import sweep as S
from headsweep.sweeps.specs import SweepError

H100 = packing.Card(0, "NVIDIA H100 80GB HBM3", free_gib=79.0, total_gib=79.6)


@pytest.fixture
def gpu_machine(monkeypatch):
    """A machine whose torch sees CUDA cards (set `cards` in the returned list)."""
    found = [H100]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: found[0].name)
    monkeypatch.setattr(P, "cards", lambda: list(found))
    return found


def test_a_gpu_sweep_packs_as_many_jobs_as_the_card_holds(gpu_machine, tmp_path):
    sweep = P.plan("table3_e", seeds=3, root=tmp_path, results=tmp_path / "results", jobs=None, cores=16)
    # 79 GiB x 0.9 usable / 3 GiB per job = 23 jobs fit; 16 cores feed 16 of them
    assert {"trainer=gpu", "hydra/launcher=joblib", "hydra.launcher.n_jobs=16", "threads=1"} <= set(sweep.common)
    sweep = P.plan("table3_e", seeds=3, root=tmp_path, results=tmp_path / "results", jobs=None, cores=64)
    assert "hydra.launcher.n_jobs=23" in sweep.common


def test_the_footprint_is_the_largest_peak_finished_gpu_runs_recorded(gpu_machine, tmp_path):
    from conftest import fake_run

    fake_run(tmp_path / "results", "other", "h8-s1", 1, 30.0, ["trainer=gpu"], machine={"gpu_memory_peak_gib": 9.5})
    sweep = P.plan("table3_e", seeds=1, root=tmp_path, results=tmp_path / "results", jobs=None, cores=64)
    assert "hydra.launcher.n_jobs=7" in sweep.common  # 71.1 // 9.5


def test_more_jobs_than_memory_holds_stop_in_one_line(gpu_machine, tmp_path):
    with pytest.raises(SweepError) as e:
        P.plan("table3_e", seeds=1, root=tmp_path, jobs=30, cores=64)
    assert str(e.value).startswith("JOBS=30: 30 jobs of ~3.0 GiB each do not fit") and "at most 23" in str(e.value)
    assert "\n" not in str(e.value)


def test_asked_jobs_may_reach_two_per_core_not_more(gpu_machine, tmp_path):
    assert "hydra.launcher.n_jobs=18" in P.plan("table3_e", seeds=1, root=tmp_path, jobs=18, cores=16).common
    with pytest.raises(SweepError, match=r"JOBS=20: .* 8 cores; use JOBS=16 or fewer"):
        P.plan("table3_e", seeds=1, root=tmp_path, jobs=20, cores=8)


def test_jobs_spread_over_several_cards(gpu_machine, tmp_path):
    gpu_machine.append(packing.Card(1, H100.name, 79.0, 79.6))
    sweep = P.plan("table3_e", seeds=2, root=tmp_path, jobs=4, cores=16)
    cards = [next(o for o in j.overrides if o.startswith("trainer.devices")) for j in sweep.jobs]
    assert cards == ["trainer.devices=[0]", "trainer.devices=[1]"] * 2


def test_a_gpu_machine_never_adds_gpu_runs_to_a_cpu_sweep(gpu_machine, tmp_path, bf16_cpu):
    from conftest import fake_run

    fake_run(tmp_path / "results", "table3_e", "sinusoidal-s1", 1, 30.0, ["model.positions=sinusoidal", "seed=1"])
    with pytest.raises(SweepError, match=re.escape("holds CPU runs") + ".*" + re.escape("NAME=table3_e_h100")):
        P.plan("table3_e", seeds=1, root=tmp_path, results=tmp_path / "results", jobs=None, cores=16)
    # under its own name it is a GPU sweep of its own; or the CPU, asked for
    assert (
        "trainer=gpu"
        in P.plan(
            "table3_e",
            seeds=1,
            root=tmp_path,
            results=tmp_path / "results",
            jobs=None,
            cores=16,
            name_as="table3_e_h100",
        ).common
    )
    assert (
        "trainer=gpu"
        not in P.plan(
            "table3_e", seeds=1, extra=["trainer=cpu"], root=tmp_path, results=tmp_path / "results", cores=16
        ).common
    )


def test_trainer_gpu_without_cuda_stops_before_any_job(tmp_path, capsys):
    """A GPU sweep still plans and lists on a CPU machine (--dry); launching it stops in one line."""
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    args = [
        "--sweep",
        "table3_e",
        "--seeds",
        "1",
        "--root",
        str(tmp_path),
        "--results",
        str(tmp_path / "r"),
        "trainer=gpu",
    ]
    assert S.main([*args, "--dry"]) == 0
    capsys.readouterr()
    assert S.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: trainer=gpu but torch sees no CUDA GPU here") and err.count("\n") == 1
    assert not (tmp_path / "table3_e").exists()  # nothing started


@pytest.mark.parametrize(
    "name, slug",
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-40GB", "a100"),
        ("NVIDIA GeForce RTX 4090", "4090"),
    ],
)
def test_a_card_names_its_sweep(name, slug):
    assert packing.device_slug(name) == slug
