"""The launch watchdog (ddp_helpers/launch_watchdog.py) on its own: it ends a tree that ignores SIGTERM,
leaves a live caller's launch alone, and exits by itself when the launch is over. tests/test_launch.py
kills a real caller."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from ddp_helpers import launch_watchdog

_WATCHDOG = launch_watchdog.__file__  # run by path, as the launcher runs it

# A process that ignores SIGTERM, with a child (and grandchild) that ignore it too.
STUBBORN_TREE = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
depth = int(sys.argv[1])
if depth:
    subprocess.Popen([sys.executable, "-c", sys.argv[2], str(depth - 1), sys.argv[2]])
print("up", flush=True)
time.sleep(600)
"""


def stubborn_tree(depth=2):
    root = subprocess.Popen([sys.executable, "-c", STUBBORN_TREE, str(depth), STUBBORN_TREE],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 30
    me = psutil.Process(root.pid)
    while len(me.children(recursive=True)) < depth:
        assert time.monotonic() < deadline, "the tree never grew"
        time.sleep(0.05)
    return root, [me, *me.children(recursive=True)]


def wait_gone(procs, seconds):
    _, alive = psutil.wait_procs(procs, timeout=seconds)
    return alive


def test_end_all_kills_a_tree_that_ignores_sigterm_after_the_grace():
    root, members = stubborn_tree()
    start = time.monotonic()
    launch_watchdog.end_all({root.pid: members[0]}, grace_s=1.0)  # only the root is known: it finds the rest
    root.wait(timeout=10)
    assert wait_gone(members, 5) == []
    assert 1.0 <= time.monotonic() - start < 8  # SIGTERM was ignored: the kill came after the grace


def test_end_all_is_quick_for_a_tree_that_obeys_sigterm():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    start = time.monotonic()
    launch_watchdog.end_all({sleeper.pid: psutil.Process(sleeper.pid)}, grace_s=20.0)
    assert sleeper.wait(timeout=10) == -signal.SIGTERM and time.monotonic() - start < 10


def run_watchdog(caller_pid, agents, grace="1", remove=None):
    """The watchdog as the launcher starts it, returned once it says it is ready (its signal handlers set)."""
    watchdog = subprocess.Popen([sys.executable, "-P", _WATCHDOG, *(["--remove", str(remove)] if remove else []),
                                 str(caller_pid), grace, *map(str, agents)],
                                stdout=subprocess.PIPE, text=True)
    assert watchdog.stdout.readline().startswith("watching "), "the watchdog never got ready"
    return watchdog


def test_a_live_caller_s_launch_is_left_alone_and_the_watchdog_exits_with_it(tmp_path):
    agent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2)"])
    watchdog = run_watchdog(os.getpid(), [agent.pid], remove=tmp_path)
    assert agent.wait(timeout=20) == 0  # not ended by the watchdog: its caller (this test) lives
    assert watchdog.wait(timeout=10) == 0  # the launch is over: it leaves
    assert tmp_path.is_dir()  # the live caller's folder: the caller removes it


def test_a_dead_caller_s_launch_is_ended_and_its_folder_removed(tmp_path):
    root, members = stubborn_tree(depth=1)
    folder = tmp_path / "ddp_failures_x"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "attempt0_rank1.json").write_text("{}")
    # the "caller" is not this watchdog's parent: as if the caller had died before it looked
    watchdog = run_watchdog(os.getpid() + 10**6, [root.pid], remove=folder)
    assert watchdog.wait(timeout=20) == 1
    root.wait(timeout=10)
    assert wait_gone(members, 5) == []
    assert not folder.exists()


def test_sigterm_to_the_watchdog_ends_the_launch():
    root, members = stubborn_tree(depth=1)
    watchdog = run_watchdog(os.getpid(), [root.pid])
    watchdog.terminate()
    assert watchdog.wait(timeout=20) == 1
    root.wait(timeout=10)
    assert wait_gone(members, 5) == []


def test_wrong_arguments_say_how_to_call_it():
    ran = subprocess.run([sys.executable, "-P", _WATCHDOG, "1"], capture_output=True, text=True, timeout=30)
    assert ran.returncode == 2 and "usage: launch_watchdog.py [--remove DIR] CALLER_PID GRACE_S AGENT_PID" in ran.stderr


@pytest.mark.parametrize("name", ["torch", "ddp_helpers"])
def test_it_imports_neither_torch_nor_the_package(name):
    # run as the launcher runs it: python -P by path; importing torch would cost seconds per launch
    probe = f"import runpy, sys; runpy.run_path({_WATCHDOG!r}, run_name='imported'); print({name!r} in sys.modules)"
    ran = subprocess.run([sys.executable, "-P", "-c", probe], capture_output=True, text=True, timeout=30)
    assert ran.stdout.strip() == "False", ran.stderr
