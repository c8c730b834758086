"""Timing that is correct on GPUs, the spread of repeated timings, and the alpha-beta arithmetic.

    from ddp_helpers.perf.timing import elapsed, spread, verdict

    seconds = elapsed(train_step, device=ctx.device)   # synchronizes CUDA before each clock read
    spread(times)          # {"n", "min", "q1", "median", "q3", "max"}
    verdict("DDP", ddp_times, "flat", flat_times)   # a sentence; "no measurable difference" unless
                                                    # the interquartile ranges are disjoint
    time_collective(op, repeats=20)                 # inside a process group: the slowest rank's times
    alpha_beta(sweep)                               # t = alpha + beta * n fitted, and where it holds

CUDA kernels are queued, not run, when Python calls them: a clock read right after a step
measures the launches. :func:`elapsed` therefore calls ``torch.cuda.synchronize(device)``
("wait for all kernels in all streams on a CUDA device to complete", ``torch/cuda/__init__.py``,
``synchronize``) before starting and before stopping the clock, as PyTorch's own benchmark timer
does (``torch/utils/benchmark/utils/timer.py``, ``timer``). On the CPU it is a plain
``time.perf_counter`` difference.

Inside a process group, a time is the wall-clock time of the *slowest* rank (max over ranks) for
one call; ranks start each call together after a barrier (:func:`time_collective`).
Implementations compared with each other are measured side by side, one call of each per round,
the order rotating every round, so that a change of machine load hits all of them
(:func:`compare_collectives`). Tensors live on the device of the process group's backend
(:func:`default_device`: ``cuda`` under nccl, chosen by :mod:`ddp_helpers.runtime`).
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
import torch.distributed as dist

KiB = 1024
MiB = 1024 * KiB

# --------------------------------------------------------------------------- the clock


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


# --------------------------------------------------------------------------- repeated timings


def median(values: Sequence[float]) -> float:
    """The median, as a float."""
    return float(statistics.median(values))


def spread(values: Sequence[float]) -> dict[str, float]:
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


def ms_spread(s: Mapping[str, float]) -> str:
    """A :func:`spread` of seconds as 'median ms [min-max]'."""
    return f"{s['median'] * 1e3:.1f} ms [{s['min'] * 1e3:.1f}-{s['max'] * 1e3:.1f}]"


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


def machine() -> dict:
    """What the numbers were measured on, and the load when this was called."""
    return {"python": platform.python_version(), "torch": torch.__version__,
            "platform": platform.platform(terse=True), "cpu_count": os.cpu_count(),
            "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
            "load_average_1min": load_average()}


# --------------------------------------------------------------------------- alpha-beta arithmetic


def message_sizes(lo: int = 4 * KiB, hi: int = 64 * MiB, factor: int = 4) -> list[int]:
    """Message sizes in bytes from ``lo`` to ``hi`` (inclusive when reached), times ``factor``."""
    if lo <= 0 or hi < lo or factor < 2:
        raise ValueError(f"need 0 < lo <= hi and factor >= 2, got {lo}, {hi}, {factor}")
    sizes, size = [], lo
    while size <= hi:
        sizes.append(size)
        size *= factor
    return sizes


def fit_latency_bandwidth(nbytes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """Fit ``t = alpha + beta * n`` (alpha in s, beta in s/byte) by least squares on relative error.

    Each point is weighted by 1/t, so the small messages (which set alpha) count as much as the
    large ones (which set beta).
    """
    n, t = np.asarray(nbytes, dtype=float), np.asarray(seconds, dtype=float)
    if n.shape != t.shape or n.size < 2 or np.any(t <= 0):
        raise ValueError("need at least two (size, positive time) pairs")
    design = np.stack([np.ones_like(n), n], axis=1) / t[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    return float(alpha), float(beta)


def fit_residuals(nbytes: Sequence[float], seconds: Sequence[float], alpha: float, beta: float) -> list[float]:
    """Relative residual of each point: measured / (alpha + beta * n) - 1 (0.5 = 50 % slower than the model)."""
    return [float(t / (alpha + beta * n) - 1) for n, t in zip(nbytes, seconds, strict=True)]


def model_holds(nbytes: Sequence[int], residuals: Sequence[float], tolerance: float = 0.25) -> tuple[int, int] | None:
    """The longest run of consecutive sizes whose |residual| <= tolerance, as (first, last) bytes.

    None when no point is within the tolerance. This is the range over which the fitted model
    may be quoted.
    """
    best: tuple[int, int, int] | None = None  # (first, last, number of sizes)
    first, length = 0, 0
    for n, r in zip(nbytes, residuals, strict=True):
        if abs(r) > tolerance:
            length = 0
            continue
        first, length = (n if length == 0 else first), length + 1
        if best is None or length > best[2]:
            best = (first, n, length)
    return None if best is None else (best[0], best[1])


def alpha_beta(sweep: Mapping[str, Sequence[float]], tolerance: float = 0.25) -> dict:
    """The alpha-beta fit of a sweep (``bytes``, median ``seconds``), its residuals, and where it holds."""
    alpha, beta = fit_latency_bandwidth(sweep["bytes"], sweep["seconds"])
    residuals = fit_residuals(sweep["bytes"], sweep["seconds"], alpha, beta)
    holds = model_holds(sweep["bytes"], residuals, tolerance)
    return {"alpha_s": alpha, "beta_s_per_byte": beta, "residuals": residuals, "tolerance": tolerance,
            "holds_bytes": list(holds) if holds else None}


def bus_bandwidth(nbytes: float, seconds: float, world_size: int) -> float:
    """Bytes/s each rank moves in a bandwidth-optimal all-reduce: 2(N-1)/N * size / time."""
    return 2 * (world_size - 1) / world_size * nbytes / seconds


def scaling_efficiency(samples_per_s_1: float, samples_per_s_n: float, n: int) -> float:
    """Throughput with n processes over n times the throughput of one (1.0 = perfect)."""
    return samples_per_s_n / (n * samples_per_s_1)


# --------------------------------------------------------------------------- inside a process group


def default_device(group: dist.ProcessGroup | None = None) -> torch.device:
    """Where this rank's tensors live for ``group``'s backend: its GPU under nccl, else the CPU."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _max_over_ranks(values: Sequence[float], group: dist.ProcessGroup | None = None) -> list[float]:
    t = torch.tensor(list(values), dtype=torch.float64, device=default_device(group))
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.tolist()


def time_collective(op: Callable[[], object], repeats: int = 5, warmup: int = 1,
                    setup: Callable[[], object] | None = None,
                    group: dist.ProcessGroup | None = None) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``op()``, on the slowest rank of ``group``.

    ``setup()`` (not timed) runs before every call, e.g. to refill a tensor that ``op``
    reduces in place. A barrier lines the ranks up before each timed call; the clock is read
    with :func:`elapsed`, after the GPU's queued work when on CUDA.
    """
    device = default_device(group)
    for _ in range(warmup):
        if setup is not None:
            setup()
        op()
    times = []
    for _ in range(repeats):
        if setup is not None:
            setup()
        dist.barrier(group=group)
        times.append(elapsed(op, device))
    return _max_over_ranks(times, group)


def compare_collectives(ops: Mapping[str, Callable[[], object]], repeats: int = 5, warmup: int = 1,
                        setup: Callable[[], object] | Mapping[str, Callable[[], object]] | None = None,
                        group: dist.ProcessGroup | None = None) -> dict[str, list[float]]:
    """Time several implementations side by side: one call of each per round, the order rotating.

    ``setup`` is one callable for all, or a dict giving each name its own.
    """
    names = list(ops)
    setups = setup if isinstance(setup, Mapping) else dict.fromkeys(names, setup)
    for name in names:
        for _ in range(warmup):
            if setups.get(name) is not None:
                setups[name]()
            ops[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        k = round_ % len(names)
        for name in names[k:] + names[:k]:
            times[name] += time_collective(ops[name], repeats=1, warmup=0, setup=setups.get(name), group=group)
    return times
