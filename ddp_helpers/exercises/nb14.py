"""Checks of notebook 14, context and sequence parallelism."""

from __future__ import annotations

import math
import os
from fractions import Fraction

import torch

from ddp_helpers.exercises.core import F32_ATOL, Answer, Exercise, check, close, integer_list, tensor


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Full attention of q over every key, in float64."""
    q, k, v = (torch.as_tensor(t).detach().double() for t in (q, k, v))
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


def _lesson_qkv(head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The exercise's q, k and v made again from its seed (torch.manual_seed(1), then three
    randn(1, 2, 16, HEAD_DIM)), the global random state left as it was: a loop over blocks in the learner's
    cell may have rebound `k` and `v` since."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        return tuple(torch.randn(1, 2, 16, head_dim) for _ in range(3))  # type: ignore[return-value]


def _head_dim(got: torch.Tensor | None) -> int:
    """The lesson's HEAD_DIM knob: the last size of the answer when it has the exercise's shape (1, 2, 16, d),
    else the knob as the notebook reads it."""
    if got is not None and got.ndim >= 3 and tuple(got.shape[-3:-1]) == (2, 16) and 0 < got.shape[-1] <= 1024:
        return int(got.shape[-1])
    try:
        return max(1, int(os.environ.get("HEAD_DIM", "6")))
    except ValueError:
        return 6


@check
def check_14_1(*, merged: Answer[torch.Tensor], q: torch.Tensor | None = None, k: torch.Tensor | None = None,
               v: torch.Tensor | None = None) -> None:
    """The truth comes from the exercise's seed; `q`, `k` and `v` are accepted (the check cell passes them) but
    not used."""
    ex = Exercise("14.1")
    ex.given(merged=merged)
    got = tensor(merged)
    truth = _attention(*_lesson_qkv(_head_dim(got)))
    if got is not None and got.numel() == truth.numel() and got.squeeze().shape == truth.squeeze().shape:
        got = got.reshape(truth.shape)  # without the batch dimension of 1 it is the same answer
    ex.require(got is not None and tuple(got.shape) == tuple(truth.shape),
               "`merged` is not an attention output of q's shape.",
               "one output row per query: the partials have q's shape, and so has their merge.")
    error = (got.double() - truth).abs().max().item()
    ex.require(error <= F32_ATOL, f"`merged` is not the attention of q over all keys (atol {F32_ATOL}, float32).",
               "weight each block's output by exp(its log-sum-exp - the log-sum-exp of all blocks), then add; "
               "a plain mean ignores how much of the softmax each block holds.")
    ex.correct()


def _zigzag(rank: int, world: int = 8, seq_len: int = 64) -> list[int]:
    size = seq_len // (2 * world)
    first, second = rank, 2 * world - 1 - rank
    return [*range(first * size, (first + 1) * size), *range(second * size, (second + 1) * size)]


def _contiguous_ratio(world: int = 8) -> Fraction:
    # rank r holds chunks 2r and 2r + 1 of 2N: 2r + 1 and 2r + 2 visible tiles, two of them diagonal halves
    work = [Fraction(4 * r + 3) - 1 for r in range(world)]
    return max(work) / (sum(work) / world)


@check
def check_14_2(*, zigzag_rank_3: Answer[list[int]], contiguous_ratio: Answer[float]) -> None:
    ex = Exercise("14.2")
    ex.given(zigzag_rank_3=zigzag_rank_3, contiguous_ratio=contiguous_ratio)
    got = integer_list(zigzag_rank_3)
    ex.require(got is not None and len(got) == 8, "`zigzag_rank_3` is not 8 token positions.",
               "64 tokens over 8 ranks: 8 positions per rank, as a list of ints.")
    ex.require(sorted(got) == _zigzag(3), "`zigzag_rank_3` holds the wrong tokens.",
               "cut the sequence in 2N = 16 chunks of 4; rank r holds chunk r and chunk 2N - 1 - r.")
    ex.require(got == _zigzag(3), "`zigzag_rank_3` is not in order.", "list the positions from small to large.")
    ex.require(close(contiguous_ratio, float(_contiguous_ratio())), "`contiguous_ratio` is wrong.",
               "rank r holds chunks 2r and 2r + 1 (of 16); count its visible tiles, a diagonal tile as 1/2, "
               "and divide the largest count by the mean.")
    ex.correct()
