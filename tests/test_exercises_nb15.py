"""Notebook 15's checks against wrong answers (copied values, hand-typed results, the lesson's numbers,
off-by-one rules; refused with a hint, never a crash) and right answers in other valid forms (accepted),
as tests/test_exercises_cases.py does for the earlier notebooks. 15.3 reads a fake lesson run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from exercise_calls import refused_text  # tests/ is on sys.path

from ddp_helpers import exercises
from ddp_helpers.experts import MoE, capacity, route, tokens
from ddp_helpers.launch import _launch_for_tests
from ddp_helpers.planner import Layout, ModelSpec, plan

# 15.1, from the library's router (not the check's private reference): 64 tokens, seed 7; router seed 3
LOGITS = tokens(64, 8, seed=7) @ MoE(8, 16, 4, seed=3).router.detach()
CAP = capacity(64, 4, 1, 1.0)
DROPPED = route(LOGITS, 1, CAP).dropped_tokens().tolist()
CHOICE = LOGITS.argmax(dim=1).tolist()
# the wrong rule: each expert keeps its *last* CAP tokens, so the early ones are dropped
EARLY = sorted(t for e in range(4) for t in [i for i, c in enumerate(CHOICE) if c == e][:-CAP or None]
               if CHOICE.count(e) > CAP)

# 15.2, from the planner (the check keeps its own arithmetic)
R16 = plan(ModelSpec.moe(4096, 14336, 64, top_k=2, tokens=4096, param_bytes=2, act_bytes=2),
           Layout(ep=16, capacity_factor=1.25), world_size=16).ranks[0]
EXPERT_BYTES = R16.params - 4096 * 64 * 2
DISPATCH = int(R16.sent("ep", "forward") // 2)
SECTION_3 = 8 * 2 * 4096 * 14336 * 2          # the lesson's example: 8 experts a rank, copied

# 15.3, a fake run of 2 ranks: rank 0 sent 5 rows to itself and 4 to rank 1, rank 1 2 and 6
FLOW = [[5, 4], [2, 6]]
OFF, BUSIEST = [4, 2], 1                        # received: columns 7 and 10

RIGHT = {
    "15.1": [dict(cap=CAP, dropped=DROPPED), dict(cap=np.int64(CAP), dropped=torch.tensor(DROPPED)),
             dict(cap=float(CAP), dropped=tuple(DROPPED))],
    "15.2": [dict(expert_bytes=EXPERT_BYTES, dispatch_sent=DISPATCH),
             dict(expert_bytes=np.int64(EXPERT_BYTES), dispatch_sent=torch.tensor(DISPATCH)),
             dict(expert_bytes=float(EXPERT_BYTES), dispatch_sent=float(DISPATCH))],
    "15.3": [dict(off_rank=OFF, busiest=BUSIEST), dict(off_rank=tuple(OFF), busiest=np.int64(BUSIEST)),
             dict(off_rank=torch.tensor(OFF), busiest=1.0)],
}
WRONG = {
    "15.1": [("copy-through: the answer passed as a reference", dict(cap=CAP, dropped=DROPPED, truth=DROPPED)),
             ("section 1's values, copied", dict(cap=8, dropped=[26, 31])),
             ("capacity rounded down", dict(cap=math.floor(64 / 4) - 1, dropped=DROPPED)),
             ("the early tokens dropped", dict(cap=CAP, dropped=EARLY)),
             ("one missing", dict(cap=CAP, dropped=DROPPED[:-1])),
             ("not in order", dict(cap=CAP, dropped=DROPPED[::-1])),
             ("a string", dict(cap=CAP, dropped=str(DROPPED)))],
    "15.2": [("section 3's example, copied", dict(expert_bytes=SECTION_3, dispatch_sent=DISPATCH)),
             ("dispatch and combine", dict(expert_bytes=EXPERT_BYTES, dispatch_sent=2 * DISPATCH)),
             ("its own experts too", dict(expert_bytes=EXPERT_BYTES, dispatch_sent=DISPATCH * 16 // 15)),
             ("float32", dict(expert_bytes=2 * EXPERT_BYTES, dispatch_sent=DISPATCH)),
             ("capacity not rounded up", dict(expert_bytes=EXPERT_BYTES,
                                              dispatch_sent=int(15 * 4 * (1.25 * 4096 * 2 / 64) * 4096 * 2) - 1)),
             ("a fraction", dict(expert_bytes=EXPERT_BYTES + 0.5, dispatch_sent=DISPATCH))],
    "15.3": [("copy-through: a flow of its own", dict(off_rank=[0, 0], busiest=0, flow=[[1, 0], [0, 1]])),
             ("the notebook's stored run, hand-typed", dict(off_rank=[45, 44, 45, 47], busiest=3)),
             ("the diagonal included", dict(off_rank=[9, 8], busiest=BUSIEST)),
             ("received, not sent", dict(off_rank=[2, 4], busiest=BUSIEST)),
             ("busiest by what it sent", dict(off_rank=OFF, busiest=0)),
             ("one rank", dict(off_rank=OFF[:1], busiest=BUSIEST))],
}


@pytest.fixture(autouse=True)
def lesson(monkeypatch, tmp_path):
    """A notebook folder whose section-3 launch recorded the token flow FLOW (15.3 reads it there)."""
    run = tmp_path / "runs/15_experts/traffic"
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps([{"uneven": {"flow": row}} for row in FLOW]))
    _launch_for_tests(Path("scripts/15_traffic.py"), 4, args=[str(run)], outputs=True)  # the launch's record
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "15_expert_parallelism.ipynb"))
    return tmp_path


def refused(exid, kwargs):
    return refused_text(exid, lambda: exercises.CHECKS[exid](**kwargs))


def test_every_check_of_15_has_its_cases():
    ids = [i for i in exercises.exercise_ids() if i.startswith("15.")]
    assert ids == ["15.1", "15.2", "15.3"] and set(RIGHT) == set(WRONG) == set(ids)
    assert all(len(RIGHT[i]) >= 2 and len(WRONG[i]) >= 3 for i in ids)


def test_the_fixtures_are_what_they_say():
    assert CAP == 16 and DROPPED and EARLY and EARLY != DROPPED and len(EARLY) == len(DROPPED)
    assert EXPERT_BYTES == 4 * 2 * 4096 * 14336 * 2 and DISPATCH == 15 * 4 * 160 * 4096 * 2


@pytest.mark.parametrize(("exid", "i"), [(e, i) for e, cases in RIGHT.items() for i in range(len(cases))])
def test_right_answers_in_other_forms_pass(exid, i, capsys):
    exercises.CHECKS[exid](**RIGHT[exid][i])
    out = capsys.readouterr().out
    assert out.endswith(f"Exercise {exid}: correct\n") and out.count("\n") == 1


@pytest.mark.parametrize(("exid", "label"), [(e, label) for e, cases in WRONG.items() for label, _ in cases])
def test_wrong_answers_fail_with_a_hint(exid, label):
    text = refused(exid, dict(WRONG[exid])[label])
    for answer in {"15.1": [str(DROPPED)], "15.2": [str(DISPATCH), str(EXPERT_BYTES)], "15.3": []}[exid]:
        assert answer not in text, label               # the hint never gives the answer


@pytest.mark.parametrize("exid", ["15.1", "15.2", "15.3"])
def test_the_starter_ellipsis_fails_first(exid):
    kwargs = {name: ... for name in RIGHT[exid][0]}
    assert "is still `...`" in refused(exid, kwargs)


def test_15_3_without_the_launch_names_it(lesson):
    (lesson / "runs/15_experts/traffic/results.json").unlink()
    text = refused("15.3", dict(off_rank=OFF, busiest=BUSIEST))
    assert "scripts/15_traffic.py" in text and "section 3" in text


def test_15_3_reads_the_recorded_run_not_the_working_directory(lesson, monkeypatch, tmp_path_factory):
    other = tmp_path_factory.mktemp("cwd")
    (other / "runs/15_experts/traffic").mkdir(parents=True)
    (other / "runs/15_experts/traffic/results.json").write_text(json.dumps([{"uneven": {"flow": [1, 1]}}] * 2))
    monkeypatch.chdir(other)
    exercises.check_15_3(off_rank=OFF, busiest=BUSIEST)   # the lesson's run, not the one in the cwd
    (lesson / "runs/15_experts/traffic/results.json").write_text(json.dumps([{"uneven": {"flow": [3, 3]}}] * 2))
    refused("15.3", dict(off_rank=OFF, busiest=BUSIEST))
    exercises.check_15_3(off_rank=[3, 3], busiest=0)
