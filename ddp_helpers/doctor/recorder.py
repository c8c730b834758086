"""The doctor's eyes inside every rank: what the learner's script did, recorded from outside it.

The start-up hook (``ddp_helpers/_walk_hook/sitecustomize.py``) calls :func:`install` in every rank of a
doctor run (``DDP_DOCTOR_RECORD`` names the folder, ``DDP_DOCTOR_SCRIPT`` the learner's file). It wraps
the DataLoader's iteration, DDP's construction, ``torch.save``/``torch.load`` and the script's own opens for writing, the collectives,
``init_process_group``/``destroy_process_group``, the optimizers' steps, ``print`` and the uncaught
exception, and appends one JSON line per event to ``FOLDER/rank{RANK}.jsonl``. Each line is written and
flushed as it happens, so a hang or a crash leaves everything before it. ``line`` is the line of the
learner's file that led to the event (the innermost frame of that file on the stack); ``lines`` the
whole chain of them, innermost first. The learner's file is never read or changed here.
"""

from __future__ import annotations

import atexit
import builtins
import collections
import datetime
import functools
import hashlib
import io
import json
import multiprocessing
import os
import re
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

RECORD_ENV = "DDP_DOCTOR_RECORD"
SCRIPT_ENV = "DDP_DOCTOR_SCRIPT"
PG_TIMEOUT_ENV = "DDP_DOCTOR_PG_TIMEOUT"  # seconds a collective waits when the script sets no timeout
COLLECTIVES = ("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "gather", "scatter", "barrier", "monitored_barrier", "all_to_all",
               "all_to_all_single", "all_gather_object", "broadcast_object_list", "gather_object",
               "scatter_object_list")
_SMALL = 8  # a collective's tensor values are recorded up to this many elements (counts, sums, flags)
_TEXT = 300  # characters kept of a printed line or an error message
_EARLY_MODULE = "torch.distributed.nn.functional"  # imported after init, its defaults hold the group (notebook 09, 7)
_RUNTIME = os.path.join("ddp_helpers", "runtime.py")  # the series' teardown, which waits out the group's threads
_WRITE_MODES = set("wax+")


class Recorder:
    """One rank's event log and the state the wrappers share."""

    def __init__(self, folder: str, script: str) -> None:
        self.rank = int(os.environ.get("RANK", "0"))
        self.script = os.path.realpath(script)
        self.pid = os.getpid()
        self.file = open(os.path.join(folder, f"rank{self.rank}.jsonl"), "a", buffering=1)
        self.lock = threading.RLock()  # the SIGTERM handler may write while the main thread is writing
        self.depth = threading.local()  # collectives inside a recorded one are not recorded again
        self.seq = 0  # collectives entered so far
        self.steps = 0
        self.ddp_models: weakref.WeakSet = weakref.WeakSet()
        self.loaders: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.params: dict[str, Any] | None = None  # after the last optimizer step
        self.params_written = False
        self.crashed = False
        self.world = 0  # the world size init_process_group gave (0: never initialised)
        self.early = False  # torch.distributed.nn was imported before init_process_group
        self.trained = 0  # samples the training passes (grad enabled) handed to the script so far
        self._is_script: dict[str, bool] = {}

    def write(self, event: str, **data: Any) -> None:
        if os.getpid() != self.pid or multiprocessing.parent_process() is not None:
            return  # a DataLoader worker: not the rank itself
        text = json.dumps({"ev": event, "t": time.time(), **data}, default=str)
        with self.lock:
            self.file.write(text + "\n")

    def lines(self, frame: Any = None) -> list[int]:
        """The learner-file lines on the stack (the current one, or from ``frame`` out), innermost first."""
        found = []
        frame = frame or sys._getframe(1)
        while frame is not None:
            if self.from_script(frame.f_code.co_filename):
                found.append(frame.f_lineno)
            frame = frame.f_back
        return found

    def from_script(self, filename: str) -> bool:
        if filename not in self._is_script:
            self._is_script[filename] = os.path.realpath(filename) == self.script
        return self._is_script[filename]

    def where(self, frame: Any = None) -> dict[str, Any]:
        chain = self.lines(frame)
        return {"line": chain[0] if chain else None, "lines": chain}

    def nested(self) -> bool:
        return getattr(self.depth, "n", 0) > 0

    def enter(self) -> None:
        self.depth.n = getattr(self.depth, "n", 0) + 1

    def leave(self) -> None:
        self.depth.n -= 1


def _first_tensor(args: tuple, kwargs: dict) -> Any:
    import torch

    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value
    return None


def _describe(tensor: Any) -> dict[str, Any]:
    if tensor is None:
        return {}
    return {"shape": list(tensor.shape), "dtype": str(tensor.dtype).replace("torch.", "")}


def _values(tensor: Any) -> list[float] | None:
    if tensor is None or tensor.numel() > _SMALL or tensor.is_complex():
        return None
    return [float(v) for v in tensor.detach().reshape(-1).tolist()]


def _reduce_op(name: str, args: tuple, kwargs: dict) -> str | None:
    if name not in ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor"):
        return None
    op = kwargs.get("op")
    if op is None:
        position = {"all_reduce": 1, "reduce": 2, "reduce_scatter": 2, "reduce_scatter_tensor": 2}[name]
        op = args[position] if len(args) > position else "SUM"
    return str(op).rsplit(".", 1)[-1].split(":")[0].strip("<>").upper()


def _wrap_collective(rec: Recorder, dist: Any, name: str) -> None:
    original = getattr(dist, name)

    @functools.wraps(original)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        if rec.nested():
            return original(*args, **kwargs)
        seq, tensor = rec.seq, _first_tensor(args, kwargs)
        rec.seq += 1
        rec.write("enter", seq=seq, op=name, reduce=_reduce_op(name, args, kwargs),
                  subgroup=kwargs.get("group") is not None, **_describe(tensor), **rec.where())
        rec.enter()
        try:
            work = original(*args, **kwargs)
        finally:
            rec.leave()
        done = not kwargs.get("async_op")
        rec.write("exit", seq=seq, values=_values(tensor) if done else None)
        return work

    setattr(dist, name, recorded)


def _wrap_process_group(rec: Recorder, dist: Any) -> None:
    init, destroy = dist.init_process_group, dist.destroy_process_group

    @functools.wraps(init)
    def recorded_init(*args: Any, **kwargs: Any) -> None:
        wait = os.environ.get(PG_TIMEOUT_ENV)
        if wait and len(args) < 3 and kwargs.get("timeout") is None:  # the script's own timeout wins
            kwargs["timeout"] = datetime.timedelta(seconds=float(wait))
        rec.early = _EARLY_MODULE in sys.modules
        init(*args, **kwargs)
        rec.world = dist.get_world_size()
        rec.write("init", world=rec.world, backend=str(dist.get_backend()), early_nn=rec.early, **rec.where())

    @functools.wraps(destroy)
    def recorded_destroy(*args: Any, **kwargs: Any) -> None:
        default_group = not args and kwargs.get("group") is None
        if default_group:
            _write_params(rec)
            caller = os.path.normpath(sys._getframe(1).f_code.co_filename)
            rec.write("destroy", ddp_alive=len(rec.ddp_models), late_nn=_late_nn(rec),
                      by_series=caller.endswith(_RUNTIME), **rec.where())
        destroy(*args, **kwargs)
        if default_group:
            rec.write("destroyed")  # it returned: the group's work on this rank is over

    dist.init_process_group, dist.destroy_process_group = recorded_init, recorded_destroy


def _late_nn(rec: Recorder) -> bool:
    """torch.distributed.nn was first imported after init_process_group (by the first optimizer or DDP model):
    its functions' default ``group=group.WORLD`` then holds the group until the interpreter exits."""
    return not rec.early and _EARLY_MODULE in sys.modules


def _write_params(rec: Recorder) -> None:
    """The parameters after the last optimizer step (taken then: a later load would hide a divergence)."""
    if rec.params is not None and not rec.params_written:
        rec.params_written = True
        rec.write("params", **rec.params)


def _param_sums(optimizer: Any) -> dict[str, Any]:
    """One sum per parameter tensor: equal on every rank when the replicas agree."""
    import torch

    params = [p for group in optimizer.param_groups for p in group["params"]]
    sharded = any(type(p.data) is not torch.Tensor for p in params)  # DTensor shards differ by design
    sums = [] if sharded or not params else torch.stack([p.detach().double().sum() for p in params]).tolist()
    return {"sums": sums, "sharded": sharded}


def _wrap_ddp(rec: Recorder) -> None:
    from torch.nn.parallel import DistributedDataParallel

    original = DistributedDataParallel.__init__

    @functools.wraps(original)
    def recorded(self: Any, *args: Any, **kwargs: Any) -> None:
        if rec.nested():
            return original(self, *args, **kwargs)
        seq = rec.seq
        rec.seq += 1
        rec.write("enter", seq=seq, op="DistributedDataParallel", reduce=None, subgroup=False, **rec.where())
        rec.enter()
        try:
            original(self, *args, **kwargs)
        finally:
            rec.leave()
        rec.ddp_models.add(self)  # weakly: the doctor must not keep a model (and its group) alive
        rec.write("exit", seq=seq, values=None)
        rec.write("ddp", find_unused=bool(kwargs.get("find_unused_parameters")), **rec.where())

    DistributedDataParallel.__init__ = recorded


def _path_of(f: Any) -> str | None:
    name = f if isinstance(f, (str, os.PathLike)) else getattr(f, "name", None)
    return os.path.abspath(os.fspath(name)) if isinstance(name, (str, os.PathLike)) else None


def _wrap_save_load(rec: Recorder, torch: Any) -> None:
    save, load = torch.save, torch.load

    @functools.wraps(save)
    def recorded_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        rec.write("save", path=_path_of(f), seq=rec.seq, **rec.where())
        return save(obj, f, *args, **kwargs)

    @functools.wraps(load)
    def recorded_load(f: Any, *args: Any, **kwargs: Any) -> Any:
        path, weights_only = _path_of(f), kwargs.get("weights_only")
        rec.write("load", path=path, seq=rec.seq, weights_only=weights_only, **rec.where())
        try:
            obj = load(f, *args, **kwargs)
        except Exception as exc:
            rec.write("load_error", path=path, error=type(exc).__name__)
            raise
        if weights_only is False and path is not None:
            rec.write("load_safe", path=path, safe=_loads_safely(load, path), **rec.where())
        return obj

    torch.save, torch.load = recorded_save, recorded_load


def _wrap_open(rec: Recorder) -> None:
    """A file the script opens for writing (``open(path, "w")``, ``Path.write_text``) is a save too: json.dump
    of a result file, a log. Only opens by the script itself (or by pathlib for it): a library's own files
    (torch.save's, a cache's) are not the script's saves."""
    original = io.open

    @functools.wraps(original)
    def recorded(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = original(file, mode, *args, **kwargs)
        if isinstance(mode, str) and _WRITE_MODES & set(mode) and not isinstance(file, int):
            caller = sys._getframe(1)
            name = caller.f_code.co_filename
            by_pathlib = name.endswith("pathlib.py") or f"{os.sep}pathlib{os.sep}" in name
            if rec.from_script(name) or (by_pathlib and rec.lines(caller)):
                rec.write("save", path=_path_of(file), seq=rec.seq, via="open", **rec.where(caller))
        return handle

    builtins.open = io.open = recorded


def _loads_safely(load: Callable[..., Any], path: str) -> bool:
    """Whether the file also loads with weights_only=True (then weights_only=False was not needed)."""
    try:
        load(path, map_location="cpu", weights_only=True)
    except Exception:
        return False
    return True


def _base_index(dataset: Any, index: Any) -> int:
    """The index into the innermost dataset, through Subsets (random_split makes them)."""
    from torch.utils.data import Subset

    index = int(index)
    while isinstance(dataset, Subset):
        dataset, index = dataset.dataset, int(dataset.indices[index])
    return index


def _sampler_facts(loader: Any) -> dict[str, Any]:
    from torch.utils.data import DistributedSampler, IterableDataset

    sampler, dataset = loader.sampler, loader.dataset
    facts: dict[str, Any] = {"sampler": type(sampler).__name__, "iterable": isinstance(dataset, IterableDataset)}
    try:
        facts["dataset_len"] = len(dataset)
    except TypeError:
        facts["dataset_len"] = None
    if isinstance(sampler, DistributedSampler):
        facts.update(replicas=sampler.num_replicas, sampler_rank=sampler.rank, epoch=sampler.epoch,
                     shuffle=sampler.shuffle, drop_last=sampler.drop_last, total_size=sampler.total_size)
    return facts


def _fingerprints(batch: Any) -> list[str]:
    """One short hash per sample of a batch (its first tensor's rows): an iterable dataset has no indices."""
    import torch

    first = batch
    while isinstance(first, (list, tuple, dict)) and first:
        first = next(iter(first.values())) if isinstance(first, dict) else first[0]
    if not isinstance(first, torch.Tensor) or first.dim() == 0:
        return []
    rows = first.detach().cpu().contiguous().reshape(len(first), -1)
    return [hashlib.blake2b(row.numpy().tobytes(), digest_size=8).hexdigest() for row in rows]


def _wrap_loader(rec: Recorder) -> None:
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    start, next_index, next_batch = DataLoader.__iter__, _BaseDataLoaderIter._next_index, _BaseDataLoaderIter.__next__

    def recorded_iter(self: Any) -> Any:
        import torch

        reused = getattr(self, "_iterator", None)  # persistent workers: the old iterator is reset for this pass
        if reused is not None:
            reused._doctor_pass = None
        iterator = start(self)
        passes = rec.loaders.get(self, 0)
        rec.loaders[self] = passes + 1
        iterator._doctor_pass = (id(self), passes)
        iterator._doctor_grad = torch.is_grad_enabled()
        iterator._doctor_sizes = collections.deque()  # the sizes of the batches drawn and not yet handed over
        rec.write("pass", pass_id=f"{id(self)}:{passes}", grad=torch.is_grad_enabled(),
                  **_sampler_facts(self), **rec.where())
        for keys in iterator.__dict__.pop("_doctor_early", []):  # drawn by the workers' prefetch, before now
            _drawn(iterator, keys)
        return iterator

    def _drawn(iterator: Any, keys: list[Any]) -> None:
        iterator._doctor_sizes.append(len(keys))
        rec.write("keys", pass_id="%d:%d" % iterator._doctor_pass, keys=[_base_index(iterator._dataset, i) for i in keys])

    def recorded_index(self: Any) -> Any:
        index = next_index(self)
        if index is not None and not _is_iterable(self):
            keys = list(index) if isinstance(index, (list, tuple)) else [index]
            if getattr(self, "_doctor_pass", None) is None:  # loader workers prefetch while the iterator starts
                self.__dict__.setdefault("_doctor_early", []).append(keys)
            else:
                _drawn(self, keys)
        return index

    def recorded_next(self: Any) -> Any:
        batch = next_batch(self)
        if getattr(self, "_doctor_pass", None) is None:
            return batch
        if _is_iterable(self):
            keys = _fingerprints(batch)
            rec.write("keys", pass_id="%d:%d" % self._doctor_pass, keys=keys)
            size = len(keys)
        else:  # loader workers draw indices ahead: the batch handed over now is the oldest one drawn
            size = self._doctor_sizes.popleft() if self._doctor_sizes else 0
        if self._doctor_grad:
            rec.trained += size
        return batch

    DataLoader.__iter__ = recorded_iter
    _BaseDataLoaderIter._next_index = recorded_index
    _BaseDataLoaderIter.__next__ = recorded_next


def _is_iterable(iterator: Any) -> bool:
    from torch.utils.data import IterableDataset

    return isinstance(iterator._dataset, IterableDataset)


def _watch_steps(rec: Recorder) -> None:
    from torch.optim.optimizer import register_optimizer_step_post_hook

    def stepped(optimizer: Any, args: Any, kwargs: Any) -> None:
        rec.steps += 1
        rec.params = {"steps": rec.steps, **_param_sums(optimizer)}
        rec.write("step", n=rec.steps, seq=rec.seq, samples=rec.trained, **rec.where())

    register_optimizer_step_post_hook(stepped)


def _wrap_print(rec: Recorder) -> None:
    original = builtins.print

    @functools.wraps(original)
    def recorded(*args: Any, **kwargs: Any) -> None:
        if rec.from_script(sys._getframe(1).f_code.co_filename):
            sep = kwargs.get("sep")
            text = (" " if sep is None else str(sep)).join(str(a) for a in args)
            rec.write("print", text=text[:_TEXT], **rec.where())
        original(*args, **kwargs)

    builtins.print = recorded


def _watch_exit(rec: Recorder, dist: Any) -> None:
    hook = sys.excepthook

    def crashed(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        line, frame = None, tb
        while frame is not None:
            if os.path.realpath(frame.tb_frame.f_code.co_filename) == rec.script:
                line = frame.tb_lineno
            frame = frame.tb_next
        rec.crashed = True
        rec.write("crash", error=kind.__name__, message=str(exc)[:_TEXT], line=line, unused=_unused(rec, str(exc)))
        hook(kind, exc, tb)

    def finished() -> None:  # registered first, so it runs after the script's own atexit handlers
        _write_params(rec)
        rec.write("end", pg_alive=dist.is_initialized(), ddp_alive=len(rec.ddp_models), late_nn=_late_nn(rec),
                  crashed=rec.crashed)
        if rec.crashed:  # a rank that failed can hang in gloo's shutdown: leave now, with Python's code for it
            rec.file.flush()
            os._exit(1)
        _wait_for_the_others(rec)

    def stopped(signum: int, frame: Any) -> None:  # the launcher's SIGTERM at the timeout: note where we were
        rec.write("stopped", **rec.where(frame))
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    sys.excepthook = crashed
    atexit.register(finished)
    signal.signal(signal.SIGTERM, stopped)  # a script that sets its own handler replaces this one


def _wait_for_the_others(rec: Recorder) -> None:
    """Stay until every rank has recorded its end (or a limit passes). gloo's exit abort (notebook 09, 7) can
    kill a rank once its interpreter shuts down; torchrun then stops the ranks still running, and a rank
    stopped in its work would make the run look failed. Waiting here, after this rank's work and before its
    shutdown, lets the records be complete whether an abort comes or not."""
    if rec.world < 2:
        return
    folder = os.path.dirname(rec.file.name)
    deadline = time.monotonic() + float(os.environ.get(PG_TIMEOUT_ENV) or 30)
    waiting = set(range(rec.world)) - {rec.rank}
    while waiting and time.monotonic() < deadline:
        for rank in sorted(waiting):
            try:
                with io.open(os.path.join(folder, f"rank{rank}.jsonl"), "rb") as f:
                    f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))  # the end event is among the last lines
                    if b'{"ev": "end"' in f.read():
                        waiting.discard(rank)
            except OSError:
                pass
        if waiting:
            time.sleep(0.05)


def _unused(rec: Recorder, message: str) -> list[str]:
    """The names of the parameters DDP's unused-parameter error gives by index."""
    found = re.search(r"did not receive grad for rank \d+: ([\d ,]+)", message)
    if not found:
        return []
    indices = {int(i) for i in re.findall(r"\d+", found.group(1))}
    return [name for model in rec.ddp_models
            for i, (name, _) in enumerate((n, p) for n, p in model.module.named_parameters() if p.requires_grad)
            if i in indices]


def install(folder: str, script: str) -> Recorder:
    """Start recording in this rank (called by the start-up hook)."""
    import torch
    import torch.distributed as dist

    rec = Recorder(folder, script)
    for name in COLLECTIVES:
        _wrap_collective(rec, dist, name)
    _wrap_process_group(rec, dist)
    _wrap_ddp(rec)
    _wrap_save_load(rec, torch)
    _wrap_open(rec)
    _wrap_loader(rec)
    _watch_steps(rec)
    _wrap_print(rec)
    _watch_exit(rec, dist)
    return rec
