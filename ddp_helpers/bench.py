"""The performance measurements of notebook 10, and the benchmark command.

    python -m ddp_helpers.bench            # table + JSON; a few minutes on 2 idle cores
    python -m ddp_helpers.bench --suite    # also the wall time of the whole notebook suite (slow)

Two kinds of functions live here, used by notebook 10's worker scripts and by this command alike:

* measurements that run *inside* a process group (in a torchrun worker):
  :func:`time_collective`, :func:`compare_collectives`, :func:`allreduce_sweep`,
  :func:`ring_vs_gloo`, :func:`overlap_timeline`, :func:`step_controls`, and the hook and
  ``torch.compile`` runs of :mod:`ddp_helpers.comm_hooks` and :mod:`ddp_helpers.compile_ddp`;
* plain arithmetic and the driver: :func:`message_sizes`, :func:`fit_latency_bandwidth`,
  :func:`fit_residuals`, :func:`model_holds`, :func:`bus_bandwidth`, :func:`scaling_efficiency`,
  :func:`run_bench`, :func:`format_table`.

A time is the wall-clock time of the *slowest* rank (max over ranks) for one call, read with
:func:`ddp_helpers.timing.elapsed` (which synchronizes CUDA before reading the clock); ranks start
each call together after a barrier. Implementations compared with each other are measured side by
side in the same process group, one call of each per round, the order rotating every round, so
that a change of machine load hits all of them. Every figure keeps all its samples, and its
spread (min, quartiles, median, max, :func:`ddp_helpers.timing.spread`). Tensors live on the
device of the process group's backend (``cuda`` under nccl, chosen by :mod:`ddp_helpers.runtime`).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_helpers.checks import BucketRecorder, max_abs_diff, record_grad_ready
from ddp_helpers.ring import ring_all_reduce
from ddp_helpers.timing import elapsed, load_average, spread

KiB = 1024
MiB = 1024 * KiB
ROOT = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------- arithmetic


def message_sizes(lo: int = 4 * KiB, hi: int = 64 * MiB, factor: int = 4) -> list[int]:
    """Message sizes in bytes from ``lo`` to ``hi`` (inclusive when reached), times ``factor``."""
    if lo <= 0 or hi < lo or factor < 2:
        raise ValueError(f"need 0 < lo <= hi and factor >= 2, got {lo}, {hi}, {factor}")
    sizes, size = [], lo
    while size <= hi:
        sizes.append(size)
        size *= factor
    return sizes


def fit_latency_bandwidth(nbytes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """Fit ``t = alpha + beta * n`` (alpha in s, beta in s/byte) by least squares on relative error.

    Each point is weighted by 1/t, so the small messages (which set alpha) count as much as the
    large ones (which set beta).
    """
    n, t = np.asarray(nbytes, dtype=float), np.asarray(seconds, dtype=float)
    if n.shape != t.shape or n.size < 2 or np.any(t <= 0):
        raise ValueError("need at least two (size, positive time) pairs")
    design = np.stack([np.ones_like(n), n], axis=1) / t[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    return float(alpha), float(beta)


def fit_residuals(nbytes: Sequence[float], seconds: Sequence[float], alpha: float, beta: float) -> list[float]:
    """Relative residual of each point: measured / (alpha + beta * n) - 1 (0.5 = 50 % slower than the model)."""
    return [float(t / (alpha + beta * n) - 1) for n, t in zip(nbytes, seconds, strict=True)]


def model_holds(nbytes: Sequence[int], residuals: Sequence[float], tolerance: float = 0.25) -> tuple[int, int] | None:
    """The longest run of consecutive sizes whose |residual| <= tolerance, as (first, last) bytes.

    None when no point is within the tolerance. This is the range over which the fitted model
    may be quoted.
    """
    best: tuple[int, int, int] | None = None  # (first, last, number of sizes)
    first, length = 0, 0
    for n, r in zip(nbytes, residuals, strict=True):
        if abs(r) > tolerance:
            length = 0
            continue
        first, length = (n if length == 0 else first), length + 1
        if best is None or length > best[2]:
            best = (first, n, length)
    return None if best is None else (best[0], best[1])


def bus_bandwidth(nbytes: float, seconds: float, world_size: int) -> float:
    """Bytes/s each rank moves in a bandwidth-optimal all-reduce: 2(N-1)/N * size / time."""
    return 2 * (world_size - 1) / world_size * nbytes / seconds


def scaling_efficiency(samples_per_s_1: float, samples_per_s_n: float, n: int) -> float:
    """Throughput with n processes over n times the throughput of one (1.0 = perfect)."""
    return samples_per_s_n / (n * samples_per_s_1)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


# --------------------------------------------------------------------------- inside a process group


def default_device(group=None) -> torch.device:
    """Where this rank's tensors live for ``group``'s backend: its GPU under nccl, else the CPU."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _max_over_ranks(values: Sequence[float], group=None) -> list[float]:
    t = torch.tensor(list(values), dtype=torch.float64, device=default_device(group))
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.tolist()


def time_collective(op: Callable[[], object], repeats: int = 5, warmup: int = 1,
                    setup: Callable[[], object] | None = None, group=None) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``op()``, on the slowest rank of ``group``.

    ``setup()`` (not timed) runs before every call, e.g. to refill a tensor that ``op``
    reduces in place. A barrier lines the ranks up before each timed call; the clock is read
    with :func:`ddp_helpers.timing.elapsed`, after the GPU's queued work when on CUDA.
    """
    device = default_device(group)
    for _ in range(warmup):
        if setup is not None:
            setup()
        op()
    times = []
    for _ in range(repeats):
        if setup is not None:
            setup()
        dist.barrier(group=group)
        times.append(elapsed(op, device))
    return _max_over_ranks(times, group)


def compare_collectives(ops: dict[str, Callable[[], object]], repeats: int = 5, warmup: int = 1,
                        setup: Callable[[], object] | Mapping[str, Callable[[], object]] | None = None,
                        group=None) -> dict[str, list[float]]:
    """Time several implementations side by side: one call of each per round, the order rotating.

    ``setup`` is one callable for all, or a dict giving each name its own.
    """
    names = list(ops)
    setups = setup if isinstance(setup, Mapping) else dict.fromkeys(names, setup)
    for name in names:
        for _ in range(warmup):
            if setups.get(name) is not None:
                setups[name]()
            ops[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        k = round_ % len(names)
        for name in names[k:] + names[:k]:
            times[name] += time_collective(ops[name], repeats=1, warmup=0, setup=setups.get(name), group=group)
    return times


def allreduce_sweep(sizes: Sequence[int], repeats: int = 5, group=None) -> dict:
    """``dist.all_reduce`` of float32 tensors of each size (bytes): every time, medians, spreads.

    The sizes are timed in rounds (one call of each size per round, the order rotating), so a
    change of load spreads over all sizes. Every call is checked: each rank contributes rank + 1,
    so each element must end as N(N+1)/2.
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    device, expected = default_device(group), world * (world + 1) / 2
    tensors = {str(n): torch.empty(n // 4, device=device) for n in sizes}
    load_before = load_average()
    times = compare_collectives({k: lambda x=x: dist.all_reduce(x, group=group) for k, x in tensors.items()},
                                repeats=repeats, setup={k: lambda x=x: x.fill_(rank + 1.0) for k, x in tensors.items()},
                                group=group)
    correct = all(bool(torch.all(x == expected)) for x in tensors.values())
    return {"world_size": world, "backend": dist.get_backend(group), "bytes": list(sizes),
            "seconds": [median(times[str(n)]) for n in sizes], "times": [times[str(n)] for n in sizes],
            "spread": [spread(times[str(n)]) for n in sizes], "correct": correct,
            "load": [load_before, load_average()]}


def ring_vs_gloo(nbytes: int, repeats: int = 5, group=None) -> dict:
    """Hand-written ring all-reduce (``ddp_helpers.ring``) vs ``dist.all_reduce``, side by side.

    ``ratio`` = ring throughput / library throughput = library time / ring time (medians).
    ``equal`` says whether both produced the same, exact, sums. (The name predates nccl: the
    library all-reduce is the process group's backend, ``backend`` in the result.)
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    device, numel = default_device(group), nbytes // 4
    base = (torch.arange(numel, device=device) % 7).float()  # small integers: float32 sums are exact
    x = torch.empty(numel, device=device)

    def setup():
        x.copy_(base).add_(rank)

    setup()
    dist.all_reduce(x, group=group)
    library = x.clone()
    setup()
    ring_all_reduce(x, group=group)
    expected = base * world + world * (world - 1) / 2
    equal = torch.equal(x, library) and torch.equal(x, expected)
    times = compare_collectives({"library": lambda: dist.all_reduce(x, group=group),
                                 "ring": lambda: ring_all_reduce(x, group=group)},
                                repeats=repeats, setup=setup, group=group)
    return {"world_size": world, "bytes": nbytes, "backend": dist.get_backend(group),
            "library_s": times["library"], "ring_s": times["ring"], "equal": bool(equal),
            "ratio": median(times["library"]) / median(times["ring"]),
            "spread": {"library": spread(times["library"]), "ring": spread(times["ring"])}}


def ring_vs_gloo_worlds(nbytes: int, repeats: int = 5, worlds: Sequence[int] = (2, 4)) -> list[dict]:
    """:func:`ring_vs_gloo` on the first ``w`` ranks for each ``w`` in ``worlds`` (one launch).

    Every rank must call this (``new_group`` is collective); ranks outside a subgroup wait.
    """
    results = []
    for w in worlds:
        if w > dist.get_world_size():
            raise ValueError(f"world size {w} needs at least {w} processes")
        group = dist.new_group(list(range(w))) if w < dist.get_world_size() else None
        if dist.get_rank() < w:
            results.append(ring_vs_gloo(nbytes, repeats, group))
        dist.barrier()
    return results


def make_mlp(width: int = 1024, depth: int = 4, classes: int = 10, seed: int = 0) -> nn.Sequential:
    """``depth`` blocks of Linear(width, width) + ReLU and a linear head; 4.2 M parameters by default."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, classes))


def average_gradients(model: nn.Module, group=None) -> int:
    """The hand-written DDP: after backward, all-reduce each gradient and divide by the world size.

    Returns the number of all-reduce calls (one per parameter tensor).
    """
    world, calls = dist.get_world_size(group), 0
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)
            p.grad /= world
            calls += 1
    return calls


def flat_average_gradients(model: nn.Module, group=None) -> int:
    """The control for DDP's buckets: after backward, ONE all-reduce of every gradient flattened.

    Same bytes and same single call as DDP with one bucket, but nothing overlaps backward.
    Returns the number of all-reduce calls (1, or 0 without gradients).
    """
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return 0
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    flat /= dist.get_world_size(group)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
    return 1


def _batches(width: int, batch: int, count: int, classes: int = 10, seed: int = 0, device=None):
    g = torch.Generator().manual_seed(seed + 1000 * (dist.get_rank() + 1))
    return [(torch.randn(batch, width, generator=g).to(device),
             torch.randint(classes, (batch,), generator=g).to(device)) for _ in range(count)]


def _train_step(model: nn.Module, optimizer, x, y, average: Callable[[nn.Module], object] | None = None) -> None:
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    if average is not None:
        average(model)
    optimizer.step()


def _cap_key(cap: float | None) -> str:
    return "default" if cap is None else f"{cap:g}"


def overlap_timeline(width: int = 1024, depth: int = 4, batch: int = 32,
                     bucket_cap_mb: float | None = None) -> tuple[list[str], int]:
    """One DDP step's order of events: ``grad NAME`` (a gradient is ready) and ``all-reduce bucket i``.

    Recorded on the second step (the first one rebuilds the buckets in arrival order).
    Returns (timeline, number of buckets). Deterministic: it is the order, not the time.
    """
    device = default_device()
    model = DDP(make_mlp(width, depth).to(device), bucket_cap_mb=bucket_cap_mb)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    timeline: list[str] = []
    recorder = BucketRecorder.attach(model, timeline)
    handles = record_grad_ready(model.module, timeline)
    for x, y in _batches(width, batch, 2, device=device):
        timeline.clear()
        recorder.take()
        _train_step(model, optimizer, x, y)
    for h in handles:
        h.remove()
    return list(timeline), len(recorder.take())


ALONE, NO_COMM, PER_TENSOR, FLAT = "1 process", "no communication", "per-tensor all-reduce", "flat all-reduce"


def _ddp_key(cap: float | None) -> str:
    return f"DDP cap {_cap_key(cap)}"


def step_controls(width: int = 1024, depth: int = 4, batch: int = 32, steps: int = 20, warmup: int = 2,
                  bucket_caps: Sequence[float | None] = (None,)) -> dict:
    """Training-step time of DDP against its controls, all side by side in one process group.

    Variants, one step of each per round (order rotating), same initial weights, same batches:

    * ``1 process``: rank 0 trains a plain model alone while the other ranks wait (the baseline
      of scaling);
    * ``no communication``: every rank trains its own plain model, no all-reduce at all (what
      sharing the machine costs, without communication);
    * ``per-tensor all-reduce``: :func:`average_gradients` after backward (one call per tensor);
    * ``flat all-reduce``: :func:`flat_average_gradients` after backward (one call, no overlap);
    * ``DDP cap X``: DDP with ``bucket_cap_mb=X`` (buckets all-reduced during backward).

    Each variant records its step times (slowest rank), spread, all-reduce calls per step and,
    for the averaging variants, ``max_diff`` from the per-tensor model (same arithmetic).
    """
    rank, device = dist.get_rank(), default_device()
    base = make_mlp(width, depth).to(device)
    plain = {ALONE: None, NO_COMM: None, PER_TENSOR: average_gradients, FLAT: flat_average_gradients}
    models = {name: copy.deepcopy(base) for name in plain}
    models.update({_ddp_key(c): DDP(copy.deepcopy(base), bucket_cap_mb=c) for c in bucket_caps})
    optimizers = {name: torch.optim.SGD(m.parameters(), lr=0.01) for name, m in models.items()}

    def step(name, x, y):
        if name != ALONE or rank == 0:
            _train_step(models[name], optimizers[name], x, y, plain.get(name))

    names, times = list(models), {name: [] for name in models}
    load_before = load_average()
    for i, (x, y) in enumerate(_batches(width, batch, warmup + steps, device=device)):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            t = time_collective(lambda name=name, x=x, y=y: step(name, x, y), repeats=1, warmup=0)
            if i >= warmup:
                times[name] += t
    n_tensors, caps = sum(1 for _ in base.parameters()), {_ddp_key(c): c for c in bucket_caps}
    variants = {}
    for name, model in models.items():
        v = {"seconds": times[name], "spread": spread(times[name]), "allreduces": 0}
        if name in (PER_TENSOR, FLAT):
            v.update(allreduces=n_tensors if name == PER_TENSOR else 1,
                     max_diff=max_abs_diff(model, models[PER_TENSOR]))
        elif name in caps:
            v.update(allreduces=overlap_timeline(width, depth, batch, caps[name])[1],
                     max_diff=max_abs_diff(model.module, models[PER_TENSOR]))
        variants[name] = v
    alone = median(times[ALONE])
    return {"parameters": sum(p.numel() for p in base.parameters()), "batch": batch, "width": width,
            "depth": depth, "world_size": dist.get_world_size(), "steps": steps, "variants": variants,
            # efficiency = (N * batch / t_N) / (N * batch / t_1) = t_1 / t_N, per variant
            "efficiency": {k: alone / median(times[k]) for k in names if k != ALONE},
            "load": [load_before, load_average()]}


# --------------------------------------------------------------------------- the command

_WORKER = '''"""Worker of `python -m ddp_helpers.bench` (generated): runs one measurement task."""
import sys

from ddp_helpers.bench import worker_main

worker_main(sys.argv[1:])
'''

BUCKET_CAPS = (None, 0.5, 2, 8, 32)  # MiB; None = DDP's default (1 MiB first bucket, then 25)


def _hello() -> dict:
    x = torch.ones(1, device=default_device())
    dist.all_reduce(x)
    return {"sum": x.item()}


def _tasks() -> dict[str, Callable[..., object]]:
    from ddp_helpers.comm_hooks import hooks_run
    from ddp_helpers.compile_ddp import compile_variants

    return {"sweep": lambda sizes, repeats: allreduce_sweep(sizes, repeats),
            "ring": lambda nbytes, repeats: ring_vs_gloo_worlds(nbytes, repeats),
            "controls": lambda **kw: step_controls(**kw), "hooks": lambda **kw: hooks_run(**kw),
            "compile": lambda **kw: compile_variants(**kw), "hello": _hello}


def worker_main(argv: Sequence[str]) -> None:
    """Entry point of the generated worker: ``TASK OUT.json [JSON keyword arguments]``."""
    from ddp_helpers.runtime import distributed

    task, out = argv[0], Path(argv[1])
    kwargs = json.loads(argv[2]) if len(argv) > 2 else {}
    torch.set_num_threads(1)
    with distributed() as ctx:
        result = _tasks()[task](**kwargs)
        if ctx.rank == 0:
            out.write_text(json.dumps(result))


def _launch(script: Path, out_dir: Path, task: str, nproc: int, timeout: float, **kwargs) -> dict:
    from ddp_helpers.launch import torchrun

    out = out_dir / f"{task}.json"
    with contextlib.redirect_stdout(sys.stderr):  # the launcher's "$ torchrun ..." lines; stdout = results
        torchrun(script, nproc=nproc, args=[task, str(out), json.dumps(kwargs)], timeout=timeout,
                 live="quiet", summary=False)  # backend and device: ddp_helpers.runtime decides
    return json.loads(out.read_text())


def _seconds(command: Callable[[], object]) -> float:
    start = time.perf_counter()
    command()
    return time.perf_counter() - start


def machine() -> dict:
    """What the numbers were measured on, and the load when this was called."""
    return {"python": platform.python_version(), "torch": torch.__version__,
            "platform": platform.platform(terse=True), "cpu_count": os.cpu_count(),
            "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
            "load_average_1min": load_average()}


def alpha_beta(sweep: dict, tolerance: float = 0.25) -> dict:
    """The alpha-beta fit of a sweep, its residuals, and the size range where it holds."""
    alpha, beta = fit_latency_bandwidth(sweep["bytes"], sweep["seconds"])
    residuals = fit_residuals(sweep["bytes"], sweep["seconds"], alpha, beta)
    holds = model_holds(sweep["bytes"], residuals, tolerance)
    return {"alpha_s": alpha, "beta_s_per_byte": beta, "residuals": residuals, "tolerance": tolerance,
            "holds_bytes": list(holds) if holds else None}


def run_bench(size_mib: int = 64, repeats: int = 20, steps: int = 20, launch_repeats: int = 5,
              suite: bool = False, timeout: float = 600, inductor: bool = False) -> dict:
    """Run every measurement in fresh torchrun launches and return the results as a dict."""
    from ddp_helpers.comm_hooks import compression_pays

    results: dict = {"machine": machine(), "size_mib": size_mib, "repeats": repeats, "steps": steps}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ddp_bench_") as tmp:
        script, out = Path(tmp) / "bench_worker.py", Path(tmp)
        script.write_text(_WORKER)
        sweep = _launch(script, out, "sweep", 2, timeout, sizes=message_sizes(hi=size_mib * MiB),
                        repeats=repeats)
        results["allreduce"] = {**sweep, **alpha_beta(sweep)}
        results["ring_vs_gloo"] = _launch(script, out, "ring", 4, timeout, nbytes=size_mib * MiB,
                                          repeats=repeats)
        results["controls"] = _launch(script, out, "controls", 2, timeout, steps=steps,
                                      bucket_caps=list(BUCKET_CAPS))
        results["hooks"] = _launch(script, out, "hooks", 2, timeout, steps=steps)
        results["hooks"]["pays"] = compression_pays(results["hooks"], alpha=results["allreduce"]["alpha_s"],
                                                    beta=results["allreduce"]["beta_s_per_byte"])
        results["compile"] = _launch(script, out, "compile", 2, timeout, inductor=inductor)
        hello, bare = [], []
        for _ in range(launch_repeats):  # alternating: a launch, then a bare import
            hello.append(_seconds(lambda: _launch(script, out, "hello", 2, timeout)))
            bare.append(_seconds(lambda: subprocess.run([sys.executable, "-c", "import torch.distributed"],
                                                        check=True, timeout=timeout)))
    results["launch"] = {"torchrun_hello_2proc_s": hello, "python_import_s": bare,
                         "spread": {"torchrun_hello_2proc": spread(hello), "python_import": spread(bare)},
                         "overhead_s": median(hello) - median(bare)}
    results["measurements_s"] = time.perf_counter() - start
    if suite:
        results["suite"] = run_suite(timeout=max(timeout, 3600))
    results["machine"]["load_average_1min_end"] = load_average()
    return results


def run_suite(timeout: float = 3600, pattern: str = "[0-9][0-9]_*.ipynb") -> dict:
    """Wall time of strict nbval over every notebook (what `make nbval` runs), or those matching ``pattern``."""
    notebooks = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "notebooks").glob(pattern))
    env = {**os.environ, "DDP_HELPERS_LIVE": "quiet", "MPLBACKEND": "agg", "PYTHONHASHSEED": "0"}
    command = [sys.executable, "-m", "pytest", "-q", "--nbval", "--nbval-current-env",
               "--nbval-sanitize-with", "notebooks/sanitize.cfg", "--nbval-cell-timeout=300", *notebooks]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    tail = done.stdout.strip().splitlines()[-1:] or [""]
    return {"notebooks": len(notebooks), "seconds": time.perf_counter() - start,
            "passed": done.returncode == 0, "pytest_summary": tail[0]}


def ms_spread(s: dict) -> str:
    """A spread of seconds as 'median ms [min-max]'."""
    return f"{s['median'] * 1e3:.1f} ms [{s['min'] * 1e3:.1f}-{s['max'] * 1e3:.1f}]"


def control_verdicts(controls: dict) -> list[str]:
    """The conclusions the step controls allow (:func:`ddp_helpers.timing.verdict` on each pair)."""
    from ddp_helpers.timing import verdict

    v = controls["variants"]
    pairs = [(FLAT, PER_TENSOR), (NO_COMM, ALONE), (FLAT, NO_COMM)]
    pairs += [(k, FLAT) for k in v if k.startswith("DDP")]
    return [verdict(a, v[a]["seconds"], b, v[b]["seconds"]) for a, b in pairs]


def table_rows(results: dict) -> list[tuple[str, str]]:
    """The headline figures as (measurement, value) rows (times: median [min-max])."""
    m = results["machine"]
    load = f"load {m['load_average_1min']}" + (f" -> {m['load_average_1min_end']}"
                                               if "load_average_1min_end" in m else "")
    rows = [("machine", f"{m['cpu_count']} CPUs, {m.get('gpus', 0)} GPUs, torch {m['torch']}, {load}")]
    if "allreduce" in results:
        a = results["allreduce"]
        holds = a.get("holds_bytes")
        where = (f"holds within {a['tolerance']:.0%} from {holds[0] // KiB} KiB to {holds[1] // KiB} KiB"
                 if holds else "holds nowhere")
        rows += [(f"all-reduce latency alpha ({a.get('backend', 'gloo')}, {a['world_size']} procs)",
                  f"{a['alpha_s'] * 1e6:.0f} us"),
                 ("all-reduce 1/beta", f"{1 / a['beta_s_per_byte'] / 1e9:.2f} GB/s ({where})")]
    for r in results.get("ring_vs_gloo", []):
        rows.append((f"ring / {r.get('backend', 'gloo')} throughput, world {r['world_size']}, "
                     f"{r['bytes'] // MiB} MiB", f"{r['ratio']:.2f}x (equal sums: {r['equal']})"))
    if "controls" in results:
        c = results["controls"]
        for name, v in c["variants"].items():
            rows.append((f"step, {name} ({c['parameters'] / 1e6:.1f} M params, batch {c['batch']})",
                         f"{ms_spread(v['spread'])}, {v['allreduces']} all-reduces"))
        for name, e in c["efficiency"].items():
            rows.append((f"scaling efficiency 1 -> {c['world_size']} processes, {name}", f"{e:.2f}"))
        rows += [("conclusion", line) for line in control_verdicts(c)]
    if "hooks" in results:
        for name, h in results["hooks"]["variants"].items():
            rows.append((f"hook {name}", f"{h['payload_bytes']} B/step in {h['allreduces']} all-reduces, "
                         f"loss {h['loss']:.4f}, replicas equal {h['replicas_equal']}, "
                         f"step {ms_spread(h['spread'])}"))
        for name, p in results["hooks"].get("pays", {}).items():
            where = (f"pays on links slower than {p['pays_below_bytes_per_s'] / 1e9:.2f} GB/s"
                     if p["threshold"] == "computed" else p["threshold"])
            rows.append((f"hook {name}: when it pays", f"saves {p['saved_s'] * 1e3:.1f} ms (alpha-beta), costs "
                         f"{p['cost_s'] * 1e3:.1f} ms (1 process): {where}; measured: {p['verdict']}"))
    if "compile" in results:
        for name, v in results["compile"]["variants"].items():
            rows.append((f"compile {name}", f"{v['graphs']} graphs ({v['subgraphs']} after bucket splits), "
                         f"{v['graph_breaks']} graph breaks, equal to eager: {v['equal']}"))
    if "launch" in results:
        lr = results["launch"]
        spans = {k: f"{min(v):.2f}-{max(v):.2f}" for k, v in lr.items() if k.endswith("_s") and isinstance(v, list)}
        rows += [("torchrun 2-process hello world",
                  f"{median(lr['torchrun_hello_2proc_s']):.2f} s [{spans['torchrun_hello_2proc_s']}]"),
                 ('bare python -c "import torch.distributed"',
                  f"{median(lr['python_import_s']):.2f} s [{spans['python_import_s']}]"),
                 ("launch overhead", f"{lr['overhead_s']:.2f} s")]
    if "suite" in results:
        su = results["suite"]
        rows.append((f"notebook suite under nbval ({su['notebooks']} notebooks)",
                     f"{su['seconds']:.0f} s ({'passed' if su['passed'] else 'FAILED'})"))
    return rows


def format_table(results: dict) -> str:
    """The headline figures as an aligned two-column text table."""
    rows = table_rows(results)
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def format_markdown(results: dict) -> str:
    """The same rows as a Markdown table (for the README)."""
    lines = ["| measurement | value |", "|---|---|"]
    return "\n".join(lines + [f"| {name} | {value} |" for name, value in table_rows(results)])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddp_helpers.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=64, help="largest message (MiB), default 64")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per collective, default 20")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per variant, default 20")
    parser.add_argument("--launch-repeats", type=int, default=5, help="launches timed, default 5")
    parser.add_argument("--inductor", action="store_true", help="also compile with inductor (slow: minutes)")
    parser.add_argument("--suite", action="store_true", help="also time strict nbval over all notebooks")
    parser.add_argument("--json", type=Path, help="also write the JSON to this file")
    parser.add_argument("--markdown-from", type=Path, metavar="JSON",
                        help="measure nothing: print the table of an earlier run's JSON as Markdown")
    args = parser.parse_args(argv)
    if args.markdown_from:
        print(format_markdown(json.loads(args.markdown_from.read_text())))
        return 0
    results = run_bench(args.size_mib, args.repeats, args.steps, args.launch_repeats, args.suite,
                        inductor=args.inductor)
    print(format_table(results))
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
