"""Notebook 10's experiments, run inside a process group (a torchrun worker, or one rank in the tests).

    from ddp_helpers.perf.experiments import allreduce_sweep, ring_vs_gloo_worlds, step_controls

    allreduce_sweep(message_sizes(), repeats=20)     # dist.all_reduce per size, every sum checked
    ring_vs_gloo_worlds(64 * MiB, repeats=20)        # the ring of notebook 01 against the library
    overlap_timeline(1024, depth=4, bucket_cap_mb=1)  # one DDP step's order of events
    step_controls(1024, steps=20, bucket_caps=BUCKET_CAPS)   # DDP against its controls

Every figure keeps all its samples and their spread; the times come from
:func:`ddp_helpers.perf.timing.time_collective` and :func:`~ddp_helpers.perf.timing.compare_collectives`
(slowest rank, implementations side by side, order rotating). The model is
:func:`ddp_helpers.models.square_mlp` seeded with :data:`MODEL_SEED`, and every training step
of the package is :func:`train_step`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_helpers.buckets import BucketRecorder, record_grad_ready
from ddp_helpers.compare import max_abs_diff
from ddp_helpers.models import square_mlp
from ddp_helpers.perf.timing import (
    compare_collectives,
    default_device,
    load_average,
    median,
    spread,
    time_collective,
    verdict,
)
from ddp_helpers.ring import ring_all_reduce

MODEL_SEED = 0  # square_mlp(width, depth, seed=MODEL_SEED): the same weights in every experiment
BUCKET_CAPS = (None, 0.5, 2, 8, 32)  # MiB; None = DDP's default (1 MiB first bucket, then 25)
ALONE, NO_COMM, PER_TENSOR, FLAT = "1 process", "no communication", "per-tensor all-reduce", "flat all-reduce"

Batch = tuple[torch.Tensor, torch.Tensor]

# --------------------------------------------------------------------------- collectives


def allreduce_sweep(sizes: Sequence[int], repeats: int = 5, group: dist.ProcessGroup | None = None) -> dict:
    """``dist.all_reduce`` of float32 tensors of each size (bytes): every time, medians, spreads.

    The sizes are timed in rounds (one call of each size per round, the order rotating), so a
    change of load spreads over all sizes. Every call is checked: each rank contributes rank + 1,
    so each element must end as N(N+1)/2.
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    device, expected = default_device(group), world * (world + 1) / 2
    tensors = {str(n): torch.empty(n // 4, device=device) for n in sizes}
    load_before = load_average()
    times = compare_collectives({k: lambda x=x: dist.all_reduce(x, group=group) for k, x in tensors.items()},
                                repeats=repeats, setup={k: lambda x=x: x.fill_(rank + 1.0) for k, x in tensors.items()},
                                group=group)
    correct = all(bool(torch.all(x == expected)) for x in tensors.values())
    return {"world_size": world, "backend": dist.get_backend(group), "bytes": list(sizes),
            "seconds": [median(times[str(n)]) for n in sizes], "times": [times[str(n)] for n in sizes],
            "spread": [spread(times[str(n)]) for n in sizes], "correct": correct,
            "load": [load_before, load_average()]}


def ring_vs_gloo(nbytes: int, repeats: int = 5, group: dist.ProcessGroup | None = None) -> dict:
    """Hand-written ring all-reduce (``ddp_helpers.ring``) vs ``dist.all_reduce``, side by side.

    ``ratio`` = ring throughput / library throughput = library time / ring time (medians).
    ``equal`` says whether both produced the same, exact, sums. (The name predates nccl: the
    library all-reduce is the process group's backend, ``backend`` in the result.)
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    device, numel = default_device(group), nbytes // 4
    base = (torch.arange(numel, device=device) % 7).float()  # small integers: float32 sums are exact
    x = torch.empty(numel, device=device)

    def setup() -> None:
        x.copy_(base).add_(rank)

    setup()
    dist.all_reduce(x, group=group)
    library = x.clone()
    setup()
    ring_all_reduce(x, group=group)
    expected = base * world + world * (world - 1) / 2
    equal = torch.equal(x, library) and torch.equal(x, expected)
    times = compare_collectives({"library": lambda: dist.all_reduce(x, group=group),
                                 "ring": lambda: ring_all_reduce(x, group=group)},
                                repeats=repeats, setup=setup, group=group)
    return {"world_size": world, "bytes": nbytes, "backend": dist.get_backend(group),
            "library_s": times["library"], "ring_s": times["ring"], "equal": bool(equal),
            "ratio": median(times["library"]) / median(times["ring"]),
            "spread": {"library": spread(times["library"]), "ring": spread(times["ring"])}}


def ring_vs_gloo_worlds(nbytes: int, repeats: int = 5, worlds: Sequence[int] = (2, 4)) -> list[dict]:
    """:func:`ring_vs_gloo` on the first ``w`` ranks for each ``w`` in ``worlds`` (one launch).

    Every rank must call this (``new_group`` is collective); ranks outside a subgroup wait.
    """
    results = []
    for w in worlds:
        if w > dist.get_world_size():
            raise ValueError(f"world size {w} needs at least {w} processes")
        group = dist.new_group(list(range(w))) if w < dist.get_world_size() else None
        if dist.get_rank() < w:
            results.append(ring_vs_gloo(nbytes, repeats, group))
        dist.barrier()
    return results


# --------------------------------------------------------------------------- training steps


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
               average: Callable[[nn.Module], object] | None = None) -> None:
    """One step of every experiment: cross-entropy backward, ``average(model)`` if given, update."""
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    if average is not None:
        average(model)
    optimizer.step()


def average_gradients(model: nn.Module, group: dist.ProcessGroup | None = None) -> int:
    """The hand-written DDP: after backward, all-reduce each gradient and divide by the world size.

    Returns the number of all-reduce calls (one per parameter tensor).
    """
    world, calls = dist.get_world_size(group), 0
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)
            p.grad /= world
            calls += 1
    return calls


def flat_average_gradients(model: nn.Module, group: dist.ProcessGroup | None = None) -> int:
    """The control for DDP's buckets: after backward, ONE all-reduce of every gradient flattened.

    Same bytes and same single call as DDP with one bucket, but nothing overlaps backward.
    Returns the number of all-reduce calls (1, or 0 without gradients).
    """
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return 0
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    flat /= dist.get_world_size(group)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
    return 1


def random_batches(width: int, batch: int, count: int, classes: int = 10, seed: int = 0,
                   device: torch.device | str | None = None) -> list[Batch]:
    """``count`` batches of random inputs and labels, from ``seed`` and this rank (its own data)."""
    g = torch.Generator().manual_seed(seed + 1000 * (dist.get_rank() + 1))
    return [(torch.randn(batch, width, generator=g).to(device),
             torch.randint(classes, (batch,), generator=g).to(device)) for _ in range(count)]


def _cap_key(cap: float | None) -> str:
    return "default" if cap is None else f"{cap:g}"


def ddp_key(cap: float | None) -> str:
    """The name of the DDP variant with ``bucket_cap_mb=cap`` in :func:`step_controls`."""
    return f"DDP cap {_cap_key(cap)}"


def overlap_timeline(width: int = 1024, depth: int = 4, batch: int = 32,
                     bucket_cap_mb: float | None = None) -> tuple[list[str], int]:
    """One DDP step's order of events: ``grad NAME`` (a gradient is ready) and ``all-reduce bucket i``.

    Recorded on the second step (the first one rebuilds the buckets in arrival order).
    Returns (timeline, number of buckets). Deterministic: it is the order, not the time.
    """
    device = default_device()
    model = DDP(square_mlp(width, depth, seed=MODEL_SEED).to(device), bucket_cap_mb=bucket_cap_mb)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    timeline: list[str] = []
    recorder = BucketRecorder.attach(model, timeline)
    handles = record_grad_ready(model.module, timeline)
    for x, y in random_batches(width, batch, 2, device=device):
        timeline.clear()
        recorder.take()
        train_step(model, optimizer, x, y)
    for h in handles:
        h.remove()
    return list(timeline), len(recorder.take())


def step_controls(width: int = 1024, depth: int = 4, batch: int = 32, steps: int = 20, warmup: int = 2,
                  bucket_caps: Sequence[float | None] = (None,)) -> dict:
    """Training-step time of DDP against its controls, all side by side in one process group.

    Variants, one step of each per round (order rotating), same initial weights, same batches:

    * ``1 process``: rank 0 trains a plain model alone while the other ranks wait (the baseline
      of scaling);
    * ``no communication``: every rank trains its own plain model, no all-reduce at all (what
      sharing the machine costs, without communication);
    * ``per-tensor all-reduce``: :func:`average_gradients` after backward (one call per tensor);
    * ``flat all-reduce``: :func:`flat_average_gradients` after backward (one call, no overlap);
    * ``DDP cap X``: DDP with ``bucket_cap_mb=X`` (buckets all-reduced during backward).

    Each variant records its step times (slowest rank), spread, all-reduce calls per step and,
    for the averaging variants, ``max_diff`` from the per-tensor model (same arithmetic).
    """
    rank, device = dist.get_rank(), default_device()
    base = square_mlp(width, depth, seed=MODEL_SEED).to(device)
    plain = {ALONE: None, NO_COMM: None, PER_TENSOR: average_gradients, FLAT: flat_average_gradients}
    models: dict[str, nn.Module] = {name: copy.deepcopy(base) for name in plain}
    models.update({ddp_key(c): DDP(copy.deepcopy(base), bucket_cap_mb=c) for c in bucket_caps})
    optimizers = {name: torch.optim.SGD(m.parameters(), lr=0.01) for name, m in models.items()}

    def step(name: str, x: torch.Tensor, y: torch.Tensor) -> None:
        if name != ALONE or rank == 0:
            train_step(models[name], optimizers[name], x, y, plain.get(name))

    names, times = list(models), {name: [] for name in models}
    load_before = load_average()
    for i, (x, y) in enumerate(random_batches(width, batch, warmup + steps, device=device)):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            t = time_collective(lambda name=name, x=x, y=y: step(name, x, y), repeats=1, warmup=0)
            if i >= warmup:
                times[name] += t
    n_tensors, caps = sum(1 for _ in base.parameters()), {ddp_key(c): c for c in bucket_caps}
    variants = {}
    for name, model in models.items():
        v = {"seconds": times[name], "spread": spread(times[name]), "allreduces": 0}
        if name in (PER_TENSOR, FLAT):
            v.update(allreduces=n_tensors if name == PER_TENSOR else 1,
                     max_diff=max_abs_diff(model, models[PER_TENSOR]))
        elif name in caps:
            v.update(allreduces=overlap_timeline(width, depth, batch, caps[name])[1],
                     max_diff=max_abs_diff(model.module, models[PER_TENSOR]))
        variants[name] = v
    alone = median(times[ALONE])
    return {"parameters": sum(p.numel() for p in base.parameters()), "batch": batch, "width": width,
            "depth": depth, "world_size": dist.get_world_size(), "steps": steps, "variants": variants,
            # efficiency = (N * batch / t_N) / (N * batch / t_1) = t_1 / t_N, per variant
            "efficiency": {k: alone / median(times[k]) for k in names if k != ALONE},
            "load": [load_before, load_average()]}


def control_verdicts(controls: Mapping[str, dict]) -> list[str]:
    """The conclusions a :func:`step_controls` result allows (:func:`~ddp_helpers.perf.timing.verdict` on each pair)."""
    v = controls["variants"]
    pairs = [(FLAT, PER_TENSOR), (NO_COMM, ALONE), (FLAT, NO_COMM)]
    pairs += [(k, FLAT) for k in v if k.startswith("DDP")]
    return [verdict(a, v[a]["seconds"], b, v[b]["seconds"]) for a, b in pairs]
