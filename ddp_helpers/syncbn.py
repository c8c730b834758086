"""A SyncBatchNorm that also runs on CPU (gloo), for learning and for CPU-only runs.

``torch.nn.SyncBatchNorm`` refuses CPU tensors inside a process group. This module
computes the same thing with three numbers per channel that every rank all-reduces:

    forward   sum(x), sum(x**2) and the element count  ->  global mean and variance
    backward  sum(dy), sum(dy * x_hat)                  ->  the global terms of dBN/dx

so the normalisation, the input gradients and the running statistics equal plain
BatchNorm applied to the concatenation of every rank's batch (ranks may hold different
batch sizes). Weight and bias gradients stay local sums, exactly as in PyTorch's
version: DDP averages them like any other parameter gradient.

    model = convert_sync_batchnorm(model)   # nn.SyncBatchNorm on CUDA, ours on CPU
    model = DDP(model)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.modules.batchnorm import _BatchNorm

__all__ = ["SyncBatchNorm", "SyncBatchNormFunction", "convert_sync_batchnorm", "batch_stats"]


def _world(group: dist.ProcessGroup | None) -> int:
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(group)
    return 1


def _channel_shape(x: torch.Tensor) -> tuple[int, ...]:
    """(1, C, 1, 1, ...) so per-channel vectors broadcast against x."""
    return (1, x.shape[1]) + (1,) * (x.dim() - 2)


def _reduce_dims(x: torch.Tensor) -> list[int]:
    return [0] + list(range(2, x.dim()))


def batch_stats(x: torch.Tensor, group: dist.ProcessGroup | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean, biased var, count) per channel over every rank's x: one all_reduce.

    Works when ranks hold different batch sizes, because the count is reduced too.
    The sums are taken in float64 so sum(x**2)/n - mean**2 loses no precision.
    """
    xd = x.detach().to(torch.float64)
    dims = _reduce_dims(x)
    count = torch.tensor([x.numel() / x.shape[1]], dtype=torch.float64, device=x.device)
    packed = torch.cat([xd.sum(dims), (xd * xd).sum(dims), count])
    if _world(group) > 1:
        dist.all_reduce(packed, op=dist.ReduceOp.SUM, group=group)
    c = x.shape[1]
    total = packed[2 * c]
    mean = packed[:c] / total
    var = (packed[c : 2 * c] / total - mean * mean).clamp_min(0)
    return mean, var, total


class SyncBatchNormFunction(torch.autograd.Function):
    """Training-mode batch norm over the union of all ranks' batches.

    forward(x, weight, bias, running_mean, running_var, eps, momentum, group)
    updates the running buffers in place (unbiased variance, like PyTorch) when they
    are given, and returns y in x's dtype (statistics are computed in float32 or
    better, so bf16/fp16 activations under autocast are fine).
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                running_mean: torch.Tensor | None, running_var: torch.Tensor | None, eps: float,
                momentum: float, group: dist.ProcessGroup | None) -> torch.Tensor:
        mean, var, count = batch_stats(x, group)
        if count <= 1:
            raise ValueError(f"expected more than 1 value per channel when training, got {int(count)}")
        compute = torch.promote_types(x.dtype, torch.float32)
        shape = _channel_shape(x)
        invstd = torch.rsqrt(var + eps).to(compute)
        x_hat = (x.to(compute) - mean.to(compute).view(shape)) * invstd.view(shape)
        y = x_hat
        if weight is not None:
            y = y * weight.to(compute).view(shape)
        if bias is not None:
            y = y + bias.to(compute).view(shape)
        if running_mean is not None and running_var is not None:
            with torch.no_grad():
                unbiased = var * count / (count - 1)
                running_mean.mul_(1 - momentum).add_(momentum * mean.to(running_mean.dtype))
                running_var.mul_(1 - momentum).add_(momentum * unbiased.to(running_var.dtype))
        ctx.save_for_backward(x_hat, invstd, weight)
        ctx.count = float(count)
        ctx.group = group
        ctx.bias_dtype = bias.dtype if bias is not None else None
        ctx.in_dtype = x.dtype
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x_hat, invstd, weight = ctx.saved_tensors
        shape = _channel_shape(x_hat)
        dims = _reduce_dims(x_hat)
        g = grad_out.to(x_hat.dtype)
        # Local sums over this rank's samples; the parameter gradients use them as
        # they are (DDP averages parameter gradients across ranks afterwards).
        sum_dy = g.sum(dims)
        sum_dy_xhat = (g * x_hat).sum(dims)
        grad_weight = sum_dy_xhat.to(weight.dtype) if weight is not None and ctx.needs_input_grad[1] else None
        grad_bias = sum_dy.to(ctx.bias_dtype) if ctx.bias_dtype is not None and ctx.needs_input_grad[2] else None
        grad_x = None
        if ctx.needs_input_grad[0]:
            # The mean and variance depend on every rank's x, so dL/dx needs the
            # global sums of dy and dy*x_hat: one all_reduce of both.
            packed = torch.cat([sum_dy, sum_dy_xhat])
            if _world(ctx.group) > 1:
                dist.all_reduce(packed, op=dist.ReduceOp.SUM, group=ctx.group)
            c = x_hat.shape[1]
            mean_dy = (packed[:c] / ctx.count).view(shape)
            mean_dy_xhat = (packed[c:] / ctx.count).view(shape)
            scale = invstd if weight is None else invstd * weight.to(x_hat.dtype)
            grad_x = (scale.view(shape) * (g - mean_dy - x_hat * mean_dy_xhat)).to(ctx.in_dtype)
        return grad_x, grad_weight, grad_bias, None, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Drop-in for BatchNorm1d/2d/3d whose training statistics span all ranks.

    Outside a process group (or with one rank) it computes ordinary BatchNorm.
    In eval mode it communicates nothing, like ``nn.SyncBatchNorm``: it normalises with
    the running statistics, or, with ``track_running_stats=False``, with this rank's
    own batch statistics.
    """

    process_group: dist.ProcessGroup | None

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True,
                 process_group: dist.ProcessGroup | None = None, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device=device, dtype=dtype)
        self.process_group = process_group

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(x)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average, as in PyTorch
                factor = 1.0 / float(self.num_batches_tracked)
        if not self.training:
            # Eval mode never communicates, as in torch/nn/modules/batchnorm.py,
            # SyncBatchNorm.forward: need_sync requires self.training, so eval falls back to
            # F.batch_norm, with the running statistics when the layer has them and with this
            # rank's own batch statistics when it has none (track_running_stats=False).
            batch_only = self.running_mean is None and self.running_var is None
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                batch_only, factor, self.eps)
        track = self.track_running_stats  # training mode from here on
        return SyncBatchNormFunction.apply(
            x, self.weight, self.bias,
            self.running_mean if track else None, self.running_var if track else None,
            self.eps, factor, self.process_group)


def _copy_bn(src: _BatchNorm, dst: _BatchNorm) -> _BatchNorm:
    if src.affine:
        dst.weight, dst.bias = src.weight, src.bias
    dst.running_mean = src.running_mean
    dst.running_var = src.running_var
    dst.num_batches_tracked = src.num_batches_tracked
    dst.train(src.training)
    if hasattr(src, "qconfig"):
        dst.qconfig = src.qconfig
    return dst


def convert_sync_batchnorm(model: nn.Module, process_group: dist.ProcessGroup | None = None,
                           device: torch.device | str | None = None) -> nn.Module:
    """Replace every BatchNorm layer by a synchronised one; call it before wrapping in DDP.

    On CUDA (``device``, or else where the model's parameters live) this is
    ``nn.SyncBatchNorm.convert_sync_batchnorm``; elsewhere the layers become this
    module's :class:`SyncBatchNorm`, sharing the original parameters and buffers.
    """
    if device is None:
        first = next(model.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
    if torch.device(device).type == "cuda":
        return nn.SyncBatchNorm.convert_sync_batchnorm(model, process_group)
    return _convert_cpu(model, process_group)


def _convert_cpu(module: nn.Module, process_group: dist.ProcessGroup | None) -> nn.Module:
    out = module
    if isinstance(module, _BatchNorm) and not isinstance(module, (SyncBatchNorm, nn.SyncBatchNorm)):
        out = _copy_bn(module, SyncBatchNorm(module.num_features, module.eps, module.momentum,
                                             module.affine, module.track_running_stats, process_group))
    for name, child in module.named_children():
        out.add_module(name, _convert_cpu(child, process_group))
    return out
