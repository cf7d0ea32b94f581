"""Interleaved, batched timing of zero-argument callables (the core of ``fastppo bench``).

How one group is timed, and why:

* Calls are **batched**: one ``perf_counter_ns`` pair brackets ``n`` calls, with
  ``n`` chosen so a batch lasts milliseconds. Timer overhead and resolution
  (tens of ns) then vanish even for microsecond calls.
* Impls are **interleaved**: round ``r`` times one batch of every impl, and the
  order rotates each round, so frequency scaling, a neighbour's job or a
  thermal dip hits every impl alike instead of biasing whichever ran last.
* The statistic is the **median** per-call time over rounds: robust to the
  occasional preempted round, unlike the mean; the minimum and quartiles are
  kept for the spread.
* The garbage collector is off inside a batch, as in ``timeit``: a collection
  triggered by someone else's garbage is noise, not the impl's cost.
"""

from __future__ import annotations

import gc
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# A batch must last at least this long before its time is trusted for
# calibration: 1 ms is ~10^4 timer ticks, so resolution error stays < 0.1 %.
_CALIBRATE_MIN_S = 1e-3


@dataclass(frozen=True)
class Budget:
    """How long to time each impl.

    Attributes
    ----------
    per_impl_s : float
        Target total seconds of timed calls per impl (calibration excluded).
    rounds : int
        Rounds for impls fast enough to fill them; slow impls run fewer, but
        never under ``min_rounds``.
    min_rounds : int
        Floor on rounds, so a median exists even for a one-second call.
    """

    per_impl_s: float
    rounds: int
    min_rounds: int = 3


QUICK = Budget(per_impl_s=0.2, rounds=5)
DEFAULT = Budget(per_impl_s=1.0, rounds=9)
FULL = Budget(per_impl_s=2.0, rounds=15)


@dataclass(frozen=True)
class Timing:
    """Per-call times of one impl, in seconds."""

    median_s: float
    min_s: float
    q1_s: float
    q3_s: float
    calls_per_round: int
    per_round_s: tuple[float, ...]

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0.05 = +-2.5 %)."""
        return (self.q3_s - self.q1_s) / self.median_s if self.median_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "median_s": self.median_s,
            "min_s": self.min_s,
            "q1_s": self.q1_s,
            "q3_s": self.q3_s,
            "spread": self.spread,
            "calls_per_round": self.calls_per_round,
            "rounds": len(self.per_round_s),
            "per_round_s": list(self.per_round_s),
        }


def batch_ns(fn: Callable[[], Any], n: int) -> int:
    """Nanoseconds for ``n`` back-to-back calls of ``fn``, garbage collector off."""
    loop = itertools.repeat(None, n)  # cheaper per iteration than range()
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter_ns()
        for _ in loop:
            fn()
        t1 = time.perf_counter_ns()
    finally:
        if gc_was_on:
            gc.enable()
    return t1 - t0


def estimate_per_call(
    fn: Callable[[], Any],
    max_s: float,
    clock: Callable[[Callable[[], Any], int], int] = batch_ns,
) -> float:
    """Seconds per call of ``fn``, from batches grown until one lasts ~1 ms.

    Stops early once a batch takes ``max_s`` (a slow call needs no precision
    here: it only sizes the timed batches). ``clock(fn, n)`` returns the
    nanoseconds of ``n`` calls.
    """
    n = 1
    while True:
        t = clock(fn, n) * 1e-9
        if t >= _CALIBRATE_MIN_S or t >= max_s:
            return t / n
        # Aim straight past the threshold instead of doubling: fewer batches.
        grow = _CALIBRATE_MIN_S * 1.5 / max(t, 1e-8)
        n = int(n * min(max(grow, 2.0), 1000.0))


def plan(per_call_s: float, budget: Budget) -> tuple[int, int]:
    """(rounds, calls per round) that spend about ``budget.per_impl_s``."""
    per_call_s = max(per_call_s, 1e-9)
    fit = math.floor(budget.per_impl_s / per_call_s)
    rounds = max(budget.min_rounds, min(budget.rounds, fit))
    calls = max(1, round(budget.per_impl_s / rounds / per_call_s))
    return rounds, calls


def time_interleaved(
    fns: dict[str, Callable[[], Any]],
    budget: Budget,
    clock: Callable[[Callable[[], Any], int], int] = batch_ns,
) -> dict[str, Timing]:
    """Time every callable in ``fns`` in interleaved rounds.

    Parameters
    ----------
    fns : dict
        Label -> zero-argument callable, already called once (compiled, warm).
    budget : Budget
        Time per impl and number of rounds.
    clock : callable, optional
        ``clock(fn, n) -> ns`` for ``n`` calls; tests pass a fake to check the
        arithmetic without timing anything.

    Returns
    -------
    dict
        Label -> :class:`Timing`, in the order of ``fns``.
    """
    round_s = budget.per_impl_s / budget.rounds
    rounds: dict[str, int] = {}
    calls: dict[str, int] = {}
    for label, fn in fns.items():
        rounds[label], calls[label] = plan(estimate_per_call(fn, round_s, clock), budget)
    labels = list(fns)
    samples: dict[str, list[float]] = {k: [] for k in labels}
    for r in range(max(rounds.values(), default=0)):
        # Rotate the order so no impl always runs right after a given other.
        k = r % len(labels)
        for label in labels[k:] + labels[:k]:
            if r >= rounds[label]:
                continue
            n = calls[label]
            per_call = clock(fns[label], n) * 1e-9 / n
            samples[label].append(per_call)
            # Calibration ran the impl alone; next to other impls (another
            # thread pool still spinning, a cold cache) it can be many times
            # slower. Re-plan then, so the budget holds; per-call samples stay
            # comparable whatever the batch size.
            if n > 1 and per_call * n > 3 * round_s:
                calls[label] = max(1, round(round_s / per_call))
    return {k: summarize(samples[k], calls[k]) for k in labels}


def summarize(per_call: list[float], calls_per_round: int) -> Timing:
    """Median, min and quartiles (linear interpolation) of per-call times."""
    if not per_call:
        raise ValueError("summarize: per_call must be non-empty, got an empty list")
    xs = sorted(per_call)
    return Timing(
        median_s=_quantile(xs, 0.5),
        min_s=xs[0],
        q1_s=_quantile(xs, 0.25),
        q3_s=_quantile(xs, 0.75),
        calls_per_round=calls_per_round,
        per_round_s=tuple(per_call),
    )


def _quantile(sorted_xs: list[float], q: float) -> float:
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def format_time(seconds: float) -> str:
    """Three significant digits with a unit: '812 ns', '12.3 us', '1.50 ms', '2.00 s'."""
    for scale, unit in ((1e-9, "ns"), (1e-6, "us"), (1e-3, "ms")):
        if seconds < scale * 999.5:  # so 999.7 us reads "1.00 ms", not "1000 us"
            return _sig3(seconds / scale) + " " + unit
    return _sig3(seconds) + " s"


def _sig3(v: float) -> str:
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def print_stages(
    fns: dict[str, Callable[[], Any]], rounds: int, header: str, ratio_to_first: bool = False
) -> None:
    """Warm every callable, time them interleaved (``rounds`` rounds, 0.1 s each
    per impl) and print ``header`` and a Markdown table of medians (with the
    first stage's median over each one's when ``ratio_to_first``): the
    stage-floor scripts' report."""
    for fn in fns.values():
        fn()  # compile and warm
    res = time_interleaved(fns, Budget(per_impl_s=0.1 * rounds, rounds=rounds))
    print(header)
    base = next(iter(res.values())).median_s
    extra = " first / this |" if ratio_to_first else ""
    print(f"| stage | median | +-IQR/2 |{extra}\n|---|---:|---:|{'---:|' if extra else ''}")
    for label, t in res.items():
        ratio = f" {base / t.median_s:.2f} |" if ratio_to_first else ""
        print(f"| {label} | {format_time(t.median_s)} | {50 * t.spread:.0f}% |{ratio}")
