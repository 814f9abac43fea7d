"""pass@k and its 95 % interval, by the bootstrap over tasks.

    pass_at_k(n=4, c=1, k=1)            # 0.25: the unbiased estimator (Chen et al. 2021)
    bootstrap_ci([1.0, 0.0, 0.5, 1.0])  # (low, high) of the mean, tasks resampled
    paired_gain([0, 1, 0], [1, 1, 0])   # (gain, low, high): after - before, per task

Tasks, not attempts, are resampled: the attempts of one task are not independent of
each other, and the claim is about tasks like these.
"""

from __future__ import annotations

import math
import random

BOOTSTRAP_SAMPLES = 2000


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of k attempts drawn from n (c of them correct)
    solves the task: 1 - C(n-c, k) / C(n, k). Needs n >= k."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def bootstrap_ci(
    values: list[float], *, level: float = 0.95, samples: int = BOOTSTRAP_SAMPLES, seed: int = 0
) -> tuple[float, float]:
    """The percentile interval of the mean of `values` (one per task) over `samples`
    resamples with replacement; deterministic for a seed. A single value, or none,
    has no spread to resample: its interval is the value itself (or (0, 0))."""
    if not values:
        return 0.0, 0.0
    n = len(values)
    if n == 1 or min(values) == max(values):
        return values[0], values[0]
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(samples))
    tail = (1.0 - level) / 2
    low = means[math.floor(tail * (samples - 1))]
    high = means[math.ceil((1.0 - tail) * (samples - 1))]
    return low, high


def paired_gain(
    before: list[float], after: list[float], *, seed: int = 0
) -> tuple[float, float, float]:
    """(mean gain, low, high) of after - before over the same tasks in the same order:
    each task's difference is resampled as one value (paired), so the interval is that
    of the change, narrower than two separate intervals would suggest when the same
    tasks stay solved or unsolved."""
    if len(before) != len(after):
        raise ValueError(f"paired results need the same tasks: {len(before)} and {len(after)}")
    diffs = [a - b for a, b in zip(after, before, strict=True)]
    low, high = bootstrap_ci(diffs, seed=seed)
    return (sum(diffs) / len(diffs) if diffs else 0.0), low, high
