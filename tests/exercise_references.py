"""Independent correct answers for the exercise checks' tests: torch's own implementations, never the
checks' private references (a test that grades a check with its own reference proves nothing)."""

import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn


def reducer_buckets(items: Sequence[tuple[str, int]], cap: float, first: float) -> list[list[str]]:
    """DDP's own bucket assignment, a correct answer to 04.3: the Reducer's
    ``compute_bucket_assignment_by_size``, which DDP calls with the limits [first_bucket_bytes_cap,
    bucket_bytes_cap] when it rebuilds its buckets in the order the gradients became ready (after the
    first step). A uint8 tensor of n elements stands for n bytes; the caps are whole bytes, as DDP's
    ``int(bucket_cap_mb * 2**20)``."""
    tensors = [torch.empty(nbytes, dtype=torch.uint8) for _, nbytes in items]
    indices, _ = dist._compute_bucket_assignment_by_size(tensors, [int(first), int(cap)], [False] * len(items),
                                                         list(range(len(items))))
    return [[items[i][0] for i in bucket] for bucket in indices]


def reducer_count(nbytes: Sequence[int], cap: float) -> int:
    """How many buckets DDP's Reducer makes with one cap for every bucket (bucket_cap_mb given: the first
    bucket's cap is the same): a correct answer to 10.2."""
    return len(reducer_buckets([(str(i), n) for i, n in enumerate(nbytes)], cap, cap))


def zero_partition(sizes: Sequence[int], world_size: int) -> list[list[int]]:
    """ZeroRedundancyOptimizer's own partition of parameters of the given sizes (element counts) over
    ``world_size`` ranks, as each rank's list of sizes: a correct answer to 11.1.

    The optimizer is built in a process group of one (made here and removed again when none exists);
    then its world size is set and its partition made again (``_partition_parameters`` reads the world
    size, the parameter groups and its cache only)."""
    with warnings.catch_warnings():  # importing it jit-scripts torch's functional optimizers: deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        from torch.distributed.optim import ZeroRedundancyOptimizer

    own_group = not dist.is_initialized()
    with tempfile.TemporaryDirectory() as tmp:
        if own_group:
            dist.init_process_group("gloo", init_method=f"file://{Path(tmp) / 'store'}", rank=0, world_size=1)
        try:
            params = [nn.Parameter(torch.zeros(n)) for n in sizes]
            zero = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.SGD, lr=0.1)
            zero.world_size, zero._partition_parameters_cache = world_size, []
            return [[p.numel() for p in groups[0]["params"]] for groups in zero._partition_parameters()]
        finally:
            if own_group:
                dist.destroy_process_group()
