"""Ending a launch's processes: :func:`terminate` when the launcher is alive (a timeout, the stop button,
an error), and a watchdog process for when the process that launched them dies, whatever killed it.

The launcher (:mod:`ddp_helpers.launch`) starts one watchdog per launch (:func:`start_watchdog`), right
after the torchrun agents, in a session of its own (a kernel restart that kills the kernel's process group
spares it):

    python -P launch_watchdog.py [--remove DIR] CALLER_PID GRACE_S AGENT_PID [AGENT_PID ...]

It checks ten times a second whether its parent is still ``CALLER_PID`` (``os.getppid()``: the same on
Linux and macOS, no ``prctl``). While the caller lives it only keeps a list of every process in the
agents' trees, so that workers and their DataLoader workers stay known even after an agent has died
and they were re-parented. When the caller dies (or this watchdog gets SIGTERM, SIGINT or SIGHUP) it
sends SIGTERM to all of them, gives them ``GRACE_S`` seconds to stop, then freezes (SIGSTOP, so
nothing forks any more) and SIGKILLs whatever is left; then it removes ``DIR`` (the launch's temporary
folder, which the dead caller can no longer remove). It never waits on torch's own shutdown: a
torchrun agent that got SIGTERM can stop its workers and then hang at interpreter exit, waiting for
its log-tail threads (``torch/distributed/elastic/multiprocessing/tail_log.py``, ``TailLog``), which
nobody stops; that agent is killed here after the grace period. It exits by itself once every agent
has ended and the caller still lives (the launch is over; the launcher handles its own leftovers).

It runs by path with ``python -P`` and imports only the standard library and psutil: importing
``ddp_helpers`` would import torch (seconds), and ``-P`` keeps this folder's modules off ``sys.path``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence

import psutil

KILL_GRACE_S = 5.0  # terminate(): SIGTERM, then SIGKILL after this
WATCHDOG_GRACE_S = 3.0  # a dead caller's launch: SIGTERM, then SIGKILL after this (all gone within 10 s)
POLL_S = 0.1  # how often the caller and the agents are checked
TREE_EVERY = 5  # the agents' trees are re-read every TREE_EVERY polls (0.5 s)
_stop_requested = False


def _request_stop(signum: int, frame: object) -> None:
    global _stop_requested
    _stop_requested = True


def _alive(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    """The processes that still run (a zombie has ended; psutil checks pid reuse)."""
    alive = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.Error:
            pass
    return alive


def _with_descendants(procs: Iterable[psutil.Process]) -> dict[int, psutil.Process]:
    """``procs`` and every descendant they have now, by pid."""
    found = {}
    for p in procs:
        found[p.pid] = p
        try:
            for child in p.children(recursive=True):
                found[child.pid] = child
        except psutil.Error:
            pass
    return found


def _signal_all(procs: Iterable[psutil.Process], sig: int) -> None:
    for p in procs:
        try:
            p.send_signal(sig)  # psutil refuses a pid that now belongs to another process
        except psutil.Error:
            pass


def end_all(known: dict[int, psutil.Process], grace_s: float) -> None:
    """SIGTERM every known process and its descendants, wait up to ``grace_s`` seconds for them to exit,
    then SIGSTOP and SIGKILL what is left (descendants started during the grace period included)."""
    known.update(_with_descendants(_alive(known.values())))
    _signal_all(known.values(), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        alive = _alive(known.values())
        if not alive:
            return
        known.update(_with_descendants(alive))  # a process may still have started children
        time.sleep(POLL_S)
    for _ in range(3):  # freeze first, so that no process forks between the last reading and the kill
        alive = _alive(known.values())
        if not alive:
            return
        _signal_all(alive, signal.SIGSTOP)
        known.update(_with_descendants(alive))
        _signal_all(_alive(known.values()), signal.SIGKILL)
        time.sleep(POLL_S)


def watch(caller_pid: int, grace_s: float, agent_pids: list[int], remove: str | None = None) -> int:
    """Watch the caller; returns the exit status (0: the launch ended, 1: it was ended here, and the
    folder ``remove`` with it)."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _request_stop)
    agents = []
    for pid in agent_pids:
        try:
            agents.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    known = _with_descendants(agents)
    print(f"watching {len(agents)} agent(s) for caller {caller_pid}", flush=True)  # ready: signals are handled
    polls = 0
    while True:
        if _stop_requested or os.getppid() != caller_pid:
            end_all(known, grace_s)
            if remove:
                shutil.rmtree(remove, ignore_errors=True)
            return 1
        if not _alive(agents):
            return 0
        polls += 1
        if polls % TREE_EVERY == 0:
            known = {p.pid: p for p in _alive(known.values())}
            known.update(_with_descendants(_alive(agents)))
        time.sleep(POLL_S)


def start_watchdog(agents: Sequence[subprocess.Popen], remove: str | None = None) -> subprocess.Popen:
    """One watchdog for a launch's agents, started by this process (the caller it watches), by path with
    ``python -P``, in a session of its own so that whatever kills the caller's process group spares it.
    ``remove``: a folder of the launch's to delete if the caller dies."""
    return subprocess.Popen([sys.executable, "-P", __file__, *(["--remove", remove] if remove else []),
                             str(os.getpid()), str(WATCHDOG_GRACE_S), *(str(p.pid) for p in agents)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def stop_watchdog(watchdog: subprocess.Popen | None) -> None:
    """The launch is over: the watchdog exits once the agents have; reap it so that no zombie stays."""
    if watchdog is None:
        return
    try:
        watchdog.wait(timeout=2 * KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        watchdog.kill()
        watchdog.wait()


def _tree(procs: Sequence[subprocess.Popen]) -> list[psutil.Process]:
    alive = []
    for p in procs:
        try:
            alive.append(psutil.Process(p.pid))
            alive += psutil.Process(p.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            pass
    return alive


def terminate(procs: Sequence[subprocess.Popen], grace: float = KILL_GRACE_S) -> None:
    """SIGTERM every agent and every descendant, then SIGKILL what is left (from a live launcher)."""
    members = _tree(procs)  # snapshot first: workers run in their own sessions
    _signal_all(members, signal.SIGTERM)
    _, alive = psutil.wait_procs(members, timeout=grace)
    _signal_all(alive + _tree(procs), signal.SIGKILL)
    psutil.wait_procs(members, timeout=grace)
    for p in procs:
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass


def main(argv: list[str]) -> int:
    remove = None
    if argv[:1] == ["--remove"] and len(argv) > 1:
        remove, argv = argv[1], argv[2:]
    if len(argv) < 3:
        sys.stderr.write("usage: launch_watchdog.py [--remove DIR] CALLER_PID GRACE_S AGENT_PID [AGENT_PID ...]\n")
        return 2
    return watch(int(argv[0]), float(argv[1]), [int(a) for a in argv[2:]], remove)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
