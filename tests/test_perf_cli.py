"""ddp_helpers.perf.cli: the tables, the command line, and the suite timed as `make nbval` runs it.

Nothing here launches torchrun or nbval: the measurements have their own tests.
"""

import ast
import inspect
import subprocess
import sys

import pytest

from ddp_helpers import series
from ddp_helpers.perf import cli
from ddp_helpers.perf.experiments import ALONE, FLAT, NO_COMM, PER_TENSOR
from ddp_helpers.perf.timing import MiB, machine


def test_format_table_lists_every_measurement():
    spread = {"n": 3, "min": 0.01, "q1": 0.01, "median": 0.02, "q3": 0.03, "max": 0.04}
    controls = {"parameters": 4.2e6, "batch": 32, "world_size": 2,
                "variants": {name: {"seconds": [s, s, s], "spread": spread, "allreduces": calls}
                             for name, s, calls in [(ALONE, 0.01, 0), (NO_COMM, 0.011, 0),
                                                    (PER_TENSOR, 0.03, 10), (FLAT, 0.02, 1),
                                                    ("DDP cap default", 0.02, 2)]},
                "efficiency": {NO_COMM: 0.9, "DDP cap default": 0.5}}
    results = {"machine": {**machine(), "load_average_1min_end": 0.5},
               "allreduce": {"alpha_s": 5e-5, "beta_s_per_byte": 5e-10, "world_size": 2, "tolerance": 0.25,
                             "holds_bytes": [MiB, 64 * MiB]},
               "ring_vs_gloo": [{"world_size": 2, "bytes": 64 * MiB, "ratio": 0.9, "equal": True}],
               "controls": controls,
               "hooks": {"variants": {"fp16": {"payload_bytes": 100, "allreduces": 1, "loss": 1.5,
                                               "replicas_equal": True, "spread": spread}}},
               "compile": {"variants": {"x": {"graphs": 1, "subgraphs": 4, "graph_breaks": 0, "equal": True}}},
               "launch": {"torchrun_hello_2proc_s": [3.0], "python_import_s": [1.0], "overhead_s": 2.0},
               "suite": {"notebooks": 11, "seconds": 500.0, "passed": True}}
    table = cli.format_table(results)
    for needle in ("ring / gloo throughput, world 2, 64 MiB  ", "0.90x", "2.00 GB/s", "from 1024 KiB to 65536 KiB",
                   "step, flat all-reduce", "20.0 ms [10.0-40.0], 1 all-reduces", "efficiency 1 -> 2 processes",
                   "flat all-reduce is 1.50x faster than per-tensor all-reduce",
                   "DDP cap default vs flat all-reduce: no measurable difference",
                   "hook fp16", "100 B/step", "4 after bucket splits", "launch overhead", "2.00 s",
                   "notebook suite", "passed", "-> 0.5"):
        assert needle in table, needle


def test_markdown_table_has_the_same_rows():
    results = {"machine": machine(), "allreduce": {"alpha_s": 5e-5, "beta_s_per_byte": 5e-10, "world_size": 2,
                                                   "tolerance": 0.25, "holds_bytes": None}}
    md = cli.format_markdown(results).splitlines()
    assert len(md) == 2 + len(cli.table_rows(results)) and "holds nowhere" in md[-1]
    assert [line.count("|") for line in md] == [3] * len(md)


def test_run_suite_times_what_make_nbval_runs(monkeypatch):
    calls = []

    def fake_run(command, **kwargs):
        calls.append((command, kwargs))
        return subprocess.CompletedProcess(command, 0, stdout="....\n3 passed in 1.00s\n", stderr="")

    monkeypatch.setattr(cli.subprocess, "run", fake_run)
    first = series.notebooks()[:2]
    result = cli.run_suite(timeout=5, notebooks=first)
    (command, kwargs), = calls
    assert command == series.nbval_command(sys.executable, [p.relative_to(series.ROOT) for p in first])
    assert kwargs["env"] == series.nbval_env() and kwargs["cwd"] == series.ROOT
    assert result["notebooks"] == 2 and result["passed"] and result["pytest_summary"] == "3 passed in 1.00s"
    cli.run_suite(timeout=5)
    assert len(calls[1][0]) == len(command) - 2 + len(series.notebooks())   # the whole series by default


def test_run_bench_launches_the_worker_with_arguments_its_tasks_take(monkeypatch):
    launched = []

    def fake_launch(script, out_dir, task, nproc, timeout, **kwargs):
        inspect.signature(cli.TASKS[task]).bind(**kwargs)   # the task takes these keyword arguments
        launched.append((task, nproc, script.read_text()))
        return {"sweep": {"bytes": [1, 2, 4], "seconds": [11.0, 12.0, 14.0]}, "ring": [], "controls": {},
                "hooks": {"variants": {"allreduce": {}}}, "compile": {}, "hello": {}}[task]

    monkeypatch.setattr(cli, "_launch", fake_launch)
    monkeypatch.setattr(cli.subprocess, "run", lambda *a, **k: None)   # the bare `import torch.distributed`
    results = cli.run_bench(size_mib=1, repeats=2, steps=2, launch_repeats=2)
    assert [(t, n) for t, n, _ in launched] == [("sweep", 2), ("ring", 4), ("controls", 2), ("hooks", 2),
                                                ("compile", 2), ("hello", 2), ("hello", 2)]
    worker = ast.parse(launched[0][2])   # the generated script runs this module's worker_main
    assert any(isinstance(n, ast.ImportFrom) and n.module == cli.__name__ and n.names[0].name == "worker_main"
               for n in worker.body)
    assert results["allreduce"]["alpha_s"] == pytest.approx(10) and results["hooks"]["pays"] == {}
    assert len(results["launch"]["torchrun_hello_2proc_s"]) == 2 and "load_average_1min_end" in results["machine"]


def test_help_names_the_module_command(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith(f"usage: {cli.PROG}")
