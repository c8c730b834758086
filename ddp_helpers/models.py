"""The models used across the series.

``ToyModel`` and ``ToyMpModel`` are the 10 -> 10 -> 5 networks of the official DDP
tutorial; ``ConvNet`` is the small digits classifier of the later notebooks. It has
BatchNorm layers on purpose: notebook 07 (SyncBatchNorm) and the capstone need buffers
that DDP broadcasts and that ``nn.SyncBatchNorm.convert_sync_batchnorm`` replaces.
``square_mlp`` is the plain stack of square layers of notebooks 04 and 10 and of
:mod:`ddp_helpers.perf`; ``seeded`` builds a model from a seed without touching the
caller's random numbers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn


@contextlib.contextmanager
def seeded(seed: int | None) -> Iterator[None]:
    """Inside, the CPU generator starts from ``seed``; after, it is back where it was.

    ``seed=None`` does nothing: the block draws from the caller's generator, as plain code
    would. With a seed, the block sees what it would after ``torch.manual_seed(seed)``
    (layers are initialized on the CPU), but the caller's generator is left untouched,
    so a cell or script that draws afterwards gets the same numbers as without the block.
    Only the CPU generator is forked and seeded: the GPU ones are neither read nor changed.
    """
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(seed)  # torch.manual_seed(seed), CPU part only
        yield


class ToyModel(nn.Module):
    """Linear(10, 10) -> ReLU -> Linear(10, 5)."""

    def __init__(self) -> None:
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net2(self.relu(self.net1(x)))


class ToyMpModel(nn.Module):
    """``ToyModel`` split over two devices (model parallelism inside one process).

    The attribute names match ``ToyModel`` so a ``ToyModel`` state dict loads into it,
    which is how the notebooks show that the split changes placement, not the maths.
    DDP wraps such a model without ``device_ids``: the module spans several devices.
    """

    def __init__(self, dev0: torch.device | str, dev1: torch.device | str) -> None:
        super().__init__()
        self.dev0 = torch.device(dev0)
        self.dev1 = torch.device(dev1)
        self.net1 = nn.Linear(10, 10).to(self.dev0)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5).to(self.dev1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.net1(x.to(self.dev0)))
        # The activation, not the layer, crosses devices; autograd sends the
        # gradient back the same way in backward.
        return self.net2(x.to(self.dev1))


class ConvNet(nn.Module):
    """Two conv/BN/ReLU/max-pool blocks and a linear head for 1x28x28 digits.

    20,538 parameters: small enough that one CPU process trains an epoch of the
    sklearn digits in about 0.2 s, large enough for ~98% test accuracy after 2-4
    epochs of Adam(lr=1e-3) at batch size 32.
    """

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        # bias=False: a BatchNorm right after the conv subtracts the batch mean, so a
        # conv bias would be cancelled anyway; BN's own shift plays its role.
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),  # 28 -> 14
            nn.Conv2d(16, 32, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.MaxPool2d(2),  # 14 -> 7
        )
        self.classifier = nn.Linear(32 * 7 * 7, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def square_mlp(width: int, depth: int, classes: int = 10, *, seed: int | None = None) -> nn.Sequential:
    """``depth`` Linear(width, width) + ReLU blocks and a Linear(width, classes) head.

    Sizes are easy to reason about: each square weight is 4 * width**2 bytes in float32,
    and the parameters are named 0.weight, 0.bias, 2.weight, ... in registration order.
    ``seed=None`` initializes from the caller's random numbers (seed them first, as the
    notebooks do); an integer gives the weights of ``torch.manual_seed(seed)`` followed by
    this call, the same on every rank, and leaves the caller's generator as it was
    (:func:`seeded`). ``square_mlp(1024, 4, seed=0)`` is the 4.2 M-parameter model of
    notebook 10 and ``python -m ddp_helpers.perf``.
    """
    with seeded(seed):
        layers = [m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())]
        return nn.Sequential(*layers, nn.Linear(width, classes))


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of scalar parameters (buffers such as BN running stats excluded)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
