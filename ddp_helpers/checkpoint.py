"""Checkpoints that survive crashes and resume a run exactly.

* ``atomic_save(obj, path)``: ``torch.save`` into a temporary file in the same
  directory, flush + fsync, then ``os.replace`` onto ``path``. A reader sees the
  old file or the new one, never a half-written one.
* ``unwrap(model)`` / ``strip_module_prefix(state_dict)``: get rid of the ``module.``
  that ``DistributedDataParallel`` (and ``DataParallel``) put in front of every key.
* ``map_location_for(device)``: what to pass to ``torch.load`` so every tensor lands
  on this rank's device instead of the device it was saved from.
* ``save_snapshot`` / ``load_snapshot``: a full training snapshot (model, optimizer,
  GradScaler, the NEXT epoch, every rank's RNG states) that
  ``torch.load(..., weights_only=True)`` accepts: everything is stored as tensors,
  numbers, strings and plain containers.

RNG states are per process, and ranks seeded differently (dropout, augmentation) have
different ones. ``gather_rng_states()``, called on every rank, collects them all; rank 0
passes the list to ``save_snapshot(..., rng_states=...)`` and on resume each rank's
``load_snapshot`` restores its own entry:

    rngs = gather_rng_states()                     # a collective: every rank calls it
    if ctx.is_main:
        save_snapshot(path, model=ddp, optimizer=opt, epoch_next=epoch + 1, rng_states=rngs)
    dist.barrier()
    ...
    start = load_snapshot(path, model=ddp, optimizer=opt)   # this rank's own RNG state
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

SNAPSHOT_FORMAT = 2  # 2: "rng" holds one state per rank
_TMP_SUFFIX = ".tmp"


# --------------------------------------------------------------------------- saving


def _tmp_prefix(path: Path) -> str:
    return f".{path.name}."


def atomic_save(obj: Any, path: str | os.PathLike,
                save_fn: Callable[[Any, Any], None] = torch.save) -> Path:
    """Write ``obj`` to ``path`` so that ``path`` is never half-written.

    ``save_fn(obj, file)`` writes into an open binary file (``torch.save`` by
    default). The bytes go to a temporary file next to ``path`` (same directory,
    hence same file system, so the final rename is atomic), are flushed and
    fsynced, and only then does ``os.replace`` swap it in. If anything fails
    before that, the temporary file is removed and the previous ``path`` is
    untouched. (A process killed by SIGKILL cannot clean up: its temporary file
    stays behind, see ``remove_stale_temp_files``; ``path`` is still intact.)
    The file gets the permissions ``open(path, "wb")`` would give it: 0666 minus
    the umask (mkstemp alone would leave 0600).
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=_tmp_prefix(path), suffix=_TMP_SUFFIX, dir=directory)
    try:
        # mkstemp creates the file 0600; give it what open() would (0666 minus the umask),
        # so that the group can read checkpoints on a shared cluster when the umask allows.
        os.fchmod(fd, 0o666 & ~_current_umask())
        with os.fdopen(fd, "wb") as f:
            save_fn(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_directory(directory)  # make the rename itself durable
    return path


def _current_umask() -> int:
    """The process umask (reading it means setting it: set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some platforms cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def stale_temp_files(path: str | os.PathLike) -> list[Path]:
    """Temporary files ``atomic_save(..., path)`` left behind (a saver was killed)."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    return sorted(directory.glob(f"{_tmp_prefix(path)}*{_TMP_SUFFIX}"))


def remove_stale_temp_files(path: str | os.PathLike) -> list[Path]:
    """Delete those leftovers; call it only when no save to ``path`` is running."""
    removed = stale_temp_files(path)
    for p in removed:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    return removed


# --------------------------------------------------------------------------- module. prefix


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside DDP / DataParallel / torch.compile wrappers."""
    while True:
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        elif hasattr(model, "_orig_mod") and isinstance(model._orig_mod, nn.Module):
            model = model._orig_mod  # torch.compile's OptimizedModule
        else:
            return model


def strip_module_prefix(state_dict: Mapping[str, Any], prefix: str = "module.") -> OrderedDict:
    """A copy of ``state_dict`` with a leading ``prefix`` removed from every key that has it."""
    out = OrderedDict((k[len(prefix):] if k.startswith(prefix) else k, v) for k, v in state_dict.items())
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is not None:  # per-module version info load_state_dict reads
        out._metadata = OrderedDict(
            (k[len(prefix):] if k.startswith(prefix) else ("" if k + "." == prefix else k), v)
            for k, v in metadata.items())
    return out


# --------------------------------------------------------------------------- map_location


def map_location_for(device: torch.device | str | int) -> str | torch.device:
    """``map_location`` for ``torch.load`` on a rank that computes on ``device``.

    CPU: ``"cpu"``. CUDA: the device itself, which sends every storage to it,
    whichever GPU it was saved from (the dict ``{"cuda:0": f"cuda:{k}"}`` only
    remaps storages saved from GPU 0). Without a map_location, ``torch.load``
    restores each storage to the device recorded in the file: ``cuda:0`` for a
    file rank 0 saved, on every rank.
    """
    device = torch.device(device)
    if device.type == "cpu":
        return "cpu"
    if device.index is None:
        raise ValueError(f"give the device index, e.g. 'cuda:{0}', got {device}")
    return device


@contextlib.contextmanager
def pretend_saved_on(location: str) -> Iterator[None]:
    """Teaching aid for CPU-only machines: tensors saved inside this block are
    recorded in the file as living on ``location`` (e.g. ``"cuda:0"``), exactly
    as if they had been saved from that device."""
    registry = torch.serialization._package_registry
    entry = (-1, lambda obj: location if obj.device.type == "cpu" else None, lambda obj, loc: None)
    registry.insert(0, entry)
    try:
        yield
    finally:
        registry.remove(entry)


# --------------------------------------------------------------------------- RNG


def rng_state() -> dict:
    """This process's RNG states as tensors and plain values (weights_only-loadable).

    CUDA: the generator of the current device only (a DDP rank's own GPU), and only
    when this process has initialised CUDA; asking for every GPU's state would
    create a CUDA context on each of them in every rank.
    """
    version, mt, gauss_next = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": {"version": int(version), "state": torch.tensor(mt, dtype=torch.int64),
                   "gauss_next": gauss_next},
        "numpy": {"name": str(name), "keys": torch.from_numpy(keys.astype(np.int64)),
                  "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() and torch.cuda.is_initialized() else None,
    }
    return state


def set_rng_state(state: Mapping) -> None:
    """Restore what ``rng_state()`` returned (tensors may be on any device)."""
    torch.set_rng_state(state["torch"].cpu())
    py = state["python"]
    random.setstate((py["version"], tuple(int(v) for v in py["state"].tolist()), py["gauss_next"]))
    npy = state["numpy"]
    np.random.set_state((npy["name"], npy["keys"].cpu().numpy().astype(np.uint32), npy["pos"],
                         npy["has_gauss"], npy["cached_gaussian"]))
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"].cpu())  # the current device's generator


def _rank_and_world(group: dist.ProcessGroup | None = None) -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group), dist.get_world_size(group)
    return 0, 1


def gather_rng_states(group: dist.ProcessGroup | None = None) -> list[dict]:
    """Every rank's ``rng_state()``, indexed by rank (a collective: call it on every rank).

    Outside a process group it is ``[rng_state()]``.
    """
    _, world = _rank_and_world(group)
    if world == 1:
        return [rng_state()]
    states: list = [None] * world
    dist.all_gather_object(states, rng_state(), group=group)
    return states


# --------------------------------------------------------------------------- snapshots


def save_snapshot(path: str | os.PathLike, *, model: nn.Module, optimizer: torch.optim.Optimizer | None,
                  epoch_next: int, scaler: torch.amp.GradScaler | None = None, extra: Mapping | None = None,
                  rng_states: list[dict] | None = None) -> Path:
    """Atomically save everything a run needs to continue at epoch ``epoch_next``.

    ``epoch_next`` is the first epoch NOT yet done (finished epoch + 1): storing the
    finished one makes the resumed run train it twice. ``extra`` must itself be
    weights_only-loadable (tensors, numbers, strings, lists, dicts).

    ``rng_states``: every rank's RNG states, from ``gather_rng_states()`` (which every
    rank must call; the saving rank passes its result). Outside a process group (one
    process) it defaults to this process's states; in a group of several ranks the
    default stores none, and ``load_snapshot(restore_rng=True)`` then refuses the file.
    """
    if not isinstance(epoch_next, int) or isinstance(epoch_next, bool) or epoch_next < 0:
        raise ValueError(f"epoch_next must be an int >= 0 (the next epoch to run), got {epoch_next!r}")
    if rng_states is None and _rank_and_world()[1] == 1:
        rng_states = [rng_state()]
    if rng_states is not None and not (isinstance(rng_states, (list, tuple))
                                       and all(isinstance(r, Mapping) for r in rng_states)):
        raise TypeError("rng_states must be the list gather_rng_states() returns (one dict per rank)")
    snapshot = {
        "format": SNAPSHOT_FORMAT,
        "model": unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "epoch_next": epoch_next,
        "rng": list(rng_states) if rng_states is not None else None,
        "extra": dict(extra) if extra is not None else {},
    }
    return atomic_save(snapshot, path)


def read_snapshot(path: str | os.PathLike,
                  map_location: str | torch.device | Mapping[str, str] | Callable[..., Any] | None = "cpu",
                  ) -> dict:
    """The snapshot dict, loaded with ``weights_only=True`` (no code runs)."""
    snapshot = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(snapshot, dict) or snapshot.get("format") != SNAPSHOT_FORMAT:
        raise ValueError(f"{path} is not a snapshot written by this version of save_snapshot "
                         f"(format {SNAPSHOT_FORMAT})")
    return snapshot


def load_snapshot(path: str | os.PathLike, *, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
                  scaler: torch.amp.GradScaler | None = None,
                  map_location: str | torch.device | Mapping[str, str] | Callable[..., Any] | None = None,
                  restore_rng: bool = True) -> int:
    """Restore a ``save_snapshot`` file into ``model`` (plain or wrapped) and friends.

    ``map_location=None`` maps every tensor to the device of the model's first
    parameter. Returns the epoch to run next.

    ``restore_rng=True`` gives this rank the RNG states it had when the snapshot was
    taken (its own entry of ``rng_states``). It raises ValueError when the file holds no
    RNG states or states of a different number of ranks: the random streams of another
    world size cannot be continued, so load with ``restore_rng=False`` and seed afresh.
    """
    plain = unwrap(model)
    if map_location is None:
        first = next(plain.parameters(), None)
        map_location = map_location_for(first.device if first is not None else "cpu")
    snapshot = read_snapshot(path, map_location)
    if restore_rng:  # checked before anything is modified
        rank, world = _rank_and_world()
        states = snapshot["rng"]
        if states is None:
            raise ValueError(f"{path} holds no RNG states: save it with "
                             "rng_states=gather_rng_states() (called on every rank), "
                             "or load it with restore_rng=False")
        if len(states) != world:
            raise ValueError(f"{path} holds the RNG states of {len(states)} rank(s) and this run "
                             f"has {world}: load it with restore_rng=False and seed every rank afresh")
    plain.load_state_dict(snapshot["model"])
    if optimizer is not None:
        if snapshot["optimizer"] is None:
            raise ValueError(f"{path} holds no optimizer state")
        optimizer.load_state_dict(snapshot["optimizer"])
    if scaler is not None and snapshot["scaler"] is not None:
        scaler.load_state_dict(snapshot["scaler"])
    if restore_rng:
        set_rng_state(snapshot["rng"][rank])
    return int(snapshot["epoch_next"])


# --- reading a restart demo's output (notebook 05)


_EPOCH = re.compile(r"^epoch (\d+):")
_RESUMED = re.compile(r"^attempt (\d+): resumed from snapshot, next epoch (\d+)")


def restart_events(rank0_lines: Iterable[str]) -> list[dict]:
    """Events of one or more runs of notebook 05's training worker, from rank 0's stdout.

    ``"epoch E: ..."`` ends epoch E (the worker then snapshots: next epoch E+1);
    ``"attempt A: resumed from snapshot, next epoch E"`` starts attempt A from the snapshot.
    A resume with a higher attempt number follows a failure torchrun restarted (a kill
    during epoch E, the one that did not finish); one with the same number follows a
    planned stop and a new launch. Returns dicts ``{"attempt", "kind", "epoch"}`` with
    kind in ``epoch_end``, ``kill``, ``stop``, ``resume``.
    """
    events, attempt = [], 0
    for line in rank0_lines:
        if m := _EPOCH.match(line):
            events.append({"attempt": attempt, "kind": "epoch_end", "epoch": int(m[1])})
        elif m := _RESUMED.match(line):
            new, epoch = int(m[1]), int(m[2])
            ended = "kill" if new > attempt else "stop"
            events.append({"attempt": attempt, "kind": ended, "epoch": epoch})
            attempt = new
            events.append({"attempt": attempt, "kind": "resume", "epoch": epoch})
    return events
