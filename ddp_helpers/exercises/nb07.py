"""Checks of notebook 07, SyncBN, distributed evaluation and early stopping."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DistributedSampler

from ddp_helpers.evaluation import EarlyStopping, EvalResult
from ddp_helpers.exercises.core import (
    ATOL,
    Answer,
    Exercise,
    by_rank,
    check,
    close,
    integer,
    number,
    run_file,
    run_json,
    sequence,
)
from ddp_helpers.exercises.provenance import lesson_run


@check
def check_07_1(*, shards: Answer[Sequence[torch.Tensor]], mean_of_means: Answer[float],
               pooled: Answer[float]) -> None:
    ex = Exercise("07.1")
    ex.given(shards=shards, mean_of_means=mean_of_means, pooled=pooled)
    parts = [torch.as_tensor(s).double().flatten() for s in sequence(shards) or []]
    sizes = [len(s) for s in parts]
    ex.require(sizes == [3, 5], "the shards do not hold 3 and 5 values.",
               "split an 8-value tensor into its first 3 and last 5 rows.")
    truth = torch.cat(parts).mean().item()
    means = [s.mean().item() for s in parts]
    ex.require(close(pooled, truth, abs_tol=ATOL),
               f"`pooled` is not the mean of all 8 values (atol {ATOL}).",
               "combine sums: sum(mean * count) / sum(count).")
    ex.require(close(mean_of_means, sum(means) / 2, abs_tol=ATOL),
               f"`mean_of_means` is not the plain average of the two shard means (atol {ATOL}).",
               "average the two means from batch_stats, ignoring the counts.")
    ex.require(abs(sum(means) / 2 - truth) > 1e-3,
               "with your values the two averages agree, so they show nothing.",
               "use values whose two shards have clearly different means.")
    ex.correct()


EVAL_RUN = Path("runs/07_eval_earlystop")
EVAL_LAUNCH = "the launch of scripts/07_eval_earlystop.py (section 2)"
EVAL_SCRIPT, EVAL_NPROC = "07_eval_earlystop.py", 2  # the lesson's launch: 2 processes, into runs/07_eval_earlystop


def _lesson_eval_run(ex: Exercise) -> None:
    """Refuse (blaming the lesson's data) a runs/07_eval_earlystop that the lesson's launch did not write last."""
    lesson_run(ex, EVAL_RUN, EVAL_SCRIPT, EVAL_LAUNCH, nproc=EVAL_NPROC)


def _recorded_losses(ex: Exercise) -> list[float]:
    """Each epoch's validation loss as rank 0 of the lesson's launch recorded it."""
    _lesson_eval_run(ex)
    record = run_json(ex, EVAL_RUN / "rank0.json", EVAL_LAUNCH)
    history = record.get("history") if isinstance(record, dict) else None
    losses = [number(h.get("loss")) if isinstance(h, dict) else None for h in history or []]
    ex.require(losses and None not in losses, f"{EVAL_RUN / 'rank0.json'} holds no history of losses.",
               f"run {EVAL_LAUNCH} again, then this check.")
    return losses  # type: ignore[return-value]


@check
def check_07_2(*, decisions: Answer[Sequence[bool]]) -> None:
    """The history is the one the lesson's launch recorded, read here (not passed by the cell)."""
    ex = Exercise("07.2")
    ex.given(decisions=decisions)
    rule = EarlyStopping(patience=3, mode="min")
    truth = [rule.step(loss) for loss in _recorded_losses(ex)]
    got = sequence(decisions)
    ex.require(got is not None and all(isinstance(d, bool | np.bool_) for d in got) and [bool(d) for d in got] == truth,
               "`decisions` is not what EarlyStopping(patience=3, mode=\"min\") returns epoch by epoch.",
               "feed each recorded epoch's validation loss (not accuracy) to one fresh rule, in order.")
    ex.correct()


@functools.cache
def _test_counts(world: int = 3) -> tuple[int, int]:
    """(the test set's size, what a padded DistributedSampler over ``world`` ranks counts)."""
    from ddp_helpers.data import load_digits_28

    _, _, test = load_digits_28(seed=0)
    size = len(test)
    return size, len(DistributedSampler(range(size), num_replicas=world, rank=0)) * world


def _is_record(record: object) -> bool:
    return isinstance(record, dict) and all(isinstance(record.get(k), dict) and "count" in record[k]
                                            for k in ("exact", "padded"))


@check
def check_07_3(*, res3: Answer[Sequence[dict]]) -> None:
    """The test set's size comes from the data itself, not from the check cell."""
    ex = Exercise("07.3")
    ex.given(res3=res3)
    records = by_rank(res3)
    ex.require(records is not None and len(records) == 3 and all(_is_record(r) for r in records),
               "`res3` is not the three ranks' JSON records.",
               "launch with nproc=3 and load runs/<your out>/rank{r}.json for r in 0, 1, 2.")
    res3, (exact, padded) = records, _test_counts()
    ex.require(all(integer(r["exact"]["count"]) == exact for r in res3),
               "the exact evaluation does not count every test image exactly once.", "read `exact` of each record.")
    ex.require(all(integer(r["padded"]["count"]) == padded for r in res3),
               "the padded count is not what DistributedSampler gives for 3 ranks.", "read `padded` of each record.")
    ex.require(res3[0]["exact"] == res3[1]["exact"] == res3[2]["exact"],
               "the ranks disagree on the exact result.", "were the three files written by the same run?")
    ex.correct()


def _shard_sizes(size: int, world: int = 3) -> list[int]:
    from ddp_helpers.samplers import UnpaddedDistributedSampler

    return [len(UnpaddedDistributedSampler(range(size), num_replicas=world, rank=r)) for r in range(world)]


def _single(ex: Exercise) -> tuple[int, int]:
    """(correct, count) of the trained model (the launch's model.pt) on the whole test set, one process."""
    from torch import nn
    from torch.utils.data import DataLoader

    from ddp_helpers.data import load_digits_28

    path = run_file(ex, EVAL_RUN / "model.pt", EVAL_LAUNCH)
    _lesson_eval_run(ex)
    net = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 10))
    try:
        net.load_state_dict(torch.load(path, weights_only=True, map_location="cpu"))
    except Exception:
        ex.fail(f"{EVAL_RUN / 'model.pt'} is not the worker's model.", f"run {EVAL_LAUNCH} again, then this check.")
    _, _, test = load_digits_28(seed=0)
    images, labels = next(iter(DataLoader(test, batch_size=len(test))))
    with torch.no_grad():
        correct = int((net.eval()(images).argmax(1) == labels).sum())
    return correct, len(test)


@check
def check_07_4(*, parts: Answer[Sequence[EvalResult]], pooled_acc: Answer[float]) -> None:
    """The single-process result is re-derived from the launch's model.pt (not passed by the cell)."""
    ex = Exercise("07.4")
    ex.given(parts=parts, pooled_acc=pooled_acc)
    parts = by_rank(parts)
    ex.require(parts is not None and len(parts) == 3 and all(isinstance(p, EvalResult) for p in parts),
               "`parts` is not one evaluation per shard.", "one `evaluate(...)` per rank r in 0, 1, 2.")
    correct, count = _single(ex)
    ex.require([integer(p.count) for p in parts] == _shard_sizes(count),
               "the shards do not cover the test set exactly once.",
               "use UnpaddedDistributedSampler(test_ds, num_replicas=3, rank=r).")
    ex.require(sum(integer(p.correct) or 0 for p in parts) == correct,
               "the shards' correct counts do not add up to the trained model's on the whole test set.",
               "evaluate the trained `net` (loaded from model.pt) on each shard.")
    ex.require(close(pooled_acc, correct / count, abs_tol=1e-12),
               "`pooled_acc` is not the exact accuracy.", "pool the correct counts and the counts, then divide.")
    ex.correct()
