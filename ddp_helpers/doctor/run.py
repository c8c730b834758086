"""Run the learner's script under torchrun with the recorder, and turn what it saw into a report."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from ddp_helpers.doctor import checks
from ddp_helpers.doctor.collectives import first_divergence, how_it_ended
from ddp_helpers.doctor.recorder import PG_TIMEOUT_ENV, RECORD_ENV, SCRIPT_ENV
from ddp_helpers.doctor.records import read_records
from ddp_helpers.doctor.report import Finding, Report
from ddp_helpers.doctor.static import Script

DEFAULT_NPROC = 2
DEFAULT_TIMEOUT_S = 120.0
_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent.parent)
_CHECKS = (checks.data_not_sharded, checks.sampler_epoch_not_set, checks.model_not_wrapped, checks.replicas_diverge,
           checks.save_on_every_rank, checks.load_without_barrier, checks.unsafe_load, checks.eval_duplicates,
           checks.unreduced_metric, checks.no_destroy, checks.no_process_group, checks.hardcoded_device,
           checks.group_held_at_exit, first_divergence)


def validate(nproc: int, timeout: float, args: Sequence[str]) -> list[str]:
    """Refuse bad arguments before anything starts; returns the script's arguments as strings."""
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise ValueError(f"nproc must be an int >= 1, got {nproc!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if isinstance(args, (str, bytes)) or not all(isinstance(a, (str, int, float)) for a in args):
        raise TypeError(f"args must be a list of strings, e.g. ['--epochs', '1'], got {args!r}")
    return [str(a) for a in args]


def diagnose(script: str | os.PathLike, args: Sequence[str] = (), nproc: int = DEFAULT_NPROC,
             timeout: float = DEFAULT_TIMEOUT_S) -> Report:
    """Run ``script`` at ``nproc`` ranks on CPU with gloo, recorded from outside, and report what went wrong."""
    return examine(script, args, nproc, timeout)[0]


def examine(script: str | os.PathLike, args: Sequence[str] = (), nproc: int = DEFAULT_NPROC,
            timeout: float = DEFAULT_TIMEOUT_S) -> tuple[Report, checks.Evidence | None]:
    """:func:`diagnose`'s report, and what the ranks recorded (None when the script could not be run): the
    exercise checks judge a conversion by it (each rank's batches, steps and saves)."""
    script_args = validate(nproc, timeout, args)
    name, path = str(script), Path(script)
    if not path.is_file():
        return Report(name, nproc, "not-run", reason=f"{name} is not a file (check the path)"), None
    try:
        source = Script(path)
    except SyntaxError as err:
        return Report(name, nproc, "not-run", reason=f"syntax error at line {err.lineno}: {err.msg}"), None
    with tempfile.TemporaryDirectory(prefix="ddp_doctor_") as work:
        record_dir, run_dir = Path(work, "record"), Path(work, "run")
        record_dir.mkdir()
        run_dir.mkdir()
        failure = _launch(path.resolve(), script_args, nproc, timeout, record_dir, run_dir)
        evidence = checks.Evidence(read_records(record_dir), source, name, nproc, run_dir)
        return _assess(evidence, failure, timeout), evidence


def _worker_env(script: Path, record_dir: Path, timeout: float) -> dict[str, str]:
    from ddp_helpers.walk_record import HOOK_DIR

    path = [str(HOOK_DIR), _PACKAGE_PARENT, os.environ.get("PYTHONPATH", "")]
    return {"CUDA_VISIBLE_DEVICES": "", "DDP_BACKEND": "gloo", RECORD_ENV: str(record_dir), SCRIPT_ENV: str(script),
            PG_TIMEOUT_ENV: str(max(5.0, timeout / 4)),  # a hang ends inside the rank, well before the timeout
            "PYTHONPATH": os.pathsep.join(p for p in path if p)}


def _launch(script: Path, args: list[str], nproc: int, timeout: float, record_dir: Path,
            run_dir: Path) -> Exception | None:
    """Run the script; the launch's failure (a rank's error, the timeout), or None."""
    from ddp_helpers.launch import RECORD_ENV as LAUNCHES_ENV
    from ddp_helpers.launch import LaunchError, torchrun

    env = _worker_env(script, record_dir, timeout)
    with _without(LAUNCHES_ENV), contextlib.redirect_stdout(io.StringIO()):  # the command names temp folders
        try:
            torchrun(script, nproc, args=args, env=env, timeout=timeout, live="quiet", summary=False, cwd=run_dir)
        except LaunchError as err:
            return err
    return None


@contextlib.contextmanager
def _without(variable: str) -> Iterator[None]:
    """A doctor run is not a lesson's launch: `make execute` must not record it for the GPU replay."""
    saved = os.environ.pop(variable, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[variable] = saved


def _assess(ev: checks.Evidence, failure: Exception | None, timeout: float) -> Report:
    ending = how_it_ended(ev, failure, timeout)
    if ending.outcome == "not-run":
        return Report(ev.file, ev.nproc, "not-run", [], ending.reason)
    failure_text = getattr(failure, "traceback_tail", "") or ""
    found: list[Finding] = [f for check in _CHECKS for f in check(ev)]
    found += checks.unused_parameters(ev, failure_text)
    if "unused-parameters" in {f.id for f in found}:  # DDP stopped mid-reduction: the divergence follows from it
        found = [f for f in found if f.id != "replicas-diverge"]
    if any(f.id == "gloo-exit-abort" for f in ending.findings):  # the abort came: it is reported, not the risk
        found = [f for f in found if f.id != "gloo-exit-abort"]
    for extra in ending.findings:  # a crash that a finding explains is not reported twice
        if extra.id == "script-failed" and any(f.level == "error" for f in found):
            continue
        if extra.id == "hang" and any(f.id in ("rank-conditional-collective", "collective-mismatch") for f in found):
            continue
        found.append(extra)
    return Report(ev.file, ev.nproc, ending.outcome, found)
