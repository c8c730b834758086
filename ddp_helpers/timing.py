"""Wall-clock timing that is correct on GPUs, and the spread of repeated timings.

    from ddp_helpers.timing import elapsed, spread, verdict

    seconds = elapsed(train_step, device=ctx.device)   # synchronizes CUDA before each clock read
    spread(times)          # {"n", "min", "q1", "median", "q3", "max"}
    verdict("DDP", ddp_times, "flat", flat_times)   # a sentence; "no measurable difference" unless
                                                    # the interquartile ranges are disjoint

CUDA kernels are queued, not run, when Python calls them: a clock read right after a step
measures the launches. :func:`elapsed` therefore calls ``torch.cuda.synchronize(device)``
("wait for all kernels in all streams on a CUDA device to complete", ``torch/cuda/__init__.py``,
``synchronize``) before starting and before stopping the clock, as PyTorch's own benchmark timer
does (``torch/utils/benchmark/utils/timer.py``, ``timer``). On the CPU it is a plain
``time.perf_counter`` difference.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence

import torch


def synchronize(device: torch.device | str | None) -> None:
    """Wait for the GPU's queued work when ``device`` is a CUDA device; nothing otherwise."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def clock(device: torch.device | str | None = None) -> float:
    """``time.perf_counter()`` read after every queued kernel of ``device`` has finished."""
    synchronize(device)
    return time.perf_counter()


def elapsed(fn: Callable[[], object], device: torch.device | str | None = None) -> float:
    """Seconds ``fn()`` takes, including the GPU work it queued on ``device``."""
    start = clock(device)
    fn()
    return clock(device) - start


def spread(values: Sequence[float]) -> dict:
    """Count, minimum, quartiles, median and maximum of repeated measurements."""
    if not values:
        raise ValueError("no measurements")
    v = sorted(float(x) for x in values)
    if len(v) == 1:
        q1 = q3 = v[0]
    else:
        q1, _, q3 = statistics.quantiles(v, n=4, method="inclusive")
    return {"n": len(v), "min": v[0], "q1": q1, "median": float(statistics.median(v)), "q3": q3,
            "max": v[-1]}


def measurable(a: Sequence[float], b: Sequence[float]) -> bool:
    """True when the two samples' interquartile ranges do not overlap.

    The rule used to conclude anything from timings: a difference counts only when it exceeds
    the spread of both measurements (half of each sample lies inside its interquartile range).
    """
    sa, sb = spread(a), spread(b)
    return sa["q3"] < sb["q1"] or sb["q3"] < sa["q1"]


def verdict(name_a: str, a: Sequence[float], name_b: str, b: Sequence[float]) -> str:
    """``"A is 1.25x faster than B"`` (by medians) when :func:`measurable`, else no difference."""
    if not measurable(a, b):
        return f"{name_a} vs {name_b}: no measurable difference"
    ma, mb = statistics.median(a), statistics.median(b)
    fast, slow, ratio = (name_a, name_b, mb / ma) if ma < mb else (name_b, name_a, ma / mb)
    return f"{fast} is {ratio:.2f}x faster than {slow}"


def load_average() -> float:
    """The machine's 1-minute load average (how many processes wanted a core), rounded."""
    return round(os.getloadavg()[0], 2)
