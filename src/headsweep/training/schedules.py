"""Learning-rate schedules that fit the training budget.

Every schedule warms up linearly for `warmup_steps`, then follows its shape. `linear` and `cosine` decay
to zero exactly when training ends. What "ends" means is module.decay_by: `steps_or_time` (make train):
progress is the larger of the step fraction and the time fraction, so a run cut by the time cap on a
slow machine still ends annealed; `steps` (the sweep budgets): progress is the step fraction alone, so
equal steps mean equal learning rates on any machine, and the time cap only stops a job (the report
flags it). Linear decay to zero is the usual winner at a fixed budget (Li et al.
2020, "Budgeted training"). `wsd` (warm-up, stable, decay; Hägele et al. 2024) holds the peak and decays
linearly to zero over the last `decay_fraction` of the budget. `inverse_sqrt` is the paper's shape, which
never anneals.
"""

from __future__ import annotations

import math

SCHEDULES = ("linear", "cosine", "wsd", "inverse_sqrt")
DECAY_BY = ("steps", "steps_or_time")  # module.decay_by: what the budget's progress counts


def inverse_sqrt_schedule(step: int, warmup_steps: int) -> float:
    """The paper's shape, min(step / warmup, sqrt(warmup / step)): 1.0 at the end of warm-up."""
    step = max(step, 1)
    return min(step / warmup_steps, math.sqrt(warmup_steps / step))


def lr_factor(
    schedule: str, step: int, warmup_steps: int, progress: float, warmup_progress: float, decay_fraction: float = 0.25
) -> float:
    """The learning rate as a fraction of its peak at optimizer step `step` (1-based).

    progress: how much of the budget is spent, in [0, 1]; warmup_progress: the progress at which warm-up
    ends when the run goes by steps (warmup_steps / max_steps), where the decay starts from the peak.
    """
    if schedule == "inverse_sqrt":
        return inverse_sqrt_schedule(step, warmup_steps)
    warm = min(step / warmup_steps, 1.0)
    if schedule == "wsd":
        return min(warm, min(max((1.0 - progress) / decay_fraction, 0.0), 1.0))
    left = min(max((progress - warmup_progress) / (1.0 - warmup_progress), 0.0), 1.0)  # decay done, 0..1
    if schedule == "linear":
        decay = 1.0 - left
    elif schedule == "cosine":
        decay = 0.5 * (1.0 + math.cos(math.pi * left))
    else:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    return min(warm, decay)


def budget_progress(step: int, max_steps: int | None, elapsed_s: float, max_time_s: float | None) -> float:
    """The spent fraction of the budget: max(step / max_steps, elapsed / max_time), over the limits set."""
    fractions = [0.0]
    if max_steps and max_steps > 0:
        fractions.append(step / max_steps)
    if max_time_s:
        fractions.append(elapsed_s / max_time_s)
    return min(max(fractions), 1.0)


def schedule_progress(
    decay_by: str, step: int, max_steps: int | None, elapsed_s: float, max_time_s: float | None
) -> float:
    """The progress the schedule decays by: budget_progress over steps and time (`steps_or_time`), or over
    steps alone (`steps`: the learning rate is a function of the step, whatever the machine's speed)."""
    if decay_by not in DECAY_BY:
        raise ValueError(f"decay_by must be one of {DECAY_BY}, got {decay_by!r}")
    if decay_by == "steps":
        return budget_progress(step, max_steps, 0.0, None)
    return budget_progress(step, max_steps, elapsed_s, max_time_s)
