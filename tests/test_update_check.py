"""The update check (issue 54): each cell's attention output change in its first Adam steps, against its base's.
The bar: h 32 at d_k = d_v = 32 moves about twice as far as the base h 8 at one rate (W^O's fan-in 1,024
against 256) and is flagged; under per-matrix rates (module.lr_scaling mup) it is not. Cells whose fan-ins do not
move (d_k 16 at h 16, kv_heads 2) move as the base does."""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from headsweep.config import compose
from headsweep.model.lr_scaling import base_fan_ins
from headsweep.store import flatten_config
from headsweep.sweeps import planning as P
from headsweep.sweeps import sweep as S
from headsweep.sweeps.init_check import (
    UPDATE_MARGIN,
    check_margin,
    measure_update,
    update_check_table,
    update_lines,
    update_settings,
)
from headsweep.sweeps.specs import SweepError

BASE = ["model.heads=8", "model.d_k=32", "model.d_v=32"]
H32 = ["model.heads=32", "model.d_k=32", "model.d_v=32"]


def cell(overrides: list[str], scaling: str = "none", base: list[str] = BASE) -> tuple[dict, dict]:
    """(flat settings, update check) of a cell at 2e-3, its lr_base from `base` under mup, as planning does."""
    # W^O and W_2 as drawn (gain 1): the start these ratios were measured under. From the default 1/sqrt(6) some move
    # (kv 2's cross attention 1.34x the base's, identical heads' encoder 1.02x): not re-measured for the new start.
    extra = ["module.peak_lr=2e-3", f"module.lr_scaling={scaling}", "model.init_wo_gain=1.0", "model.init_ff2_gain=1.0"]
    if scaling == "mup":
        fans = base_fan_ins(flatten_config(compose(base)))
        extra.append("module.lr_base={" + ",".join(f"{k}:{v}" for k, v in fans.items()) + "}")
    cfg = compose([*overrides, *extra])
    flat = flatten_config(cfg)
    flat["module.peak_lr"] = float(cfg.module.peak_lr)
    return flat, measure_update(OmegaConf.to_container(cfg.model, resolve=True), update_settings(flat), 1)


def lines(cells: dict[str, tuple[dict, dict]]) -> list[str]:
    labels = list(cells)
    return update_lines("s", labels, [cells[k][0] for k in labels], [cells[k][1] for k in labels], UPDATE_MARGIN)


def test_the_update_check_flags_many_wide_heads_and_not_under_per_matrix_rates():
    none = {"h8": cell(BASE), "h32": cell(H32)}
    flagged = lines(none)
    assert len(flagged) == 1 and "cell h32 moves its attention" in flagged[0], flagged
    assert "W^O's fan-in h * d_v 1024 (base 256)" in flagged[0]
    ratios = {k: none["h32"][1]["change"][k] / none["h8"][1]["change"][k] for k in none["h8"][1]["change"]}
    assert all(r > 1 + UPDATE_MARGIN for r in ratios.values()), ratios  # about 2x in every kind
    scaled = {"h8": cell(BASE, "mup"), "h32": cell(H32, "mup")}
    assert scaled["h8"][1] == none["h8"][1] | {"lr_scaling": "mup"}  # the base's factors are 1: the same steps
    assert scaled["h32"][1]["factors"] == {"w_o": 0.25, "ff_w2": 1.0}
    assert lines(scaled) == []
    ratios = {k: scaled["h32"][1]["change"][k] / scaled["h8"][1]["change"][k] for k in ratios}
    assert all(1 / (1 + UPDATE_MARGIN) < r < 1 + UPDATE_MARGIN for r in ratios.values()), ratios


def test_cells_whose_fan_ins_do_not_move_move_as_the_base():
    """Row B-like d_k 16 at h 16 (h * d_v 256) and kv_heads 2 (W^O still h * d_v): flat at one rate."""
    cells = {
        "h8": cell(BASE),
        "h16-dk16": cell(["model.heads=16", "model.d_k=16", "model.d_v=16"]),
        "kv2": cell([*BASE, "model.kv_heads=2"]),
    }
    assert lines(cells) == []
    for label in ("h16-dk16", "kv2"):
        for kind, v in cells[label][1]["change"].items():
            assert v / cells["h8"][1]["change"][kind] == pytest.approx(1.0, abs=0.25), (label, kind)


def test_the_update_check_leaves_the_global_rng_alone_and_repeats():
    from headsweep.model import TransformerConfig
    from headsweep.training.update_check import update_check

    cfg = TransformerConfig(vocab_size=64, d_model=16, n_layers=1, heads=2, d_ff=32)
    state = torch.get_rng_state()
    first = update_check(cfg, 1e-3, steps=2)
    assert torch.equal(torch.get_rng_state(), state)
    assert json.dumps(update_check(cfg, 1e-3, steps=2)) == json.dumps(first)
    assert set(first["change"]) == {"enc_self", "dec_self", "cross"} and first["steps"] == 2


def test_the_table_shows_each_cell_against_its_base():
    cells = {"h8": cell(BASE), "h32": cell(H32)}
    table = update_check_table(list(cells), [c[0] for c in cells.values()], [c[1] for c in cells.values()])
    assert "(base)" in table[2] and "lr 0.002, lr_scaling none" in table[2]
    assert "enc_self 2." in table[3] and "x base" in table[0]


@pytest.mark.parametrize("margin", [0, 10, -1, float("nan"), "0.5", True])
def test_a_margin_outside_0_10_is_one_line(margin):
    with pytest.raises(ValueError, match=r"between 0 and 10 \(exclusive\)") as e:
        check_margin(margin)
    assert "\n" not in str(e.value)


def test_a_bad_margin_stops_the_sweep_before_anything(tmp_path, capsys):
    with pytest.raises(SweepError, match="update check margin 12"):
        P.plan("table3_a", seeds=1, root=tmp_path, update_margin=12)
    assert S.main(["--sweep", "table3_a", "--update-margin", "0", "--dry", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: update check margin 0.0") and "\n" not in err


def test_a_sweep_sets_lr_base_itself(tmp_path):
    with pytest.raises(SweepError, match="module.lr_base is set per job by the sweep"):
        P.plan("heads_wo_mirror_mup", seeds=1, root=tmp_path, extra=["module.lr_base={w_o:1,ff_w2:1}"])


def test_a_run_records_its_update_check(tiny_run):
    """results.json's update_check is what `make sweep` measures for its cell (recomputed here from its config)."""
    results = json.loads((tiny_run / "results.json").read_text())
    recorded = results["update_check"]
    config = results["config"]
    flat = flatten_config(OmegaConf.create(config))
    flat["module.peak_lr"] = config["module"]["peak_lr"]
    assert recorded == measure_update(config["model"], update_settings(flat), config["seed"])
    assert recorded["lr_scaling"] == "none" and set(recorded["change"]) == {"enc_self", "dec_self", "cross"}


def test_make_sweep_prints_the_update_check_before_anything_trains(tmp_path, capsys):
    """A spec of the bar's two cells: planned with the update check, one line for h 32 under one rate; its mup
    variant (every job given the base's fan-ins) none."""
    import yaml

    specs = tmp_path / "specs"
    specs.mkdir()
    spec = {
        "method": "grid",
        "parameters": {"model": {"values": ["{heads:8,d_k:32,d_v:32}", "{heads:32,d_k:32,d_v:32}"]}},
        "variants": {"mup": {"set": {"module.lr_scaling": "mup"}}},
    }
    (specs / "two.yaml").write_text(yaml.safe_dump(spec))
    kw = dict(seeds=1, root=tmp_path / "mr", specs_dir=specs, update_margin=UPDATE_MARGIN)
    P.plan("two", extra=["module.peak_lr=2e-3"], **kw)
    out = capsys.readouterr().out
    assert out.count("update check: two cell h32-dk32-dv32 moves its attention") == 1, out
    sweep = P.plan("two_mup", extra=["module.peak_lr=2e-3"], **kw)
    assert "update check" not in capsys.readouterr().out
    assert all("module.lr_base={w_o:256,ff_w2:1024}" in j.overrides for j in sweep.jobs)


def test_the_report_section_reads_each_cells_recorded_check():
    from types import SimpleNamespace

    from headsweep.reports.sweep.checks import update_check_section

    (f8, c8), (f32, c32) = cell(BASE), cell(H32)
    run = lambda flat, check: SimpleNamespace(seed=1, flat=flat, results={"update_check": check})  # noqa: E731
    cells = [SimpleNamespace(label="h8", runs=[run(f8, c8)]), SimpleNamespace(label="h32", runs=[run(f32, c32)])]
    section = update_check_section(cells).splitlines()
    assert section[0] == "## First steps" and "10 Adam steps" in section[2]
    assert section[-1].startswith("| h32 |") and "enc_self 2." in section[-1]
    old = [SimpleNamespace(label="h8", runs=[run(f8, None)])]
    assert update_check_section(old) == ""  # runs recorded before issue 54: no section


def test_make_checks_prints_both_tables_per_rate_and_trains_nothing(tmp_path, capsys):
    """`make checks SWEEP=.. LR_GRID=..`: every cell's init and update tables at each rate; at 2e-3 the h 32 row
    is flagged in the table."""
    import yaml

    specs = tmp_path / "specs"
    specs.mkdir()
    spec = {
        "method": "grid",
        "parameters": {"model": {"values": ["{heads:8,d_k:32,d_v:32}", "{heads:32,d_k:32,d_v:32}"]}},
    }
    (specs / "two.yaml").write_text(yaml.safe_dump(spec))
    root = tmp_path / "mr"
    argv = ["--sweep", "two", "--checks", "--lr-grid", "5e-4,2e-3", "--specs", str(specs), "--root", str(root)]
    assert S.main(argv) == 0
    out = capsys.readouterr().out
    at = {lr: part for lr, part in zip(("5e-4", "2e-3"), out.split("two at module.peak_lr=")[1:])}
    for lr, part in at.items():
        assert part.startswith(f"{float(lr):g}") and "At init:" in part and "First steps:" in part, lr
        rows = [line for line in part.splitlines() if line.startswith("| h32-dk32-dv32 |")]
        assert len(rows) == 2, part  # one row in each table
        assert f"lr {float(lr):g}, lr_scaling none" in rows[1]
    assert "enc_self 2." in at["2e-3"].splitlines()[-1]  # flagged: about 2x the base's
    assert not root.exists()  # no job folder, nothing trained


def test_a_shared_kv_head_is_named_as_what_moves():
    """kv_heads 1 moves no fan-in, yet its attention moves about 1.3x the base's in the first steps: one K/V head
    read by 8 query heads. With a margin tight enough to flag it, the line says so rather than blaming a fan-in."""
    cells = {"h8": cell(BASE), "kv1": cell([*BASE, "model.kv_heads=1"])}
    ratios = [cells["kv1"][1]["change"][k] / cells["h8"][1]["change"][k] for k in cells["h8"][1]["change"]]
    assert all(1.1 < r < 1 + UPDATE_MARGIN for r in ratios), ratios
    labels = list(cells)
    found = update_lines("s", labels, [c[0] for c in cells.values()], [c[1] for c in cells.values()], 0.1)
    assert len(found) == 1 and "no fan-in moves; W^K and W^V are shared by 8 query heads (base 1)" in found[0], found


def test_identical_heads_are_flagged_for_their_w_o_step():
    """Identical heads get one gradient: their 8 W^O blocks (each 1/sqrt(8) of the base's scale) take the same step,
    so the layer's W^O moves sqrt(8) times as far for its size. The check flags the encoder's and names that cause."""
    cells = {"h8": cell(BASE), "same": cell([*BASE, "model.init_heads=identical"])}
    ratios = [cells["same"][1]["change"][k] / cells["h8"][1]["change"][k] for k in cells["h8"][1]["change"]]
    assert all(r > 1.2 for r in ratios), ratios
    found = lines(cells)
    assert len(found) == 1 and "the 8 heads start identical and get the same gradient" in found[0], found


def test_a_cell_that_varies_depth_is_not_flagged_for_its_pooled_change():
    """Row C's N 1: one layer of each kind, the one nearest the loss, which moves most in every model (the base's
    cross-attention grows from the bottom layer to the top). Pooled over layers it reads about 2x the base's; depth
    is what the cell varies, so it is shown, not flagged, while a moved fan-in in the same sweep still is."""
    cells = {"h8": cell(BASE), "n1": cell([*BASE, "model.n_layers=1"]), "h32": cell(H32)}
    base_cross = cells["h8"][1]["change_by_layer"]["cross"]
    assert base_cross[-1] > 1.3 * base_cross[0], base_cross  # the top layer moves most
    assert cells["n1"][1]["change"]["cross"] / cells["h8"][1]["change"]["cross"] > 1 + UPDATE_MARGIN
    found = lines(cells)
    assert len(found) == 1 and "cell h32 moves" in found[0], found
