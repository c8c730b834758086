"""Checks of notebook 10, performance: the alpha-beta model and DDP's buckets."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch

from ddp_helpers.exercises.core import (
    REL_TOL,
    Answer,
    Exercise,
    caller_namespace,
    check,
    close,
    integer,
    number,
    rel_tol_for,
)


@check
def check_10_1(*, one_message: Answer[float], per_tensor: Answer[float], alpha: float, beta: float,
               model: torch.nn.Module) -> None:
    ex = Exercise("10.1")
    ex.given(one_message=one_message, per_tensor=per_tensor)
    sizes = [p.numel() * p.element_size() for p in model.parameters()]
    ex.require(close(one_message, alpha + beta * sum(sizes)),
               f"`one_message` is not the alpha-beta time of one message of all gradients (rel. tol. {REL_TOL}).",
               "alpha + beta * (total bytes); float32 gradients have 4 bytes per value.")
    ex.require(close(per_tensor, sum(alpha + beta * b for b in sizes)),
               f"`per_tensor` is not the time of one message per parameter tensor (rel. tol. {REL_TOL}).",
               "each tensor pays its own alpha.")
    ex.correct()


def _reference_count(nbytes: Sequence[int], cap: float) -> int:
    buckets, size = 0, 0
    for b in nbytes:
        size += b
        if size >= cap:
            buckets, size = buckets + 1, 0
    return buckets + (size > 0)


def _by_cap(counts: object) -> dict[float, int] | None:
    """Bucket counts keyed by the cap in MiB as a number ("0.5" and 0.5 alike)."""
    if not isinstance(counts, Mapping):
        return None
    try:
        out = {float(k): integer(v) for k, v in counts.items()}
    except (TypeError, ValueError):
        return None
    return None if None in out.values() else out  # type: ignore[return-value]


def _arrival(width: object) -> list[int] | None:
    """The gradients' bytes in arrival order of the notebook's model (None without its width)."""
    if integer(width) is None or isinstance(width, bool) or not 0 < integer(width) <= 4096:
        return None
    from ddp_helpers.models import square_mlp

    return [4 * p.numel() for p in reversed(list(square_mlp(integer(width), 4, seed=0).parameters()))]


@check
def check_10_2(*, predict_buckets: Answer[Callable[[Sequence[int], float], int]],
               predicted_buckets: Answer[Mapping[str, int]], recorded: Mapping[str, int]) -> None:
    ex = Exercise("10.2")
    ex.given(predict_buckets=predict_buckets, predicted_buckets=predicted_buckets)
    ex.function("predict_buckets", predict_buckets)
    for nbytes, cap in (([3, 5, 2, 9], 6), ([10], 4), ([1, 1], 8), ([4, 4, 4], 8)):
        ex.require(integer(predict_buckets(nbytes, cap)) == _reference_count(nbytes, cap),
                   f"predict_buckets({nbytes}, {cap}) is wrong.",
                   "close a bucket when its size reaches the cap (>=) and count a last partly filled one.")
    got = _by_cap(predicted_buckets)
    ex.require(got is not None and got == _by_cap(recorded),
               "`predicted_buckets` differs from the counts the worker recorded.",
               "walk the parameters in reversed(list(model.parameters())) order, caps in MiB (ddp_helpers.perf.timing.MiB).")
    arrival = _arrival(caller_namespace().get("WIDTH"))
    ex.require(arrival is None or got == {cap: integer(predict_buckets(arrival, cap * 2**20)) for cap in got},
               "`predicted_buckets` is not what your `predict_buckets` gives for the model's gradients.",
               "call your function on the arrival order of square_mlp(WIDTH, 4, seed=0), once per cap.")
    ex.correct()


@check
def check_10_3(*, crossover: Answer[float], alpha: float, beta: float) -> None:
    ex = Exercise("10.3")
    ex.given(crossover=crossover)
    x = number(crossover)
    ex.require(x is not None and close(alpha + beta * x, 2 * alpha, rel_tol=rel_tol_for(crossover)),
               f"at `crossover` bytes the bandwidth term is not equal to the latency (rel. tol. {REL_TOL}).",
               "solve beta * S = alpha for S.")
    ex.correct()
