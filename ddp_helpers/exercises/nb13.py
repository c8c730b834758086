"""Checks of notebook 13, pipeline parallelism."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ddp_helpers.exercises.core import (
    Answer,
    Exercise,
    call,
    check,
    close,
    integer,
    integer_list,
    number_list,
    run_json,
)
from ddp_helpers.exercises.provenance import lesson_run


def _bubble(stages: int, microbatches: int, per_rank: int = 1) -> float:
    """The idle fraction of a schedule with ``per_rank`` stages per rank: (p - 1) / (v m + p - 1)."""
    return (stages - 1) / (per_rank * microbatches + stages - 1)


def _smallest(stages: int, per_rank: int, below: float) -> int:
    return next(m for m in range(1, 10_000) if _bubble(stages, m, per_rank) < below)


@check
def check_13_1(*, gpipe_m: Answer[int], interleaved_m: Answer[int]) -> None:
    ex = Exercise("13.1")
    ex.given(gpipe_m=gpipe_m, interleaved_m=interleaved_m)
    gpipe, interleaved = integer(gpipe_m), integer(interleaved_m)
    ex.require(gpipe is not None and interleaved is not None, "an answer is not a whole number of microbatches.",
               "a number of microbatches is a positive integer.")
    ex.require(gpipe == _smallest(4, 1, 0.1),
               "`gpipe_m` is not the smallest number of microbatches with a GPipe bubble under 10% on 4 stages.",
               "solve (p - 1) / (m + p - 1) < 0.1 for m; 'under' is strict, so check the boundary.")
    ex.require(interleaved == _smallest(4, 2, 0.1),
               "`interleaved_m` is not the smallest number for 2 stages per rank.",
               "with v stages per rank every idle slot is v times shorter: (p - 1) / (v m + p - 1).")
    ex.correct()


def _live_1f1b(stages: int, microbatches: int) -> list[int]:
    """The most microbatches stage s holds under 1F1B: its warm-up forwards, p - s (at most m)."""
    return [min(microbatches, stages - s) for s in range(stages)]


_GRID = [(2, 2), (2, 5), (3, 3), (4, 8), (4, 4), (5, 9), (8, 16), (8, 8)]


@check
def check_13_2(*, live_1f1b: Answer[Callable[[int, int], Sequence[int]]]) -> None:
    ex = Exercise("13.2")
    ex.given(live_1f1b=live_1f1b)
    ex.function("live_1f1b", live_1f1b)
    for stages, m in _GRID:
        got = integer_list(call(live_1f1b, stages, m))
        ex.require(got is not None and len(got) == stages,
                   f"`live_1f1b({stages}, {m})` is not one whole number per stage.",
                   "return a list with one entry per stage, stage 0 first.")
        ex.require(got == _live_1f1b(stages, m), f"`live_1f1b({stages}, {m})` is wrong.",
                   "count the forwards stage s runs before its first backward (its warm-up); after it, "
                   "every backward frees a microbatch before the next forward: section 3's 1F1B timeline.")
    ex.correct()


def _idle_by_rank(timeline: Sequence[Sequence[dict]]) -> list[float]:
    every = [e for events in timeline for e in events]
    span = max(e["end"] for e in every) - min(e["start"] for e in every)
    return [1 - sum(e["end"] - e["start"] for e in events) / span for events in timeline]


SCHEDULES_RUN = Path("runs/13_pipeline/schedules/results.json")
SCHEDULES_LAUNCH = "the launch of scripts/13_schedules.py (section 2)"


def _gpipe_timeline(ex: Exercise) -> list[list[dict]]:
    """The GPipe step's events per rank, as the lesson's launch recorded them (read here, not passed by the cell)."""
    runs = run_json(ex, SCHEDULES_RUN, SCHEDULES_LAUNCH)
    lesson_run(ex, SCHEDULES_RUN.parent, "13_schedules.py", SCHEDULES_LAUNCH, nproc=2)
    try:
        timeline = [list(r["events"]) for r in runs["runs"]["GPipe"]]
        _idle_by_rank(timeline)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        ex.fail(f"{SCHEDULES_RUN} holds no GPipe timeline.", f"run {SCHEDULES_LAUNCH} again, then this check.")
    return timeline


@check
def check_13_3(*, idle_by_rank: Answer[Sequence[float]]) -> None:
    ex = Exercise("13.3")
    ex.given(idle_by_rank=idle_by_rank)
    truth = _idle_by_rank(_gpipe_timeline(ex))
    values = number_list(idle_by_rank)
    ex.require(values is not None and len(values) == len(truth), "`idle_by_rank` is not one number per rank.",
               "a list with one fraction per rank, rank 0 first.")
    ex.require(all(0 <= v <= 1 for v in values), "a fraction in `idle_by_rank` is outside 0..1.",
               "idle time divided by the step's span.")
    ex.require(all(close(v, t, rel_tol=1e-6) for v, t in zip(values, truth, strict=True)),
               "`idle_by_rank` is not each rank's idle fraction of this step (relative tolerance 1e-6).",
               "the span runs from the first call's start on any rank to the last call's end on any rank; "
               "a rank is busy during its own calls (start to end) and idle the rest of the span.")
    ex.correct()
