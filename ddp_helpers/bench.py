"""The performance measurements of notebook 10, and the benchmark command.

    python -m ddp_helpers.bench            # table + JSON; a minute or two on 2 idle cores
    python -m ddp_helpers.bench --suite    # also the wall time of the whole notebook suite (slow)

Two kinds of functions live here, used by notebook 10's worker scripts and by this command alike:

* measurements that run *inside* a process group (in a torchrun worker):
  :func:`time_collective`, :func:`compare_collectives`, :func:`allreduce_sweep`,
  :func:`ring_vs_gloo`, :func:`ddp_vs_hand`, :func:`overlap_timeline`, :func:`scaling_run`;
* plain arithmetic and the driver: :func:`message_sizes`, :func:`fit_latency_bandwidth`,
  :func:`bus_bandwidth`, :func:`scaling_efficiency`, :func:`run_bench`, :func:`format_table`.

A time is the wall-clock time of the *slowest* rank (max over ranks) for one call; ranks start
each call together after a barrier. Ratios compare implementations measured side by side in
the same process group, in alternating order, so that a change of machine load hits both.
Everything runs on the CPU with gloo (the command sets ``DDP_BACKEND=gloo`` even on a GPU box).
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
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_helpers.checks import BucketRecorder, max_abs_diff, record_grad_ready
from ddp_helpers.ring import ring_all_reduce

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


def bus_bandwidth(nbytes: float, seconds: float, world_size: int) -> float:
    """Bytes/s each rank moves in a bandwidth-optimal all-reduce: 2(N-1)/N * size / time."""
    return 2 * (world_size - 1) / world_size * nbytes / seconds


def scaling_efficiency(samples_per_s_1: float, samples_per_s_n: float, n: int) -> float:
    """Throughput with n processes over n times the throughput of one (1.0 = perfect)."""
    return samples_per_s_n / (n * samples_per_s_1)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


# --------------------------------------------------------------------------- inside a process group


def _max_over_ranks(values: Sequence[float], group=None) -> list[float]:
    t = torch.tensor(list(values), dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.tolist()


def time_collective(op: Callable[[], object], repeats: int = 5, warmup: int = 1,
                    setup: Callable[[], object] | None = None, group=None) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``op()``, on the slowest rank of ``group``.

    ``setup()`` (not timed) runs before every call, e.g. to refill a tensor that ``op``
    reduces in place. A barrier lines the ranks up before each timed call.
    """
    for _ in range(warmup):
        if setup is not None:
            setup()
        op()
    times = []
    for _ in range(repeats):
        if setup is not None:
            setup()
        dist.barrier(group=group)
        start = time.perf_counter()
        op()
        times.append(time.perf_counter() - start)
    return _max_over_ranks(times, group)


def compare_collectives(ops: dict[str, Callable[[], object]], repeats: int = 5, warmup: int = 1,
                        setup: Callable[[], object] | None = None, group=None) -> dict[str, list[float]]:
    """Time several implementations side by side: one call of each per round, the order rotating."""
    names = list(ops)
    for name in names:
        for _ in range(warmup):
            if setup is not None:
                setup()
            ops[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        k = round_ % len(names)
        for name in names[k:] + names[:k]:
            times[name] += time_collective(ops[name], repeats=1, warmup=0, setup=setup, group=group)
    return times


def allreduce_sweep(sizes: Sequence[int], repeats: int = 5, group=None) -> dict:
    """``dist.all_reduce`` of float32 tensors of each size (bytes); median seconds per size.

    Every call is checked: each rank contributes rank + 1, so each element must end as
    N(N+1)/2.
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    expected, medians, correct = world * (world + 1) / 2, [], True
    for nbytes in sizes:
        x = torch.empty(nbytes // 4)
        times = time_collective(lambda x=x: dist.all_reduce(x, group=group), repeats=repeats,
                                setup=lambda x=x: x.fill_(rank + 1.0), group=group)
        correct &= bool(torch.all(x == expected))
        medians.append(median(times))
    return {"world_size": world, "bytes": list(sizes), "seconds": medians, "correct": correct}


def ring_vs_gloo(nbytes: int, repeats: int = 5, group=None) -> dict:
    """Hand-written ring all-reduce (``ddp_helpers.ring``) vs ``dist.all_reduce``, side by side.

    ``ratio`` = ring throughput / library throughput = library time / ring time (medians).
    ``equal`` says whether both produced the same, exact, sums.
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    numel = nbytes // 4
    base = (torch.arange(numel) % 7).float()  # small integers: float32 sums are exact
    x = torch.empty(numel)

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
            "ratio": median(times["library"]) / median(times["ring"])}


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


def _batches(width: int, batch: int, count: int, classes: int = 10, seed: int = 0):
    g = torch.Generator().manual_seed(seed + 1000 * (dist.get_rank() + 1))
    return [(torch.randn(batch, width, generator=g), torch.randint(classes, (batch,), generator=g))
            for _ in range(count)]


def _train_step(model: nn.Module, optimizer, x, y, hand: bool) -> None:
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    if hand:
        average_gradients(model)
    optimizer.step()


def _cap_key(cap: float | None) -> str:
    return "default" if cap is None else f"{cap:g}"


def overlap_timeline(width: int = 1024, depth: int = 4, batch: int = 32,
                     bucket_cap_mb: float | None = None) -> tuple[list[str], int]:
    """One DDP step's order of events: ``grad NAME`` (a gradient is ready) and ``all-reduce bucket i``.

    Recorded on the second step (the first one rebuilds the buckets in arrival order).
    Returns (timeline, number of buckets). Deterministic: it is the order, not the time.
    """
    model = DDP(make_mlp(width, depth), bucket_cap_mb=bucket_cap_mb)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    timeline: list[str] = []
    recorder = BucketRecorder.attach(model, timeline)
    handles = record_grad_ready(model.module, timeline)
    for x, y in _batches(width, batch, 2):
        timeline.clear()
        recorder.take()
        _train_step(model, optimizer, x, y, hand=False)
    for h in handles:
        h.remove()
    return list(timeline), len(recorder.take())


def ddp_vs_hand(width: int = 1024, depth: int = 4, batch: int = 32, steps: int = 5, warmup: int = 2,
                bucket_caps: Sequence[float | None] = (None,)) -> dict:
    """Step time of DDP (one model per ``bucket_cap_mb``) vs the hand-written average, side by side.

    All models start from the same weights and see the same batches; the result records how
    far each DDP model ended from the hand-averaged one (``max_diff``), its bucket count, and
    ``ratio`` = median DDP step time / median hand step time.
    """
    base = make_mlp(width, depth)
    models = {"hand": copy.deepcopy(base)}
    models.update({_cap_key(c): DDP(copy.deepcopy(base), bucket_cap_mb=c) for c in bucket_caps})
    optimizers = {name: torch.optim.SGD(m.parameters(), lr=0.01) for name, m in models.items()}
    names, times = list(models), {name: [] for name in models}
    for i, (x, y) in enumerate(_batches(width, batch, warmup + steps)):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            t = time_collective(lambda name=name, x=x, y=y: _train_step(
                models[name], optimizers[name], x, y, hand=name == "hand"), repeats=1, warmup=0)
            if i >= warmup:
                times[name] += t
    hand = median(times["hand"])
    result = {"parameters": sum(p.numel() for p in base.parameters()), "batch": batch,
              "world_size": dist.get_world_size(), "hand_s": times["hand"],
              "hand_allreduces": sum(1 for _ in base.parameters()), "ddp": {}}
    for cap in bucket_caps:
        key = _cap_key(cap)
        result["ddp"][key] = {"seconds": times[key], "ratio": median(times[key]) / hand,
                              "max_diff": max_abs_diff(models[key].module, models["hand"]),
                              "buckets": overlap_timeline(width, depth, batch, cap)[1]}
    return result


def scaling_run(width: int = 1024, depth: int = 4, batch: int = 64, steps: int = 5, warmup: int = 1) -> dict:
    """Samples/s of one process alone (plain model) and of all processes under DDP (weak scaling).

    Phase 1: rank 0 trains alone while the others wait; phase 2: every rank trains its own
    ``batch`` per step under DDP. ``replicas_equal`` checks the DDP replicas at the end.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    batches = _batches(width, batch, warmup + steps)
    alone = torch.zeros(1, dtype=torch.float64)
    if rank == 0:
        model = make_mlp(width, depth)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for x, y in batches[:warmup]:
            _train_step(model, optimizer, x, y, hand=False)
        start = time.perf_counter()
        for x, y in batches[warmup:]:
            _train_step(model, optimizer, x, y, hand=False)
        alone[0] = batch * steps / (time.perf_counter() - start)
    dist.all_reduce(alone, op=dist.ReduceOp.MAX)  # the others wait here during phase 1
    model = DDP(make_mlp(width, depth))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in batches[:warmup]:
        _train_step(model, optimizer, x, y, hand=False)
    dist.barrier()
    start = time.perf_counter()
    for x, y in batches[warmup:]:
        _train_step(model, optimizer, x, y, hand=False)
    seconds = _max_over_ranks([time.perf_counter() - start])[0]
    samples = torch.tensor([batch * steps])
    dist.all_reduce(samples)  # every rank's samples count
    digests = [None] * world
    dist.all_gather_object(digests, [p.detach().sum().item() for p in model.parameters()])
    together = samples.item() / seconds
    return {"world_size": world, "batch_per_rank": batch, "steps": steps,
            "samples_per_s": {"1": alone.item(), str(world): together},
            "efficiency": scaling_efficiency(alone.item(), together, world),
            "samples_counted": int(samples.item()),
            "replicas_equal": all(d == digests[0] for d in digests)}


# --------------------------------------------------------------------------- the command

_WORKER = '''"""Worker of `python -m ddp_helpers.bench` (generated): runs one measurement task."""
import sys

from ddp_helpers.bench import worker_main

worker_main(sys.argv[1:])
'''


def _hello() -> dict:
    x = torch.ones(1)
    dist.all_reduce(x)
    return {"sum": x.item()}


def worker_main(argv: Sequence[str]) -> None:
    """Entry point of the generated worker: ``TASK OUT.json [JSON keyword arguments]``."""
    from ddp_helpers.runtime import distributed

    tasks = {"sweep": lambda sizes, repeats: allreduce_sweep(sizes, repeats),
             "ring": lambda nbytes, repeats: ring_vs_gloo_worlds(nbytes, repeats),
             "ddp": lambda **kw: ddp_vs_hand(**kw), "scaling": lambda **kw: scaling_run(**kw),
             "hello": _hello}
    task, out = argv[0], Path(argv[1])
    kwargs = json.loads(argv[2]) if len(argv) > 2 else {}
    torch.set_num_threads(1)
    with distributed() as ctx:
        result = tasks[task](**kwargs)
        if ctx.rank == 0:
            out.write_text(json.dumps(result))


def _launch(script: Path, out_dir: Path, task: str, nproc: int, timeout: float, **kwargs) -> dict:
    from ddp_helpers.launch import torchrun

    out = out_dir / f"{task}.json"
    with contextlib.redirect_stdout(sys.stderr):  # the launcher's "$ torchrun ..." lines; stdout = results
        torchrun(script, nproc=nproc, args=[task, str(out), json.dumps(kwargs)], timeout=timeout,
                 env={"DDP_BACKEND": "gloo"}, live="quiet", summary=False)  # CPU tensors: gloo even on GPUs
    return json.loads(out.read_text())


def _seconds(command: Callable[[], object]) -> float:
    start = time.perf_counter()
    command()
    return time.perf_counter() - start


def machine() -> dict:
    """What the numbers were measured on."""
    return {"python": platform.python_version(), "torch": torch.__version__,
            "platform": platform.platform(terse=True), "cpu_count": os.cpu_count(),
            "load_average_1min": round(os.getloadavg()[0], 2)}


def run_bench(size_mib: int = 64, repeats: int = 5, steps: int = 5, launch_repeats: int = 3,
              suite: bool = False, timeout: float = 600) -> dict:
    """Run every measurement in fresh torchrun launches and return the results as a dict."""
    results: dict = {"machine": machine(), "size_mib": size_mib, "repeats": repeats, "steps": steps}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ddp_bench_") as tmp:
        script, out = Path(tmp) / "bench_worker.py", Path(tmp)
        script.write_text(_WORKER)
        sweep = _launch(script, out, "sweep", 2, timeout, sizes=message_sizes(hi=size_mib * MiB),
                        repeats=repeats)
        alpha, beta = fit_latency_bandwidth(sweep["bytes"], sweep["seconds"])
        results["allreduce"] = {**sweep, "alpha_s": alpha, "beta_s_per_byte": beta}
        results["ring_vs_gloo"] = _launch(script, out, "ring", 4, timeout, nbytes=size_mib * MiB,
                                          repeats=repeats)
        results["ddp_vs_hand"] = _launch(script, out, "ddp", 2, timeout, steps=steps)
        results["scaling"] = _launch(script, out, "scaling", 2, timeout, steps=steps)
        hello = [_seconds(lambda: _launch(script, out, "hello", 2, timeout)) for _ in range(launch_repeats)]
        bare = [_seconds(lambda: subprocess.run([sys.executable, "-c", "import torch.distributed"],
                                                check=True, timeout=timeout))
                for _ in range(launch_repeats)]
    results["launch"] = {"torchrun_hello_2proc_s": hello, "python_import_s": bare,
                         "overhead_s": median(hello) - median(bare)}
    results["measurements_s"] = time.perf_counter() - start
    if suite:
        results["suite"] = run_suite(timeout=max(timeout, 3600))
    results["machine"]["load_average_1min_end"] = round(os.getloadavg()[0], 2)
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


def format_table(results: dict) -> str:
    """The headline figures as an aligned two-column text table."""
    rows = [("machine", f"{results['machine']['cpu_count']} CPUs, torch {results['machine']['torch']}, "
                        f"load {results['machine']['load_average_1min']}")]
    if "allreduce" in results:
        a = results["allreduce"]
        rows += [("all-reduce latency alpha (gloo, 2 procs)", f"{a['alpha_s'] * 1e6:.0f} us"),
                 ("all-reduce 1/beta (gloo, 2 procs)", f"{1 / a['beta_s_per_byte'] / 1e9:.2f} GB/s")]
    for r in results.get("ring_vs_gloo", []):
        rows.append((f"ring / gloo throughput, world {r['world_size']}, {r['bytes'] // MiB} MiB",
                     f"{r['ratio']:.2f}x (equal sums: {r['equal']})"))
    if "ddp_vs_hand" in results:
        d = results["ddp_vs_hand"]
        for key, v in d["ddp"].items():
            rows.append((f"DDP / hand-average step time ({d['parameters'] / 1e6:.1f} M params, cap {key})",
                         f"{v['ratio']:.2f}x ({v['buckets']} buckets vs {d['hand_allreduces']} all-reduces)"))
    if "scaling" in results:
        s = results["scaling"]
        rows.append(("samples/s, 1 process -> 2 processes",
                     f"{s['samples_per_s']['1']:.0f} -> {s['samples_per_s']['2']:.0f} "
                     f"(efficiency {s['efficiency']:.2f})"))
    if "launch" in results:
        lr = results["launch"]
        rows += [("torchrun 2-process hello world", f"{median(lr['torchrun_hello_2proc_s']):.2f} s"),
                 ('bare python -c "import torch.distributed"', f"{median(lr['python_import_s']):.2f} s"),
                 ("launch overhead", f"{lr['overhead_s']:.2f} s")]
    if "suite" in results:
        su = results["suite"]
        rows.append((f"notebook suite under nbval ({su['notebooks']} notebooks)",
                     f"{su['seconds']:.0f} s ({'passed' if su['passed'] else 'FAILED'})"))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddp_helpers.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=64, help="largest message (MiB), default 64")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per collective, default 5")
    parser.add_argument("--steps", type=int, default=5, help="timed training steps, default 5")
    parser.add_argument("--launch-repeats", type=int, default=3, help="launches timed, default 3")
    parser.add_argument("--suite", action="store_true", help="also time strict nbval over all notebooks")
    parser.add_argument("--json", type=Path, help="also write the JSON to this file")
    args = parser.parse_args(argv)
    results = run_bench(args.size_mib, args.repeats, args.steps, args.launch_repeats, args.suite)
    print(format_table(results))
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
