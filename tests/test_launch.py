"""Reliability of the torchrun launcher: failures are named, nothing hangs, nothing is left running."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

from ddp_helpers import LaunchTimeout, WorkerFailed, torchrun

MARK = "ddp_launch_test_"  # every worker script of this file has it in its name


def write(tmp_path, name, body):
    path = tmp_path / f"{MARK}{name}.py"
    path.write_text(textwrap.dedent(body))
    return path


def leftovers():
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(MARK in part for part in (p.info["cmdline"] or [])) and p.pid != os.getpid():
                found.append(p)
        except psutil.NoSuchProcess:
            pass
    return found


@pytest.fixture(autouse=True)
def no_orphans():
    yield
    deadline = time.monotonic() + 10
    while leftovers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not leftovers(), f"worker processes survived: {[p.info['cmdline'] for p in leftovers()]}"


HELLO = """
    import torch, torch.distributed as dist
    from ddp_helpers.runtime import distributed
    with distributed() as ctx:
        t = torch.tensor([ctx.rank + 1.0])
        dist.all_reduce(t)
        print(f"rank={ctx.rank} world={ctx.world_size} sum={t.item():.0f}")
"""

HANG = """
    import time, pathlib, sys
    from ddp_helpers.runtime import distributed
    with distributed() as ctx:
        pathlib.Path(sys.argv[1], f"started{ctx.rank}").touch()
        time.sleep(600)
"""


def test_success_summary_is_rank_ordered(tmp_path, capsys):
    result = torchrun(write(tmp_path, "hello", HELLO), nproc=2, live="quiet")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("$ torchrun --standalone --nproc-per-node=2 ")
    assert out[1:] == ["[rank 0] rank=0 world=2 sum=3", "[rank 1] rank=1 world=2 sum=3"]
    assert result.stdout == {0: ["rank=0 world=2 sum=3"], 1: ["rank=1 world=2 sum=3"]}


def test_failing_rank_is_named_with_its_traceback(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # as in a notebook: the script path is relative
    script = write(tmp_path, "fail", """
        import torch.distributed as dist
        from ddp_helpers.runtime import distributed
        with distributed() as ctx:
            if ctx.rank == 1:
                raise ValueError("boom on rank one")
            dist.barrier()
    """)
    with pytest.raises(WorkerFailed) as info:
        torchrun(script.name, nproc=2, live="quiet")
    err = info.value
    assert err.rank == 1 and err.exitcode == 1
    assert err.traceback_tail.splitlines()[-1] == "ValueError: boom on rank one"
    assert "rank 1 failed first" in str(err)
    assert f'File "{script.name}", line 6' in err.traceback_tail  # this machine's paths shortened


def test_failure_before_init_is_named_too(tmp_path):
    script = write(tmp_path, "early", """
        import os
        if os.environ["RANK"] == "1":
            raise KeyError("no such setting")
    """)
    with pytest.raises(WorkerFailed) as info:
        torchrun(script, nproc=2, live="quiet")
    assert info.value.rank == 1 and "KeyError" in info.value.traceback_tail


def test_hang_times_out_and_kills_every_process(tmp_path):
    script = write(tmp_path, "hang", HANG)
    start = time.monotonic()
    with pytest.raises(LaunchTimeout, match="timeout=20s"):
        torchrun(script, nproc=2, args=[tmp_path], timeout=20, live="quiet")
    assert time.monotonic() - start < 20 + 15
    assert {p.name for p in tmp_path.glob("started*")} == {"started0", "started1"}
    assert not leftovers()


def test_interrupt_kills_every_process(tmp_path):
    script = write(tmp_path, "hang_int", HANG)
    driver = subprocess.Popen([sys.executable, "-c", (
        "import sys\nfrom ddp_helpers import torchrun\n"
        f"torchrun({str(script)!r}, nproc=2, args=[{str(tmp_path)!r}], timeout=120, live='quiet')")])
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("started*"))) < 2:
        assert time.monotonic() < deadline and driver.poll() is None, "workers never started"
        time.sleep(0.2)
    driver.send_signal(signal.SIGINT)  # what Jupyter's stop button sends the kernel
    assert driver.wait(timeout=30) != 0
    time.sleep(0.5)
    assert not leftovers()


def test_two_launches_at_once_do_not_collide(tmp_path):
    script = write(tmp_path, "hello2", HELLO)
    results, errors = [], []

    def run():
        try:
            results.append(torchrun(script, nproc=2, live="quiet", summary=False))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and len(results) == 2
    assert all(r.stdout[0] == ["rank=0 world=2 sum=3"] for r in results)


def test_simulated_nodes_get_global_ranks(tmp_path):
    result = torchrun(write(tmp_path, "nodes", HELLO), nproc=2, nnodes=2, live="quiet", summary=False)
    assert sorted(result.stdout) == [0, 1, 2, 3]
    assert all(lines == [f"rank={r} world=4 sum=10"] for r, lines in result.stdout.items())


def test_restart_after_a_failed_attempt(tmp_path):
    script = write(tmp_path, "restart", """
        import os
        from ddp_helpers.runtime import distributed
        with distributed() as ctx:
            attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
            if attempt == 0 and ctx.rank == 0:
                raise RuntimeError("first attempt fails")
            print(f"attempt={attempt}")
    """)
    result = torchrun(script, nproc=2, torchrun_args=["--max-restarts=1"], live="quiet", summary=False)
    assert result.stdout[0][-1] == "attempt=1" and result.stdout[1][-1] == "attempt=1"


def test_extra_env_reaches_every_rank(tmp_path):
    script = write(tmp_path, "env", """
        import os
        print(os.environ["RANK"], os.environ["DDP_TEST_KNOB"])
    """)
    result = torchrun(script, nproc=2, env={"DDP_TEST_KNOB": "42"}, live="quiet", summary=False)
    assert result.stdout == {0: ["0 42"], 1: ["1 42"]}


@pytest.mark.parametrize("kwargs, error, words", [
    ({"nproc": 0}, ValueError, "nproc must be an int >= 1"),
    ({"nproc": "2"}, ValueError, "nproc must be an int >= 1"),
    ({"nnodes": 0}, ValueError, "nnodes must be an int >= 1"),
    ({"timeout": 0}, ValueError, "timeout must be a positive"),
    ({"args": "--epochs 3"}, TypeError, "args must be a list of strings"),
    ({"torchrun_args": ["--nproc-per-node=4"]}, ValueError, "through the nproc/nnodes parameters"),
    ({"env": {"EPOCHS": 3}}, TypeError, "env must map str to str"),
    ({"live": "loud"}, ValueError, "live must be"),
])
def test_bad_arguments_get_clear_errors(tmp_path, kwargs, error, words):
    script = write(tmp_path, "unused", "print('never runs')\n")
    with pytest.raises(error, match=words):
        torchrun(script, **{"live": "quiet", **kwargs})


def test_missing_script_says_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="Run the %%writefile cell"):
        torchrun(tmp_path / "nope.py", live="quiet")


def test_worker_options_are_not_taken_by_torchrun(tmp_path):
    script = write(tmp_path, "argv", "import sys\nprint(' '.join(sys.argv[1:]))\n")
    result = torchrun(script, nproc=1, args=["--n", "3", "--max", "2"], live="quiet", summary=False)
    assert result.stdout == {0: ["--n 3 --max 2"]}
    assert " -- " in result.command


def test_error_after_the_group_is_closed_still_fails_the_rank(tmp_path):
    script = write(tmp_path, "after", """
        from ddp_helpers.runtime import distributed
        with distributed() as ctx:
            rank = ctx.rank
        if rank == 0:
            raise ValueError("after teardown")
        print("rank 1 finished")
    """)
    with pytest.raises(WorkerFailed) as info:
        torchrun(script, nproc=2, live="quiet")
    assert info.value.rank == 0 and info.value.exitcode == 1
    assert info.value.traceback_tail.splitlines()[-1] == "ValueError: after teardown"
