"""Learning-rate schedules that fit the training budget.

Every schedule warms up linearly for `warmup_steps`, then follows its shape. `linear` and `cosine` decay
to zero exactly when training ends. What "ends" means is module.decay_by: `steps_or_time` (make train):
progress is the larger of the step fraction and the time fraction, so a run cut by the time cap on a
slow machine still ends annealed; `steps` (the sweep budgets): progress is the step fraction alone, so
equal steps mean equal learning rates on any machine, and the time cap only stops a job (the report
flags it). Linear decay to zero is the usual winner at a fixed budget (Li et al.
2020, "Budgeted training"). `wsd` (warm-up, stable, decay; Hägele et al. 2024) holds the peak and decays
to zero over the last `decay_fraction` of the budget, linearly (1 - t) or as 1 - sqrt(t) (`cooldown`, Hägele et
al.'s "(1-sqrt)" cooldown, with t the share of the cooldown done). `constant` holds the peak after warm-up and
never decays: a trunk of `make budgets`, whose checkpoints cooldown branches continue as `wsd` runs of longer
budgets. `inverse_sqrt` is the paper's shape, which never anneals.
"""

from __future__ import annotations

import math

SCHEDULES = ("linear", "cosine", "wsd", "constant", "inverse_sqrt")
COOLDOWNS = ("linear", "sqrt")  # module.cooldown: wsd's decay, 1 - t or 1 - sqrt(t) over the cooldown's share t
DECAY_BY = ("steps", "steps_or_time")  # module.decay_by: what the budget's progress counts


def inverse_sqrt_schedule(step: int, warmup_steps: int) -> float:
    """The paper's shape, min(step / warmup, sqrt(warmup / step)): 1.0 at the end of warm-up."""
    step = max(step, 1)
    return min(step / warmup_steps, math.sqrt(warmup_steps / step))


def lr_factor(
    schedule: str,
    step: int,
    warmup_steps: int,
    progress: float,
    warmup_progress: float,
    decay_fraction: float = 0.25,
    cooldown: str = "linear",
) -> float:
    """The learning rate as a fraction of its peak at optimizer step `step` (1-based).

    progress: how much of the budget is spent, in [0, 1]; warmup_progress: the progress at which warm-up
    ends when the run goes by steps (warmup_steps / max_steps), where the decay starts from the peak.
    """
    if schedule == "inverse_sqrt":
        return inverse_sqrt_schedule(step, warmup_steps)
    warm = min(step / warmup_steps, 1.0)
    if schedule == "constant":
        return warm
    if schedule == "wsd":
        # t: the cooldown's share done, 0 -> 1. Measured from its start (1 - f), so that t is exactly 0 where the
        # cooldown starts on a whole step (8 / 10 == 1 - 0.2 in floating point; sqrt would turn the last bits of
        # (1 - progress) / f into a rate 1.5e-8 below the peak there), and exactly 1 at the end
        t = 1.0 if progress >= 1.0 else min(max((progress - (1.0 - decay_fraction)) / decay_fraction, 0.0), 1.0)
        if cooldown == "sqrt":  # Hägele et al. 2024's (1 - sqrt) cooldown
            return min(warm, 1.0 - math.sqrt(t))
        if cooldown != "linear":
            raise ValueError(f"cooldown must be one of {COOLDOWNS}, got {cooldown!r}")
        return min(warm, 1.0 - t)
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


def cooldown_start(max_steps: int, decay_fraction: float) -> int:
    """The steps a wsd run of `max_steps` trains at the peak before its cooldown, floor((1 - f) * max_steps): a
    `constant` trunk's checkpoint after that many steps is where a branch cools down to this budget (every step up
    to it has the trunk's rate; the next is the branch's). The 1e-9 keeps 0.8 * 1150 at 920 in floating point."""
    return math.floor((1.0 - decay_fraction) * max_steps + 1e-9)
