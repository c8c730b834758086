"""Collectives compared across ranks, and how a run that did not end cleanly ended.

The n-th collective of every rank must be the same call: :func:`first_divergence` finds the first
one that is not, or that only some ranks reached. :func:`how_it_ended` tells a hang, the script's own
crash, and gloo's abort at exit after the work was done (pytorch/pytorch#190489) apart, from what
the ranks recorded, not from their exit codes alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ddp_helpers.doctor.checks import Evidence, _ranks
from ddp_helpers.doctor.records import Collective, RankRecord
from ddp_helpers.doctor.report import Finding, Outcome

if TYPE_CHECKING:
    from ddp_helpers.launch import WorkerFailed

ABORT_CODE = -6  # SIGABRT: std::terminate in a gloo thread at interpreter exit


def first_divergence(ev: Evidence) -> list[Finding]:
    calls = {rank: r.collectives() for rank, r in sorted(ev.records.items())}
    for k in range(max((len(c) for c in calls.values()), default=0)):
        at_k = {rank: c[k] for rank, c in calls.items() if len(c) > k}
        missing = [rank for rank, c in calls.items() if len(c) <= k]
        if len({c.signature() for c in at_k.values()}) > 1:
            return [_mismatch(ev, k, at_k)]
        if missing:
            return _never_called(ev, k, at_k, missing)
    return []


def _mismatch(ev: Evidence, k: int, at_k: dict[int, Collective]) -> Finding:
    said = "; ".join(f"rank {rank} called {c.describe()} at line {c.line}" for rank, c in at_k.items())
    for c in at_k.values():
        branch = ev.script.rank_branch(c.lines)
        if branch is not None:
            return ev.finding("rank-conditional-collective", c.line, (
                f"collective #{k + 1} differs between the ranks: {said}; line {c.line} is inside the `if` on "
                f"the rank at line {branch}"))
    first = next(iter(at_k.values()))
    return ev.finding("collective-mismatch", first.line, f"collective #{k + 1} differs between the ranks: {said}")


def _never_called(ev: Evidence, k: int, at_k: dict[int, Collective], missing: list[int]) -> list[Finding]:
    if any(ev.records[r].of("crash") for r in missing):
        return []  # that rank stopped with its own error first: see script-failed
    rank, call = next(iter(at_k.items()))
    branch = ev.script.rank_branch(call.lines)
    inside = f" (inside the `if` on the rank at line {branch})" if branch is not None else ""
    waited = "" if call.done else " and waited for the others"
    where = "; ".join(f"rank {r} {_whereabouts(ev.records[r])}" for r in missing)
    return [ev.finding("rank-conditional-collective", call.line, (
        f"{_ranks(sorted(at_k))} entered {call.describe()} at line {call.line}{inside}{waited}; "
        f"{_ranks(missing)} never called it ({where})"))]


def _whereabouts(record: RankRecord) -> str:
    destroy = record.first("destroy")
    if destroy is not None:
        return f"reached destroy_process_group at line {destroy.get('line')}"
    if record.finished:
        return "reached the end of the script"
    pending = [c for c in record.collectives() if not c.done]
    if pending:
        return f"waited in {pending[-1].describe()} at line {pending[-1].line}"
    stopped = record.last("stopped")
    if stopped is not None and stopped.get("line") is not None:
        return f"was at line {stopped['line']} when the timeout stopped it"
    lines = [e["line"] for e in record.events if e.get("line") is not None]
    return f"was last seen at line {lines[-1]}" if lines else "recorded nothing"


@dataclass
class Ending:
    """How the run ended, as the doctor establishes it."""

    outcome: Outcome
    findings: list[Finding] = field(default_factory=list)
    reason: str | None = None  # set when the script could not be run at all


def how_it_ended(ev: Evidence, failure: Exception | None, timeout: float) -> Ending:
    from ddp_helpers.launch import LaunchTimeout, WorkerFailed

    if failure is None:
        return Ending("completed")
    if not ev.initialised:
        return Ending("not-run", reason=_before_init(ev, failure, timeout))
    crashed = any(r.of("crash") for r in ev.records.values())
    if isinstance(failure, LaunchTimeout) and not crashed:  # a crashed rank that then hung: its error counts
        return Ending("timed-out", [_hang(ev, timeout)])
    codes = _exit_codes(failure) if isinstance(failure, WorkerFailed) else {}
    if codes and ABORT_CODE in codes.values() and all(ev.records.get(r) and ev.records[r].finished for r in codes):
        return Ending("completed", [_exit_abort(ev, [r for r, c in codes.items() if c == ABORT_CODE])])
    return Ending("crashed", [_crash(ev, failure)])


def _exit_codes(failure: WorkerFailed) -> dict[int, int]:
    codes = dict(failure.other_failures)
    if failure.rank is not None and failure.exitcode is not None:
        codes[failure.rank] = failure.exitcode
    return codes


def _before_init(ev: Evidence, failure: Exception, timeout: float) -> str:
    crash = next((c for r in ev.records.values() for c in r.of("crash")), None)
    if crash is not None:
        return (f"it stopped with {crash['error']} at line {crash.get('line')} before init_process_group: "
                f"{crash.get('message', '')}")
    from ddp_helpers.launch import LaunchTimeout, WorkerFailed

    if isinstance(failure, LaunchTimeout):
        return f"it did not reach init_process_group within the {timeout:g} s timeout"
    tail = failure.traceback_tail.strip().splitlines() if isinstance(failure, WorkerFailed) else [str(failure)]
    return f"it stopped before init_process_group: {tail[-1] if tail else failure}"


def _hang(ev: Evidence, timeout: float) -> Finding:
    where = "; ".join(f"rank {rank} {_whereabouts(r)}" for rank, r in sorted(ev.records.items()))
    pending = [c for r in ev.records.values() for c in r.collectives() if not c.done]
    return ev.finding("hang", pending[0].line if pending else None,
                      f"the run did not end within the {timeout:g} s timeout: {where}")


def _exit_abort(ev: Evidence, ranks: list[int]) -> Finding:
    record = ev.records[ranks[0]]
    destroy = record.first("destroy") or {}
    returned = "destroy_process_group returned and " if record.first("destroyed") else ""
    held = (f"; {destroy['ddp_alive']} DDP model(s) still existed when destroy_process_group ran"
            if destroy.get("ddp_alive") else "")
    return ev.finding("gloo-exit-abort", destroy.get("line"), (
        f"{_ranks(ranks)} finished the script ({returned}the doctor's exit handler ran), then aborted with "
        f"exit code {ABORT_CODE}{held}"))


def _crash(ev: Evidence, failure: Exception) -> Finding:
    from ddp_helpers.launch import WorkerFailed

    crashes = sorted(((c["t"], rank, c) for rank, r in ev.records.items() for c in r.of("crash")),
                     key=lambda item: item[:2])
    if crashes:
        _, rank, crash = crashes[0]
        return ev.finding("script-failed", crash.get("line"),
                          f"rank {rank} stopped with {crash['error']}: {_first_line(crash.get('message', ''))}")
    rank = failure.rank if isinstance(failure, WorkerFailed) else None
    tail = failure.traceback_tail.strip().splitlines() if isinstance(failure, WorkerFailed) else [str(failure)]
    return ev.finding("script-failed", None, f"rank {rank} stopped: {tail[-1] if tail else 'no error text'}")


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else "(no message)"
