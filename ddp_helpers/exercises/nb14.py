"""Checks of notebook 14, context and sequence parallelism."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import torch

from ddp_helpers.exercises.core import F32_ATOL, Answer, Exercise, check, close, integer_list


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Full attention of q over every key, in float64."""
    q, k, v = (torch.as_tensor(t).detach().double() for t in (q, k, v))
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


@check
def check_14_1(*, merged: Answer[torch.Tensor], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    ex = Exercise("14.1")
    ex.given(merged=merged)
    truth = _attention(q, k, v)
    ex.require(isinstance(merged, torch.Tensor | np.ndarray) and tuple(merged.shape) == tuple(truth.shape),
               "`merged` is not an attention output of q's shape.",
               "one output row per query: the partials have q's shape, and so has their merge.")
    error = (torch.as_tensor(merged).detach().double() - truth).abs().max().item()
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
    ratio = contiguous_ratio
    if isinstance(ratio, Fraction):
        ratio = float(ratio)
    ex.require(close(ratio, float(_contiguous_ratio())), "`contiguous_ratio` is wrong.",
               "rank r holds chunks 2r and 2r + 1 (of 16); count its visible tiles, a diagonal tile as 1/2, "
               "and divide the largest count by the mean.")
    ex.correct()
