"""The one place every worker script gets its process group, device and printing.

    from ddp_helpers.runtime import distributed, print0, print_in_rank_order

    with distributed() as ctx:          # reads RANK/LOCAL_RANK/WORLD_SIZE from torchrun
        x = torch.ones(3, device=ctx.device)
        ...

Backend and device are chosen here and nowhere else: ``nccl`` and
``cuda:LOCAL_RANK`` when this node has at least LOCAL_WORLD_SIZE GPUs, ``gloo``
and the CPU otherwise. ``DDP_BACKEND=gloo`` forces the CPU path on a GPU box.
"""

from __future__ import annotations

import atexit
import datetime
import json
import logging
import os
import sys
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist

DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class DistContext:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    backend: str
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _env_int(name: str) -> int:
    value = os.environ.get(name)
    if value is None:
        raise RuntimeError(
            f"{name} is not set: this script is a distributed worker. Launch it with "
            "torchrun (or ddp_helpers.launch.torchrun from a notebook), not plain python."
        )
    return int(value)


def choose_backend(local_world_size: int) -> tuple[str, str]:
    """(backend, device type): nccl/cuda if every local rank can own a GPU, else gloo/cpu."""
    forced = os.environ.get("DDP_BACKEND")
    if forced == "gloo":
        return "gloo", "cpu"
    if forced not in (None, "", "nccl"):
        raise ValueError(f"DDP_BACKEND must be 'gloo' or 'nccl', got {forced!r}")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus >= local_world_size:
        return "nccl", "cuda"
    if forced == "nccl":
        raise RuntimeError(f"DDP_BACKEND=nccl needs {local_world_size} visible GPUs, found {gpus}")
    return "gloo", "cpu"


def setup(timeout_s: float | None = None) -> DistContext:
    """Initialise the default process group from torchrun's environment."""
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    local_rank = _env_int("LOCAL_RANK")
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    backend, device_type = choose_backend(local_world)
    if device_type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)  # before init: NCCL binds this rank to its GPU
    else:
        device = torch.device("cpu")
    timeout = datetime.timedelta(seconds=float(os.environ.get("DDP_TIMEOUT_S", timeout_s or DEFAULT_TIMEOUT_S)))
    init_kwargs = {"device_id": device} if device_type == "cuda" else {}
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout,
                            store=_attempt_store(world, timeout), **init_kwargs)
    return DistContext(rank, local_rank, world, local_world, backend, device)


def _attempt_store(world_size: int, timeout: datetime.timedelta):
    """A store namespaced by torchrun's restart count, or None for the default env:// store.

    Under torchrun every attempt reuses the agent's TCPStore, so after a restart
    (--max-restarts) ranks can read the previous attempt's gloo addresses and fail
    with "connectFullMesh ... Connection refused". A per-attempt prefix avoids it.
    """
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    client = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                           is_master=False, timeout=timeout)
    return dist.PrefixStore(f"/worker/attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", client)


_uncaught_error = False


def _exit_skipping_finalizers() -> None:
    """At interpreter exit, end the process without Python's finalization.

    A DDP model leaves gloo threads that may still be releasing the last
    collective's tensors while Python tears down its modules; the process then
    aborts ("terminate called without an active exception", exit code -6) after
    all its work succeeded. Everything is flushed here, so skipping that
    finalization loses nothing a worker script writes with ``with open(...)``.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if _uncaught_error else 0)


def _note_uncaught(hook):
    def wrapped(*args):
        global _uncaught_error
        _uncaught_error = True
        hook(*args)
    return wrapped


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


FAILURES_ENV = "DDP_HELPERS_FAILURES"


def record_failure(formatted: str) -> None:
    """Note when this rank failed (ns clock) and its traceback, for the launcher.

    When one rank crashes, its peers fail a moment later inside a collective
    ("Connection closed by peer"); torchrun's own report only has one-second
    timestamps and often blames a peer. The launcher reads these files instead,
    and takes the traceback from here because torchrun's copy of a dying rank's
    stderr can miss its last lines.
    """
    folder = os.environ.get(FAILURES_ENV)
    if not folder:
        return
    record = {"rank": int(os.environ.get("RANK", -1)), "time_ns": time.time_ns(),
              "attempt": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)),
              "traceback": formatted}
    name = f"attempt{record['attempt']}_rank{record['rank']}.json"
    with open(os.path.join(folder, name), "w") as f:
        json.dump(record, f)


@contextmanager
def distributed(timeout_s: float | None = None):
    """setup() on entry, destroy_process_group() on a clean exit.

    On an error the rank records it, prints its traceback and exits at once
    with code 1 (fail fast): its peers then fail inside their next collective
    and torchrun stops the group, instead of this rank lingering in teardown
    until torchrun kills it and reports a signal instead of the real error.
    """
    ctx = setup(timeout_s)
    if not getattr(sys.excepthook, "_ddp_helpers", False):
        sys.excepthook = _note_uncaught(sys.excepthook)
        sys.excepthook._ddp_helpers = True
        atexit.register(_exit_skipping_finalizers)  # registered last, so it runs first
    try:
        yield ctx
    except SystemExit as exc:
        if exc.code in (None, 0):
            teardown()
            raise
        _exit_now(exc, exc.code if isinstance(exc.code, int) else 1)
    except BaseException as exc:
        _exit_now(exc, 1)
    else:
        teardown()


def _exit_now(exc: BaseException, code: int) -> None:
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next  # start at the worker's own frame, as an uncaught error would
    formatted = "".join(traceback.format_exception(type(exc), exc, tb))
    record_failure(formatted)
    sys.stderr.write(formatted)
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(code)


def print0(*args, **kwargs) -> None:
    """print on rank 0 only (or always, outside a process group)."""
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(*args, flush=True, **kwargs)


def print_in_rank_order(text: str) -> None:
    """Gather one string per rank and print them on rank 0, rank 0 first."""
    texts = [None] * dist.get_world_size()
    dist.all_gather_object(texts, str(text))
    if dist.get_rank() == 0:
        for rank, t in enumerate(texts):
            print(f"rank {rank}: {t}", flush=True)
