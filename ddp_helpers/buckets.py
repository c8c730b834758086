"""Watch DDP's buckets: which gradients each all-reduce carried, and when, against the backward pass.

    from ddp_helpers.buckets import BucketRecorder, record_grad_ready

    timeline = []
    recorder = BucketRecorder.attach(ddp_model, timeline)   # a comm hook that all-reduces as DDP does
    record_grad_ready(ddp_model.module, timeline)           # "grad NAME" when a gradient is accumulated
    loss.backward()
    recorder.take()   # [(bucket index, [parameter names], number of values), ...]
    timeline          # "grad ..." and "all-reduce bucket i" entries in the order they happened
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn


class BucketRecorder:
    """A DDP communication hook that all-reduces exactly like the default and records each bucket.

        recorder = BucketRecorder.attach(ddp_model)
        loss.backward()
        recorder.take()   # [(bucket index, [parameter names], number of values), ...] in call order

    One call is one all-reduce, so ``len(recorder.take())`` counts the collectives a
    backward pass launched (zero under ``no_sync()``). With a ``timeline`` list, each
    call also appends ``"all-reduce bucket i"`` to it; :func:`record_grad_ready` adds
    ``"grad NAME"`` entries to the same list, which shows communication interleaved
    with the backward pass.
    """

    def __init__(self, names: Mapping[torch.nn.Parameter, str] | None = None,
                 timeline: list[str] | None = None) -> None:
        self.names = dict(names or {})
        self.calls: list[tuple[int, list[str], int]] = []
        self.timeline = timeline

    @classmethod
    def attach(cls, ddp_model: nn.Module, timeline: list[str] | None = None) -> BucketRecorder:
        names = {p: n for n, p in ddp_model.module.named_parameters()}
        recorder = cls(names, timeline)
        ddp_model.register_comm_hook(recorder, _recording_allreduce_hook)
        return recorder

    def take(self) -> list[tuple[int, list[str], int]]:
        """The calls recorded since the last take(), and forget them."""
        calls, self.calls = self.calls, []
        return calls


# No annotations on `bucket` or the return: DDP's register_comm_hook compares them with the classes
# dist.GradBucket and torch.futures.Future[torch.Tensor], and this module's postponed (string)
# annotations would not compare equal, so DDP would refuse the hook.
def _recording_allreduce_hook(state: BucketRecorder, bucket):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    params = bucket.parameters()
    if state.timeline is not None:
        state.timeline.append(f"all-reduce bucket {bucket.index()}")
    state.calls.append((bucket.index(), [state.names.get(p, "?") for p in params], bucket.buffer().numel()))
    return default_hooks.allreduce_hook(None, bucket)  # mean over ranks, as DDP does by default


def record_grad_ready(module: nn.Module, timeline: list[str]) -> list[torch.utils.hooks.RemovableHandle]:
    """Append ``"grad NAME"`` to ``timeline`` whenever a parameter's ``.grad`` is accumulated.

    Returns the hook handles (call ``.remove()`` on each to stop recording).
    """
    handles = []
    for name, p in module.named_parameters():
        handles.append(p.register_post_accumulate_grad_hook(lambda _, name=name: timeline.append(f"grad {name}")))
    return handles
