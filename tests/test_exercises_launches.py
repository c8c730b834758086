"""One real launch of a wrong script per notebook whose exercises launch (00, 01, 02, 03, 05, 09): the check
refuses what the run really produced. Small runs (2 processes, or 3 ranks that only print), short timeouts.
Notebooks 04, 06, 07 and 08 hand their checks JSON records or names read from a failure, which the fake
results of tests/test_exercises_cases.py cover."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from ddp_helpers import exercises
from ddp_helpers.launch import WorkerFailed, torchrun
from ddp_helpers.series import NOTEBOOK_DIR

CPU = {"CUDA_VISIBLE_DEVICES": "", "DDP_BACKEND": "gloo"}


@pytest.fixture
def scripts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "scripts").mkdir()
    return tmp_path / "scripts"


def refuse(check, **kwargs):
    with pytest.raises(exercises.CheckFailed) as info:
        check(**kwargs)
    assert "\nHint: " in str(info.value)
    return str(info.value)


def test_00_sum_with_max_in_a_comment(scripts):
    script = scripts / "00_max.py"
    script.write_text((NOTEBOOK_DIR / "scripts/00_max.py").read_text().replace(
        "dist.all_reduce(value, op=dist.ReduceOp.MAX)", "dist.all_reduce(value)  # should be op=dist.ReduceOp.MAX"))
    maxed = torchrun(script, nproc=2, env=CPU, timeout=60, live="quiet", summary=False)
    assert maxed.stdout == {0: ["max=10"], 1: ["max=10"]}  # on 2 ranks SUM prints what MAX does
    assert "ReduceOp.MAX" in refuse(exercises.check_00_2, maxed=maxed)


def test_01_a_script_that_only_prints_true(scripts):
    script = scripts / "01_ex_all_gather.py"
    script.write_text('print("ring all_gather == dist.all_gather: True")\n')
    gathered = torchrun(script, nproc=3, timeout=60, live="quiet", summary=False)
    assert "send and receive" in refuse(exercises.check_01_1, gathered=gathered)


def test_02_the_sampler_run_on_two_ranks(scripts):
    four = torchrun(NOTEBOOK_DIR / "scripts/02_sampler_epochs.py", nproc=2, env=CPU, timeout=90, live="quiet",
                    summary=False, args=["--dataset-size", 10, "--epochs", 1])
    assert "ran 2 process(es)" in refuse(exercises.check_02_4, four=four, padded_count=12, exact_count=10)


def test_03_a_guarded_spawn(scripts):
    script = scripts / "03_ex_no_guard.py"
    script.write_text("import torch.multiprocessing as mp\n\n\ndef worker(index):\n    print(index)\n\n\n"
                      "if __name__ == '__main__':\n    mp.spawn(worker, nprocs=1)\n")
    ran = subprocess.run([sys.executable, "scripts/03_ex_no_guard.py"], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0
    assert "guard" in refuse(exercises.check_03_1, no_guard=ran)


def test_05_rank0_prints_its_own_loss(scripts):
    script = scripts / "05_rank0_collective_fixed.py"
    script.write_text("import torch\nimport torch.distributed as dist\n\nfrom ddp_helpers.runtime import distributed\n\n"
                      "with distributed() as ctx:\n    loss = torch.tensor([1.0 + ctx.rank])\n    if ctx.rank == 0:\n"
                      "        print(f'would save mean loss {loss.item():.3f}')\n    dist.barrier()\n"
                      "    print('after the barrier')\n")
    fixed_run = torchrun(script, nproc=2, env={**CPU, "DDP_TIMEOUT_S": "3"}, timeout=60, live="quiet", summary=False)
    assert "all-reduce" in refuse(exercises.check_05_4, fixed_run=fixed_run)


def test_09_the_solution_without_its_monitored_barrier(scripts):
    solution = next(c for c in __import__("json").loads((NOTEBOOK_DIR / "09_multinode_and_debugging.ipynb").read_text())
                    ["cells"] if "".join(c["source"]).startswith("%%writefile scripts/09_barrier_then_mismatch.py"))
    source = "".join(solution["source"]).split("\n", 1)[1]
    script = scripts / "09_barrier_then_mismatch.py"
    script.write_text(source.replace("    dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))\n", ""))
    out = scripts.parent / "runs/09_debugging"
    out.mkdir(parents=True)
    start = time.monotonic()
    with pytest.raises(WorkerFailed) as info:
        torchrun(script, nproc=2, args=[str(out)], env={**CPU, "HANG_TIMEOUT_S": "3"}, timeout=60, live="quiet",
                 summary=False)
    late, seconds = info.value, time.monotonic() - start  # noqa: F841  (the check finds `late` here)
    assert (out / "barrier_passed.txt").exists() and seconds >= 3  # what fooled the old check
    with pytest.raises(exercises.CheckFailed) as refused:  # called here: the check finds `late` in this frame
        exercises.check_09_4(seconds=seconds)
    assert "monitored_barrier" in str(refused.value) and "\nHint: " in str(refused.value)
