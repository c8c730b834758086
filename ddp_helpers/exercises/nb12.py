"""Checks of notebook 12, DTensor and tensor parallelism."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ddp_helpers.exercises.core import Answer, Exercise, check


@check
def check_12_1(*, partials: Answer[Sequence[torch.Tensor]], dense: torch.nn.Module, x: torch.Tensor,
               tol: float) -> None:
    ex = Exercise("12.1")
    ex.given(partials=partials)
    ex.require(isinstance(partials, list | tuple) and len(partials) == 2, "`partials` is not two partial outputs.",
               "one partial output per simulated rank.")
    with torch.no_grad():
        expected = dense(x)
        parts = [torch.as_tensor(p).detach() for p in partials]
        ex.require(parts[0].shape == expected.shape, "a partial output does not have the dense output's shape.",
                   "multiply the hidden slice by the matching columns of down.weight.")
        ex.require((parts[0] + parts[1] + dense.down.bias - expected).abs().max().item() <= tol,
                   f"the partials plus down.bias do not equal the dense output (tol {tol}).",
                   "rows of `up` (weight and bias) and the same indices as columns of `down`; add down.bias once.")
        ex.require((parts[0] + dense.down.bias - expected).abs().max().item() > 0.1,
                   "one partial alone already matches the dense output.", "each half must use only its own rows.")
    ex.correct()


def _tp_bytes(batch: int, layers: int = 24, seq: int = 2048, hidden: int = 2048, nbytes: int = 2) -> int:
    """Tensor parallelism's all-reduce bytes for a micro-batch: 2 blocks x (forward + backward) per layer."""
    return layers * 2 * 2 * nbytes * batch * seq * hidden


@check
def check_12_2(*, crossover: Answer[int]) -> None:
    ex = Exercise("12.2")
    ex.given(crossover=crossover)
    layers, hidden, nbytes = 24, 2048, 2
    dp = nbytes * layers * 12 * hidden**2
    ex.require(isinstance(crossover, int) and _tp_bytes(crossover - 1) < dp <= _tp_bytes(crossover),
               "`crossover` is not the smallest micro-batch at which TP moves at least as many bytes as DP.",
               "per layer: 2 blocks x (forward + backward) all-reduces of batch x seq x hidden fp16 values, "
               "against one all-reduce of 12 x hidden^2 fp16 gradients.")
    ex.correct()


@check
def check_12_3(*, averaged: Answer[torch.Tensor], dense: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
               tol: float) -> None:
    ex = Exercise("12.3")
    ex.given(averaged=averaged)
    mse = torch.nn.functional.mse_loss

    def grad(loss: torch.Tensor) -> torch.Tensor:
        return torch.autograd.grad(loss, [dense.up.weight])[0]

    halves = [grad(mse(dense(a), b, reduction="sum")) for a, b in zip(x.chunk(2), y.chunk(2), strict=True)]
    truth = (halves[0] + halves[1]) / 2
    ex.require(torch.is_tensor(averaged) and averaged.shape == truth.shape,
               "`averaged` is not a gradient of `dense.up.weight`.", "average the two halves' gradients of up.weight.")
    ex.require(torch.allclose(averaged, truth, atol=tol),
               f"`averaged` is not the average of the two halves' gradients of the sum loss (atol {tol}).",
               "reduction=\"sum\" on each half of 8 samples, then (g0 + g1) / 2.")
    ex.correct()
