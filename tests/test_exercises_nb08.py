"""The checks of notebook 08: each accepts right answers in other forms and refuses wrong ones (a silent
script, a script without DistributedSampler, a launch without --max-restarts, files left by an older run,
copied values) with a hint that does not give the answer. Fake launch results name real files written here;
one real launch of a wrong conversion shows the check refusing what a run really produced.
``RIGHT08`` and ``WRONG08`` have the shape of tests/test_exercises_cases.py's RIGHT and WRONG.

08.2 and 08.3 compare with what the lesson's own launches wrote (the uninterrupted run of section 2, the
preempted run's snapshot of section 4), read from the notebook's folder as in tests/test_exercises_runs.py:
here fake lesson folders (JPY_SESSION_NAME's parent), ``_lesson`` in a case naming another one than LESSON."""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from exercise_calls import notebook_in, refused_text  # tests/ is on sys.path

from ddp_helpers import exercises
from ddp_helpers.launch import LaunchResult, torchrun
from ddp_helpers.series import NOTEBOOK_DIR, ROOT

TMP = Path(tempfile.mkdtemp(prefix="exercise_nb08_"))
atexit.register(shutil.rmtree, TMP, ignore_errors=True)


def solution(prefix: str) -> str:
    """The notebook's own %%writefile solution cell for ``prefix`` (its script, without the magic line)."""
    cells = json.loads((NOTEBOOK_DIR / "08_capstone_digits.ipynb").read_text())["cells"]
    cell = next(c for c in cells if "".join(c["source"]).startswith(f"%%writefile scripts/{prefix}"))
    return "".join(cell["source"]).split("\n", 1)[1]


def launch(script: Path, stdout: dict, *, flags: str = "", out: Path | None = None, nproc: int = 2) -> LaunchResult:
    args = f" --out {out}" if out is not None else ""
    return LaunchResult(command=f"torchrun --standalone --nproc-per-node={nproc} {flags} -- {script}{args}".replace(
        "  ", " "), stdout=stdout, seconds=1.0)


def folder(name: str, files: dict, *, older_than: Path | None = None) -> Path:
    """A run folder holding ``files`` (JSON values, or tensors for .pt), optionally dated before a script."""
    path = TMP / name
    path.mkdir(parents=True, exist_ok=True)
    for file, value in files.items():
        if file.endswith(".pt"):
            torch.save(value, path / file)
        else:
            (path / file).write_text(json.dumps(value))
        if older_than is not None:
            t = older_than.stat().st_mtime - 60
            os.utime(path / file, (t, t))
    return path


# --- 08.1: the conversion -----------------------------------------------------------------------------
SCRIPTS1 = TMP / "s1"
SCRIPTS1.mkdir()
CONVERTED = SCRIPTS1 / "08_ex_ddp_digits.py"
CONVERTED.write_text(solution("08_ex_ddp_digits.py"))
(TMP / "s1b").mkdir()
QUALIFIED = TMP / "s1b" / "08_ex_ddp_digits.py"  # DDP spelled in full, another print
QUALIFIED.write_text(solution("08_ex_ddp_digits.py").replace("model = DDP(", "model = torch.nn.parallel.DistributedDataParallel(")
                     .replace('print(f"rank {rank}: {len(sampler)} samples per epoch")',
                              'print(f"rank {rank} trains on {len(sampler)} samples per epoch")'))
(TMP / "s1c").mkdir()


def with_clean_exit(source: str) -> str:
    """``source`` ending its group as the walkthrough does (torch.distributed.nn imported before init; a barrier,
    then the DDP model dropped, before destroy_process_group()), where it does not yet: a test about the check
    must not fail on gloo's exit abort, which comes after the script's work (notebook 04, section 1)."""
    if "\nimport torch.distributed.nn" not in source:
        source = source.replace("import torch.distributed as dist\n",
                                "import torch.distributed as dist\nimport torch.distributed.nn  # noqa: F401\n", 1)
    if "\ndel model" not in source:
        source = source.replace("\ndist.destroy_process_group()", "\ndist.barrier()\ndel model\ndist.destroy_process_group()")
    assert "\nimport torch.distributed.nn" in source
    assert re.search(r"^del model\b.*\ndist\.destroy_process_group\(\)", source, re.M)
    return source


NO_SAMPLER = TMP / "s1c" / "08_ex_ddp_digits.py"
NO_SAMPLER.write_text(with_clean_exit(solution("08_ex_ddp_digits.py")).replace(
    "sampler = DistributedSampler(train, shuffle=True, seed=0)", "sampler = range(len(train))").replace(
    "    sampler.set_epoch(epoch)\n", ""))
RESULT_OK = folder("ex1", {"result.json": {"test_accuracy": 0.95, "world_size": 2}})
RESULT_OLD = folder("ex1_old", {"result.json": {"test_accuracy": 0.95, "world_size": 2}}, older_than=CONVERTED)
RESULT_ONE = folder("ex1_one", {"result.json": {"test_accuracy": 0.95, "world_size": 1}})
HALVES = {0: ["rank 0: 700 samples per epoch", "epoch 0: loss 0.5", "test accuracy 0.95"],
          1: ["rank 1: 700 samples per epoch"]}
WHOLE = {0: ["rank 0: 1400 samples per epoch"], 1: ["rank 1: 1400 samples per epoch"]}

# the notebook's folders: the lesson's runs, none yet, runs that differ, the killed run in the straight run's place
LESSON, EMPTY, ODD, SELF = (TMP / name for name in ("lesson", "empty_lesson", "odd_lesson", "self_lesson"))
for _folder in (LESSON, EMPTY, ODD, SELF):
    _folder.mkdir()
LESSON_RUNS = "runs/08_capstone"

# --- 08.2: the killed run -----------------------------------------------------------------------------
COPY = TMP / "s2" / "train_ddp.py"
COPY.parent.mkdir()
shutil.copyfile(ROOT / "templates" / "train_ddp.py", COPY)
CONFIG = {"epochs": 3, "global_batch": 64, "lr": 3e-3, "weight_decay": 1e-4, "clip": 1.0, "workers": 1, "seed": 0,
          "world_size": 2}
torch.manual_seed(0)
WEIGHTS = {"0.weight": torch.randn(4, 3), "0.bias": torch.randn(4)}
OTHER = {k: v + 1e-7 for k, v in WEIGHTS.items()}


def log(attempts):
    return [{"epoch": e, "attempt": a, "train_loss": 0.5, "lr": 1e-3} for e, a in enumerate(attempts)]


REFERENCE = folder(f"lesson/{LESSON_RUNS}/straight", {"config.json": CONFIG, "final.pt": WEIGHTS,
                                                       "log.json": log([0, 0, 0])})
folder(f"odd_lesson/{LESSON_RUNS}/straight", {"config.json": CONFIG, "final.pt": WEIGHTS, "log.json": log([0, 0, 1])})
IN_PLACE = folder(f"self_lesson/{LESSON_RUNS}/straight", {"config.json": CONFIG, "final.pt": WEIGHTS,
                                                          "log.json": log([0, 0, 1])})
KILLED = folder("ex2", {"config.json": CONFIG, "final.pt": WEIGHTS, "log.json": log([0, 0, 1])})
DIFFERENT = folder("ex2_diff", {"config.json": CONFIG, "final.pt": OTHER, "log.json": log([0, 0, 1])})
STALE = folder("ex2_stale", {"config.json": CONFIG, "final.pt": WEIGHTS, "log.json": log([0, 0, 1])}, older_than=COPY)
OTHER_CUT = folder("ex2_cut", {"config.json": CONFIG, "final.pt": WEIGHTS, "log.json": log([0, 1, 1])})
HEAD = "; 2 processes x batch 32 = global batch 64, 1 loader workers per process"
RESTARTED = {0: ["attempt 0: new run" + HEAD, "epoch 0: train loss 0.5", "epoch 1: train loss 0.4",
                 "attempt 1: resumed at epoch 2 step 0" + HEAD, "epoch 2: train loss 0.3", "test: accuracy 0.9"],
             1: []}
UNKILLED = {0: ["attempt 0: new run" + HEAD, "epoch 0: x", "epoch 1: x", "epoch 2: x", "test: accuracy 0.9"], 1: []}
FINISHED = {0: ["attempt 0: resumed at epoch 3 step 0" + HEAD, "test: accuracy 0.9"], 1: []}
RESTARTS = "--max-restarts=1"

# --- 08.3: the preempted snapshot -------------------------------------------------------------------
def snapshot(epoch, step, lr):
    """What the template's SIGTERM handler saves (the fields the exercise reads)."""
    return {"state": {"epoch": epoch, "step": step, "sums": [1.0, 2.0], "history": []},
            "optimizer": {"param_groups": [{"lr": lr}]}, "scheduler": {"_last_lr": [lr]}}


torch.save(snapshot(1, 11, 0.0021875), LESSON / LESSON_RUNS / "preempted_snapshot.pt")
torch.save(snapshot(2, 3, 0.0005), ODD / LESSON_RUNS / "preempted_snapshot.pt")
OWN_SNAPSHOT = TMP / "my_snapshot.pt"  # a snapshot of the learner's choosing
torch.save(snapshot(0, 1, 0.5), OWN_SNAPSHOT)

RIGHT08 = {
    "08.1": [dict(converted=launch(CONVERTED, HALVES, out=RESULT_OK)),
             dict(converted=launch(QUALIFIED, {0: ["rank 0 trains on 700 samples per epoch"],
                                               1: ["rank 1 trains on 700 samples per epoch"]}, out=RESULT_OK))],
    "08.2": [dict(killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=KILLED), equal=True),
             dict(killed_again=launch(COPY, RESTARTED, flags="--max-restarts 3", out=KILLED), equal=torch.tensor(True)),
             dict(killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=KILLED), equal=np.bool_(True))],
    "08.3": [dict(next_epoch=1, next_step=11, next_lr=0.0021875),
             dict(next_epoch=np.int64(1), next_step=torch.tensor(11), next_lr=np.float64(0.0021875)),
             dict(next_epoch=1.0, next_step=torch.tensor(11, dtype=torch.int32), next_lr=torch.tensor(0.0021875,
                                                                                                      dtype=torch.float64)),
             dict(next_epoch=2, next_step=3, next_lr=0.0005, _lesson=ODD)],  # another lesson run: its own snapshot
}
WRONG08 = {
    "08.1": [("a silent rank", dict(converted=launch(CONVERTED, {0: HALVES[0], 1: []}, out=RESULT_OK))),
             ("no DistributedSampler", dict(converted=launch(NO_SAMPLER, WHOLE, out=RESULT_OK))),
             ("each rank saw everything", dict(converted=launch(CONVERTED, WHOLE, out=RESULT_OK))),
             ("files from an older run", dict(converted=launch(CONVERTED, HALVES, out=RESULT_OLD))),
             ("one process", dict(converted=launch(CONVERTED, {0: HALVES[0]}, out=RESULT_OK, nproc=1))),
             ("world size 1 recorded", dict(converted=launch(CONVERTED, HALVES, out=RESULT_ONE))),
             ("no --out", dict(converted=launch(CONVERTED, HALVES))),
             ("another script", dict(converted=launch(COPY, HALVES, out=RESULT_OK)))],
    "08.2": [("copy-through: the learner's own run as the reference", dict(
                 killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=DIFFERENT), equal=True, reference=DIFFERENT)),
             ("no uninterrupted run yet", dict(killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=KILLED),
                                               equal=True, _lesson=EMPTY)),
             ("launched into the uninterrupted run's folder", dict(
                 killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=IN_PLACE), equal=True, _lesson=SELF)),
             ("the lesson's straight run was restarted", dict(
                 killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=KILLED), equal=True, _lesson=ODD)),
             ("no --max-restarts", dict(killed_again=launch(COPY, RESTARTED, out=KILLED), equal=True)),
             ("nothing killed", dict(killed_again=launch(COPY, UNKILLED, flags=RESTARTS, out=KILLED), equal=True)),
             ("a finished run relaunched", dict(killed_again=launch(COPY, FINISHED, flags=RESTARTS, out=KILLED),
                                                equal=True)),
             ("files from an older run", dict(killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=STALE),
                                              equal=True)),
             ("a log of another cut", dict(killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=OTHER_CUT),
                                           equal=True)),
             ("weights differ", dict(killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=DIFFERENT), equal=True)),
             ("equal said False", dict(killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=KILLED), equal=False)),
             ("equal as a string", dict(killed_again=launch(COPY, RESTARTED, flags=RESTARTS, out=KILLED), equal="True"))],
    "08.3": [("copy-through: answers of a snapshot of the learner's choosing", dict(
                 next_epoch=0, next_step=1, next_lr=0.5, snapshot=OWN_SNAPSHOT)),
             ("answers of a snapshot of the learner's choosing", dict(next_epoch=0, next_step=1, next_lr=0.5)),
             ("no snapshot yet", dict(next_epoch=1, next_step=11, next_lr=0.0021875, _lesson=EMPTY)),
             ("another run's snapshot", dict(next_epoch=1, next_step=11, next_lr=0.0021875, _lesson=ODD)),
             ("the step in progress", dict(next_epoch=1, next_step=10, next_lr=0.0021875)),
             ("the epoch skipped", dict(next_epoch=2, next_step=0, next_lr=0.0021875)),
             ("a fresh schedule's LR", dict(next_epoch=1, next_step=11, next_lr=3e-3 / 25)),
             ("the LR as a list", dict(next_epoch=1, next_step=11, next_lr=[0.0021875]))],
}


@pytest.fixture(autouse=True)
def lesson(monkeypatch):
    """The running notebook is LESSON/notebook.ipynb: the lesson's runs are LESSON/runs/08_capstone/..."""
    monkeypatch.setenv("JPY_SESSION_NAME", str(LESSON / "notebook.ipynb"))


def run_case(exid, kwargs):
    """Call the check; ``_lesson`` is the notebook's folder for this case."""
    kwargs = dict(kwargs)
    folder = kwargs.pop("_lesson", LESSON)
    with notebook_in(folder):
        return exercises.CHECKS[exid](**kwargs)


def test_every_check_of_08_has_its_cases():
    ids = [i for i in exercises.exercise_ids() if i.startswith("08.")]
    assert ids == ["08.1", "08.2", "08.3"] and set(RIGHT08) == set(WRONG08) == set(ids)
    for exid in ids:
        assert len(RIGHT08[exid]) >= 2 and len(WRONG08[exid]) >= 3, exid
    for exid in ("08.2", "08.3"):  # they read the lesson's runs: one case copies through, one has no run
        labels = [label for label, _ in WRONG08[exid]]
        assert any(label.startswith("copy-through") for label in labels), exid
        assert any(kwargs.get("_lesson") is EMPTY for _, kwargs in WRONG08[exid]), exid


@pytest.mark.parametrize(("exid", "i"), [(e, i) for e, cases in RIGHT08.items() for i in range(len(cases))])
def test_right_answers_in_other_forms_pass(exid, i, capsys):
    run_case(exid, RIGHT08[exid][i])
    assert capsys.readouterr().out == f"✓ Exercise {exid}: correct\n"


@pytest.mark.parametrize(("exid", "label"), [(e, label) for e, cases in WRONG08.items() for label, _ in cases])
def test_wrong_answers_fail_with_a_hint(exid, label):
    refused_text(exid, lambda: run_case(exid, dict(WRONG08[exid])[label]))


@pytest.mark.parametrize(("exid", "label", "launch"), [
    ("08.2", "no uninterrupted run yet", "the uninterrupted launch of train_ddp.py (section 2)"),
    ("08.3", "no snapshot yet", "the preempted launch of train_ddp.py (section 4)")])
def test_a_missing_lesson_run_names_the_launch_to_run_first(exid, label, launch):
    with pytest.raises(exercises.CheckFailed) as info:
        run_case(exid, dict(WRONG08[exid])[label])
    assert "does not exist" in str(info.value) and f"run {launch} first" in str(info.value)


def test_the_lesson_runs_are_read_beside_the_notebook_not_in_the_working_directory(tmp_path, monkeypatch):
    """A snapshot at the same relative path under the working directory is not the lesson's."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / LESSON_RUNS).mkdir(parents=True)
    torch.save(snapshot(0, 1, 0.5), tmp_path / LESSON_RUNS / "preempted_snapshot.pt")
    with pytest.raises(exercises.CheckFailed):
        run_case("08.3", dict(next_epoch=0, next_step=1, next_lr=0.5))
    run_case("08.3", dict(next_epoch=1, next_step=11, next_lr=0.0021875))


def test_a_real_launch_of_a_conversion_without_distributed_sampler_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "scripts").mkdir()
    shutil.copyfile(NO_SAMPLER, tmp_path / "scripts" / "08_ex_ddp_digits.py")
    converted = torchrun("scripts/08_ex_ddp_digits.py", nproc=2, args=["--out", "runs/ex1", "--epochs", "1"],
                         env={"CUDA_VISIBLE_DEVICES": ""}, timeout=120, live="quiet", summary=False)
    assert converted.stdout[1] == ["rank 1: 1400 samples per epoch"]  # each rank trained on everything
    with pytest.raises(exercises.CheckFailed) as info:
        exercises.check_08_1(converted=converted)
    assert "DistributedSampler" in str(info.value)
