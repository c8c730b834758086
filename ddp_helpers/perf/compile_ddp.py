"""``torch.compile`` and DDP: what gets compiled, counted with a graph-counting backend.

    from ddp_helpers.perf.compile_ddp import compile_variants
    compile_variants(steps=3)     # inside a process group (a torchrun worker)

Two ways to combine them: ``torch.compile(DDP(model))`` and ``DDP(torch.compile(model))``.
For each, on a plain ``nn.Sequential`` and on a model with its own ``forward`` (:class:`UserMLP`),
this counts what dynamo captured (``graphs``: distinct FX graphs; ``graph_breaks``), how many
pieces the backend was handed (``subgraphs``: under DDP, dynamo's DDPOptimizer splits a graph at
the bucket boundaries, ``torch/_dynamo/backends/distributed.py``), and whether training with it
ends bitwise equal to eager DDP. The counting backend runs each graph eagerly (like
``backend="eager"``: nothing is code-generated, so counting is cheap); ``backend="inductor"``
compiles for real (a cold compile costs tens of seconds on a laptop CPU).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_helpers.compare import max_abs_diff
from ddp_helpers.models import square_mlp
from ddp_helpers.perf.experiments import MODEL_SEED, train_step
from ddp_helpers.perf.timing import default_device

WRAP_THEN_COMPILE, COMPILE_THEN_WRAP = "torch.compile(DDP(model))", "DDP(torch.compile(model))"


class UserMLP(nn.Module):
    """:func:`ddp_helpers.models.square_mlp` behind a ``forward`` written outside ``torch.nn``."""

    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.body = square_mlp(width, depth, seed=MODEL_SEED)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class GraphCounter:
    """A ``torch.compile`` backend that counts the graphs it is given, then hands them on."""

    def __init__(self, backend: str = "eager") -> None:
        self.backend, self.subgraphs = backend, 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
        self.subgraphs += 1
        if self.backend == "eager":
            return gm.forward
        from torch._dynamo import lookup_backend

        return lookup_backend(self.backend)(gm, example_inputs)


def _dynamo_counts() -> tuple[int, int, list[str]]:
    from torch._dynamo.utils import counters

    breaks = counters["graph_break"]
    reasons = sorted({reason.splitlines()[0] for reason in breaks})
    return counters["stats"]["unique_graphs"], sum(breaks.values()), reasons


def _train(model: nn.Module, steps: int, width: int, batch: int) -> None:
    g = torch.Generator().manual_seed(dist.get_rank())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(steps):
        x = torch.randn(batch, width, generator=g).to(default_device())
        y = torch.randint(10, (batch,), generator=g).to(default_device())
        train_step(model, optimizer, x, y)


def compile_variants(width: int = 512, depth: int = 4, batch: int = 16, steps: int = 3, bucket_cap_mb: float = 1,
                     inductor: bool = False) -> dict:
    """Graphs, graph breaks, subgraphs and equality to eager DDP for each way of combining them.

    ``bucket_cap_mb`` must be at least DDP's first bucket (1 MiB), which DDPOptimizer asserts.
    """
    import torch._dynamo

    device = default_device()
    makers = {"nn.Sequential": lambda: square_mlp(width, depth, seed=MODEL_SEED), "UserMLP": lambda: UserMLP(width, depth)}
    backends = ["eager", "inductor"] if inductor else ["eager"]
    result = {"width": width, "depth": depth, "steps": steps, "bucket_cap_mb": bucket_cap_mb, "variants": {}}
    for kind, make in makers.items():
        reference = DDP(make().to(device), bucket_cap_mb=bucket_cap_mb)
        _train(reference, steps, width, batch)
        for backend in backends:
            for way in (WRAP_THEN_COMPILE, COMPILE_THEN_WRAP):
                torch.compiler.reset()
                torch._dynamo.utils.counters.clear()
                counter, model = GraphCounter(backend), make().to(device)
                if way == WRAP_THEN_COMPILE:
                    ddp = DDP(model, bucket_cap_mb=bucket_cap_mb)
                    run = torch.compile(ddp, backend=counter)
                else:
                    ddp = DDP(torch.compile(model, backend=counter), bucket_cap_mb=bucket_cap_mb)
                    run = ddp
                _train(run, steps, width, batch)
                graphs, breaks, reasons = _dynamo_counts()
                diff = max_abs_diff(reference.module.state_dict(), _plain_state(ddp))
                result["variants"][f"{way}, {kind}, {backend}"] = {
                    "way": way, "model": kind, "backend": backend, "graphs": graphs, "subgraphs": counter.subgraphs,
                    "graph_breaks": breaks, "break_reasons": reasons, "max_diff": diff, "equal": diff == 0.0}
    torch.compiler.reset()
    return result


def _plain_state(ddp: DDP) -> dict[str, torch.Tensor]:
    """The wrapped model's state dict without the ``_orig_mod.`` prefix torch.compile adds."""
    return {k.replace("_orig_mod.", ""): v for k, v in ddp.module.state_dict().items()}
