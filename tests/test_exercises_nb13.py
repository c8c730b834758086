"""The checks of notebook 13: each accepts right answers in other forms and refuses wrong ones (copied
values, the checks' own reference, answers off by one) with a hint that does not give the answer.
``RIGHT13`` and ``WRONG13`` have the shape of tests/test_exercises_cases.py's RIGHT and WRONG."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ddp_helpers import exercises
from ddp_helpers.exercises import nb13
from ddp_helpers.launch import _launch_for_tests
from ddp_helpers.pipeline import measured_bubble


def live_1f1b(stages, microbatches):
    return [min(microbatches, stages - s) for s in range(stages)]


def as_tensor(stages, microbatches):
    return torch.tensor([stages - s for s in range(stages)])


def constant(stages, microbatches):   # right for section 5's run only
    return [4, 3, 2, 1]


def one_more(stages, microbatches):
    return [stages - s + 1 for s in range(stages)]


def gpipe_like(stages, microbatches):
    return [microbatches] * stages


def timeline():
    """A 2-rank GPipe timeline (forwards 1 unit, backwards 2): rank 1 starts 1 unit late and, as the last
    stage, runs its backwards first; the step spans 0 .. 13."""
    ranks = []
    for r in range(2):
        evs = [dict(kind="F", stage=r, chunk=i, start=r + 2 * i, end=r + 2 * i + 1) for i in range(2)]
        evs += [dict(kind="B", stage=r, chunk=i, start=8 - 3 * r + 3 * i, end=10 - 3 * r + 3 * i) for i in range(2)]
        ranks.append(evs)
    return ranks


TL = timeline()
IDLE = [7 / 13, 7 / 13]                       # each rank computes 2 x 1 + 2 x 2 = 6 of 13 units
BUSY = [6 / 13, 6 / 13]
OWN_SPAN = [1 - 6 / 13, 1 - 6 / 9]            # rank 1's own calls span 1 .. 10


RIGHT13 = {
    "13.1": [dict(gpipe_m=28, interleaved_m=14), dict(gpipe_m=np.int64(28), interleaved_m=torch.tensor(14)),
             dict(gpipe_m=28.0, interleaved_m=14.0)],
    "13.2": [dict(live_1f1b=live_1f1b), dict(live_1f1b=as_tensor)],
    "13.3": [dict(idle_by_rank=IDLE), dict(idle_by_rank=tuple(np.array(IDLE))),
             dict(idle_by_rank=torch.tensor(IDLE, dtype=torch.float64))],
}
WRONG13 = {
    "13.1": [("27: the boundary", dict(gpipe_m=27, interleaved_m=14)),
             ("interleaved as GPipe", dict(gpipe_m=28, interleaved_m=28)),
             ("halved wrongly", dict(gpipe_m=28, interleaved_m=13)),
             ("a fraction", dict(gpipe_m=27.5, interleaved_m=14)),
             ("a list", dict(gpipe_m=[28], interleaved_m=14))],
    "13.2": [("constant list", dict(live_1f1b=constant)),
             ("one more", dict(live_1f1b=one_more)),
             ("GPipe's", dict(live_1f1b=gpipe_like)),
             ("the reference helper", dict(live_1f1b=nb13._live_1f1b)),
             ("not a function", dict(live_1f1b=[4, 3, 2, 1])),
             ("returns nothing", dict(live_1f1b=lambda stages, microbatches: None))],
    "13.3": [("copy-through: a timeline of its own", dict(idle_by_rank=[0.5, 0.5], timeline=[TL[0][:1], TL[1][:1]])),
             ("busy, not idle", dict(idle_by_rank=BUSY)),
             ("each rank's own span", dict(idle_by_rank=OWN_SPAN)),
             ("the formula", dict(idle_by_rank=[1 / 3, 1 / 3])),
             ("the mean only", dict(idle_by_rank=measured_bubble(TL))),
             ("one rank", dict(idle_by_rank=IDLE[:1]))],
}


@pytest.fixture(autouse=True)
def lesson(monkeypatch, tmp_path):
    """A notebook folder whose section-2 launch recorded the GPipe timeline TL (13.3 reads it there)."""
    run = tmp_path / "runs/13_pipeline/schedules"
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps({"runs": {"GPipe": [{"events": evs} for evs in TL]}}))
    _launch_for_tests(Path("scripts/13_schedules.py"), 2, args=[str(run)], outputs=True)  # the launch's record
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "13_pipeline_parallelism.ipynb"))
    return tmp_path


def test_13_3_without_the_launch_names_it(lesson):
    (lesson / "runs/13_pipeline/schedules/results.json").unlink()
    with pytest.raises(exercises.CheckFailed, match="scripts/13_schedules.py") as info:
        exercises.check_13_3(idle_by_rank=IDLE)
    assert "section 2" in info.value.hint


def test_13_3_reads_the_recorded_timeline_not_a_passed_one(lesson):
    (lesson / "runs/13_pipeline/schedules/results.json").write_text(json.dumps({"runs": {"GPipe": [
        {"events": [dict(kind="F", stage=r, chunk=0, start=0, end=1)]} for r in range(2)]}}))
    with pytest.raises(exercises.CheckFailed):   # right for TL, wrong for the run on disk: every rank busy
        exercises.check_13_3(idle_by_rank=IDLE)
    exercises.check_13_3(idle_by_rank=[0.0, 0.0])


def test_every_check_of_13_has_its_cases():
    ids = [i for i in exercises.exercise_ids() if i.startswith("13.")]
    assert ids == ["13.1", "13.2", "13.3"] and set(RIGHT13) == set(WRONG13) == set(ids)
    assert all(len(RIGHT13[i]) >= 2 and len(WRONG13[i]) >= 3 for i in ids)


def test_the_timeline_fixture_is_what_it_says():
    assert measured_bubble(TL) == pytest.approx(sum(IDLE) / 2)
    assert nb13._idle_by_rank(TL) == pytest.approx(IDLE)


@pytest.mark.parametrize(("exid", "i"), [(e, i) for e, cases in RIGHT13.items() for i in range(len(cases))])
def test_right_answers_pass(exid, i, capsys):
    exercises.CHECKS[exid](**RIGHT13[exid][i])
    out = capsys.readouterr().out
    assert out.endswith(f"Exercise {exid}: correct\n") and out.count("\n") == 1, out


@pytest.mark.parametrize(("exid", "label"), [(e, label) for e, cases in WRONG13.items() for label, _ in cases])
def test_wrong_answers_fail_with_a_hint(exid, label):
    with pytest.raises(exercises.CheckFailed) as info:
        exercises.CHECKS[exid](**dict(WRONG13[exid])[label])
    text = str(info.value)
    assert text.startswith(f"Exercise {exid}: ") and "\nHint: " in text, text
    assert "Traceback" not in text and "def check_" not in text
    for answer in ("28", "14"):   # the hint never gives 13.1's answers
        assert exid != "13.1" or answer not in text


@pytest.mark.parametrize("exid", ["13.1", "13.2", "13.3"])
def test_starter_fails(exid):
    starter = {"13.1": dict(gpipe_m=..., interleaved_m=...), "13.2": dict(live_1f1b=...),
               "13.3": dict(idle_by_rank=...)}[exid]
    with pytest.raises(exercises.CheckFailed, match="still `...`"):
        exercises.CHECKS[exid](**starter)
