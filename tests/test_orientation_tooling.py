"""Checks of the tooling that notebook 00 used to make in front of the learner (issue 27): the pinned
torch, torchrun's OMP_NUM_THREADS notice, the frames a failed launch shows in IPython, and torchrun's
whole-second Root Cause (notebook 09 explains the last one to someone debugging)."""

import json
import sys
import textwrap
import traceback
from pathlib import Path

import torch
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from ddp_helpers import torchrun
from ddp_helpers.launch import is_omp_notice
from ddp_helpers.tracebacks import learner_frames

ROOT = Path(__file__).resolve().parents[1]

HELLO = """
    import torch, torch.distributed as dist
    from ddp_helpers.runtime import distributed
    with distributed() as ctx:
        t = torch.tensor([ctx.rank + 1.0])
        dist.all_reduce(t)
        print(f"sum={t.item():.0f}")
"""


def test_installed_torch_and_python_are_a_supported_stack_whatever_the_build_suffix():
    """torch from the lowest pin of requirements.txt to the highest pin's minor release (tools/stack.py's
    range, which make venv keeps), Python 3.11 to 3.13."""
    import runpy

    from ddp_helpers.releases import torch_release

    low, high = runpy.run_path(str(ROOT / "tools" / "stack.py"))["supported"]((ROOT / "requirements.txt").read_text())
    assert low <= torch_release() and torch_release()[:2] <= high[:2], (torch.__version__, low, high)
    assert (3, 11) <= sys.version_info[:2] <= (3, 13)


def test_torchrun_sets_omp_num_threads_only_when_it_is_unset(tmp_path, monkeypatch):
    script = tmp_path / "ddp_omp_hello.py"
    script.write_text(textwrap.dedent(HELLO))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    unset = torchrun(script, nproc=2, live="quiet", summary=False)
    given = torchrun(script, nproc=2, live="quiet", summary=False, env={"OMP_NUM_THREADS": "1"})
    notices = [[line.strip() for line in r.agent_log if "OMP_NUM_THREADS" in line] for r in (unset, given)]
    assert notices[0] and notices[0][0].startswith("Setting OMP_NUM_THREADS environment variable for each process")
    assert all(is_omp_notice(line + "\n") for line in notices[0])
    assert notices[1] == []
    assert unset.stdout[0] == given.stdout[0] == ["sum=3"]


def test_learner_frames_drop_the_frames_that_hide_themselves():
    def launcher():
        __tracebackhide__ = True  # noqa: F841 - read by learner_frames
        raise RuntimeError("rank 1 failed")

    def cell():
        launcher()

    try:
        cell()
    except RuntimeError as err:
        tb = err.__traceback__
    shown = [frame.name for frame in traceback.extract_tb(learner_frames(tb))]
    assert shown == ["test_learner_frames_drop_the_frames_that_hide_themselves", "cell"]
    assert "launcher" in [frame.name for frame in traceback.extract_tb(tb)]   # the filter did remove it


def failure(tmp_path, local_rank, second, message):
    """What torchrun builds from a rank's error file."""
    path = tmp_path / f"error{local_rank}.json"
    path.write_text(json.dumps({"message": {"message": message, "extraInfo": {"timestamp": str(second)}}}))
    return ProcessFailure(local_rank=local_rank, pid=0, exitcode=1, error_file=str(path))


def test_torchruns_root_cause_breaks_a_same_second_tie_by_rank(tmp_path):
    second = 1_700_000_000
    tie = ChildFailedError("w.py", {0: failure(tmp_path, 0, second, "Connection closed by peer"),
                                    1: failure(tmp_path, 1, second, "ZeroDivisionError")})
    assert tie.get_first_failure()[0] == 0
    later = ChildFailedError("w.py", {0: failure(tmp_path, 0, second + 1, "Connection closed by peer"),
                                      1: failure(tmp_path, 1, second, "ZeroDivisionError")})
    assert later.get_first_failure()[0] == 1
