"""Reliability of the torchrun launcher: failures are named, nothing hangs, nothing is left running."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import types

import psutil
import pytest

from ddp_helpers import LaunchTimeout, WorkerFailed, launch, torchrun

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
    before = time.time()
    result = torchrun(write(tmp_path, "hello", HELLO), nproc=2, live="quiet")
    assert before <= result.started <= before + result.seconds + 5
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("$ torchrun --standalone --nproc-per-node=2 ")
    assert out[1:] == ["[rank 0] rank=0 world=2 sum=3", "[rank 1] rank=1 world=2 sum=3"]
    assert result.stdout == {0: ["rank=0 world=2 sum=3"], 1: ["rank=1 world=2 sum=3"]}


def test_failing_rank_is_named_with_its_traceback(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # as in a notebook: the script path is relative
    own_tmp = tmp_path / "tmp"   # where this launch's failures folder goes, seen by no other test
    own_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(own_tmp))
    script = write(tmp_path, "fail", """
        import torch.distributed as dist
        from ddp_helpers.runtime import distributed
        with distributed() as ctx:
            if ctx.rank == 1:
                raise ValueError("boom on rank one")
            dist.barrier()
    """)
    before = time.time()
    with pytest.raises(WorkerFailed) as info:
        torchrun(script.name, nproc=2, live="quiet")
    err = info.value
    assert err.rank == 1 and err.exitcode == 1
    assert err.traceback_tail.splitlines()[-1] == "ValueError: boom on rank one"
    assert "rank 1 failed first" in str(err)
    assert f'File "{script.name}", line 6' in err.traceback_tail  # this machine's paths shortened
    assert list(own_tmp.iterdir()) == []  # the failures folder the rank wrote to is gone after a failure too
    assert before <= err.started <= time.time()  # when it began: a check can tell a stale file from this run's
    assert err.result.command == err.command and not err.exit_abort  # what the ranks printed comes with it


@pytest.mark.parametrize("exitcode, tail, abort", [
    (-6, "[W] something\nterminate called without an active exception", True),
    (-6, "Fatal Python error: Aborted", False),      # another abort
    (1, "RuntimeError: terminate called without an active exception", False),  # an error whose text quotes it
    (None, "terminate called without an active exception", False),
])
def test_the_exit_abort_is_named_with_its_fix(exitcode, tail, abort):
    err = WorkerFailed(0, exitcode, tail, "torchrun x.py")
    assert err.exit_abort is abort
    assert ("pytorch/pytorch#190489" in str(err)) is abort and ("`del model`" in str(err)) is abort
    assert ("(notebook 09, section 7)" in str(err)) is abort  # the section that explains it


def test_a_process_that_outlives_its_output_is_a_timeout(tmp_path, monkeypatch):
    # an agent that closes its output and keeps running: the wait after the output ends times out too
    silent = [sys.executable, "-c", f"import os, time; os.close(1); os.close(2); time.sleep(120)  # {MARK}"]
    monkeypatch.setattr(launch, "_with_parent_death_signal", lambda argv: silent)
    start = time.monotonic()
    with pytest.raises(LaunchTimeout, match="after its output ended"):
        torchrun(write(tmp_path, "hello", HELLO), nproc=1, timeout=3, live="quiet")
    assert time.monotonic() - start < 3 + 15
    assert not leftovers()


@pytest.mark.parametrize("interfaces, expected", [
    ({"lo": ["127.0.0.1", "::1"], "eth0": ["192.0.2.2"]}, "lo"),           # Linux
    ({"en0": ["192.168.1.4"], "lo0": ["::1", "127.0.0.1"]}, "lo0"),        # macOS
    ({"eth0": ["192.0.2.2"], "lo6": ["::1"]}, None),                        # no IPv4 loopback: gloo picks
])
def test_gloo_stays_on_the_loopback_interface_of_any_os(monkeypatch, interfaces, expected):
    def addresses(items):
        return [types.SimpleNamespace(family=socket.AF_INET6 if ":" in a else socket.AF_INET, address=a)
                for a in items]
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: {n: addresses(a) for n, a in interfaces.items()})
    assert launch.loopback_interface() == expected


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


# A notebook kernel installs its own SIGINT handler; the driver does the same, so the test
# holds when the caller ignores SIGINT (`nohup make test &` hands that disposition down).
IPYTHON_CELL = """
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance(colors="nocolor")
shell.run_cell({cell!r})
"""


def kill_tree(proc):
    """SIGKILL ``proc`` and every process below it (no-op for those already gone)."""
    try:
        family = psutil.Process(proc.pid).children(recursive=True) + [psutil.Process(proc.pid)]
    except psutil.NoSuchProcess:
        return
    for p in family:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait(timeout=10)


def in_ipython(cell):
    """A driver process that runs ``cell`` in an IPython shell, as a notebook kernel would."""
    return subprocess.Popen([sys.executable, "-c", IPYTHON_CELL.format(cell=cell)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "DDP_HELPERS_LIVE": "quiet"})


def test_interrupt_kills_every_process_and_says_so(tmp_path):
    script = write(tmp_path, "hang_int", HANG)
    driver = in_ipython("from ddp_helpers import torchrun\n"
                        f"torchrun({str(script)!r}, nproc=2, args=[{str(tmp_path)!r}], timeout=120)")
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("started*"))) < 2:
            assert time.monotonic() < deadline and driver.poll() is None, "workers never started"
            time.sleep(0.2)
        driver.send_signal(signal.SIGINT)  # what Jupyter's stop button sends the kernel
        shown, _ = driver.communicate(timeout=30)
    finally:
        kill_tree(driver)  # a failed run leaves nothing behind for the next tests
    time.sleep(0.5)
    assert not leftovers()
    assert "LaunchStopped: stopped: all 2 ranks terminated" in shown
    assert "queue.py" not in shown and "threading.py" not in shown and "launch.py" not in shown
    assert issubclass(__import__("ddp_helpers").LaunchStopped, KeyboardInterrupt)


FAIL_RANK1 = """
    from ddp_helpers.runtime import distributed
    with distributed() as ctx:
        if ctx.rank == 1:
            print(1 / 0)
"""


def test_failure_traceback_in_ipython_shows_the_cell_and_the_rank(tmp_path):
    script = write(tmp_path, "fail_ipy", FAIL_RANK1)
    driver = in_ipython(f"from ddp_helpers import torchrun\ntorchrun({str(script)!r}, nproc=2)")
    shown, _ = driver.communicate(timeout=120)
    assert "----> 2 torchrun(" in shown                     # the learner's line
    assert "rank 1 failed first" in shown and "ZeroDivisionError" in shown
    assert "launch.py" not in shown                          # none of the launcher's frames


def test_omp_notice_is_recognised_and_kept_in_the_agent_log(tmp_path):
    from ddp_helpers.launch import is_omp_notice
    result = torchrun(write(tmp_path, "hello_omp", HELLO), nproc=2, live="quiet")
    notice = [line for line in result.agent_log if "OMP_NUM_THREADS" in line]
    assert notice and all(is_omp_notice(line) for line in notice)
    assert not any(is_omp_notice(f"[rank{r}]:{line}\n") for r, lines in result.stdout.items()
                   for line in lines)


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
    ({"args": 5}, TypeError, "args must be a list of strings"),
    ({"args": [None]}, TypeError, "None is a NoneType"),
    ({"args": [{"a": 1}]}, TypeError, "is a dict"),
    ({"args": [b"x"]}, TypeError, "is a bytes"),
    ({"torchrun_args": ["--nproc-per-node=4"]}, ValueError, "through the nproc/nnodes parameters"),
    ({"torchrun_args": ["--no-such-flag"]}, ValueError,
     "torchrun rejected torchrun_args=.*unrecognized arguments: --no-such-flag"),
    ({"torchrun_args": ["--max-restarts=two"]}, ValueError, "torchrun rejected .*invalid int value"),
    ({"env": {"EPOCHS": 3}}, TypeError, "env must be a dict of str to str"),
    ({"env": 5}, TypeError, "env must be a dict of str to str"),
    ({"live": "loud"}, ValueError, "live must be"),
    ({"live": "bogus"}, ValueError, "live must be"),
    ({"script": None}, TypeError, "script must be the path of a worker script"),
    ({"cwd": "no/such/folder"}, NotADirectoryError, "is not a folder"),
])
def test_bad_arguments_get_clear_errors_before_anything_starts(tmp_path, monkeypatch, capsys,
                                                               kwargs, error, words):
    import subprocess as sp

    def no_process(*args, **kw):
        raise AssertionError("a process was started")

    monkeypatch.setattr(sp, "Popen", no_process)
    script = write(tmp_path, "unused", "print('never runs')\n")
    with pytest.raises(error, match=words):
        torchrun(**{"script": script, "live": "quiet", **kwargs})
    assert capsys.readouterr().out == ""  # not even the command is printed


def test_bad_live_mode_in_the_environment(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DDP_HELPERS_LIVE", "loud")
    with pytest.raises(ValueError, match="DDP_HELPERS_LIVE must be"):
        torchrun(write(tmp_path, "unused", "print('never runs')\n"))
    assert capsys.readouterr().out == ""


def test_missing_script_says_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="Run the %%writefile cell"):
        torchrun(tmp_path / "nope.py", live="quiet")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        torchrun(tmp_path, live="quiet")


def test_ranks_start_in_cwd_and_a_relative_script_is_found_from_here(tmp_path, monkeypatch):
    script = write(tmp_path, "cwd", "import os\nprint(os.getcwd())\n")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    result = torchrun(script.name, nproc=2, live="quiet", summary=False, cwd=tmp_path / "elsewhere")
    assert result.stdout == {r: [str(tmp_path / "elsewhere")] for r in (0, 1)}
    assert torchrun(script.name, nproc=1, live="quiet", summary=False).stdout == {0: [str(tmp_path)]}


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


def test_torchrun_rejecting_its_flags_is_not_blamed_on_a_rank(tmp_path, monkeypatch):
    from ddp_helpers import launch

    real = launch._check_torchrun_flags
    monkeypatch.setattr(launch, "_check_torchrun_flags", lambda flags: real([]))  # let it through
    with pytest.raises(launch.LaunchError, match="torchrun rejected its arguments, so no rank ran: "
                                                 ".*unrecognized arguments: --no-such-flag") as info:
        torchrun(write(tmp_path, "unused2", "print('never runs')\n"), torchrun_args=["--no-such-flag"],
                 live="quiet")
    assert not isinstance(info.value, WorkerFailed)


EXIT_STATUS = """
    import atexit, os, sys
    from ddp_helpers.runtime import distributed
    atexit.register(lambda: print("atexit handler ran", flush=True))  # registered before the helper's
    with distributed() as ctx:
        rank = ctx.rank
    if rank == 1:
        {ending}
    print("done", flush=True)
"""


@pytest.mark.parametrize("ending, code, last_line", [
    ("sys.exit(3)", 3, None),
    ('raise SystemExit("fatal: disk full")', 1, "fatal: disk full"),
])
def test_exit_status_after_the_block_is_kept(tmp_path, ending, code, last_line):
    script = write(tmp_path, f"exit{code}", EXIT_STATUS.replace("{ending}", ending))
    with pytest.raises(WorkerFailed) as info:
        torchrun(script, nproc=2, live="quiet")
    assert info.value.rank == 1 and info.value.exitcode == code
    if last_line:
        assert info.value.traceback_tail.splitlines()[-1] == last_line


def test_clean_exit_runs_every_atexit_handler(tmp_path):
    script = write(tmp_path, "exit0", EXIT_STATUS.replace("{ending}", "pass"))
    result = torchrun(script, nproc=2, live="quiet", summary=False)
    assert result.stdout == {0: ["done", "atexit handler ran"], 1: ["done", "atexit handler ran"]}


SWITCH_ENV = """
    import os
    print(os.environ.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE"), os.environ["TORCHELASTIC_USE_AGENT_STORE"])
"""


@pytest.mark.parametrize("torchrun_args, env, shown, seen", [
    (["--max-restarts=1"], None, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun ", "1 False"),
    (["--max-restarts", "2"], {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"},
     "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=0 torchrun ", "0 True"),
    ([], None, "torchrun ", "None True"),  # no restarts: torch's default, nothing added
])
def test_restarts_get_a_fresh_store_per_attempt_visibly(tmp_path, monkeypatch, torchrun_args, env, shown, seen):
    monkeypatch.delenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", raising=False)
    result = torchrun(write(tmp_path, "switch", SWITCH_ENV), nproc=1, torchrun_args=torchrun_args, env=env,
                      live="quiet", summary=False)
    assert result.command.startswith(shown)
    assert result.stdout == {0: [seen]}


@pytest.mark.restarts
def test_plain_worker_restarted_after_sigkill_succeeds():
    """A learner's plain init_process_group("gloo") script, rank 1 SIGKILLed on the first
    attempt, restarted by --max-restarts=1 (the launcher adds torch's store switch).
    Once in `make test`; `make stress` repeats it (STRESS_REPEATS, 10 there) for a rate."""
    from restart_demo import run_restarts  # tests/restart_demo.py (pytest puts tests/ on sys.path)

    repeats = int(os.environ.get("STRESS_REPEATS", "1"))
    counts = run_restarts(repeats, share_store=False, timeout=120)
    assert counts == {"succeeded": repeats, "failed": 0, "hung": 0, "errors": []}


def test_launches_are_recorded_for_gpu_check(tmp_path, monkeypatch):
    script = tmp_path / "ok.py"
    script.write_text("print('hi')\n")
    record = tmp_path / "launches.jsonl"
    monkeypatch.setenv("DDP_HELPERS_RECORD", str(record))
    torchrun(script, nproc=1, args=["--x", 3], env={"A": "1"}, live="quiet", summary=False, timeout=60)
    entry = json.loads(record.read_text())
    assert entry == {"script": str(script), "nproc": 1, "nnodes": 1, "args": ["--x", "3"], "env": {"A": "1"},
                     "torchrun_args": [], "timeout": 60, "outcome": "ok"}


def test_simulated_nodes_pass_no_node_rank():
    from ddp_helpers.launch import LaunchPlan

    plan = LaunchPlan.make("w.py", 2, 2, port=29999)
    assert "--node-rank" not in plan.shown and "--nnodes=2 --rdzv-backend=c10d" in plan.shown
    assert "--rdzv-endpoint=127.0.0.1:<PORT>" in plan.shown and "--rdzv-endpoint=127.0.0.1:29999" in plan.argv()


AGENT_ARGV = """
    import json, os
    if os.environ["RANK"] == "0":  # the agent (this worker's parent) as it runs, read back by Linux
        with open(f"/proc/{os.getppid()}/cmdline") as f:
            print(json.dumps(f.read().split("\\0")[:-1]))
"""


@pytest.mark.parametrize("nnodes", [1, 2])
def test_the_printed_command_is_what_runs(tmp_path, capsys, nnodes):
    from ddp_helpers.launch import LaunchPlan, shown_command

    script = write(tmp_path, f"argv{nnodes}", AGENT_ARGV)
    result = torchrun(script, nproc=1, nnodes=nnodes, args=["--n", 3, "a b"], torchrun_args=["--max-restarts=0"],
                      live="quiet", summary=False)
    printed = capsys.readouterr().out.splitlines()[0]
    ran = json.loads(result.stdout[0][0])
    port = next((int(a.rsplit(":", 1)[1]) for a in ran if a.startswith("--rdzv-endpoint=")), None)
    own = LaunchPlan.make(script, 1, nnodes, port=port).own  # the launcher's flags for this process
    assert printed == f"$ {shown_command(ran, own, port)}" == f"$ {result.command}"
    assert ran[-5:] == ["--", str(script), "--n", "3", "a b"] and "--max-restarts=0" in ran
    assert printed.startswith("$ torchrun ") and "'a b'" in printed  # quoted as a shell would need it


def test_shown_command_refuses_another_program_and_a_changed_line():
    from ddp_helpers.launch import LaunchPlan, shown_command

    plan = LaunchPlan.make("w.py", 2, 1, ["--max-restarts=1"], ["--epochs", "3"])
    with pytest.raises(ValueError, match="not a torchrun command line"):
        shown_command(["python", "w.py"])
    changed = plan.argv()
    changed[changed.index("--nproc-per-node=2")] = "--nproc-per-node=4"
    assert shown_command(changed, plan.own) != plan.shown  # what runs differs: so does the line
    with pytest.raises(ValueError):
        shown_command(plan.argv(), ("--not-there",))  # an own flag that is not in the line


# An agent that will not stop: SIGTERM ignored (as a torchrun agent whose exit hangs in its log-tail
# threads), with a child that ignores it too; both write a marker, then sleep. Run as the "agent" of a launch.
STUBBORN_AGENT = """
    import os, pathlib, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    out = pathlib.Path(sys.argv[-1])
    child = subprocess.Popen([sys.executable, "-c", "import signal, time, pathlib, sys; "
                              "signal.signal(signal.SIGTERM, signal.SIG_IGN); pathlib.Path(sys.argv[1]).touch(); "
                              "time.sleep(600)", str(out / "started_child"), sys.argv[0]])
    (out / "started_agent").touch()
    time.sleep(600)
"""


def started_then_killed(tmp_path, cell, marker, wait_s, markers=1, env=None):
    """Run ``cell`` in a fresh interpreter (the kernel), SIGKILL it once ``markers`` of its processes have
    started, and return what of them is still alive after ``wait_s`` seconds (bounded waits only)."""
    driver = subprocess.Popen([sys.executable, "-c", cell], env={**os.environ, "DDP_HELPERS_LIVE": "quiet", **(env or {})},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob(f"{marker}/started*"))) < markers:
        assert time.monotonic() < deadline and driver.poll() is None, "the worker never started"
        time.sleep(0.1)
    driver.kill()
    driver.wait(timeout=10)
    deadline = time.monotonic() + wait_s
    while leftovers() and time.monotonic() < deadline:
        time.sleep(0.2)
    survivors = leftovers()
    for p in survivors:  # a failed check leaves nothing behind for the next tests
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    return survivors


# The kernel's cell, run in a fresh interpreter: {setup} then a launch of {script} into {out}.
KERNEL_CELL = """
import sys
from ddp_helpers import launch, torchrun
{setup}
torchrun({script!r}, nproc=1, args=[{out!r}], timeout=120)
"""
# Linux-only paths off, as on macOS: no setpriv (so no parent-death signal) and no /proc for the launcher.
AS_MACOS = ("sys.platform = 'darwin'\n"
            "launch.shutil.which = lambda name, *a, **k: None\n"
            "launch.os.path.exists = lambda path: not str(path).startswith(('/proc', '/sys'))")


@pytest.mark.parametrize("setup", ["", AS_MACOS], ids=["linux", "as-macos"])
def test_killing_the_kernel_leaves_no_worker(tmp_path, setup):
    """A notebook kernel that dies (SIGKILL: nothing of it runs any more) takes its launch with it within
    10 s: the launch's watchdog ends every process of it, and removes the launch's temporary folder (the
    kernel's TemporaryDirectory never gets to). Also with the Linux-only paths off (macOS)."""
    script = write(tmp_path, "hang_kill", HANG)
    (tmp_path / "helper").mkdir()
    own_tmp = tmp_path / "tmp"  # where the launch's failures folder goes, seen by no other test
    own_tmp.mkdir()
    cell = KERNEL_CELL.format(setup=setup, script=str(script), out=str(tmp_path / "helper"))
    assert started_then_killed(tmp_path, cell, "helper", wait_s=10, env={"TMPDIR": str(own_tmp)}) == []

    def left():  # torch's own compile cache is not the launch's: a torchrun agent that gets a second SIGTERM
        # while it shuts down imports torch._dynamo, whose package module makes TMPDIR/torchinductor_<user>
        return [p.name for p in own_tmp.iterdir() if not p.name.startswith("torchinductor_")]

    deadline = time.monotonic() + 5
    while left() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left() == []


def test_an_agent_that_ignores_sigterm_is_killed_with_its_child(tmp_path):
    """What no SIGTERM path can do: an agent that will not stop (a torchrun agent whose exit hangs
    in its log-tail threads) and its child both end within 10 s of the kernel's death."""
    agent = write(tmp_path, "stubborn_agent", STUBBORN_AGENT)
    (tmp_path / "stubborn").mkdir()
    setup = f"launch._TORCHRUN = (sys.executable, {str(agent)!r})  # the stubborn agent instead of torchrun"
    cell = KERNEL_CELL.format(setup=setup, script=str(agent), out=str(tmp_path / "stubborn"))
    assert started_then_killed(tmp_path, cell, "stubborn", wait_s=10, markers=2) == []


def test_without_the_launcher_the_agent_outlives_its_parent(tmp_path):
    """The control: the same agent started by a plain Popen stays after its parent's death."""
    script = write(tmp_path, "hang_kill", HANG)
    (tmp_path / "plain").mkdir()
    plain = ("import subprocess, sys, time\n"
             f"subprocess.Popen([sys.executable, '-m', 'torch.distributed.run', '--standalone', "
             f"'--nproc-per-node=1', {str(script)!r}, {str(tmp_path / 'plain')!r}], start_new_session=True)\n"
             "time.sleep(600)")
    assert started_then_killed(tmp_path, plain, "plain", wait_s=3), "the agent should outlive its parent"
