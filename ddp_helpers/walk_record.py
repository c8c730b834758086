"""Record what each process of a walkthrough step did, without a line of the step's file changing.

A step launched with :func:`record_env` in its environment imports this module at start-up (through
``ddp_helpers/_walk_hook/sitecustomize.py`` on ``PYTHONPATH``). Each process then notes the sample
indices of the first batch its ``DataLoader`` drew (``BatchSampler`` yields them) and, at exit, the
final values of its optimizer's parameters, in ``FOLDER/rank{RANK}.pt``. :func:`read_record` loads
them: the notebook's state strip (:mod:`ddp_helpers.viz.state_strip`) shows each rank's shard and
whether the ranks ended with equal weights, from the run itself.

    from ddp_helpers import torchrun
    from ddp_helpers.walk_record import read_record, record_env

    torchrun("walkthrough/step4_sampler.py", nproc=2, args=["runs/x"], env=record_env("runs/x/record"))
    read_record("runs/x/record")   # {0: {"first_batch": [...], "weights": [...]}, 1: {...}}
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path
from typing import Any

HOOK_DIR = Path(__file__).resolve().parent / "_walk_hook"
ENV = "WALK_RECORD"


def record_env(folder: str | os.PathLike) -> dict[str, str]:
    """The environment that makes every process of a launch record into ``folder``.

    The hook's folder is given relative to the current working folder (so that a launch record
    names no machine's path): launch from this folder, as ``torchrun`` and ``subprocess`` do by default.
    """
    hook = os.path.relpath(HOOK_DIR)  # from the working folder: a launch record names no machine's path
    path = [hook, os.environ.get("PYTHONPATH", "")]
    return {ENV: str(folder), "PYTHONPATH": os.pathsep.join(p for p in path if p)}


def install(folder: str | os.PathLike) -> dict[str, list[Any]]:
    """Start recording in this process (called at start-up by the hook); returns what it records."""
    import torch
    from torch.utils.data import BatchSampler

    seen: dict[str, list[Any]] = {"batches": [], "optimizers": []}
    batch_iter, optimizer_init = BatchSampler.__iter__, torch.optim.Optimizer.__init__

    def recording_iter(self):
        for batch in batch_iter(self):
            if not seen["batches"]:
                seen["batches"].append([int(i) for i in batch])
            yield batch

    def recording_init(self, *args, **kwargs):
        optimizer_init(self, *args, **kwargs)
        seen["optimizers"].append(self)

    def write() -> None:
        if not seen["optimizers"]:  # torchrun's own agent process, or a script without training
            return
        params = [p.detach().cpu().clone() for group in seen["optimizers"][-1].param_groups
                  for p in group["params"]]
        Path(folder).mkdir(parents=True, exist_ok=True)
        record = {"first_batch": seen["batches"][0] if seen["batches"] else [], "weights": params}
        torch.save(record, Path(folder) / f"rank{os.environ.get('RANK', '0')}.pt")

    BatchSampler.__iter__ = recording_iter
    torch.optim.Optimizer.__init__ = recording_init
    atexit.register(write)
    return seen


def read_record(folder: str | os.PathLike) -> dict[int, dict[str, Any]]:
    """``{rank: {"first_batch": [sample indices], "weights": [tensors]}}`` of a recorded launch."""
    import torch

    files = sorted(Path(folder).glob("rank*.pt"), key=lambda p: int(p.stem[4:]))
    if not files:
        raise FileNotFoundError(f"no record in {folder}: launch the step with env=record_env({str(folder)!r})")
    return {int(p.stem[4:]): torch.load(p, weights_only=True) for p in files}
