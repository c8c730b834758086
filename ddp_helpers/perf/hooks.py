"""DDP communication hooks, measured: bytes all-reduced per step, loss, replicas, step time.

    from ddp_helpers.perf.hooks import count_allreduces, register_hook, hooks_run

    with count_allreduces() as sizes:      # bytes of every dist.all_reduce called inside
        loss.backward()
    register_hook(ddp_model, "powerSGD rank 2")
    hooks_run(width=1024, steps=20)        # inside a process group: every hook side by side

The hooks are PyTorch's own (``torch/distributed/algorithms/ddp_comm_hooks/``): ``allreduce_hook``
(what DDP does without a hook, written as a hook so its bytes can be counted),
``fp16_compress_hook`` and ``powerSGD_hook``. Their payload is counted by wrapping
``torch.distributed.all_reduce`` for the duration of a ``with count_allreduces()`` block: the hooks
call it through the module attribute (``dist.all_reduce(...)``), so every call they make, from any
thread, goes through the wrapper; DDP's built-in reducer calls C++ directly and is not seen.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_helpers.compare import gather_digests
from ddp_helpers.models import square_mlp
from ddp_helpers.perf.experiments import MODEL_SEED, Batch, train_step
from ddp_helpers.perf.timing import (
    compare_collectives,
    default_device,
    load_average,
    measurable,
    median,
    spread,
    verdict,
)

HOOKS = ("allreduce", "fp16", "powerSGD rank 1", "powerSGD rank 2", "powerSGD rank 4")
START_POWERSGD_ITER = 2  # the smallest PowerSGD allows with error feedback (plain all-reduce before)
ONE_BUCKET_MB = 64  # bucket_cap_mb that puts every gradient of the default model in one bucket
TEACHER_SEED = 99  # the teacher network that labels the task of hooks_run


@contextlib.contextmanager
def count_allreduces() -> Iterator[list[int]]:
    """Yield a list that receives the byte count of every ``dist.all_reduce`` call made inside."""
    sizes: list[int] = []
    original = dist.all_reduce

    @functools.wraps(original)
    def counting(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        sizes.append(tensor.numel() * tensor.element_size())
        return original(tensor, *args, **kwargs)

    dist.all_reduce = counting
    try:
        yield sizes
    finally:
        dist.all_reduce = original


def register_hook(model: DDP, name: str, group: dist.ProcessGroup | None = None,
                  ) -> dist.ProcessGroup | powerSGD_hook.PowerSGDState | None:
    """Register the hook called ``name`` (one of :data:`HOOKS`) on ``model``; return its state."""
    if name == "allreduce":
        model.register_comm_hook(group, default_hooks.allreduce_hook)
        return group
    if name == "fp16":
        model.register_comm_hook(group, default_hooks.fp16_compress_hook)
        return group
    if name.startswith("powerSGD rank "):
        state = powerSGD_hook.PowerSGDState(process_group=group, matrix_approximation_rank=int(name.split()[-1]),
                                            start_powerSGD_iter=START_POWERSGD_ITER, random_seed=0)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return state
    raise ValueError(f"unknown hook {name!r}; known: {HOOKS}")


def bf16_registration_error() -> str | None:
    """The error ``register_comm_hook(bf16_compress_hook)`` raises here, or None if it registers.

    DDP refuses it unless torch was built with CUDA and NCCL >= 2.10, or XPU and XCCL
    (``torch/nn/parallel/distributed.py``, ``DistributedDataParallel._check_comm_hook``).
    """
    model = DDP(square_mlp(8, 1, seed=MODEL_SEED).to(default_device()))
    try:
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    except TypeError as exc:
        return str(exc)
    return None


def teacher_batches(width: int, batch: int, count: int, classes: int = 10, seed: int = 0,
                    device: torch.device | str | None = None) -> list[Batch]:
    """A learnable task: random inputs (``seed`` and this rank's), labelled by one fixed teacher network."""
    teacher = square_mlp(width, 1, classes, seed=TEACHER_SEED)
    g = torch.Generator().manual_seed(seed + 1000 * (dist.get_rank() + 1))
    xs = [torch.randn(batch, width, generator=g) for _ in range(count)]
    with torch.no_grad():
        return [(x.to(device), teacher(x).argmax(1).to(device)) for x in xs]


def _held_out(width: int, device: torch.device | str | None, size: int = 256) -> Batch:
    """Held-out samples of the task, the same on every rank."""
    g = torch.Generator().manual_seed(12345)
    x = torch.randn(size, width, generator=g)
    with torch.no_grad():
        return x.to(device), square_mlp(width, 1, seed=TEACHER_SEED)(x).argmax(1).to(device)


def hooks_run(width: int = 1024, depth: int = 4, batch: int = 32, steps: int = 20, lr: float = 0.05,
              hooks: tuple[str, ...] = HOOKS, bucket_cap_mb: float = ONE_BUCKET_MB) -> dict:
    """Train one DDP model per hook side by side (same weights, same batches), then measure.

    For each hook: bytes and all-reduce calls of the last step (PowerSGD compresses from step
    :data:`START_POWERSGD_ITER`), the loss on a held-out batch after ``steps`` steps, whether the
    replicas are bitwise identical, and the step times (slowest rank, order rotating). Then the
    same hooks on a one-process group (rank 0 alone): the step time without any communication
    to save, i.e. what the compression itself costs.

    Every model has one bucket by default (:data:`ONE_BUCKET_MB`): with several buckets on gloo,
    PowerSGD's chained all-reduces are issued from the callbacks of earlier ones, on gloo's threads,
    and the ranks can issue them in different orders (a collective mismatch that aborts gloo).
    """
    device, world = default_device(), dist.get_world_size()
    base = square_mlp(width, depth, seed=MODEL_SEED).to(device)
    data = teacher_batches(width, batch, steps, device=device)
    x_eval, y_eval = _held_out(width, device)
    result = {"world_size": world, "bucket_cap_mb": bucket_cap_mb, "parameters": sum(p.numel() for p in base.parameters()), "steps": steps,
              "lr": lr, "bf16_error": bf16_registration_error(), "load": [load_average()], "variants": {}}
    with torch.no_grad():
        result["initial_loss"] = F.cross_entropy(base(x_eval), y_eval).item()
    models = {name: DDP(copy.deepcopy(base), bucket_cap_mb=bucket_cap_mb) for name in hooks}
    for name, model in models.items():
        register_hook(model, name)
    optimizers = {name: torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9) for name, m in models.items()}
    payload: dict[str, list[int]] = {}
    batches = iter(data)

    def train(name: str) -> None:
        with count_allreduces() as sizes:
            train_step(models[name], optimizers[name], *current)
        payload[name] = sizes

    times = {name: [] for name in hooks}
    for _ in range(steps):
        current = next(batches)
        round_ = compare_collectives({name: functools.partial(train, name) for name in hooks},
                                     repeats=1, warmup=0)
        for name in hooks:
            times[name] += round_[name]
        hooks = hooks[1:] + hooks[:1]  # the next round starts with the next hook
    for name, model in models.items():
        with torch.no_grad():
            loss = F.cross_entropy(model(x_eval), y_eval).item()
        digests = gather_digests(model.module)
        result["variants"][name] = {"payload_bytes": sum(payload[name]), "allreduces": len(payload[name]),
                                    "loss": loss, "replicas_equal": len(set(digests)) == 1,
                                    "seconds": times[name], "spread": spread(times[name])}
    for name, seconds in _alone(base, tuple(models), data, bucket_cap_mb).items():
        result["variants"][name].update(alone_seconds=seconds, alone_spread=spread(seconds))
    result["load"].append(load_average())
    return result


def _alone(base: nn.Module, hooks: tuple[str, ...], data: Sequence[Batch], bucket_cap_mb: float,
           ) -> dict[str, list[float]]:
    """Step times of each hook on a one-process group (rank 0; the other ranks wait)."""
    solo = dist.new_group([0])
    rank = dist.get_rank()
    models = ({name: DDP(copy.deepcopy(base), process_group=solo, bucket_cap_mb=bucket_cap_mb) for name in hooks}
              if rank == 0 else {})
    for name, model in models.items():
        register_hook(model, name, group=solo)
    optimizers = {name: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for name, m in models.items()}
    times = {name: [] for name in hooks}
    for x, y in data:
        ops = {name: (functools.partial(train_step, models[name], optimizers[name], x, y) if rank == 0
                      else (lambda: None)) for name in hooks}
        for name, t in compare_collectives(ops, repeats=1, warmup=0).items():
            times[name] += t
        hooks = hooks[1:] + hooks[:1]
    return times


def compression_pays(hooks: Mapping[str, Any], alpha: float, beta: float, reference: str = "allreduce") -> dict:
    """When does each hook of a :func:`hooks_run` result pay, by the alpha-beta model?

    It saves ``alpha * (fewer calls) + beta * (fewer bytes)`` of communication per step and costs
    what it adds to a step on one process (``alone_seconds``, where nothing travels). It pays on
    links slower than ``fewer bytes / (cost - alpha * fewer calls)`` bytes/s. When the cost is
    within the spread of the measurements, no threshold is computed (``pays_below_bytes_per_s``
    None, ``threshold`` says why). ``verdict``: the measured step times against the reference.
    """
    base, out = hooks["variants"][reference], {}
    for name, v in hooks["variants"].items():
        if name == reference:
            continue
        fewer_bytes, fewer_calls = base["payload_bytes"] - v["payload_bytes"], base["allreduces"] - v["allreduces"]
        cost = median(v["alone_seconds"]) - median(base["alone_seconds"])
        denominator = cost - alpha * fewer_calls
        if not measurable(v["alone_seconds"], base["alone_seconds"]):
            below, threshold = None, "cost within the spread"
        elif denominator <= 0:
            below, threshold = None, "pays on any link"
        else:
            below, threshold = fewer_bytes / denominator, "computed"
        out[name] = {"saved_s": alpha * fewer_calls + beta * fewer_bytes, "cost_s": cost,
                     "pays_below_bytes_per_s": below, "threshold": threshold,
                     "verdict": verdict(name, v["seconds"], reference, base["seconds"])}
    return out
