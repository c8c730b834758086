"""Checks of notebook 04, DDP fundamentals: unused parameters, uneven shards, buckets."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from ddp_helpers.exercises.core import ATOL, Answer, Exercise, call, check, sequence, tensor

MiB = 2**20
Arrival = Sequence[tuple[str, int]]  # (parameter name, gradient bytes) in the order the gradients are ready


def _unused_names() -> set[str]:
    """The worker's head_b is an nn.Linear that the forward never calls."""
    return {f"head_b.{n}" for n, _ in torch.nn.Linear(10, 5).named_parameters()}


def _names(value: object) -> list[str] | None:
    """Parameter names as a list, tuple, set or array of strings, or as the error's own text
    ("layer.weight, layer.bias"); None otherwise."""
    if isinstance(value, str):
        value = [n for n in re.split(r"[,\s]+", value.strip()) if n]
    items = sequence(value)
    if items is None or not all(isinstance(n, str | np.str_) for n in items):
        return None
    return [str(n).strip() for n in items]


@check
def check_04_1(*, unused: Answer[list[str] | tuple[str, ...] | set[str]]) -> None:
    ex = Exercise("04.1")
    ex.given(unused=unused)
    names = _names(unused)
    ex.require(names is not None, "`unused` is not a list of parameter names (strings).",
               "collect the names as strings, e.g. a list like [\"layer.weight\", ...].")
    ex.require(len(set(names)) == len(names) and set(names) == _unused_names(),
               "`unused` is not the set of parameter names that the INFO error lists.",
               "catch WorkerFailed, find the line starting with \"Parameters which\" in `.traceback_tail`, "
               "and split the names after the colon at \", \".")
    ex.correct()


def _grads_of(model: torch.nn.Module, loss: torch.Tensor) -> list[torch.Tensor]:
    return [g.detach() for g in torch.autograd.grad(loss, list(model.parameters()))]


def _lesson_data() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """The exercise's model and batch, made again from its seed (the exercise cell's first two lines), with
    the global random state left as it was: the learner's own names may have been rebound since."""
    from ddp_helpers.models import ToyModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return ToyModel(), torch.randn(8, 10), torch.randn(8, 5)


def _gradients(value: object, model: torch.nn.Module) -> list[torch.Tensor] | None:
    """One gradient per parameter: a list, tuple or dict keyed by position or by the parameter's name
    (a "module." prefix allowed), each a tensor, an array or nested lists; None otherwise."""
    if isinstance(value, Mapping):
        named = {str(k).removeprefix("module."): v for k, v in value.items()}
        order = [n for n, _ in model.named_parameters()]
        if set(named) == set(order):
            value = [named[n] for n in order]
    items = sequence(value)
    if items is None:
        return None
    out = [tensor(v) for v in items]
    return None if any(t is None for t in out) else out  # type: ignore[return-value]


def _max_diff(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    """The largest difference (inf when a shape differs)."""
    diffs = []
    for x, y in zip(a, b, strict=True):
        x = x.detach().to(torch.float64)
        if x.shape != y.shape:
            return float("inf")
        diffs.append((x - y.to(torch.float64)).abs().max().item())
    return max(diffs)


@check
def check_04_2(*, ddp_like: Answer[list[torch.Tensor]], weighted: Answer[list[torch.Tensor]],
               model: torch.nn.Module | None = None, x: torch.Tensor | None = None,
               y: torch.Tensor | None = None) -> None:
    """The truth comes from the exercise's seed, made again here: `model`, `x` and `y` are accepted (the check
    cell passes them) but not used, since a loop in the learner's cell may have rebound them."""
    ex = Exercise("04.2")
    ex.given(ddp_like=ddp_like, weighted=weighted)
    model, x, y = _lesson_data()
    mse = torch.nn.functional.mse_loss
    full = _grads_of(model, mse(model(x), y))
    n = len(full)
    got = {}
    for name, value in (("ddp_like", ddp_like), ("weighted", weighted)):
        got[name] = _gradients(value, model)
        ex.require(got[name] is not None and len(got[name]) == n,
                   f"`{name}` is not a list of one gradient tensor per parameter ({n}).",
                   "use `grads(model)` (ddp_helpers.compare) after each backward.")
    g0, g1 = _grads_of(model, mse(model(x[:6]), y[:6])), _grads_of(model, mse(model(x[6:]), y[6:]))
    ex.require(_max_diff(got["ddp_like"], [(a + b) / 2 for a, b in zip(g0, g1, strict=True)]) <= ATOL,
               f"`ddp_like` is not the plain average of the two shards' gradients (atol {ATOL}).",
               "rank 0 has samples 0-5, rank 1 samples 6-7, each with the mean loss of its own samples.")
    ex.require(_max_diff(got["weighted"], full) <= ATOL,
               f"`weighted` does not equal the gradient of the mean loss over all 8 samples (atol {ATOL}).",
               "DDP still divides by the world size: weight each rank's mean by its share of the samples times 2.")
    ex.correct()


def _reference_buckets(names_and_bytes: Arrival, cap: float, first: float) -> list[list[str]]:
    cap, first = int(cap), int(first)  # DDP's caps are whole bytes: int(bucket_cap_mb * 2**20)
    buckets, current, size = [], [], 0
    for name, nbytes in names_and_bytes:
        current.append(name)
        size += nbytes
        if size >= (first if not buckets else cap):
            buckets.append(current)
            current, size = [], 0
    return buckets + ([current] if current else [])


def _worker_arrival() -> list[tuple[str, torch.Tensor]]:
    """The gradients of the worker's model (scripts/04_buckets.py: square_mlp(256, 2)) in the order
    backward makes them ready: the last layer's first."""
    from ddp_helpers.models import square_mlp

    return list(reversed(list(square_mlp(256, 2).named_parameters())))


# bucket_cap_mb as the worker passed it -> (cap, first bucket's cap) in bytes: DDP's default cap is
# 25 MiB with a first bucket of dist._DEFAULT_FIRST_BUCKET_BYTES (1 MiB); a cap given applies to both.
_CAPS = {"None": (25 * MiB, MiB), "0.05": (int(0.05 * MiB),) * 2, "0.001": (int(0.001 * MiB),) * 2}


def _ddp_buckets(cap: int, first: int) -> list[list[str]]:
    """The buckets DDP rebuilds after its first step: its Reducer's own assignment
    (torch.distributed._compute_bucket_assignment_by_size) over the worker's gradients in ready order."""
    import torch.distributed as dist

    named = _worker_arrival()
    indices, _ = dist._compute_bucket_assignment_by_size([p for _, p in named], [first, cap],
                                                         [False] * len(named), list(range(len(named))))
    return [[named[i][0] for i in bucket] for bucket in indices]


def _as_buckets(value: object) -> list[list[str]] | None:
    """Buckets as lists of names: lists, tuples, arrays, or a dict keyed by bucket index."""
    outer = sequence(value)
    inner = None if outer is None else [sequence(b) for b in outer]
    if inner is None or any(b is None or not all(isinstance(n, str | np.str_) for n in b) for b in inner):
        return None
    return [[str(n) for n in b] for b in inner]  # type: ignore[union-attr]


@check
def check_04_3(*, predict_buckets: Answer[Callable[[Arrival, float, float], list[list[str]]]]) -> None:
    """The truth is DDP's own: its Reducer's bucket assignment over the worker's model (scripts/04_buckets.py),
    not a record or an arrival order that the check cell passes."""
    ex = Exercise("04.3")
    ex.given(predict_buckets=predict_buckets)
    ex.function("predict_buckets", predict_buckets)
    cases = [([("a", 3), ("b", 5), ("c", 2), ("d", 9)], 6, 4), ([("a", 10)], 4, 4), ([("a", 1), ("b", 1)], 8, 1),
             ([("a", 4), ("b", 4), ("c", 4)], 8, 100)]
    for items, cap, first in cases:
        ex.require(_as_buckets(call(predict_buckets, items, cap, first)) == _reference_buckets(items, cap, first),
                   f"predict_buckets({items}, {cap}, {first}) is wrong.",
                   "a bucket closes as soon as its size reaches the cap (>=), the first bucket uses first_cap_bytes, "
                   "and a last partly filled bucket counts too.")
    arrival = [(name, p.numel() * p.element_size()) for name, p in _worker_arrival()]
    for cap, (cap_bytes, first) in _CAPS.items():
        ex.require(_as_buckets(call(predict_buckets, arrival, cap_bytes, first)) == _ddp_buckets(cap_bytes, first),
                   f"the prediction for bucket_cap_mb={cap} differs from the buckets DDP makes for the worker's model.",
                   "walk the parameters in reverse order of model.named_parameters(); the default cap is 25 MiB "
                   "with a first bucket of 1 MiB.")
    ex.correct()
