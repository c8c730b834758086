"""Comparison utilities: are two models, two gradient lists, or all DDP replicas the same?

    from ddp_helpers.compare import digest, max_abs_diff, assert_replicas_equal

    digest(model)                       # 16 hex chars; equal digests <=> bitwise-equal tensors
    checksum(model)                     # one float64 number, handy to print (rounded)
    max_abs_diff(ref.state_dict(), model.state_dict())   # or two lists of gradients
    assert_replicas_equal(ddp_model)    # inside a process group: every rank holds the same weights

A digest hashes names, shapes, dtypes and raw bytes, so it says "bitwise identical"
and nothing less. A checksum is a position-weighted float sum: readable, and it
changes when values move between positions, but two different models can share
one. Use digests to assert, checksums to show.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

import torch
import torch.distributed as dist
from torch import nn

TensorSource = nn.Module | Mapping[str, torch.Tensor] | Iterable[torch.Tensor | None]


def named_tensors(source: TensorSource) -> list[tuple[str, torch.Tensor | None]]:
    """(name, tensor) pairs of a module's parameters, a state dict, or a list of tensors.

    A list gets names "0", "1", ... so it can be compared position by position.
    """
    if isinstance(source, nn.Module):
        return [(name, p.detach()) for name, p in source.named_parameters()]
    if isinstance(source, Mapping):
        return [(str(k), None if v is None else v.detach()) for k, v in source.items()]
    if isinstance(source, torch.Tensor):
        raise TypeError("pass a module, a state dict or a list of tensors, not a single tensor")
    return [(str(i), None if t is None else t.detach()) for i, t in enumerate(source)]


def grads(module: nn.Module) -> list[torch.Tensor | None]:
    """A copy of every parameter's ``.grad`` (None where a parameter has none)."""
    return [None if p.grad is None else p.grad.detach().clone() for p in module.parameters()]


def digest(source: TensorSource) -> str:
    """16 hex characters of a SHA-256 over names, shapes, dtypes and the bytes of every tensor."""
    h = hashlib.sha256()
    for name, t in named_tensors(source):
        h.update(name.encode())
        if t is None:
            h.update(b"<none>")
            continue
        t = t.detach().to("cpu").contiguous()
        h.update(f"{tuple(t.shape)}{t.dtype}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def checksum(source: TensorSource) -> float:
    """sum_i (1 + i mod 7) * x_i over all values, in float64 (None entries are skipped)."""
    total = torch.zeros((), dtype=torch.float64)
    for _, t in named_tensors(source):
        if t is None:
            continue
        flat = t.detach().to("cpu", torch.float64).flatten()
        weights = 1.0 + torch.arange(flat.numel(), dtype=torch.float64) % 7
        total += (flat * weights).sum()
    return total.item()


def max_abs_diff(a: TensorSource, b: TensorSource) -> float:
    """Largest |a - b| over matching tensors; raises if the names or shapes do not match.

    Two missing gradients (None, None) count as equal; one None against a tensor raises,
    since "no gradient" and "a gradient" are different outcomes.
    """
    left, right = named_tensors(a), named_tensors(b)
    names_l, names_r = [n for n, _ in left], [n for n, _ in right]
    if names_l != names_r:
        raise ValueError(f"the two sides hold different tensors: {names_l} vs {names_r}")
    worst = 0.0
    for (name, x), (_, y) in zip(left, right, strict=True):
        if x is None or y is None:
            if x is None and y is None:
                continue
            raise ValueError(f"{name}: one side is None, the other a tensor")
        if x.shape != y.shape:
            raise ValueError(f"{name}: shapes differ, {tuple(x.shape)} vs {tuple(y.shape)}")
        if x.numel():
            diff = (x.detach().to("cpu", torch.float64) - y.detach().to("cpu", torch.float64)).abs().max()
            worst = max(worst, diff.item())
    return worst


def gather_digests(source: TensorSource, group: dist.ProcessGroup | None = None) -> list[str]:
    """Every rank's digest of ``source``, indexed by rank (a collective: call it on all ranks)."""
    world = dist.get_world_size(group)
    out: list[str | None] = [None] * world
    dist.all_gather_object(out, digest(source), group=group)
    return [str(d) for d in out]


def assert_replicas_equal(source: TensorSource, group: dist.ProcessGroup | None = None) -> str:
    """Raise AssertionError on every rank unless all ranks hold bitwise-equal tensors.

    Returns the common digest. A DDP wrapper may be passed as is: its parameters are
    the wrapped module's, under a ``module.`` prefix on every rank alike.
    """
    digests = gather_digests(source, group)
    if len(set(digests)) != 1:
        detail = ", ".join(f"rank {r}: {d}" for r, d in enumerate(digests))
        raise AssertionError(f"replicas differ ({detail})")
    return digests[0]


def gather_per_rank(value: object, group: dist.ProcessGroup | None = None) -> list[object]:
    """Every rank's (picklable) ``value``, as a list indexed by rank (a collective)."""
    out: list[object] = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, value, group=group)
    return out


def all_equal_across_ranks(value: object, group: dist.ProcessGroup | None = None) -> bool:
    """True on every rank when every rank passed an equal (picklable) ``value``."""
    out = gather_per_rank(value, group)
    return all(v == out[0] for v in out)


def backward_on_own_batch(model: nn.Module, rank: int, device: torch.device | str, seed: int = 0,
                          batch: int = 16) -> torch.Tensor:
    """Forward and backward of ``mean(model(x)**2)`` on a batch seeded by (seed, rank).

    Every rank draws different data, as in training, and the same call on one process
    with the same rank draws the same data again (a reference to compare DDP with).
    """
    gen = torch.Generator().manual_seed(seed * 100 + rank)
    width = next(model.parameters()).shape[1]
    x = torch.randn(batch, width, generator=gen).to(device)
    loss = model(x).square().mean()
    loss.backward()
    return loss


def shard(batch: Sequence[torch.Tensor] | torch.Tensor, rank: int,
          world_size: int) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """Rank ``rank``'s contiguous 1/world_size slice of a batch (a tensor or a tuple of tensors).

    The concatenation of all ranks' shards, in rank order, is the whole batch: the
    single-process reference a DDP run is compared with.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    tensors = (batch,) if isinstance(batch, torch.Tensor) else tuple(batch)
    n = len(tensors[0])
    if n % world_size:
        raise ValueError(f"batch of {n} does not split evenly over {world_size} ranks")
    size = n // world_size
    parts = tuple(t[rank * size : (rank + 1) * size] for t in tensors)
    return parts[0] if isinstance(batch, torch.Tensor) else parts
