"""Samplers for data-parallel training and exact distributed evaluation.

Three parts, used by notebook 02 (samplers) and notebook 07 (exact evaluation):

1. The arithmetic of ``torch.utils.data.DistributedSampler`` written out as plain
   functions (:func:`num_samples`, :func:`total_size`, :func:`padding_size`,
   :func:`global_order`, :func:`rank_indices`), so a notebook can check them
   against torch's sampler.
2. Exact evaluation sharding: :class:`UnpaddedDistributedSampler` (strided, no
   padding, so per-rank counts may differ by one), :func:`deduplicate` for
   ``(index, value)`` pairs gathered from a padded sampler, and
   :func:`all_gather_deduplicated`, which does the gathering in a process group.
3. The sampler explorer's data: :func:`sampler_grid` (a rank x position grid computed
   by torch's own ``DistributedSampler``) and :func:`grid_summary`; the picture and the
   widget are :mod:`ddp_helpers.viz.sampler_explorer`.

Plus two small datasets the notebook's DataLoader workers must be able to
import: :class:`RangeStream` (an ``IterableDataset`` sharded by rank and by
DataLoader worker) and :class:`NoisyIndex` (returns the worker's random draw).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence, Sized
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler, IterableDataset, Sampler, get_worker_info

__all__ = [
    "num_samples", "total_size", "padding_size", "global_order", "rank_indices",
    "UnpaddedDistributedSampler", "unpadded_counts", "deduplicate", "all_gather_deduplicated",
    "SamplerGrid", "sampler_grid", "grid_summary",
    "RangeStream", "NoisyIndex",
]


# --------------------------------------------------------------------------- 1. arithmetic

def _check(n: int, num_replicas: int, rank: int | None = None) -> None:
    if n < 1:
        raise ValueError(f"dataset size must be >= 1, got {n}")
    if num_replicas < 1:
        raise ValueError(f"num_replicas must be >= 1, got {num_replicas}")
    if rank is not None and not 0 <= rank < num_replicas:
        raise ValueError(f"rank must be in [0, {num_replicas - 1}], got {rank}")


def num_samples(n: int, num_replicas: int, drop_last: bool = False) -> int:
    """How many indices each rank gets from a DistributedSampler over ``n`` items.

    drop_last=False rounds up (the last ranks are topped up with repeats);
    drop_last=True rounds down (the tail that does not fill a round is dropped).
    """
    _check(n, num_replicas)
    return n // num_replicas if drop_last else -(-n // num_replicas)


def total_size(n: int, num_replicas: int, drop_last: bool = False) -> int:
    """Length of the padded (or truncated) global index list: num_samples * num_replicas."""
    return num_samples(n, num_replicas, drop_last) * num_replicas


def padding_size(n: int, num_replicas: int, drop_last: bool = False) -> int:
    """Signed change of the global list: > 0 repeats added, < 0 indices dropped."""
    return total_size(n, num_replicas, drop_last) - n


def global_order(n: int, num_replicas: int, *, shuffle: bool = True, seed: int = 0,
                 epoch: int = 0, drop_last: bool = False) -> list[int]:
    """The global index list every rank builds before taking its stride.

    A permutation of range(n) drawn from a generator seeded with seed + epoch
    (or range(n) without shuffle), then padded by repeating from the start
    (cyclically if the padding is longer than the list) or truncated.
    """
    _check(n, num_replicas)
    if shuffle:
        gen = torch.Generator().manual_seed(seed + epoch)
        order = torch.randperm(n, generator=gen).tolist()
    else:
        order = list(range(n))
    size = total_size(n, num_replicas, drop_last)
    repeats = math.ceil(size / n)
    return (order * repeats)[:size]


def rank_indices(n: int, num_replicas: int, rank: int, *, shuffle: bool = True, seed: int = 0,
                 epoch: int = 0, drop_last: bool = False) -> list[int]:
    """What DistributedSampler(rank=rank) yields: every num_replicas-th entry from position rank."""
    _check(n, num_replicas, rank)
    order = global_order(n, num_replicas, shuffle=shuffle, seed=seed, epoch=epoch, drop_last=drop_last)
    return order[rank::num_replicas]


# --------------------------------------------------------------------------- 2. exact evaluation

def _length(dataset_or_len: Sized | int | np.integer) -> int:
    return int(dataset_or_len) if isinstance(dataset_or_len, (int, np.integer)) else len(dataset_or_len)


def unpadded_counts(n: int, num_replicas: int) -> list[int]:
    """Per-rank sample counts of UnpaddedDistributedSampler: the first n % R ranks get one more."""
    _check(n, num_replicas)
    return [len(range(rank, n, num_replicas)) for rank in range(num_replicas)]


class UnpaddedDistributedSampler(Sampler[int]):
    """Every index exactly once across ranks: strided like DistributedSampler, never padded.

    Rank r gets positions r, r + R, r + 2R, ... of range(n) (or of the shared
    permutation seeded with seed + epoch when shuffle=True), so the ranks'
    counts differ by at most one. Use it for evaluation, where a repeated
    sample would be counted twice; do not use it for DDP training steps,
    where a rank with one batch fewer leaves its peers waiting in an all-reduce.
    """

    def __init__(self, dataset_or_len: Sized | int, num_replicas: int | None = None,
                 rank: int | None = None, shuffle: bool = False, seed: int = 0) -> None:
        if num_replicas is None:
            num_replicas = dist.get_world_size() if dist.is_initialized() else 1
        if rank is None:
            rank = dist.get_rank() if dist.is_initialized() else 0
        self.n = _length(dataset_or_len)
        _check(self.n, num_replicas, rank)
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        if self.shuffle:
            order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch))
            order = order.tolist()
        else:
            order = range(self.n)
        return iter(list(order[self.rank::self.num_replicas]))

    def __len__(self) -> int:
        return len(range(self.rank, self.n, self.num_replicas))


def deduplicate(indices: torch.Tensor | np.ndarray | Sequence[int],
                values: torch.Tensor | np.ndarray | Sequence[Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep one ``value`` per dataset ``index``; return (sorted unique indices, their values).

    For results gathered from a padded DistributedSampler: the padded repeats
    carry the same index as the original. Negative indices (filler) are ignored.
    Raises ValueError if two copies of one index carry different values, which
    would mean the ranks did not evaluate the same model on the same sample.
    """
    indices = torch.as_tensor(indices).reshape(-1).long()
    values = torch.as_tensor(values)
    if values.dim() == 0 or values.shape[0] != indices.shape[0]:
        raise ValueError(f"{indices.shape[0]} indices but values of shape {tuple(values.shape)}")
    keep = indices >= 0
    indices, values = indices[keep], values[keep]
    order = torch.argsort(indices, stable=True)
    indices, values = indices[order], values[order]
    first = torch.ones_like(indices, dtype=torch.bool)
    first[1:] = indices[1:] != indices[:-1]
    # every copy must agree with the first copy of its index
    first_pos = torch.cumsum(first.long(), 0) - 1
    unique_vals = values[first]
    if not torch.equal(unique_vals[first_pos], values):
        raise ValueError("copies of one index carry different values")
    return indices[first], unique_vals


def all_gather_deduplicated(indices: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather every rank's (index, value) pairs and de-duplicate them; the same result on every rank.

    Works for equal per-rank counts (a padded DistributedSampler) and unequal
    ones (UnpaddedDistributedSampler, the last batch of a stream): each rank
    pads its part to the longest with index -1 before the all_gather.
    ``values`` has one row per index (any trailing shape, any dtype).
    """
    indices = torch.as_tensor(indices).reshape(-1).long()
    values = torch.as_tensor(values)
    device = values.device
    count = torch.tensor([indices.numel()], device=device)
    counts = [torch.zeros_like(count) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, count)
    longest = int(max(c.item() for c in counts))
    pad = longest - indices.numel()
    idx = torch.cat([indices.to(device), torch.full((pad,), -1, dtype=torch.long, device=device)])
    val = torch.cat([values, torch.zeros((pad, *values.shape[1:]), dtype=values.dtype, device=device)])
    all_idx = [torch.empty_like(idx) for _ in counts]
    all_val = [torch.empty_like(val) for _ in counts]
    dist.all_gather(all_idx, idx)
    dist.all_gather(all_val, val)
    return deduplicate(torch.cat(all_idx).cpu(), torch.cat(all_val).cpu())


# --------------------------------------------------------------------------- 3. explorer

@dataclass(frozen=True)
class SamplerGrid:
    """What DistributedSampler hands each rank, laid out rank x position.

    grid[r, p]     the dataset index rank r gets at position p (torch's sampler)
    duplicate[r, p] True where that index was already handed out earlier in the
                   global order (position-major: p * R + r) - a padded repeat
    dropped        dataset indices no rank sees (drop_last=True)
    """

    n: int
    num_replicas: int
    drop_last: bool
    shuffle: bool
    seed: int
    epoch: int
    grid: np.ndarray
    duplicate: np.ndarray
    dropped: tuple[int, ...]

    @property
    def num_samples(self) -> int:
        return self.grid.shape[1]


def sampler_grid(n: int, num_replicas: int, *, drop_last: bool = False, shuffle: bool = True,
                 seed: int = 0, epoch: int = 0) -> SamplerGrid:
    """Build the rank x position grid by asking torch's DistributedSampler for every rank."""
    _check(n, num_replicas)
    rows = []
    for rank in range(num_replicas):
        sampler = DistributedSampler(range(n), num_replicas=num_replicas, rank=rank,
                                     shuffle=shuffle, seed=seed, drop_last=drop_last)
        sampler.set_epoch(epoch)
        rows.append(list(sampler))
    grid = np.array(rows, dtype=np.int64).reshape(num_replicas, -1)
    duplicate = np.zeros(grid.shape, dtype=bool)
    seen: set[int] = set()
    for p in range(grid.shape[1]):  # the global order is position-major
        for r in range(num_replicas):
            duplicate[r, p] = int(grid[r, p]) in seen
            seen.add(int(grid[r, p]))
    dropped = tuple(sorted(set(range(n)) - seen))
    return SamplerGrid(n, num_replicas, drop_last, shuffle, seed, epoch, grid, duplicate, dropped)


def grid_summary(data: SamplerGrid) -> str:
    """One sentence on what the grid shows; for an empty grid, why it is empty."""
    R, S = data.grid.shape
    if S == 0:
        return (f"Every rank gets 0 samples: with drop_last=True each rank gets floor(n / replicas) = "
                f"floor({data.n} / {R}) = 0, because n = {data.n} < {R} replicas fills no complete round, "
                f"so all {data.n} samples are dropped.")
    return (f"Each of the {R} ranks gets {S} samples; {int(data.duplicate.sum())} padded repeats, "
            f"{len(data.dropped)} dropped.")


# --------------------------------------------------------------------------- datasets for the demos

class RangeStream(IterableDataset):
    """A stream of the integers 0..n-1, split between ranks and DataLoader workers.

    With shard=True, reader ``k = rank * num_workers + worker_id`` of the
    ``world_size * num_workers`` readers yields the items k, k + readers, ...,
    so every item is read exactly once. With shard=False every reader yields the
    whole stream, which is what an IterableDataset does unless you shard it.
    """

    def __init__(self, n: int, rank: int = 0, world_size: int = 1, shard: bool = True) -> None:
        _check(n, world_size, rank)
        self.n, self.rank, self.world_size, self.shard = n, rank, world_size, shard

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()  # None in the main process (num_workers=0)
        workers, worker_id = (info.num_workers, info.id) if info is not None else (1, 0)
        if not self.shard:
            return iter(range(self.n))
        reader = self.rank * workers + worker_id
        return iter(range(reader, self.n, self.world_size * workers))


class NoisyIndex(torch.utils.data.Dataset):
    """Item i is (i, torch seed of the loading worker, a random draw): the draw stands for augmentation.

    The draw comes from torch's global RNG in whichever process loads the item;
    the seed is that process's ``torch.initial_seed()`` (-1 in the main process).
    """

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[int, int, float]:
        in_worker = get_worker_info() is not None
        return i, (torch.initial_seed() if in_worker else -1), torch.rand(()).item()
