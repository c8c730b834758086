"""Checks of notebook 12, DTensor and tensor parallelism."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ddp_helpers.exercises.core import F32_ATOL, Answer, Exercise, check, integer, sequence, tensor


def _partials(dense: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """Each half of the hidden units' partial output (without down.bias), in float64."""
    with torch.no_grad():
        w_up, b_up, w_down = (t.detach().double() for t in (dense.up.weight, dense.up.bias, dense.down.weight))
        half = w_up.shape[0] // 2
        return [torch.relu(x.double() @ w_up[rows].T + b_up[rows]) @ w_down[:, rows].T
                for rows in (slice(0, half), slice(half, None))]


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal to F32_ATOL: the exercise computes in float32, so values of size ~1 differ by its rounding."""
    return a.shape == b.shape and bool((a.double() - b.double()).abs().max() <= F32_ATOL)


def _lesson_data(rows: int, with_y: bool) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor | None]:
    """The exercise's layer and batch made again from its seed (torch.manual_seed(0); MLP(16, 64), then
    randn(rows, 16), and for 12.3 a target of the same shape), the global random state left as it was: a
    loop in the learner's cell may have rebound `dense`, `x` or `y` since."""
    from ddp_helpers.tensor_parallel import MLP

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        dense, x = MLP(16, 64), torch.randn(rows, 16)
        return dense, x, torch.randn(rows, 16) if with_y else None


def _tensors(value: object) -> list[torch.Tensor] | None:
    items = sequence(value)
    out = None if items is None else [tensor(v) for v in items]
    return None if out is None or any(t is None for t in out) else out  # type: ignore[return-value]


@check
def check_12_1(*, partials: Answer[Sequence[torch.Tensor]], dense: torch.nn.Module | None = None,
               x: torch.Tensor | None = None) -> None:
    """The truth comes from the exercise's seed; `dense` and `x` are accepted (the check cell passes them)
    but not used."""
    ex = Exercise("12.1")
    ex.given(partials=partials)
    parts = _tensors(partials)
    ex.require(parts is not None and len(parts) == 2, "`partials` is not two partial outputs.",
               "one partial output per simulated rank, each a tensor.")
    dense, x, _ = _lesson_data(8, with_y=False)
    truth = _partials(dense, x)
    ex.require(all(p.shape == truth[0].shape for p in parts), "a partial output does not have the dense output's shape.",
               "multiply the hidden slice by the matching columns of down.weight.")
    ex.require(_close(parts[0] + parts[1], truth[0] + truth[1]),
               f"the partials plus down.bias do not equal the dense output (atol {F32_ATOL}, float32).",
               "rows of `up` (weight and bias) and the same indices as columns of `down`; add down.bias once.")
    ex.require(all(_close(p, t) for p, t in zip(parts, truth, strict=True)),
               "a partial output is not what its half of the hidden units gives.",
               "each half must use only its own rows: rank r takes split_range(64, r, 2).")
    ex.correct()


def _tp_bytes(batch: int, layers: int = 24, seq: int = 2048, hidden: int = 2048, nbytes: int = 2) -> int:
    """Tensor parallelism's all-reduce bytes for a micro-batch: 2 blocks x (forward + backward) per layer."""
    return layers * 2 * 2 * nbytes * batch * seq * hidden


def _is_crossover(batch: int | None, layers: int = 24, hidden: int = 2048, nbytes: int = 2) -> bool:
    dp = nbytes * layers * 12 * hidden**2
    return batch is not None and _tp_bytes(batch - 1) < dp <= _tp_bytes(batch)


@check
def check_12_2(*, crossover: Answer[int]) -> None:
    ex = Exercise("12.2")
    ex.given(crossover=crossover)
    ex.require(_is_crossover(integer(crossover)),
               "`crossover` is not the smallest micro-batch at which TP moves at least as many bytes as DP.",
               "per layer: 2 blocks x (forward + backward) all-reduces of batch x seq x hidden fp16 values, "
               "against one all-reduce of 12 x hidden^2 fp16 gradients.")
    ex.correct()


@check
def check_12_3(*, averaged: Answer[torch.Tensor], dense: torch.nn.Module | None = None,
               x: torch.Tensor | None = None, y: torch.Tensor | None = None) -> None:
    """The truth comes from the exercise's seed; `dense`, `x` and `y` are accepted but not used."""
    ex = Exercise("12.3")
    ex.given(averaged=averaged)
    dense, x, y = _lesson_data(16, with_y=True)
    mse = torch.nn.functional.mse_loss

    def grad(loss: torch.Tensor) -> torch.Tensor:
        return torch.autograd.grad(loss, [dense.up.weight])[0]

    halves = [grad(mse(dense(a), b, reduction="sum")) for a, b in zip(x.chunk(2), y.chunk(2), strict=True)]
    truth = (halves[0] + halves[1]) / 2
    got = tensor(averaged)
    ex.require(got is not None and tuple(got.shape) == tuple(truth.shape),
               "`averaged` is not a gradient of `dense.up.weight`.",
               "average the two halves' gradients of up.weight: a tensor of up.weight's shape.")
    ex.require(_close(got, truth),
               f"`averaged` is not the average of the two halves' gradients of the sum loss (atol {F32_ATOL}, "
               "float32).",
               "reduction=\"sum\" on each half of 8 samples, then (g0 + g1) / 2.")
    ex.correct()
