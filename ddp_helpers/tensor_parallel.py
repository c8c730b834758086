"""Megatron-style tensor parallelism for a two-layer MLP, written by hand.

    from ddp_helpers.tensor_parallel import MLP, HandTensorParallelMLP

    dense = MLP(dim=16, hidden=64)                      # the single-process model
    tp = HandTensorParallelMLP(dense, group=None)       # this rank's half of it

``up`` (dim -> hidden) is split by its output features: rank r holds rows
[r*h/N, (r+1)*h/N) of ``up.weight`` and computes that slice of the hidden activation
with no communication; the activation is elementwise, so it applies to the slice.
``down`` (hidden -> dim) is split by its input features: each rank's product is a
partial sum of the output, and ONE all-reduce adds the partial sums (Megatron's ``g``).
In backward the mirror image happens: the gradient of the block's input is a partial
sum too, all-reduced by Megatron's ``f`` (identity forward, all-reduce backward).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


class MLP(nn.Module):
    """Linear(dim, hidden) -> ReLU -> Linear(hidden, dim): a transformer's feed-forward block."""

    def __init__(self, dim: int = 16, hidden: int = 64) -> None:
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.act = nn.ReLU()
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class _CopyToParallel(torch.autograd.Function):
    """Megatron's f: every rank uses the whole input; their input gradients are summed."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor, group: dist.ProcessGroup | None,
                ) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromParallel(torch.autograd.Function):
    """Megatron's g: sum the ranks' partial outputs; the gradient passes through unchanged."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor, group: dist.ProcessGroup | None,
                ) -> torch.Tensor:
        x = x.clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def split_range(size: int, rank: int, world_size: int) -> slice:
    """Rank ``rank``'s equal slice of ``size`` features (size must divide evenly)."""
    if size % world_size:
        raise ValueError(f"{size} features do not split evenly over {world_size} ranks")
    step = size // world_size
    return slice(rank * step, (rank + 1) * step)


class HandTensorParallelMLP(nn.Module):
    """This rank's shard of ``dense``: a column-parallel ``up``, a row-parallel ``down``.

    The parameters are copies of the dense model's slices: ``up.weight[rows]``,
    ``up.bias[rows]``, ``down.weight[:, rows]``; ``down.bias`` is whole on every rank and
    added once, after the all-reduce.
    """

    def __init__(self, dense: MLP, group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        self.group = group
        rows = split_range(dense.up.out_features, dist.get_rank(group), dist.get_world_size(group))
        self.rows = rows
        self.up_weight = nn.Parameter(dense.up.weight.detach()[rows].clone())
        self.up_bias = nn.Parameter(dense.up.bias.detach()[rows].clone())
        self.down_weight = nn.Parameter(dense.down.weight.detach()[:, rows].clone())
        self.down_bias = nn.Parameter(dense.down.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _CopyToParallel.apply(x, self.group)
        hidden = torch.relu(x @ self.up_weight.T + self.up_bias)   # this rank's hidden slice
        partial = hidden @ self.down_weight.T                       # a partial sum of the output
        return _ReduceFromParallel.apply(partial, self.group) + self.down_bias

    def dense_slices(self, dense: MLP) -> list[torch.Tensor]:
        """The slices of ``dense``'s gradients that correspond to this rank's parameters."""
        g = dense.up.weight.grad, dense.up.bias.grad, dense.down.weight.grad, dense.down.bias.grad
        return [g[0][self.rows], g[1][self.rows], g[2][:, self.rows], g[3]]
