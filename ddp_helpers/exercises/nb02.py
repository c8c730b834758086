"""Checks of notebook 02, samplers."""

from __future__ import annotations

from collections.abc import Iterable

from torch.utils.data import DataLoader, DistributedSampler

from ddp_helpers.exercises.core import (
    Answer,
    Exercise,
    as_int_list,
    check,
    close,
    flag,
    integer,
    integer_list,
)
from ddp_helpers.exercises.provenance import current_launch
from ddp_helpers.launch import LaunchResult


def _rank_of_ten(r: int, drop_last: bool) -> list[int]:
    """Rank r's indices of 10 samples over 4 ranks, unshuffled."""
    return list(DistributedSampler(range(10), num_replicas=4, rank=r, shuffle=False, drop_last=drop_last))


@check
def check_02_1(*, padded_len: Answer[int], dropped_len: Answer[int], rank3_padded: Answer[list[int]],
               rank3_dropped: Answer[list[int]], repeated: Answer[Iterable[int]],
               unseen: Answer[Iterable[int]]) -> None:
    ex = Exercise("02.1")
    ex.given(padded_len=padded_len, dropped_len=dropped_len, rank3_padded=rank3_padded,
             rank3_dropped=rank3_dropped, repeated=repeated, unseen=unseen)
    rank = _rank_of_ten
    ex.require(integer(padded_len) == len(rank(0, False)), "`padded_len` is not num_samples with drop_last=False.",
               "without drop_last the sampler rounds 10 / 4 up and pads.")
    ex.require(integer(dropped_len) == len(rank(0, True)), "`dropped_len` is not num_samples with drop_last=True.",
               "with drop_last the sampler rounds 10 / 4 down.")
    ex.require(integer_list(rank3_padded) == rank(3, False), "`rank3_padded` is not rank 3's index list (in order).",
               "rank r takes every 4th index of the padded list, starting at r.")
    ex.require(integer_list(rank3_dropped) == rank(3, True), "`rank3_dropped` is not rank 3's index list (in order).",
               "with drop_last the global list is cut to a multiple of 4 before the stride.")
    everything = [i for r in range(4) for i in rank(r, False)]
    ex.require(as_int_list(repeated) == sorted({i for i in everything if everything.count(i) > 1}),
               "`repeated` is not the set of indices that the padding repeats.",
               "the padding appends indices from the start of the list.")
    seen = {i for r in range(4) for i in rank(r, True)}
    ex.require(as_int_list(unseen) == sorted(set(range(10)) - seen),
               "`unseen` is not the set of indices that drop_last leaves out.", "which tail does the cut remove?")
    ex.correct()


@check
def check_02_2(*, twice: Answer[Iterable[int]], never: Answer[Iterable[int]]) -> None:
    ex = Exercise("02.2")
    ex.given(twice=twice, never=never)
    r0 = DistributedSampler(range(12), num_replicas=2, rank=0, seed=0)
    r1 = DistributedSampler(range(12), num_replicas=2, rank=1, seed=0)
    r0.set_epoch(1)
    a, b = set(r0), set(r1)
    ex.require(as_int_list(twice) == sorted(a & b),
               "`twice` is not the set of samples both ranks see at epoch 1.",
               "rank 0 calls set_epoch(1), rank 1 stays at epoch 0 (seed 0, 12 samples); intersect their index sets.")
    ex.require(as_int_list(never) == sorted(set(range(12)) - a - b),
               "`never` is not the set of samples no rank sees.", "the samples in neither rank's set.")
    ex.correct()


def _batches(n: int = 50_000, b: int = 256, gpus: int = 8, lr: float = 0.1) -> tuple[int, int, float]:
    """(global batch, steps per epoch on one rank, linearly scaled learning rate)."""
    loader = DataLoader(range(n), batch_size=b, sampler=DistributedSampler(range(n), num_replicas=gpus, rank=0))
    return gpus * b, len(loader), lr * gpus


@check
def check_02_3(*, global_batch: Answer[int], steps: Answer[int], scaled_lr: Answer[float]) -> None:
    ex = Exercise("02.3")
    ex.given(global_batch=global_batch, steps=steps, scaled_lr=scaled_lr)
    truth = _batches()
    ex.require(integer(global_batch) == truth[0], "`global_batch` is wrong.",
               "each optimizer step averages the batches of every GPU.")
    ex.require(integer(steps) == truth[1], "`steps` is not the number of batches per epoch on one rank.",
               "build `DataLoader(range(50_000), batch_size=256, sampler=DistributedSampler(..., num_replicas=8, "
               "rank=...))` and take its len().")
    ex.require(close(scaled_lr, truth[2]), "`scaled_lr` is not what the linear scaling rule gives.",
               "the rule scales the learning rate by the same factor as the global batch.")
    ex.correct()


def _counts(n: int = 10, world: int = 4) -> tuple[int, int]:
    """(what the padded evaluation counts, what the exact one counts)."""
    return DistributedSampler(range(n), num_replicas=world, rank=0, shuffle=False).total_size, n


@check
def check_02_4(*, four: Answer[LaunchResult], padded_count: Answer[int], exact_count: Answer[int]) -> None:
    ex = Exercise("02.4")
    ex.given(four=four, padded_count=padded_count, exact_count=exact_count)
    current_launch(ex, "four", four, "02_sampler_epochs.py", nproc=4)
    ex.require(flag(four.command, "--dataset-size") == "10" and flag(four.command, "--epochs") == "1",
               "`four` did not run a dataset of 10 samples for 1 epoch.",
               "pass `args=[\"--dataset-size\", 10, \"--epochs\", 1]` to the launch.")
    ex.require(any(str(line).startswith("correct/count:") for line in four.stdout.get(0, [])),
               "rank 0 of `four` did not print the counts.",
               "launch scripts/02_sampler_epochs.py as section 8 wrote it: its rank 0 prints `correct/count: ...`.")
    padded, exact = _counts()
    ex.require(integer(padded_count) == padded, "`padded_count` is not what the padded evaluation counts.",
               "read the count from runs/02_samplers/world4.json (`padded` is [correct, count]).")
    ex.require(integer(exact_count) == exact, "`exact_count` is not what the exact evaluation counts.",
               "read the count of the unpadded evaluation from the same JSON file.")
    ex.correct()
