"""The benchmark command: notebook 10's measurements outside Jupyter, in fresh torchrun launches.

    python -m ddp_helpers.perf --json build/bench.json    # table + JSON; a few minutes on 2 idle cores
    python -m ddp_helpers.perf --suite                    # also strict nbval over the series (slow)
    python -m ddp_helpers.perf --markdown-from build/bench.json   # an earlier run's table, as Markdown

Each measurement is one torchrun launch of a generated worker script (:func:`worker_main` runs
one task of :data:`TASKS` in the process group, rank 0 writes its JSON). ``--suite`` times the
command ``make nbval`` runs, with its environment, both from :mod:`ddp_helpers.series`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ddp_helpers import series
from ddp_helpers.launch import torchrun
from ddp_helpers.perf.compile_ddp import compile_variants
from ddp_helpers.perf.experiments import (
    BUCKET_CAPS,
    allreduce_sweep,
    control_verdicts,
    ring_vs_gloo_worlds,
    step_controls,
)
from ddp_helpers.perf.hooks import compression_pays, hooks_run
from ddp_helpers.perf.timing import (
    KiB,
    MiB,
    alpha_beta,
    default_device,
    load_average,
    machine,
    median,
    message_sizes,
    ms_spread,
    spread,
)
from ddp_helpers.runtime import distributed

PROG = "python -m ddp_helpers.perf"

_WORKER = f'''"""Worker of `{PROG}` (generated): runs one measurement task."""
import sys

from ddp_helpers.perf.cli import worker_main

worker_main(sys.argv[1:])
'''

# --------------------------------------------------------------------------- inside the worker


def _hello() -> dict:
    x = torch.ones(1, device=default_device())
    dist.all_reduce(x)
    return {"sum": x.item()}


TASKS: dict[str, Callable[..., object]] = {
    "sweep": allreduce_sweep, "ring": ring_vs_gloo_worlds, "controls": step_controls,
    "hooks": hooks_run, "compile": compile_variants, "hello": _hello}


def worker_main(argv: Sequence[str]) -> None:
    """Entry point of the generated worker: ``TASK OUT.json [JSON keyword arguments]``."""
    task, out = argv[0], Path(argv[1])
    kwargs = json.loads(argv[2]) if len(argv) > 2 else {}
    torch.set_num_threads(1)
    with distributed() as ctx:
        result = TASKS[task](**kwargs)
        if ctx.rank == 0:
            out.write_text(json.dumps(result))


# --------------------------------------------------------------------------- the driver


def _launch(script: Path, out_dir: Path, task: str, nproc: int, timeout: float, **kwargs: Any) -> Any:
    out = out_dir / f"{task}.json"
    with contextlib.redirect_stdout(sys.stderr):  # the launcher's "$ torchrun ..." lines; stdout = results
        torchrun(script, nproc=nproc, args=[task, str(out), json.dumps(kwargs)], timeout=timeout,
                 live="quiet", summary=False)  # backend and device: ddp_helpers.runtime decides
    return json.loads(out.read_text())


def _seconds(command: Callable[[], object]) -> float:
    start = time.perf_counter()
    command()
    return time.perf_counter() - start


def run_bench(size_mib: int = 64, repeats: int = 20, steps: int = 20, launch_repeats: int = 5,
              suite: bool = False, timeout: float = 600, inductor: bool = False) -> dict:
    """Run every measurement in fresh torchrun launches and return the results as a dict."""
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


def run_suite(timeout: float = 3600, notebooks: Sequence[Path] | None = None) -> dict:
    """Wall time of strict nbval over the series, exactly as ``make nbval`` runs it.

    The command, its environment and the notebooks (all of them unless ``notebooks`` says which)
    come from :mod:`ddp_helpers.series`, run from the repository root.
    """
    paths = [Path(p).resolve().relative_to(series.ROOT) for p in
             (series.notebooks() if notebooks is None else notebooks)]
    start = time.perf_counter()
    done = subprocess.run(series.nbval_command(sys.executable, paths), cwd=series.ROOT, env=series.nbval_env(),
                          capture_output=True, text=True, timeout=timeout)
    tail = done.stdout.strip().splitlines()[-1:] or [""]
    return {"notebooks": len(paths), "seconds": time.perf_counter() - start,
            "passed": done.returncode == 0, "pytest_summary": tail[0]}


# --------------------------------------------------------------------------- tables


def table_rows(results: Mapping[str, Any]) -> list[tuple[str, str]]:
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


def format_table(results: Mapping[str, Any]) -> str:
    """The headline figures as an aligned two-column text table."""
    rows = table_rows(results)
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def format_markdown(results: Mapping[str, Any]) -> str:
    """The same rows as a Markdown table (for the README)."""
    lines = ["| measurement | value |", "|---|---|"]
    return "\n".join(lines + [f"| {name} | {value} |" for name, value in table_rows(results)])


def main(argv: Sequence[str] | None = None) -> int:
    """The command line of ``python -m ddp_helpers.perf``."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
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
