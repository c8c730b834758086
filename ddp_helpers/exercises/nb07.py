"""Checks of notebook 07, SyncBN, distributed evaluation and early stopping."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch.utils.data import DistributedSampler

from ddp_helpers.evaluation import EarlyStopping, EvalResult
from ddp_helpers.exercises.core import ATOL, Answer, Exercise, check


@check
def check_07_1(*, shards: Answer[Sequence[torch.Tensor]], mean_of_means: Answer[float],
               pooled: Answer[float]) -> None:
    ex = Exercise("07.1")
    ex.given(shards=shards, mean_of_means=mean_of_means, pooled=pooled)
    sizes = [len(s) for s in shards]
    ex.require(sizes == [3, 5], f"the shards hold {sizes} values, the exercise asks for 3 and 5.",
               "split an 8-value tensor into its first 3 and last 5 rows.")
    truth = torch.cat(list(shards)).double().mean().item()
    means = [s.double().mean().item() for s in shards]
    ex.require(math.isclose(float(pooled), truth, abs_tol=ATOL),
               f"`pooled` is not the mean of all 8 values (atol {ATOL}).",
               "combine sums: sum(mean * count) / sum(count).")
    ex.require(math.isclose(float(mean_of_means), sum(means) / 2, abs_tol=ATOL),
               f"`mean_of_means` is not the plain average of the two shard means (atol {ATOL}).",
               "average the two means from batch_stats, ignoring the counts.")
    ex.require(abs(sum(means) / 2 - truth) > 1e-3,
               "with your values the two averages agree, so they show nothing.",
               "use values whose two shards have clearly different means.")
    ex.correct()


@check
def check_07_2(*, decisions: Answer[Sequence[bool]], history: Sequence[dict]) -> None:
    ex = Exercise("07.2")
    ex.given(decisions=decisions)
    rule = EarlyStopping(patience=3, mode="min")
    truth = [rule.step(h["loss"]) for h in history]
    ex.require(list(decisions) == truth,
               "`decisions` is not what EarlyStopping(patience=3, mode=\"min\") returns epoch by epoch.",
               "feed each recorded epoch's validation loss (not accuracy) to one fresh rule, in order.")
    ex.correct()


@check
def check_07_3(*, res3: Answer[Sequence[dict]], test_size: int) -> None:
    ex = Exercise("07.3")
    ex.given(res3=res3)
    ex.require(isinstance(res3, list | tuple) and len(res3) == 3, "`res3` is not the three ranks' JSON records.",
               "launch with nproc=3 and load runs/<your out>/rank{r}.json for r in 0, 1, 2.")
    padded = len(DistributedSampler(range(test_size), num_replicas=3, rank=0)) * 3
    ex.require(all(r["exact"]["count"] == test_size for r in res3),
               "the exact evaluation does not count every test image exactly once.", "read `exact` of each record.")
    ex.require(all(r["padded"]["count"] == padded for r in res3),
               "the padded count is not what DistributedSampler gives for 3 ranks.", "read `padded` of each record.")
    ex.require(res3[0]["exact"] == res3[1]["exact"] == res3[2]["exact"],
               "the ranks disagree on the exact result.", "were the three files written by the same run?")
    ex.correct()


@check
def check_07_4(*, parts: Answer[Sequence[EvalResult]], pooled_acc: Answer[float], single: EvalResult) -> None:
    ex = Exercise("07.4")
    ex.given(parts=parts, pooled_acc=pooled_acc)
    ex.require(isinstance(parts, list | tuple) and len(parts) == 3, "`parts` is not one evaluation per shard.",
               "one `evaluate(...)` per rank r in 0, 1, 2.")
    ex.require(sum(p.count for p in parts) == single.count, "the shards do not cover the test set exactly once.",
               "use UnpaddedDistributedSampler(test_ds, num_replicas=3, rank=r).")
    ex.require(math.isclose(float(pooled_acc), single.accuracy, abs_tol=1e-12),
               "`pooled_acc` is not the exact accuracy.", "pool the correct counts and the counts, then divide.")
    ex.correct()
