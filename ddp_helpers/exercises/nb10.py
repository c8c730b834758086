"""Checks of notebook 10, performance: the alpha-beta model and DDP's buckets."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch

from ddp_helpers.exercises.core import REL_TOL, Answer, Exercise, check, same_numbers


@check
def check_10_1(*, one_message: Answer[float], per_tensor: Answer[float], alpha: float, beta: float,
               model: torch.nn.Module) -> None:
    ex = Exercise("10.1")
    ex.given(one_message=one_message, per_tensor=per_tensor)
    sizes = [p.numel() * p.element_size() for p in model.parameters()]
    ex.require(same_numbers(one_message, alpha + beta * sum(sizes)),
               f"`one_message` is not the alpha-beta time of one message of all gradients (rel. tol. {REL_TOL}).",
               "alpha + beta * (total bytes); float32 gradients have 4 bytes per value.")
    ex.require(same_numbers(per_tensor, sum(alpha + beta * b for b in sizes)),
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


@check
def check_10_2(*, predict_buckets: Answer[Callable[[Sequence[int], float], int]],
               predicted_buckets: Answer[Mapping[str, int]], recorded: Mapping[str, int]) -> None:
    ex = Exercise("10.2")
    ex.given(predict_buckets=predict_buckets, predicted_buckets=predicted_buckets)
    ex.function("predict_buckets", predict_buckets)
    for nbytes, cap in (([3, 5, 2, 9], 6), ([10], 4), ([1, 1], 8), ([4, 4, 4], 8)):
        ex.require(predict_buckets(nbytes, cap) == _reference_count(nbytes, cap),
                   f"predict_buckets({nbytes}, {cap}) is wrong.",
                   "close a bucket when its size reaches the cap (>=) and count a last partly filled one.")
    ex.require(dict(predicted_buckets) == dict(recorded),
               "`predicted_buckets` differs from the counts the worker recorded.",
               "walk the parameters in reversed(list(model.parameters())) order, caps in MiB (ddp_helpers.perf.timing.MiB).")
    ex.correct()


@check
def check_10_3(*, crossover: Answer[float], alpha: float, beta: float) -> None:
    ex = Exercise("10.3")
    ex.given(crossover=crossover)
    ex.require(same_numbers(alpha + beta * crossover, 2 * alpha),
               f"at `crossover` bytes the bandwidth term is not equal to the latency (rel. tol. {REL_TOL}).",
               "solve beta * S = alpha for S.")
    ex.correct()
