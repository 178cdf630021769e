"""Learning-rate schedules: the shapes, budget progress by steps or time, and budgets that cannot fit."""

import math

import pytest

from headsweep.training.schedules import budget_progress, inverse_sqrt_schedule, lr_factor


def test_inverse_sqrt_is_the_papers_formula():
    d_model, warmup = 512, 4000
    for step in (1, 100, 4000, 4001, 10_000, 100_000):
        paper = d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
        assert inverse_sqrt_schedule(step, warmup) * (d_model * warmup) ** -0.5 == pytest.approx(paper)


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_decay_reaches_zero_exactly_at_the_end_of_a_step_budget(schedule):
    max_steps, warmup = 1000, 100
    # the rate of step done + 1, as the LightningModule asks for it
    f = [lr_factor(schedule, done + 1, warmup, budget_progress(done, max_steps, 0.0, None), warmup / max_steps)
         for done in range(max_steps + 1)]
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
