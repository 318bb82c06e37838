"""lr_schedule.py — the learning-rate schedule of tessera-train in float64 (src/optim/schedule.c
lr_multiplier), without torch so that a shell test can import it quickly; torch_gpt re-exports it."""
import math


def lr_multiplier(schedule, alpha_f, step, warmup, total, decay=0):
    """Composer-style schedule at optimizer step `step` (0-based): linear warmup
    (step+1)/warmup for step < warmup, then over p = (step-warmup)/(total-warmup) in [0, 1]:
    cosine alpha_f + (1-alpha_f)(1+cos(pi p))/2, linear 1-(1-alpha_f) p, or constant 1;
    wsd (warmup-stable-decay): 1 until step total-decay, then linear over the last `decay` steps,
    1-(1-alpha_f) p with p = (step-(total-decay))/decay."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "wsd":
        if step < total - decay:
            return 1.0
        warmup, schedule = total - decay, "linear"
    p = min(1.0, (step - warmup) / max(total - warmup, 1))
    if schedule == "cosine":
        return alpha_f + (1.0 - alpha_f) * 0.5 * (1.0 + math.cos(math.pi * p))
    if schedule == "linear":
        return 1.0 - (1.0 - alpha_f) * p
    return 1.0
