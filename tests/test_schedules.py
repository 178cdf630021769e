"""Learning-rate schedules: the shapes, budget progress by steps or time, and budgets that cannot fit."""

import math

import pytest

from headsweep.training.schedules import budget_progress, inverse_sqrt_schedule, lr_factor


def test_inverse_sqrt_is_the_papers_formula():
    d_model, warmup = 512, 4000
    for step in (1, 100, 4000, 4001, 10_000, 100_000):
        paper = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert inverse_sqrt_schedule(step, warmup) * (d_model * warmup) ** -0.5 == pytest.approx(paper)


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_decay_reaches_zero_exactly_at_the_end_of_a_step_budget(schedule):
    max_steps, warmup = 1000, 100
    # the rate of step done + 1, as the LightningModule asks for it
    f = [
        lr_factor(schedule, done + 1, warmup, budget_progress(done, max_steps, 0.0, None), warmup / max_steps)
        for done in range(max_steps + 1)
    ]
    assert f[49] == pytest.approx(0.5) and f[99] == pytest.approx(1.0)  # linear warm-up to the peak
    assert max(f) == pytest.approx(1.0) and 0 < f[max_steps - 1] < 0.002  # the last step: nearly zero
    assert f[max_steps] == 0.0  # reached exactly when the budget is spent
    assert all(a >= b for a, b in zip(f[99:], f[100:]))  # monotone after the peak
    middle = lr_factor(schedule, 550, warmup, 0.55, 0.1)  # halfway through the decay
    assert middle == pytest.approx(0.5)  # linear: 1 - 0.5; cosine: (1 + cos(pi/2)) / 2


def test_linear_and_cosine_shapes():
    # 25% of the way through the decay: linear 0.75, cosine (1 + cos(pi/4)) / 2
    assert lr_factor("linear", 500, 100, 0.325, 0.1) == pytest.approx(0.75)
    assert lr_factor("cosine", 500, 100, 0.325, 0.1) == pytest.approx((1 + math.cos(math.pi / 4)) / 2)


def test_a_time_capped_run_still_ends_annealed():
    """On a slow machine the time cap comes before max_steps: progress follows time, so the rate is near
    zero when the cap stops training, far from the peak where the inverse square root would leave it."""
    max_steps, max_time = 2100, 1200.0
    step, elapsed = 1150, 1190.0  # a 2-core AVX2 CPU: ~1,150 steps in 20 minutes
    progress = budget_progress(step, max_steps, elapsed, max_time)
    assert progress == pytest.approx(elapsed / max_time)
    assert lr_factor("linear", step, 300, progress, 300 / max_steps) < 0.02
    assert inverse_sqrt_schedule(step, 300) > 0.5


def test_progress_is_the_larger_fraction_and_capped():
    assert budget_progress(500, 1000, 100.0, 1000.0) == 0.5
    assert budget_progress(100, 1000, 800.0, 1000.0) == 0.8
    assert budget_progress(100, None, 500.0, 1000.0) == 0.5
    assert budget_progress(2000, 1000, 0.0, None) == 1.0
    assert budget_progress(5, None, 0.0, None) == 0.0


def test_unknown_schedule():
    with pytest.raises(ValueError, match="schedule must be one of"):
        lr_factor("step", 10, 5, 0.5, 0.1)


def test_wsd_holds_the_peak_then_decays_over_the_last_part():
    f = lambda done: lr_factor("wsd", done + 1, 100, budget_progress(done, 1000, 0.0, None), 0.1, 0.25)  # noqa: E731
    assert f(49) == pytest.approx(0.5) and f(99) == 1.0 and f(749) == 1.0  # warm-up, then the peak
    assert f(875) == pytest.approx(0.5) and f(1000) == 0.0  # halfway down the last quarter; zero at the end


def fit_on_a_slow_machine(decay_by: str, monkeypatch, max_steps: int = 30, seconds_per_step: float = 200.0):
    """A real fit of a tiny TranslationModule with Lightning's Timer (trainer.max_time one hour) on a clock that
    runs 200 s per step, so the time share (step / 18) outruns the step share (step / 30): the learning rate of
    every step it takes, and the steps taken."""
    from types import SimpleNamespace

    import pytorch_lightning as pl
    import torch
    from tokenizers import Tokenizer, models

    from headsweep.data.tokenizer import SPECIALS
    from headsweep.training.module import TranslationModule

    clock = [0.0]
    monkeypatch.setattr("pytorch_lightning.callbacks.timer.time", SimpleNamespace(monotonic=lambda: clock[0]))
    vocab = {t: i for i, t in enumerate([*SPECIALS, "a", "b", "c", "d"])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>")).to_str()
    module = TranslationModule(
        {"d_model": 16, "n_layers": 1, "heads": 2, "d_ff": 32},
        len(vocab),
        tokenizer,
        peak_lr=1e-3,
        warmup_steps=4,
        decay_by=decay_by,
    )
    g = torch.Generator().manual_seed(0)
    batches = [
        {
            "src": torch.randint(4, 8, (2, 5), generator=g),
            "tgt_in": torch.randint(4, 8, (2, 4), generator=g),
            "tgt_out": torch.randint(4, 8, (2, 4), generator=g),
        }
        for _ in range(max_steps)
    ]
    rates = []

    class SlowClock(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            rates.append(trainer.optimizers[0].param_groups[0]["lr"])  # the rate this step trains with

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            clock[0] += seconds_per_step

    trainer = pl.Trainer(
        max_steps=max_steps,
        max_time="00:01:00:00",
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        callbacks=[SlowClock()],
    )
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(batches, batch_size=None))
    return rates, trainer.global_step


def test_under_decay_by_steps_every_rate_is_the_step_s_alone_on_a_slow_machine(monkeypatch):
    """Sweep budgets (module.decay_by=steps): the learning rate is a function of the step; the time cap only
    stops the job. make train's steps_or_time anneals by the clock, so a slow machine decays earlier."""
    max_steps, warmup = 30, 4
    by_steps, steps_taken = fit_on_a_slow_machine("steps", monkeypatch, max_steps)
    step_only = [
        1e-3 * lr_factor("linear", done + 1, warmup, budget_progress(done, max_steps, 0.0, None), warmup / max_steps)
        for done in range(len(by_steps))
    ]
    assert by_steps == pytest.approx(step_only, rel=1e-9, abs=1e-15)
    assert steps_taken < max_steps and len(by_steps) == steps_taken  # the time cap stopped it (18 of 30)
    by_time, _ = fit_on_a_slow_machine("steps_or_time", monkeypatch, max_steps)
    assert by_time[:warmup] == pytest.approx(step_only[:warmup])  # the same warm-up
    later = list(zip(by_time[warmup + 1 :], step_only[warmup + 1 :]))
    assert len(later) > 10 and all(t < s for t, s in later)  # then the clock's share leads: a lower rate each step


def test_decay_by_steps_without_max_steps_and_unknown_values_fail_before_data():
    from headsweep.config import compose
    from headsweep.training.checks import ConfigError, check_config

    with pytest.raises(
        ConfigError, match="module.decay_by=steps decays module.schedule=linear by trainer.max_steps, which is unset"
    ):
        check_config(compose(["module.decay_by=steps", "trainer.max_steps=-1", "paths.output_dir=/tmp/x"]))
    with pytest.raises(ConfigError, match="module.decay_by='clock': use steps"):
        check_config(compose(["module.decay_by=clock", "paths.output_dir=/tmp/x"]))
    assert compose(["budget=ablation"]).module.decay_by == "steps" == compose(["budget=short"]).module.decay_by
    assert compose([]).module.decay_by == "steps_or_time"  # make train keeps its time-aware decay
