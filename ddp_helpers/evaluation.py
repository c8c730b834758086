"""Exact distributed evaluation and an early stopping rule every rank agrees on.

Exact evaluation: each rank sums loss, correct predictions and sample count over *its*
shard (an unpadded sampler, so no sample is seen twice), then one collective adds the
three sums. Dividing global sums gives the metric of the whole data set, the same
number a single process would compute, whatever the batch or shard sizes. (Averaging
per-rank accuracies instead is wrong as soon as the shards differ in size.)

    result = evaluate(model, loader, ctx.device)          # all_reduce: every rank gets it
    stop = stopper.step(result.accuracy)                   # same input -> same decision
    if stop: break                                         # every rank, same epoch

``dst=0`` uses ``dist.reduce`` instead: only rank 0 receives the sums (enough for
logging); the other ranks get ``None`` and must not make decisions from it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

__all__ = ["EvalResult", "evaluate", "reduce_sums", "EarlyStopping", "any_rank"]


@dataclass(frozen=True)
class EvalResult:
    """Metrics over the whole evaluated data set (all ranks together)."""

    loss: float  # mean cross-entropy per sample
    accuracy: float  # correct / count
    correct: int
    count: int

    def as_dict(self) -> dict:
        return asdict(self)


def _in_group() -> bool:
    return dist.is_available() and dist.is_initialized()


def reduce_sums(values: Sequence[float] | torch.Tensor, device: torch.device | str,
                dst: int | None = None) -> torch.Tensor | None:
    """Sum a short vector of numbers over all ranks in one collective (float64).

    dst=None: ``all_reduce``, every rank returns the totals.
    dst=r:    ``reduce`` to rank r; rank r returns the totals, every other rank None
              (its buffer holds no meaningful value after a reduce).
    Outside a process group the local values are the totals.
    """
    packed = torch.as_tensor(values, dtype=torch.float64).to(device).clone()
    if not _in_group():
        return packed.cpu()
    if dst is None:
        dist.all_reduce(packed, op=dist.ReduceOp.SUM)
        return packed.cpu()
    dist.reduce(packed, dst=dst, op=dist.ReduceOp.SUM)
    return packed.cpu() if dist.get_rank() == dst else None


@torch.no_grad()
def evaluate(model: nn.Module, loader: Iterable[tuple[torch.Tensor, torch.Tensor]], device: torch.device | str,
             dst: int | None = None, autocast: Callable[[], AbstractContextManager[Any]] | None = None,
             ) -> EvalResult | None:
    """Cross-entropy loss and accuracy of ``model`` over every rank's ``loader`` together.

    A DDP wrapper is unwrapped: evaluation needs no gradient sync, and calling the plain
    module keeps the forward free of collectives even when ranks have different numbers
    of batches. ``autocast`` is an optional context manager factory (mixed precision).
    Restores the model's train/eval mode afterwards.

    The result is one process's number only if every rank holds the same model. With
    plain BatchNorm it does not: each rank updated its running statistics from its own
    batches, and since no DDP forward runs here, no buffer broadcast evens them out, so
    each shard is normalised with its own rank's statistics. Use SyncBatchNorm, or
    broadcast the buffers from rank 0 before evaluating.
    """
    module = getattr(model, "module", model)
    was_training = module.training
    module.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        with (autocast() if autocast is not None else nullcontext()):
            logits = module(images)
        logits = logits.float()
        loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(1) == labels).sum().item()
        count += labels.numel()
    module.train(was_training)
    totals = reduce_sums([loss_sum, correct, count], device, dst)
    if totals is None:
        return None
    n = int(totals[2])
    return EvalResult(loss=float(totals[0]) / max(n, 1), accuracy=float(totals[1]) / max(n, 1),
                      correct=int(totals[1]), count=n)


def any_rank(flag: bool, device: torch.device | str) -> bool:
    """True on every rank if ``flag`` is True on at least one rank (all_reduce MAX).

    Use it when a decision may differ between ranks (a rank-local condition, a file
    that only rank 0 reads): after it, all ranks act on the same value.
    """
    if not _in_group():
        return bool(flag)
    t = torch.tensor([int(bool(flag))], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


class EarlyStopping:
    """Stop when the monitored metric has not improved for ``patience`` epochs.

    ``mode="max"`` for accuracy, ``"min"`` for loss; an improvement must beat the best
    value by more than ``min_delta``. The rule is deterministic, so ranks that feed it
    the same all-reduced metric take the same decision at the same epoch without any
    further communication. ``state_dict``/``load_state_dict`` let a snapshot resume it.
    """

    def __init__(self, patience: int, mode: Literal["max", "min"] = "max", min_delta: float = 0.0) -> None:
        if patience < 1:
            raise ValueError(f"patience must be >= 1, got {patience}")
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        self.patience, self.mode, self.min_delta = patience, mode, min_delta
        self.best: float = -math.inf if mode == "max" else math.inf
        self.best_epoch: int = -1
        self.bad_epochs: int = 0
        self.epoch: int = -1
        self.improved: bool = False
        self.should_stop: bool = False

    def step(self, metric: float) -> bool:
        """Record one epoch's metric; return True when training should stop."""
        self.epoch += 1
        metric = float(metric)
        if self.mode == "max":
            self.improved = metric > self.best + self.min_delta
        else:
            self.improved = metric < self.best - self.min_delta
        if self.improved:
            self.best, self.best_epoch, self.bad_epochs = metric, self.epoch, 0
        else:
            self.bad_epochs += 1
        self.should_stop = self.bad_epochs >= self.patience
        return self.should_stop

    def state_dict(self) -> dict:
        return {k: getattr(self, k) for k in
                ("patience", "mode", "min_delta", "best", "best_epoch", "bad_epochs", "epoch",
                 "improved", "should_stop")}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for key, value in state.items():
            setattr(self, key, value)
