"""Run a worker script with torchrun from a notebook or a terminal.

One function, :func:`torchrun`, does it all: it starts one torchrun agent per
simulated node (normally one), streams every rank's output live, and when the
run ends prints a deterministic rank-ordered summary of what each rank wrote to
stdout. A failing rank raises :class:`WorkerFailed` naming the rank, its exit
code and the tail of its traceback. A timeout or an interrupt (the notebook's
stop button) terminates every process the launch started: no orphans. So does a
killed kernel, on every platform: a watchdog process (:mod:`ddp_helpers.launch_watchdog`) ends
the launch's whole process tree when the process that called ``torchrun`` dies; on Linux each
agent also starts under ``setpriv --pdeathsig TERM``, which covers the moment before the
watchdog starts.
The command printed before a launch is derived from the one that runs
(:class:`LaunchPlan`), less the flags the launcher adds for itself.

Every launch records its provenance (:mod:`ddp_helpers.launch_record`): on its :class:`LaunchResult`, in a
process-local registry, and as ``.launch.json`` in the run's output.

In a notebook, these errors' tracebacks show the learner's cell and the failing rank's
traceback, not this module's frames: ``torchrun`` registers an IPython handler for its own
exception types (see :func:`ddp_helpers.tracebacks.install_traceback_filter`). The live view leaves out torchrun's
OMP_NUM_THREADS notice (:func:`is_omp_notice`); it stays in ``LaunchResult.agent_log``.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, NoReturn

import psutil

from ddp_helpers.launch_record import (  # noqa: F401  re-exported: provenance readers import them from here
    LAUNCHER,
    PROVENANCE_FILE,
    RECORD_ENV,
    file_sha256,
    is_registered_launch,
    output_targets,
    record_launch,
    register,
    sidecar,
    write_provenance,
)
from ddp_helpers.launch_watchdog import start_watchdog, stop_watchdog, terminate
from ddp_helpers.live_view import (  # noqa: F401  is_omp_notice re-exported
    PREFIX_TEMPLATE,
    LiveMode,
    RankLines,
    _in_kernel,
    _live_mode,
    _live_sink,
    is_omp_notice,
)
from ddp_helpers.runtime import FAILURES_ENV
from ddp_helpers.tracebacks import install_traceback_filter

if TYPE_CHECKING:
    import argparse

# torch itself prefixes traceback lines with "[rankN]: " as well.
_INNER_PREFIX_RE = re.compile(r"^\[rank\d+\]: ?")
_ROOT_CAUSE_RE = re.compile(r"Root Cause.*?rank\s*:\s*(\d+)", re.S)
_FAILURE_RE = re.compile(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")
_TRACEBACK_TAIL_LINES = 15

# torch's own switch against pytorch/pytorch#135712, set when restarts are requested.
# By default torchrun's c10d rendezvous shares the agent's TCPStore with the workers
# (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py,
# DynamicRendezvousHandler.use_agent_store, which LocalElasticAgent._start_workers in
# torch/distributed/elastic/agent/server/local_elastic_agent.py passes on as
# TORCHELASTIC_USE_AGENT_STORE). That store outlives a restart, so the next attempt
# reads the dead attempt's keys (gloo addresses: "connectFullMesh failed ... Connection
# refused", or a hang). With the switch at "1", DynamicRendezvousHandler.next_rendezvous
# returns RendezvousStoreInfo.build(...) (torch/distributed/elastic/rendezvous/api.py),
# a new free port for every round, and torch/distributed/rendezvous.py,
# _create_c10d_store, lets rank 0 of each attempt host a fresh store.
SHARE_STORE_SWITCH = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent) + os.sep  # shows ddp_helpers/...


# What a worker script's arguments and a launch's extra flags may hold (turned into strings).
Arg = str | int | float | os.PathLike


class LaunchError(RuntimeError):
    """The launch itself failed (a node agent died, the run timed out)."""

    started: float | None = None  # time.time() when the launch began (set by torchrun)
    result: LaunchResult | None = None  # what the ranks printed, with the launch's provenance (set by torchrun)


# What libstdc++ prints when gloo's exit abort kills a rank (SIGABRT, exit code -6): see WorkerFailed.exit_abort.
EXIT_ABORT_TEXT = "terminate called without an active exception"


class WorkerFailed(LaunchError):
    """A rank exited with a non-zero code. ``result`` holds what the ranks printed before the end."""

    def __init__(self, rank: int | None, exitcode: int | None, traceback_tail: str, command: str,
                 other_failures: Mapping[int, int] | None = None, result: LaunchResult | None = None) -> None:
        self.rank = rank
        self.exitcode = exitcode
        self.traceback_tail = traceback_tail
        self.command = command
        self.other_failures = dict(other_failures or {})  # rank -> exit code
        self.result = result
        where = f"rank {rank}" if rank is not None else "a rank"
        code = f"exit code {exitcode}" if exitcode is not None else "an error"
        others = (f"\nthen ranks {sorted(self.other_failures)} stopped too (their exit codes "
                  "depend on timing: an error in a collective, or torchrun's SIGTERM)"
                  if self.other_failures else "")
        abort = ("\nThis is gloo's exit abort (pytorch/pytorch#190489): a process group still held at interpreter "
                 "exit (by a DDP model, for one) can kill a rank after its last line ran. Drop what holds the "
                 "group before ending it: `del model` then `dist.destroy_process_group()` (notebook 09, section 7)."
                 if self.exit_abort else "")
        super().__init__(
            f"{where} failed first, with {code}.{others}{abort}\n"
            f"--- last lines of {where}'s stderr ---\n{traceback_tail}\n"
            f"--- command ---\n{command}"
        )

    @property
    def exit_abort(self) -> bool:
        """Whether the rank died of gloo's exit abort (SIGABRT with libstdc++'s "terminate called without an
        active exception"), which comes after the script's work when a process group outlives
        ``destroy_process_group()``, rather than of an error in the script."""
        return self.exitcode == -6 and EXIT_ABORT_TEXT in self.traceback_tail


class LaunchTimeout(LaunchError):
    """The run took longer than ``timeout`` seconds and was terminated."""


class LaunchStopped(KeyboardInterrupt):
    """The run was interrupted (the notebook's stop button) and every rank was terminated."""


@dataclass
class LaunchResult:
    """What a finished run produced; ``stdout[r]`` is rank r's stdout lines."""

    command: str
    stdout: dict[int, list[str]] = field(default_factory=dict)
    stderr: dict[int, list[str]] = field(default_factory=dict)
    seconds: float = 0.0
    agent_log: list[str] = field(default_factory=list)  # torchrun's own lines (no rank prefix)
    started: float = 0.0  # time.time() when the launch began: files it wrote are newer
    # provenance, set by torchrun (a hand-made result keeps these defaults; see is_registered_launch)
    script: str = ""         # the worker script's absolute path
    sha256: str = ""         # the sha256 of the script's content when the launch began
    ended: float = 0.0       # time.time() when the launch ended
    nproc: int = 0           # processes per node
    nnodes: int = 0          # (simulated) nodes
    args: list[str] = field(default_factory=list)  # the worker script's arguments
    launcher: str = ""       # "ddp_helpers.launch.torchrun" for a launch of this series' launcher
    ok: bool = False         # every rank exited with code 0

    def provenance(self) -> dict[str, object]:
        """The launch's record, as written to ``.launch.json``."""
        return {"script": self.script, "script_name": Path(self.script).name if self.script else "",
                "sha256": self.sha256, "started": self.started, "ended": self.ended, "nproc": self.nproc,
                "nnodes": self.nnodes, "args": list(self.args), "ok": self.ok}


def _finish(result: LaunchResult, ok: bool, cwd: str | os.PathLike | None) -> None:
    """Close the launch's record: its end, its outcome, the registry and the provenance files."""
    if not result.ended:
        result.ended = time.time()
    result.ok = ok
    register(result)
    for target in output_targets(Path(result.script), result.args, Path(cwd or os.getcwd()), result.started):
        write_provenance(target, result.provenance())


def _launch_for_tests(script: str | os.PathLike, nproc: int = 2, stdout: Mapping[int, list[str]] | None = None, *,
                      args: Sequence[Arg] = (), nnodes: int = 1, torchrun_args: Sequence[str] = (),
                      started: float | None = None, ended: float | None = None, seconds: float = 1.0,
                      stderr: Mapping[int, list[str]] | None = None, ok: bool = True,
                      outputs: bool = False, cwd: str | os.PathLike | None = None) -> LaunchResult:
    """FOR TESTS ONLY: a registered LaunchResult with the provenance ``torchrun`` would record for ``script``
    (its path and current sha256), without running anything. ``outputs=True`` also writes the provenance
    files into the run's output as a real launch does (see :func:`output_targets`). Never used by the series."""
    path = Path(script).resolve()
    script_args = _check_arg_list("args", list(args))
    now = time.time()
    started = now - seconds if started is None else started
    result = LaunchResult(command=LaunchPlan.make(script, nproc, nnodes, list(torchrun_args), script_args).shown,
                          stdout={int(k): list(v) for k, v in (stdout or {}).items()},
                          stderr={int(k): list(v) for k, v in (stderr or {}).items()}, seconds=seconds,
                          started=started, script=str(path), sha256=file_sha256(path),
                          ended=started + seconds if ended is None else ended, nproc=nproc, nnodes=nnodes,
                          args=script_args, launcher=LAUNCHER, ok=ok)
    register(result)
    if outputs:
        for target in output_targets(path, script_args, Path(cwd or os.getcwd()), 0.0):
            write_provenance(target, result.provenance())
    return result


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _script_part(script: str | os.PathLike, script_args: Sequence[str]) -> list[str]:
    """The script and its arguments; "--" stops torchrun from reading a worker's "--n" or
    "--max" as an abbreviation of its own --nnodes or --max-restarts."""
    return ["--", str(script), *script_args] if script_args else [str(script)]


# The program torchrun is: the printed "torchrun" runs as this Python's torch.distributed.run
# (the same entry point; it also works where the console script is not on PATH).
_TORCHRUN = (sys.executable, "-m", "torch.distributed.run")
# The flags the launcher adds for itself (LaunchPlan.own) are left out of the printed command:
# --tee=3 copies the workers' output to the agent's, where the launcher reads it with torchrun's
# rank prefixes; simulated nodes bind their agents to loopback and share a rendezvous id.
_PORT_SHOWN = "<PORT>"


@dataclass(frozen=True)
class LaunchPlan:
    """A launch as data: the command line every agent runs, and the printed command derived from it.

    ``argv()`` is what runs (each simulated node runs the same line); ``shown`` is that line read
    back by :func:`shown_command`: ``torchrun`` for the program, the launcher's own flags (``own``)
    left out, the rendezvous port as <PORT>, and the variables the launcher sets in front.
    """

    flags: tuple[str, ...]        # torchrun's flags, printed
    script: tuple[str, ...]       # the worker script and its arguments
    own: tuple[str, ...]          # flags for the launcher itself, not printed
    port: int | None = None       # the rendezvous port of simulated nodes (None: --standalone)
    shown_env: tuple[tuple[str, str], ...] = ()

    @classmethod
    def make(cls, script: str | os.PathLike, nproc: int, nnodes: int, torchrun_args: Sequence[str] = (),
             script_args: Sequence[str] = (), shown_env: Mapping[str, str] | None = None,
             port: int | None = None) -> LaunchPlan:
        if nnodes == 1:
            flags, own, port = ["--standalone"], ("--tee=3",), None
        else:
            port = free_port() if port is None else port
            # No --node-rank: the c10d rendezvous numbers the agents itself and torchrun ignores
            # the flag for it (torch/distributed/run.py, config_from_args: only "static" reads it).
            flags = [f"--nnodes={nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}"]
            own = ("--tee=3", "--local-addr=127.0.0.1", f"--rdzv-id=nb{os.getpid()}")
        flags += [f"--nproc-per-node={nproc}", *torchrun_args]
        return cls(tuple(flags), tuple(_script_part(script, script_args)), own, port,
                   tuple((shown_env or {}).items()))

    def argv(self) -> list[str]:
        return [*_TORCHRUN, *self.own, *self.flags, *self.script]

    @property
    def shown(self) -> str:
        return shown_command(self.argv(), self.own, self.port, dict(self.shown_env))


def shown_command(argv: Sequence[str], own: Sequence[str] = (), port: int | None = None,
                  shown_env: Mapping[str, str] | None = None) -> str:
    """A torchrun command line as a learner would type it: ``torchrun`` for the program, without
    the flags in ``own``, the rendezvous port as <PORT>, the variables in ``shown_env`` in front."""
    argv = list(argv)
    if tuple(argv[:len(_TORCHRUN)]) != _TORCHRUN:
        raise ValueError(f"not a torchrun command line: {argv[:3]!r}")
    rest = argv[len(_TORCHRUN):]
    for flag in own:  # the launcher's flags come first, before torchrun's own and the script
        rest.remove(flag)
    if port is not None:
        rest = [f"--rdzv-endpoint=127.0.0.1:{_PORT_SHOWN}" if a == f"--rdzv-endpoint=127.0.0.1:{port}" else a
                for a in rest]
    parts = [f"{k}={v}" for k, v in (shown_env or {}).items()] + ["torchrun", *rest]
    return " ".join(p if _PORT_SHOWN in p else shlex.quote(p) for p in parts)  # <PORT>: a placeholder


def loopback_interface() -> str | None:
    """The name of the network interface that holds 127.0.0.1 (``lo`` on Linux, ``lo0`` on macOS), or None.
    The launcher gives it to gloo (GLOO_SOCKET_IFNAME): every run of this machine stays on loopback."""
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addresses):
            return name
    return None


def _check_arg_list(name: str, seq: Sequence[Arg]) -> list[str]:
    """The list as strings, after checking every item is a str, number or path."""
    example = "['--epochs', '3']" if name == "args" else "['--max-restarts=1']"
    if isinstance(seq, (str, bytes)) or not isinstance(seq, (list, tuple)):
        raise TypeError(f"{name} must be a list of strings, e.g. {example}, got {seq!r}")
    bad = [a for a in seq if not isinstance(a, Arg) or isinstance(a, bool)]
    if bad:
        raise TypeError(f"{name} must be a list of strings (numbers and paths are converted), "
                        f"e.g. {example}; {bad[0]!r} is a {type(bad[0]).__name__}")
    return [os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in seq]


def _check_torchrun_flags(flags: list[str]) -> argparse.Namespace:
    """Parse the flags with torchrun's own parser: a rejected flag fails here, before
    anything starts, with torchrun's message. Returns the parsed namespace."""
    from torch.distributed.run import get_args_parser

    for flag in flags:
        if flag.split("=")[0] in ("--nproc-per-node", "--nproc_per_node", "--nnodes",
                                  "--standalone", "--node-rank", "--node_rank"):
            raise ValueError(f"pass {flag!r} through the nproc/nnodes parameters, not torchrun_args")
    parser = get_args_parser()

    def rejected(message: str) -> NoReturn:
        raise ValueError(f"torchrun rejected torchrun_args={flags!r}: {message}. "
                         "See `torchrun --help` for its flags.")

    parser.error = rejected  # argparse reports every bad flag through error()
    return parser.parse_args([*flags, "worker.py"])


def _validate(script: str | os.PathLike, nproc: int, nnodes: int, timeout: float, args: Sequence[Arg],
              torchrun_args: Sequence[Arg], env: Mapping[str, str] | None, live: str,
              ) -> tuple[Path, list[str], list[str], argparse.Namespace, str]:
    """Check every argument before anything is printed or started.

    Returns (script path, worker args, torchrun flags, parsed torchrun flags, live mode).
    """
    if not isinstance(script, (str, os.PathLike)):
        raise TypeError(f"script must be the path of a worker script (str or Path), got {script!r}")
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise ValueError(f"nproc must be an int >= 1 (processes per node), got {nproc!r}")
    if not isinstance(nnodes, int) or isinstance(nnodes, bool) or nnodes < 1:
        raise ValueError(f"nnodes must be an int >= 1 (simulated nodes), got {nnodes!r}")
    if not (isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    path = Path(script)
    if path.is_dir():
        raise IsADirectoryError(f"worker script {str(script)!r} is a directory: give the path "
                                "of the .py file to run")
    if not path.is_file():
        raise FileNotFoundError(
            f"worker script {str(script)!r} not found (cwd: {Path.cwd().name}/). "
            "Run the %%writefile cell that creates it first."
        )
    script_args = _check_arg_list("args", args)
    flags = _check_arg_list("torchrun_args", torchrun_args)
    parsed = _check_torchrun_flags(flags)
    if env is not None and (not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
        raise TypeError(f"env must be a dict of str to str, e.g. {{'EPOCHS': '3'}}, got {env!r}")
    return path, script_args, flags, parsed, _live_mode(live)


def _with_parent_death_signal(argv: list[str]) -> list[str]:
    """``argv`` run so that Linux SIGTERMs the agent if the process that started it dies (a killed
    notebook kernel): util-linux's ``setpriv --pdeathsig`` sets PR_SET_PDEATHSIG and then execs the
    agent, which on SIGTERM stops its workers. It is set in the new process, not through Popen's
    preexec_fn, which Python documents as unsafe in a process with threads (a kernel has several).
    Without setpriv (not Linux, or util-linux missing) the agent runs as it is."""
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    return [setpriv, "--pdeathsig", "TERM", "--", *argv] if setpriv else list(argv)


def _pump(stream: IO[str], tag: str, q: queue.Queue) -> None:
    for line in iter(stream.readline, ""):
        q.put((tag, line))
    q.put((tag, None))


def torchrun(
    script: str | os.PathLike,
    nproc: int = 2,
    *,
    args: Sequence[Arg] = (),
    env: Mapping[str, str] | None = None,
    torchrun_args: Sequence[Arg] = (),
    nnodes: int = 1,
    timeout: float = 120,
    live: LiveMode = "auto",
    summary: bool = True,
    cwd: str | os.PathLike | None = None,
) -> LaunchResult:
    """Run ``script`` under torchrun with ``nproc`` processes per node.

    args           arguments for the worker script
    env            extra environment variables for every rank
    torchrun_args  extra torchrun flags, e.g. ["--max-restarts=1"]; checked with
                   torchrun's own parser before anything starts. With restarts
                   (--max-restarts > 0) the launch adds
                   TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (a fresh rendezvous store per
                   attempt, pytorch/pytorch#135712) and shows it in the printed
                   command, unless env (or this process's environment) sets it;
                   env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"} shows the bug.
    nnodes         simulated nodes on this machine (one torchrun agent each,
                   joined through a c10d rendezvous on 127.0.0.1)
    timeout        seconds before every process is terminated (LaunchTimeout)
    live           "auto" (widget in Jupyter, stdout elsewhere), "widget",
                   "stdout" or "quiet"; env DDP_HELPERS_LIVE overrides "auto"
    summary        print the rank-ordered stdout summary at the end
    cwd            the working folder of the agents and ranks (default: this process's);
                   a relative ``script`` is still found from this process's folder

    Returns a LaunchResult; raises WorkerFailed naming the failing rank. The stop button
    (KeyboardInterrupt) terminates every rank, then raises KeyboardInterrupt saying so.
    """
    __tracebackhide__ = True  # tracebacks show the caller's cell and the error, not this frame
    install_traceback_filter((LaunchError, LaunchStopped))
    path, script_args, torchrun_args, parsed, live_mode = _validate(
        script, nproc, nnodes, timeout, args, torchrun_args, env, live)
    if cwd is not None and not Path(cwd).is_dir():
        raise NotADirectoryError(f"cwd {str(cwd)!r} is not a folder")
    script = path.resolve() if cwd is not None else script  # the ranks start in cwd
    env = dict(env or {})
    caller_env = dict(env)  # what the caller asked for, for the launch record
    if parsed.max_restarts > 0 and SHARE_STORE_SWITCH not in env and SHARE_STORE_SWITCH not in os.environ:
        env[SHARE_STORE_SWITCH] = "1"  # a fresh store per attempt, see SHARE_STORE_SWITCH
    shown_env = {SHARE_STORE_SWITCH: env[SHARE_STORE_SWITCH]} if SHARE_STORE_SWITCH in env else {}
    plan = LaunchPlan.make(script, nproc, nnodes, torchrun_args, script_args, shown_env)
    print(f"$ {plan.shown}", flush=True)
    sha256 = file_sha256(path)  # the content that runs: read before any rank starts
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="ddp_failures_") as failures_dir:  # removed on every path
        try:
            return _run(plan, path, nproc, nnodes, script_args, env, caller_env, torchrun_args, timeout,
                        live_mode, summary, failures_dir, started, cwd, sha256)
        except LaunchError as err:
            err.started = started
            raise


def _run(plan: LaunchPlan, path: Path, nproc: int, nnodes: int, script_args: list[str], env: dict[str, str],
         caller_env: dict[str, str], torchrun_args: list[str], timeout: float, live_mode: str, summary: bool,
         failures_dir: str, started: float, cwd: str | os.PathLike | None = None, sha256: str = "") -> LaunchResult:
    """Start the plan's agents, stream their output, and return or raise as torchrun() says."""
    __tracebackhide__ = True
    shown = plan.shown
    child_env = {**os.environ, **env}
    child_env[FAILURES_ENV] = failures_dir
    # torchrun's own log folder (its --log-dir, as PET_LOG_DIR) inside the launch's temporary folder: an agent
    # killed after its caller died cannot remove a folder of its own; this one goes with the launch's
    child_env.setdefault("PET_LOG_DIR", os.path.join(failures_dir, "torchelastic"))
    child_env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = PREFIX_TEMPLATE
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    child_env.setdefault("PYTHON_COLORS", "0")  # parsed text: ipykernel sets FORCE_COLOR, 3.13 would colour tracebacks
    child_env.pop("DDP_HELPERS_LIVE", None)
    if nnodes > 1:  # simulated nodes share this machine's GPUs: NCCL would refuse them
        child_env.setdefault("DDP_BACKEND", "gloo")
    loopback = loopback_interface()
    if loopback:
        child_env.setdefault("GLOO_SOCKET_IFNAME", loopback)  # keep gloo on loopback

    commands = [_with_parent_death_signal(plan.argv()) for _ in range(nnodes)]

    write_live = _live_sink(live_mode)
    q: queue.Queue = queue.Queue()
    procs = []
    watchdog = None
    result = LaunchResult(command=shown, started=started, script=str(path.resolve()), sha256=sha256, nproc=nproc,
                          nnodes=nnodes, args=list(script_args), launcher=LAUNCHER)
    agent_log: list[str] = []
    start = time.monotonic()
    try:
        for cmd in commands:
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=child_env, start_new_session=True, bufsize=1, cwd=cwd)
            procs.append(p)
            for tag, stream in (("out", p.stdout), ("err", p.stderr)):
                threading.Thread(target=_pump, args=(stream, tag, q), daemon=True).start()
        watchdog = start_watchdog(procs, remove=failures_dir)  # removes it too if this process dies
        open_streams, rank_lines = 2 * len(procs), RankLines()
        while open_streams:
            remaining = timeout - (time.monotonic() - start)
            if remaining <= 0:
                raise LaunchTimeout(
                    f"run exceeded timeout={timeout}s; all {nproc * nnodes} ranks were terminated. "
                    "Look for a rank waiting in a collective the others never reach, "
                    "or raise timeout= for longer runs.")
            try:
                tag, line = q.get(timeout=min(remaining, 0.2))
            except queue.Empty:
                continue
            if line is None:
                open_streams -= 1
                continue
            whole = rank_lines.feed(tag, line)
            if whole is None:
                if not is_omp_notice(line):
                    write_live(line)
                agent_log.append(line)
                continue
            bucket = result.stdout if tag == "out" else result.stderr
            for rank, text in whole:
                write_live(f"[rank{rank}]:{text}\n")
                bucket.setdefault(rank, []).append(text)
        for tag, rank, text in rank_lines.rest():
            (result.stdout if tag == "out" else result.stderr).setdefault(rank, []).append(text)
        for p in procs:  # their output has ended; a process that still does not exit is a timeout too
            try:
                p.wait(timeout=max(1.0, timeout - (time.monotonic() - start)))
            except subprocess.TimeoutExpired:
                raise LaunchTimeout(
                    f"run exceeded timeout={timeout}s after its output ended; all {nproc * nnodes} ranks "
                    "were terminated. Raise timeout= for longer runs.") from None
    except KeyboardInterrupt:
        terminate(procs)
        _finish(result, False, cwd)
        # a new exception, so the traceback ends here and not in queue.get's wait
        raise LaunchStopped(f"stopped: all {nproc * nnodes} ranks terminated") from None
    except BaseException as err:
        terminate(procs)
        _finish(result, False, cwd)
        if isinstance(err, LaunchError):
            err.result = result
        raise
    finally:
        stop_watchdog(watchdog)
        result.seconds = time.monotonic() - start
        result.agent_log = agent_log
    codes = [p.returncode for p in procs]
    _finish(result, not any(codes), cwd)
    record_launch(path, nproc, nnodes, script_args, caller_env, torchrun_args, timeout, codes)
    if any(codes):
        failure = _failure(result, "".join(agent_log), shown, codes, failures_dir)
        failure.result = result
        raise failure
    if summary:
        print_summary(result)
    return result


def _first_failure(agent_log: str, failures_dir: str) -> tuple[int | None, dict]:
    """(rank, record) of the rank that failed first: by the runtime's ns failure records
    (the record then has its traceback), else by torchrun's report (empty record)."""
    records = []
    for path in Path(failures_dir).glob("attempt*_rank*.json"):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    if records:
        first = min(records, key=lambda r: (-r["attempt"], r["time_ns"]))  # last attempt
        return first["rank"], first
    m = _ROOT_CAUSE_RE.search(agent_log)
    return (int(m.group(1)) if m else None), {}


def _failure(result: LaunchResult, agent_log: str, shown: str, codes: list[int], failures_dir: str) -> LaunchError:
    exitcodes = {int(r): int(c) for r, c in _FAILURE_RE.findall(agent_log)}
    rank, record = _first_failure(agent_log, failures_dir)
    if rank is None:  # no report (agent killed, bad flag): fall back to what we know
        lines = agent_log.strip().splitlines()
        usage_error = next((line for line in lines if re.match(r"^\S+: error: ", line)), None)
        if usage_error and not result.stdout and not result.stderr:  # argparse: no rank ran
            return LaunchError(f"torchrun rejected its arguments, so no rank ran: {usage_error}\n"
                               f"--- command ---\n{shown}")
        return WorkerFailed(None, max(codes, key=abs),
                            "\n".join(lines[-_TRACEBACK_TAIL_LINES:]), shown, result=result)
    if record.get("traceback"):
        err = record["traceback"].rstrip("\n").splitlines()
    else:
        err = [_INNER_PREFIX_RE.sub("", s) for s in result.stderr.get(rank, [])]
    err = [_relative_paths(line) for line in err]
    tail = "\n".join(err[-_TRACEBACK_TAIL_LINES:]) or "(rank wrote nothing to stderr)"
    others = {r: c for r, c in exitcodes.items() if r != rank}
    return WorkerFailed(rank, exitcodes.get(rank), tail, shown, others, result)


def _relative_paths(line: str) -> str:
    """Shorten this machine's paths so a traceback reads the same everywhere."""
    line = line.replace(str(Path.cwd()) + os.sep, "").replace(_PACKAGE_PARENT, "")
    return re.sub(r"[^\s\"']*/site-packages/", "<site-packages>/", line)


def print_summary(result: LaunchResult) -> None:
    """Print each rank's stdout, rank 0 first: deterministic whatever the interleaving."""
    for rank in sorted(result.stdout):
        for text in result.stdout[rank]:
            print(f"[rank {rank}] {text}")
