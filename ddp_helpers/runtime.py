"""The one place every worker script gets its process group, device and printing.

    from ddp_helpers.runtime import distributed, print0, print_in_rank_order

    with distributed() as ctx:          # reads RANK/LOCAL_RANK/WORLD_SIZE from torchrun
        x = torch.ones(3, device=ctx.device)
        ...

Backend and device are chosen here and nowhere else: ``nccl`` and
``cuda:LOCAL_RANK`` when this node has at least LOCAL_WORLD_SIZE GPUs, ``gloo``
and the CPU otherwise. ``DDP_BACKEND=gloo`` forces the CPU path on a GPU box.
``DDP_SHARE_GPUS=1`` puts more processes than GPUs on the GPUs (two ranks on one
laptop GPU): ``gloo``, rank r on ``cuda:(LOCAL_RANK mod GPUs)``. NCCL refuses two
ranks of one group on one device (NCCL's init: "Duplicate GPU detected"); gloo
is slower there, and not every collective has a CUDA version in every release.
"""

from __future__ import annotations

import datetime
import gc
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

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

    @property
    def device_ids(self) -> list[int] | None:
        """What DDP's ``device_ids`` takes for a module on ``self.device``: the one GPU, or
        None for a CPU module (DDP rejects ``device_ids`` for one that is not on a single GPU)."""
        return [self.device.index] if self.device.type == "cuda" else None


def _env_int(name: str) -> int:
    value = os.environ.get(name)
    if value is None:
        raise RuntimeError(
            f"{name} is not set: this script is a distributed worker. Launch it with "
            "torchrun (or ddp_helpers.launch.torchrun from a notebook), not plain python."
        )
    return int(value)


SHARE_GPUS_ENV = "DDP_SHARE_GPUS"


def choose_backend(local_world_size: int) -> tuple[str, str]:
    """(backend, device type): nccl/cuda if every local rank can own a GPU, else gloo/cpu;
    gloo/cuda when DDP_SHARE_GPUS=1 asks the ranks to share the visible GPUs."""
    forced = os.environ.get("DDP_BACKEND")
    if forced not in (None, "", "gloo", "nccl"):
        raise ValueError(f"DDP_BACKEND must be 'gloo' or 'nccl', got {forced!r}")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    share = os.environ.get(SHARE_GPUS_ENV, "")
    if share not in ("", "0", "1"):
        raise ValueError(f"{SHARE_GPUS_ENV} must be 1 (ranks share the GPUs over gloo) or 0, got {share!r}")
    if share == "1":
        if forced == "nccl":
            raise ValueError(f"{SHARE_GPUS_ENV}=1 needs gloo: NCCL refuses two ranks on one GPU. "
                             "Unset DDP_BACKEND (or set it to gloo).")
        if gpus == 0:
            raise RuntimeError(f"{SHARE_GPUS_ENV}=1 needs a visible GPU, found none: unset it to run on the CPU")
        return "gloo", "cuda"
    if forced == "gloo":
        return "gloo", "cpu"
    if gpus >= local_world_size:
        return "nccl", "cuda"
    if forced == "nccl":
        raise RuntimeError(f"DDP_BACKEND=nccl needs {local_world_size} visible GPUs, found {gpus}")
    return "gloo", "cpu"


def resolve_timeout(timeout_s: float | None = None) -> datetime.timedelta:
    """The process-group timeout: ``timeout_s`` if given, else the environment variable
    ``DDP_TIMEOUT_S``, else DEFAULT_TIMEOUT_S (60 s)."""
    if timeout_s is None:
        raw = os.environ.get("DDP_TIMEOUT_S", "")
        try:
            timeout_s = float(raw) if raw.strip() else DEFAULT_TIMEOUT_S
        except ValueError:
            raise ValueError(f"DDP_TIMEOUT_S must be a number of seconds, got {raw!r}") from None
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise ValueError(f"the timeout must be a positive number of seconds, got {timeout_s!r}")
    return datetime.timedelta(seconds=float(timeout_s))


def setup(timeout_s: float | None = None) -> DistContext:
    """Initialise the default process group from torchrun's environment.

    ``timeout_s``: how long a collective may wait for the other ranks before it
    fails. An explicit value wins; ``None`` reads ``DDP_TIMEOUT_S`` (so a launch can
    shorten it: ``torchrun(..., env={"DDP_TIMEOUT_S": "3"})``), else 60 s.
    """
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    local_rank = _env_int("LOCAL_RANK")
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    timeout = resolve_timeout(timeout_s)
    backend, device_type = choose_backend(local_world)
    if device_type == "cuda":  # its own GPU (nccl), or a shared one (gloo, DDP_SHARE_GPUS=1)
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)  # before init: NCCL binds this rank to its GPU
    else:
        device = torch.device("cpu")
    init_kwargs = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout, **init_kwargs)
    return DistContext(rank, local_rank, world, local_world, backend, device)


# ProcessGroupGloo's worker threads carry this name (ProcessGroupGloo::runLoop).
_GLOO_WORKER_THREAD = "pt_gloo_runloop"


def _busy_gloo_workers() -> int | None:
    """How many gloo worker threads of this process are not parked (None: cannot tell).

    A parked worker sleeps on its queue ('S' in /proc). One that is releasing a
    finished collective is running, or runnable, or waiting for the GIL; this is
    only called while the main thread sleeps without the GIL, so such a waiter gets
    it at once and shows as running.
    """
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    busy = 0
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() != _GLOO_WORKER_THREAD:
                    continue
            with open(f"/proc/self/task/{tid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # the thread has ended
        busy += state != "S"
    return busy


def wait_for_gloo_workers(timeout_s: float = 5.0, settle: int = 3) -> bool:
    """Return once every gloo worker thread is parked (``settle`` checks in a row, 1 ms
    apart, the GIL released), or after ``timeout_s``; True if they all were.

    Why: a gloo worker thread drops its references to a finished collective's
    tensors after the caller's ``wait()`` has returned, and for a tensor Python
    created that takes the GIL (c10's PyObject preservation: TensorImpl::decref_pyobject
    -> pybind11::gil_scoped_acquire). If the interpreter is finalizing by then, CPython
    ends that thread with pthread_exit, whose unwinding through the noexcept release
    calls std::terminate: "terminate called without an active exception", exit code -6,
    after the rank finished its work (seen with gdb: thread pt_gloo_runloop in
    ~AsyncAllreduceWork -> take_gil -> PyThread_exit_thread). ``destroy_process_group``
    joins those threads only when nothing else holds the group; a DDP model (its
    Reducer), an FSDP2 model (its mesh) and torch.distributed.nn.functional (its
    default ``group=group.WORLD`` arguments, bound when the first optimizer or DDP model
    imports it after init) keep it alive until interpreter exit. Plain scripts avoid
    both (their clean exit, notebook 00; the mechanism: notebook 09, section 7); this wait is the mend
    for the rest.
    Outside Linux the state cannot be read and this sleeps 50 ms instead.
    """
    if _busy_gloo_workers() is None:
        time.sleep(0.05)
        return False
    deadline = time.monotonic() + timeout_s
    quiet = 0
    while quiet < settle:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)  # releases the GIL
        quiet = quiet + 1 if _busy_gloo_workers() == 0 else 0
    return True


def teardown() -> None:
    """Close the default process group so that the interpreter can exit normally.

    1. a barrier: every rank's collectives are complete, none is still running on
       a gloo worker thread (a barrier waits for all earlier work of the group);
    2. ``destroy_process_group()``, then ``gc.collect()``: a group nothing else holds
       is freed here, which joins its worker threads;
    3. wait until the gloo worker threads that live on (the group held by a DDP or FSDP
       model, or by torch.distributed.nn.functional's defaults) have released the last
       collective's tensors (``wait_for_gloo_workers``).
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    backend = dist.get_backend()
    dist.barrier()
    dist.destroy_process_group()
    gc.collect()
    if backend == "gloo":
        wait_for_gloo_workers()


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
def distributed(timeout_s: float | None = None) -> Iterator[DistContext]:
    """setup() on entry, teardown() on a clean exit.

    ``timeout_s`` as in setup(): an explicit value wins over ``DDP_TIMEOUT_S``.

    On an error the rank records it, prints its traceback and exits at once
    with code 1 (a ``SystemExit`` keeps its code): fail fast, its peers then fail
    inside their next collective and torchrun stops the group, instead of this rank
    lingering in teardown until torchrun kills it and reports a signal instead of
    the real error. After a clean exit the interpreter ends normally: atexit
    handlers run, and ``sys.exit(3)`` or an error after the block is the exit status.
    """
    ctx = setup(timeout_s)
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
    logging.shutdown()
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(code)  # no teardown: its barrier would wait for peers that may never come


def print0(*args: object, **kwargs: Any) -> None:
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
