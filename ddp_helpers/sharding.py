"""Sharding the training state: bytes per rank, ZeRO-1/2 written by hand, collectives counted.

    from ddp_helpers.sharding import ShardedAdam, state_bytes, zero_formula, CommCounter

    state_bytes(model.parameters(), optimizer)    # {"params", "grads", "optimizer"} on this rank
    zero_formula(numel, world_size, stage=1)      # the same three numbers, from the ZeRO paper
    opt = ShardedAdam(model.parameters(), lr=1e-2, stage=1)   # Adam state for 1/N of the values
    with CommCounter() as comm:                   # every collective this rank starts, with bytes
        ...

Bytes are counted from the tensors a rank holds (a DTensor counts its local shard), not
from an allocator, so the same numbers come out on a CPU and on a GPU. Adam's ``step``
counters (one scalar per parameter tensor) are left out of "optimizer": the formula
counts the two moments, which are what grows with the model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any, ClassVar

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode

MOMENTS = ("exp_avg", "exp_avg_sq")  # Adam's per-value state


def make_stack(widths: tuple[int, ...] = (32, 64, 64, 8), device: torch.device | str = "cpu",
               seed: int = 0) -> nn.Sequential:
    """Linear layers of the given widths with ReLUs between them, seeded: the same
    weights on every rank. The default has 6,792 parameters (divisible by 2 and 4).
    The weights are those of ``torch.manual_seed(seed)`` then building on the CPU; the
    caller's generator is left as it was (:func:`ddp_helpers.models.seeded`)."""
    from ddp_helpers.models import seeded  # (may move to the top of this module)

    with seeded(seed):
        layers: list[nn.Module] = []
        for a, b in zip(widths, widths[1:], strict=False):
            layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1]).to(device)


def shard_layers(model: nn.Module, mesh: DeviceMesh, **fsdp_kwargs: Any) -> nn.Module:
    """FSDP2 the usual way: ``fully_shard`` every Linear (one all-gather and one
    reduce-scatter unit each), then the root, which picks up any parameters left."""
    from torch.distributed.fsdp import fully_shard

    for layer in model.modules():
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, **fsdp_kwargs)
    return fully_shard(model, mesh=mesh, **fsdp_kwargs)


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The part of ``t`` this rank stores: a DTensor's local shard, any other tensor itself."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def nbytes(t: torch.Tensor | None) -> int:
    if t is None:
        return 0
    t = local_tensor(t)
    return t.numel() * t.element_size()


def state_bytes(params: Iterable[torch.Tensor],
                optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
    """Bytes of parameters, gradients and optimizer moments that this rank holds.

    Gradients are counted for the parameters and for every tensor the optimizer steps
    (a hand-written ZeRO keeps its gradient shard on its own tensor), each tensor once.
    """
    params = list(params)
    tensors = {id(p): p for p in params}
    if optimizer is not None:
        for group in optimizer.param_groups:
            tensors.update({id(p): p for p in group["params"]})
    moments = 0
    if optimizer is not None:
        for state in optimizer.state.values():
            moments += sum(nbytes(v) for k, v in state.items() if k in MOMENTS)
    return {"params": sum(nbytes(p) for p in params),
            "grads": sum(nbytes(t.grad) for t in tensors.values()),
            "optimizer": moments}


def zero_formula(numel: int, world_size: int, stage: int, bytes_per_value: int = 4,
                 moments: int = 2) -> dict[str, int]:
    """Per-rank bytes of parameters, gradients and Adam moments (ZeRO paper, fp32 training).

    stage 0 (DDP) replicates all three; stage 1 shards the optimizer state, stage 2 also
    the gradients, stage 3 (FSDP) also the parameters. A shard is ceil(numel / N) values.
    """
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"stage must be 0, 1, 2 or 3, got {stage!r}")
    full = numel * bytes_per_value
    shard = -(-numel // world_size) * bytes_per_value
    return {"params": shard if stage >= 3 else full,
            "grads": shard if stage >= 2 else full,
            "optimizer": moments * (shard if stage >= 1 else full)}


class ShardedAdam:
    """ZeRO stage 1 (or 2) by hand: each rank keeps Adam's state for its 1/N of the values.

    The parameters are moved into one flat buffer (``p.data`` becomes a view of it), cut
    into N equal slices. ``step()`` is the DDP step with the all-reduce split in two:

    1. ``reduce_gradients()``: ``reduce_scatter`` of the flattened gradients; rank r gets
       the average of slice r only. Stage 2 then frees the full gradients.
    2. ``update()``: Adam on this rank's slice (Adam's moments exist for that slice
       only), then ``all_gather`` of the updated slices into every rank's flat buffer.

    Gradients are divided by N before they are summed, as DDP does.
    """

    def __init__(self, params: Iterable[torch.Tensor], stage: int = 1, group: dist.ProcessGroup | None = None,
                 **adam_kwargs: Any) -> None:
        if stage not in (1, 2):
            raise ValueError(f"stage must be 1 or 2, got {stage!r}")
        self.params = list(params)
        self.stage, self.group = stage, group
        self.world, rank = dist.get_world_size(group), dist.get_rank(group)
        numel = sum(p.numel() for p in self.params)
        self.shard_numel = -(-numel // self.world)
        self.flat = self._flatten([p.detach() for p in self.params])
        offset = 0
        for p in self.params:  # parameters become views: the all-gather updates them in place
            p.data = self.flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        lo = rank * self.shard_numel
        self.shard = self.flat[lo:lo + self.shard_numel]  # a view: Adam writes into the buffer
        self.inner = torch.optim.Adam([self.shard], **adam_kwargs)

    def _flatten(self, tensors: Iterable[torch.Tensor]) -> torch.Tensor:
        flat = torch.cat([t.reshape(-1) for t in tensors])
        return F.pad(flat, (0, self.shard_numel * self.world - flat.numel()))

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def reduce_gradients(self) -> None:
        flat_grads = self._flatten([torch.zeros_like(p) if p.grad is None else p.grad
                                    for p in self.params]).div_(self.world)
        self.shard.grad = torch.empty_like(self.shard)
        dist.reduce_scatter_single(self.shard.grad, flat_grads, group=self.group)
        if self.stage == 2:
            self.zero_grad()  # the slice is all this rank's update needs

    @torch.no_grad()
    def update(self) -> None:
        self.inner.step()
        self.shard.grad = None
        dist.all_gather_single(self.flat, self.shard.clone(), group=self.group)

    def step(self) -> None:
        self.reduce_gradients()
        self.update()


def _namespace(func: Any) -> str:
    return func._qualified_op_name.split("::")[0]


_COLLECTIVES: dict[str, str] = {  # c10d and functional-collective op names -> one name per collective
    "allreduce": "all_reduce", "all_reduce": "all_reduce",
    "allgather": "all_gather", "allgather_base": "all_gather", "all_gather_into_tensor": "all_gather",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter", "broadcast": "broadcast",
    "alltoall_base": "all_to_all", "all_to_all_single": "all_to_all",
    "shard_dim_alltoall": "all_to_all",  # DTensor's Shard(i) -> Shard(j) on GPUs
    "scatter": "scatter", "gather": "gather", "reduce": "reduce",  # distribute_tensor(Shard) scatters
}


def _collective_name(func: Any) -> str | None:
    if _namespace(func) not in ("c10d", "_c10d_functional", "_dtensor"):
        return None
    return _COLLECTIVES.get(func.__name__.split(".")[0].strip("_"))


class CommCounter(TorchDispatchMode):
    """Count the collectives this rank starts and the bytes of their payload.

    Payload = the bytes of the full result of one collective: the tensor for an
    all-reduce, a broadcast or a reduce, the gathered tensor for an all-gather, the input
    for a reduce-scatter or an all-to-all, and all shards together for a scatter or a gather
    (the same number on every rank). ``counts`` and ``payload`` are keyed by "all_reduce",
    "all_gather", "reduce_scatter", "broadcast", "all_to_all", "scatter", "gather" and
    "reduce"; point-to-point sends and receives are not counted. It sees what dispatches
    through torch's c10d operators: ``torch.distributed`` calls, DTensor's collectives
    (``distribute_tensor`` scatters or broadcasts from rank 0), and DDP's bucket all-reduce
    (the Reducer calls the same operator). The test suite checks it against torch's own
    ``CommDebugMode`` (``torch/distributed/tensor/debug/_comm_mode.py``). Collectives that
    one counted operation runs inside itself are not counted again.
    """

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self.payload: Counter[str] = Counter()

    supports_higher_order_operators: ClassVar[bool] = True

    def __torch_dispatch__(self, func: Any, types: Collection[type], args: Sequence[Any] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return func(*args, **kwargs)
        if any(issubclass(t, DTensor) for t in types):
            return NotImplemented  # let DTensor run first: its collectives come back here
        name = _collective_name(func.overloadpacket)
        if name is not None:
            self.counts[name] += 1
            self.payload[name] += _payload_bytes(func.overloadpacket, args)
        return func(*args, **kwargs)

    def sent_per_rank(self, world_size: int) -> float:
        """Bytes each rank sends for what was counted, with bandwidth-optimal ring algorithms."""
        return sum(ring_bytes_sent(op, b, world_size) for op, b in self.payload.items())


def _tensors(obj: Any) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors(item)


def _payload_bytes(func: Any, args: Sequence[Any]) -> int:
    """The full result's bytes: c10d ops take (output, input) or (tensors, ...); the larger
    side is the full tensor. A functional all-gather takes (shard, group_size, group)."""
    sides = [sum(nbytes(t) for t in _tensors(a)) for a in args[:2]]
    if _namespace(func) == "_c10d_functional" and func.__name__.startswith("all_gather"):
        return sides[0] * int(args[1])
    if _namespace(func) == "c10d" and func.__name__.strip("_") in ("scatter", "gather"):
        # (outputs, inputs, group, root, ...): only the root holds every shard; this rank's one shard
        # (the output of a scatter, the input of a gather) times the group's size is the same everywhere
        group = dist.ProcessGroup.unbox(args[2])  # the dispatcher passes it as a ScriptObject
        return sides[0 if func.__name__.strip("_") == "scatter" else 1] * group.size()
    return max(sides, default=0)


def ring_bytes_sent(op: str, payload: int, world_size: int) -> float:
    """Bytes one rank sends for a collective of ``payload`` bytes (notebook 01's ring).

    all-reduce 2(N-1)/N * S; all-gather and reduce-scatter (N-1)/N * S each.
    """
    factor = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1}.get(op)
    if factor is None:
        raise ValueError(f"no ring formula for {op!r}")
    return factor * (world_size - 1) / world_size * payload
