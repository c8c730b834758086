"""A run belongs to the script it checks; lesson runs are read-only; 09.4's timing (issue 38, items 1, 2, 7).

Every check that takes a launch refuses, with a hint that names what happened: a stale run (the script
edited after its launch), a launch of another script, the instructor's solution launched by its absolute
path (another folder's copy), a LaunchResult typed by hand, a copied one (copy.copy), and a script that
prints the expected answer as a literal; and accepts the current script's launch, a launch again after an
edit, and answers in other forms. Every check that reads a lesson run refuses a run another launch wrote
last (another script, the lesson's script at another world size: an exercise launched into the lesson's
folder), a failed launch and a run without a record, and each hint blames the lesson's data and names the
lesson's launch to run again. 09.4 judges the hang from the moment the workers were past the barrier, so a
slow start-up does not count as waiting for the timeout.

Most launches are fakes registered as torchrun's own (ddp_helpers.launch._launch_for_tests, for tests
only); the tests marked "real" launch with torchrun (run them under `flock /tmp/ddp_heavy.lock`).
"""

from __future__ import annotations

import ast
import copy
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import test_exercises_nb13 as N13  # tests/ is on sys.path
import test_exercises_nb15 as N15
import test_exercises_runs as R
import torch
from exercise_calls import notebook_in, refused_text

from ddp_helpers import exercises
from ddp_helpers.exercises.core import Exercise
from ddp_helpers.exercises.provenance import literal_prints, prints_no_literal
from ddp_helpers.launch import (
    PROVENANCE_FILE,
    LaunchResult,
    WorkerFailed,
    _launch_for_tests,
    file_sha256,
    is_registered_launch,
    output_targets,
    sidecar,
    torchrun,
    write_provenance,
)
from ddp_helpers.series import NOTEBOOK_DIR

CPU = {"CUDA_VISIBLE_DEVICES": "", "DDP_BACKEND": "gloo"}
SOLUTIONS = NOTEBOOK_DIR / "scripts"  # the instructor's scripts (the executed notebooks wrote them)


# --- the learner's notebook folder --------------------------------------------------------------------

@pytest.fixture
def learner(tmp_path, monkeypatch):
    """A notebook folder of the learner's (the running notebook's and the working directory) holding its own
    scripts/, copies of the notebooks' scripts."""
    (tmp_path / "scripts").mkdir()
    for name in ("00_hello.py", "00_max.py", "00_fail.py", "01_ex_all_gather.py", "02_sampler_epochs.py",
                 "03_ex_no_guard.py", "03_ex_no_record.py", "03_ex_always_fails.py", "05_rank0_collective_fixed.py",
                 "05_save_load.py", "09_two_nodes.py"):
        shutil.copy(SOLUTIONS / name, tmp_path / "scripts" / name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "notebook.ipynb"))
    return tmp_path


def edit(folder: Path, name: str, old: str | None = None, new: str = "") -> Path:
    """Change the learner's scripts/<name>: replace ``old`` by ``new``, or append a comment."""
    path = folder / "scripts" / name
    text = path.read_text()
    if old is not None:
        assert old in text, (name, old)
    path.write_text(text.replace(old, new) if old is not None else text + "# edited\n")
    return path


COUNTS_LINE = "correct/count: padded [7, 12], unpadded+all_reduce [6, 10], gather+dedup [6, 10]"
# exercise: (the check's launch keyword, script, processes, what the ranks printed, script args, other keywords)
LAUNCHES = {
    "00.1": ("three", "00_hello.py", 3, {r: [f"rank {r}: all_reduce(rank+1)=6"] for r in range(3)}, [], {}),
    "00.2": ("maxed", "00_max.py", 2, {0: ["max=10"], 1: ["max=10"]}, [], {}),
    "01.1": ("gathered", "01_ex_all_gather.py", 3, {r: ["ring all_gather == dist.all_gather: True"] for r in range(3)},
             [], {}),
    "02.4": ("four", "02_sampler_epochs.py", 4, {0: [COUNTS_LINE]}, ["--dataset-size", "10", "--epochs", "1"],
             dict(padded_count=12, exact_count=10)),
    "05.4": ("fixed_run", "05_rank0_collective_fixed.py", 2,
             {0: ["would save mean loss 1.500", "after the barrier"], 1: ["after the barrier"]}, [], {}),
}


def fake(exid: str, script: Path | None = None) -> object:
    """The check's launch value for exercise ``exid``: a registered fake launch of ``script`` (default: the
    learner's own scripts/<name>); 03.3's is the WorkerFailed that carries it."""
    if exid == "03.3":
        result = _launch_for_tests(script or Path("scripts/03_ex_always_fails.py"), 1, {},
                                   args=["runs/03_launching/attempts.txt"], torchrun_args=["--max-restarts=2"],
                                   ok=False)
        return WorkerFailed(0, 3, "tail", result.command, result=result)
    _, name, nproc, stdout, args, _ = LAUNCHES[exid]
    return _launch_for_tests(script or Path("scripts") / name, nproc, stdout, args=args)


def kwargs_for(exid: str, value: object) -> dict:
    if exid == "03.3":
        return dict(counts=["0", "1", "2"], caught=value)
    keyword, *_, extra = LAUNCHES[exid]
    return {keyword: value, **extra}


def script_of(exid: str) -> str:
    return "03_ex_always_fails.py" if exid == "03.3" else LAUNCHES[exid][1]


def accepted(exid: str, kwargs: dict, capsys) -> None:
    exercises.CHECKS[exid](**kwargs)
    assert capsys.readouterr().out == f"✓ Exercise {exid}: correct\n"


def refused(exid: str, kwargs: dict) -> str:
    return refused_text(exid, lambda: exercises.CHECKS[exid](**kwargs))


LAUNCH_IDS = [*LAUNCHES, "03.3"]


@pytest.mark.parametrize("exid", LAUNCH_IDS)
def test_the_current_scripts_launch_passes_and_again_after_an_edit(exid, learner, capsys):
    accepted(exid, kwargs_for(exid, fake(exid)), capsys)
    edit(learner, script_of(exid))
    accepted(exid, kwargs_for(exid, fake(exid)), capsys)  # launched again after the edit


@pytest.mark.parametrize("exid", LAUNCH_IDS)
def test_a_run_of_the_script_before_an_edit_is_stale(exid, learner):
    value = fake(exid)
    edit(learner, script_of(exid))
    text = refused(exid, kwargs_for(exid, value))
    assert f"you changed scripts/{script_of(exid)} after launching it" in text and "launch it again" in text


@pytest.mark.parametrize("exid", LAUNCH_IDS)
def test_a_launch_of_another_script_is_refused(exid, learner):
    text = refused(exid, kwargs_for(exid, fake(exid, Path("scripts/00_fail.py"))))
    assert "00_fail.py" in text or f"not the failure of scripts/{script_of(exid)}" in text


@pytest.mark.parametrize("exid", LAUNCH_IDS)
def test_the_solution_by_its_absolute_path_is_refused(exid, learner):
    text = refused(exid, kwargs_for(exid, fake(exid, SOLUTIONS / script_of(exid))))
    assert "a copy in another folder" in text and f"your scripts/{script_of(exid)}" in text


@pytest.mark.parametrize("exid", LAUNCH_IDS)
def test_a_hand_typed_result_is_refused(exid, learner):
    real = fake(exid)
    if exid == "03.3":
        typed = WorkerFailed(0, 3, "tail", real.command)  # the same words, no launch behind them
    else:
        typed = LaunchResult(command=real.command, stdout=real.stdout, seconds=1.0, started=real.started,
                             script=real.script, sha256=real.sha256, nproc=real.nproc, nnodes=1, args=real.args,
                             launcher=real.launcher, ok=True)  # even with the provenance typed in
    assert "returned in this kernel" in refused(exid, kwargs_for(exid, typed))


@pytest.mark.parametrize("exid", LAUNCH_IDS)
def test_a_copied_or_unpickled_result_is_refused(exid, learner):
    real = fake(exid)
    if exid == "03.3":
        copies = [WorkerFailed(0, 3, "tail", real.command, result=copy.copy(real.result))]
    else:
        copies = [copy.copy(real), copy.deepcopy(real), pickle.loads(pickle.dumps(real))]
    for value in copies:
        assert "returned in this kernel" in refused(exid, kwargs_for(exid, value))


# the scripts that print the expected number (or the comparison's True) as a literal
LITERAL = {
    "00.1": ('print(f"backend={ctx.backend} all_reduce(rank+1)={value.item():.0f}")',
             'print(f"backend={ctx.backend} all_reduce(rank+1)=6")'),
    "00.2": ('print(f"max={value.item():.0f}")', 'print("max=10")'),
    "01.1": ('print(f"ring all_gather == dist.all_gather: {same}")',
             'print("ring all_gather == dist.all_gather: True")'),
    "05.4": ('print(f"would save mean loss {loss.item():.3f}")', 'print("would save mean loss", 1.5)'),
}


@pytest.mark.parametrize("exid", list(LITERAL))
def test_a_script_that_prints_the_literal_answer_is_refused(exid, learner):
    edit(learner, script_of(exid), *LITERAL[exid])
    text = refused(exid, kwargs_for(exid, fake(exid)))  # launched after the edit: current, but a literal
    assert "as a constant it wrote itself" in text
    for answer in ("= 6", "=10", "1.5"):
        assert answer not in text.split("Hint: ")[1]  # the hint never gives the answer


def test_a_printed_value_in_another_form_is_no_literal(learner, capsys):
    edit(learner, "00_max.py", 'print(f"max={value.item():.0f}")', 'print("max", int(value.item()))')
    accepted("00.2", dict(maxed=_launch_for_tests(Path("scripts/00_max.py"), 2, {0: ["max 10"], 1: ["max 10"]})),
             capsys)


def test_literal_prints_reads_code_not_text():
    tree = ast.parse('x = 6\nprint(f"{x:.6f} six")\nprint(value)\nprint("value", 6.0)\n'
                     'f.write(f"total {10}")\nprint(f"{y!r:>6}")\nlog("6")\nprint("06:00")\n')
    assert literal_prints(tree, [6]) == [4, 8]            # print("value", 6.0) and "06:00" (the number 6)
    assert literal_prints(tree, [10]) == [5]              # an f-string's constant part
    assert literal_prints(tree, ["six"]) == [2]           # a string answer inside a printed string
    assert literal_prints(tree, [3]) == []                # format specs (.6f, >6) are not printed numbers
    assert literal_prints(ast.parse("print(True)"), [1]) == []  # a bool is not the number 1
    ex = Exercise("00.2")
    prints_no_literal(ex, ast.parse("print(value.item())"), [10])
    with pytest.raises(exercises.CheckFailed, match="as a constant"):
        prints_no_literal(ex, ast.parse("print(10)"), [10])


# --- the checks of processes run with plain python (00.3, 03.1, 03.2) ---------------------------------------

BOOT = "RuntimeError: ... has finished its bootstrapping phase."
ROOT_NA = "... Root Cause (first observed failure):\n  error_file: <N/A>\n  traceback : To enable traceback see ...\n"
HELLO_ERR = "RuntimeError: ... Launch it with torchrun: torchrun --nproc-per-node=2 scripts/00_hello.py"


def process(exid: str, script: str | Path) -> dict:
    prefix = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1"] \
        if exid == "03.2" else [sys.executable]
    keyword, stderr = {"00.3": ("plain", HELLO_ERR), "03.1": ("no_guard", BOOT), "03.2": ("bare", ROOT_NA)}[exid]
    return {keyword: subprocess.CompletedProcess([*prefix, str(script)], 1, stdout="", stderr=stderr)}


PROCESS_SCRIPTS = {"00.3": "00_hello.py", "03.1": "03_ex_no_guard.py", "03.2": "03_ex_no_record.py"}


@pytest.mark.parametrize("exid", list(PROCESS_SCRIPTS))
def test_a_process_of_the_learners_script_passes(exid, learner, capsys):
    accepted(exid, process(exid, f"scripts/{PROCESS_SCRIPTS[exid]}"), capsys)
    accepted(exid, process(exid, learner / "scripts" / PROCESS_SCRIPTS[exid]), capsys)  # absolute, the same file


@pytest.mark.parametrize("exid", list(PROCESS_SCRIPTS))
def test_a_process_of_the_solution_by_its_absolute_path_is_refused(exid, learner):
    text = refused(exid, process(exid, SOLUTIONS / PROCESS_SCRIPTS[exid]))
    assert "beside this notebook" in text


@pytest.mark.parametrize("exid", list(PROCESS_SCRIPTS))
def test_a_process_of_another_script_is_refused_without_a_default(exid, learner):
    """03.1 and 03.2 once fell back to their default script name when the process named another."""
    text = refused(exid, process(exid, "scripts/00_fail.py"))
    assert f"scripts/{PROCESS_SCRIPTS[exid]}" in text


# --- 00.4's launch identity (the doctor's verdicts: tests/test_exercises_nb00.py) ---------------------------

def test_00_4_refuses_a_copy_the_solution_and_a_stale_run_before_running_anything(learner):
    (learner / "scripts" / "00_ex_ddp.py").write_text((SOLUTIONS / "00_ex_ddp.py").read_text())
    mine = _launch_for_tests(Path("scripts/00_ex_ddp.py"), 2, {0: ["x"]}, args=["runs/00_ex_ddp"])
    assert "returned in this kernel" in refused("00.4", dict(converted=copy.copy(mine)))
    theirs = _launch_for_tests(SOLUTIONS / "00_ex_ddp.py", 2, {0: ["x"]}, args=["runs/00_ex_ddp"])
    assert "a copy in another folder" in refused("00.4", dict(converted=theirs))
    three = _launch_for_tests(Path("scripts/00_ex_ddp.py"), 3, {0: ["x"]}, args=["runs/00_ex_ddp"])
    assert "ran 3 process(es)" in refused("00.4", dict(converted=three))
    edit(learner, "00_ex_ddp.py")
    assert "after launching it" in refused("00.4", dict(converted=mine))


# --- 09.2: the launch found in the notebook's namespace ----------------------------------------------------

ENVS = [{"RANK": r, "LOCAL_RANK": 0, "GROUP_RANK": r, "WORLD_SIZE": 3, "LOCAL_WORLD_SIZE": 1} for r in range(3)]


def two_nodes(script: Path = Path("scripts/09_two_nodes.py")) -> LaunchResult:
    return _launch_for_tests(script, 1, {r: [" ".join(f"{k}={v}" for k, v in e.items())] for r, e in enumerate(ENVS)},
                             nnodes=3)


def check_09_2_beside(launch: object) -> None:
    three = launch  # noqa: F841  (the check finds the launch in its caller's namespace, as in a notebook)
    exercises.check_09_2(three_env=ENVS)


def test_09_2_accepts_this_kernels_launch_of_the_current_script(learner, capsys):
    check_09_2_beside(two_nodes())
    edit(learner, "09_two_nodes.py")
    check_09_2_beside(two_nodes())
    assert capsys.readouterr().out == "✓ Exercise 09.2: correct\n" * 2


@pytest.mark.parametrize("case", ["hand-typed", "copied", "stale", "the solution by its absolute path"])
def test_09_2_refuses_a_launch_that_is_not_this_kernels_of_the_current_script(case, learner):
    real = two_nodes(SOLUTIONS / "09_two_nodes.py" if case.startswith("the solution") else Path("scripts/09_two_nodes.py"))
    value = {"hand-typed": LaunchResult(command=real.command, stdout=real.stdout),
             "copied": copy.copy(real)}.get(case, real)
    if case == "stale":
        edit(learner, "09_two_nodes.py")
    text = refused_text("09.2", lambda: check_09_2_beside(value))
    assert "no launch of scripts/09_two_nodes.py in this kernel" in text


# --- 09.4: timed from the moment the workers were past the barrier ----------------------------------------

def check_09_4_beside(late: object, seconds: object) -> None:
    here = Path.cwd()
    os.chdir(Path(R.OK[0]).parent.parent)  # the case's learner folder
    try:
        with notebook_in(R.LESSON):
            exercises.check_09_4(seconds=seconds)
    finally:
        os.chdir(here)


@pytest.mark.parametrize(("start", "end", "seconds"), [(-0.5, 3.2, 3.7), (-40.0, 3.1, 43.1), (-0.1, 9.0, 9.1)])
def test_09_4_accepts_a_real_timeout_after_any_start_up(start, end, seconds, capsys, monkeypatch):
    monkeypatch.delenv("NB09_HANG_TIMEOUT_S", raising=False)
    check_09_4_beside(R.barrier_failure(R.OK, start=start, end=end), seconds)
    assert capsys.readouterr().out == "✓ Exercise 09.4: correct\n"


@pytest.mark.parametrize(("start", "end", "seconds"), [(-5.0, 0.4, 5.4), (-2.9, 0.2, 3.1), (-60.0, 2.5, 62.5)])
def test_09_4_refuses_a_slow_start_up_and_a_short_run(start, end, seconds, monkeypatch):
    """The launch took longer than the 3 s timeout (``seconds``), but the workers ended sooner than that after
    the barrier: the time went to the start-up, and the mismatch did not hang."""
    monkeypatch.delenv("NB09_HANG_TIMEOUT_S", raising=False)
    text = refused_text("09.4", lambda: check_09_4_beside(R.barrier_failure(R.OK, start=start, end=end), seconds))
    assert "spent starting up" in text


@pytest.mark.parametrize("case", ["hand-typed", "copied"])
def test_09_4_refuses_a_failure_no_launch_raised(case, monkeypatch):
    monkeypatch.delenv("NB09_HANG_TIMEOUT_S", raising=False)
    real = R.barrier_failure(R.OK)
    value = WorkerFailed(1, 1, "tail", real.command) if case == "hand-typed" else \
        WorkerFailed(1, 1, "tail", real.command, result=copy.copy(real.result))
    text = refused_text("09.4", lambda: check_09_4_beside(value, 3.4))
    assert "typed or copied" in text


# --- the lesson's runs: read-only, and a run another launch overwrote is the lesson's stale data ------------

# exercise: (its lesson run, the lesson's script, its processes, the launch the hint names)
LESSON_RUNS = {
    "05.1": ("runs/05_checkpoints/save_load", "05_save_load.py", 2, "section 1"),
    "07.2": ("runs/07_eval_earlystop", "07_eval_earlystop.py", 2, "section 2"),
    "07.4": ("runs/07_eval_earlystop", "07_eval_earlystop.py", 2, "section 2"),
    "10.1": ("runs/10_performance/sweep.json", "10_allreduce_sizes.py", 2, "section 2"),
    "10.2": ("runs/10_performance/controls.json", "10_step_controls.py", 2, "section 4"),
    "10.3": ("runs/10_performance/sweep.json", "10_allreduce_sizes.py", 2, "section 2"),
    "11.1": ("runs/11_sharding/zero", "11_zero.py", 2, "section 1"),
    "11.3": ("runs/11_sharding/fsdp2", "11_fsdp2.py", 2, "section 4"),
    "13.3": ("runs/13_pipeline/schedules", "13_schedules.py", 2, "section 2"),
    "15.3": ("runs/15_experts/traffic", "15_traffic.py", 4, "section 3"),
}
RIGHT_ANSWERS = {**{exid: R.RIGHT[exid][0] for exid in LESSON_RUNS if exid in R.RIGHT},
                 "13.3": dict(idle_by_rank=N13.IDLE), "15.3": dict(off_rank=N15.OFF, busiest=N15.BUSIEST)}


@pytest.fixture
def lesson(tmp_path):
    """A copy of the fake lesson folder of tests/test_exercises_runs.py with 13's and 15's runs added, every
    run with the record of the lesson's launch."""
    folder = tmp_path / "lesson"
    shutil.copytree(R.LESSON, folder)
    for relative, results in (("runs/13_pipeline/schedules", {"runs": {"GPipe": [{"events": e} for e in N13.TL]}}),
                              ("runs/15_experts/traffic", [{"uneven": {"flow": row}} for row in N15.FLOW])):
        (folder / relative).mkdir(parents=True)
        (folder / relative / "results.json").write_text(json.dumps(results))
    for relative, script, nproc, _ in LESSON_RUNS.values():
        _launch_for_tests(Path("scripts") / script, nproc, args=[str(folder / relative)], outputs=True)
    with notebook_in(folder):
        yield folder


def record_of(folder: Path, relative: str) -> Path:
    path = folder / relative
    return path / PROVENANCE_FILE if path.is_dir() else sidecar(path)


def overwrite(folder: Path, relative: str, script: str, nproc: int, ok: bool = True) -> None:
    """Another launch wrote into the lesson's run last: its record replaces the lesson's."""
    _launch_for_tests(Path("scripts") / script, nproc, args=[str(folder / relative)], outputs=True, ok=ok)


@pytest.mark.parametrize("exid", list(LESSON_RUNS))
def test_the_lessons_own_run_passes(exid, lesson, capsys):
    accepted(exid, RIGHT_ANSWERS[exid], capsys)
    relative, script, nproc, _ = LESSON_RUNS[exid]
    overwrite(lesson, relative, script, nproc)  # the lesson's launch again: still the lesson's run
    accepted(exid, RIGHT_ANSWERS[exid], capsys)


def blames_the_lessons_data(exid: str, text: str) -> None:
    relative, script, _, section = LESSON_RUNS[exid]
    what, hint = text.split("\nHint: ")
    assert relative in what and "the lesson's data" in what
    assert f"run the launch of scripts/{script} ({section}) again" in hint
    assert "your answer" not in text and "`" + next(iter(RIGHT_ANSWERS[exid])) + "`" not in what


@pytest.mark.parametrize("exid", list(LESSON_RUNS))
def test_a_lesson_run_another_script_overwrote_blames_the_lessons_data(exid, lesson):
    relative, _, nproc, _ = LESSON_RUNS[exid]
    overwrite(lesson, relative, "my_experiment.py", nproc)
    text = refused(exid, RIGHT_ANSWERS[exid])
    blames_the_lessons_data(exid, text)
    assert "last written by a launch of scripts/my_experiment.py" in text


@pytest.mark.parametrize("exid", list(LESSON_RUNS))
def test_an_exercise_launch_of_the_lessons_script_into_its_folder_is_stale_lesson_data(exid, lesson):
    """Exercise 07.3 once launched the section-2 worker on 3 processes into runs/07_eval_earlystop."""
    relative, script, nproc, _ = LESSON_RUNS[exid]
    overwrite(lesson, relative, script, nproc + 1)
    text = refused(exid, RIGHT_ANSWERS[exid])
    blames_the_lessons_data(exid, text)
    assert f"{nproc + 1}-process launch" in text and "folder of their own" in text


@pytest.mark.parametrize("exid", list(LESSON_RUNS))
def test_a_lesson_run_whose_last_launch_failed_or_without_a_record_is_refused(exid, lesson):
    relative, script, nproc, _ = LESSON_RUNS[exid]
    overwrite(lesson, relative, script, nproc, ok=False)
    blames_the_lessons_data(exid, refused(exid, RIGHT_ANSWERS[exid]))
    record_of(lesson, relative).unlink()
    text = refused(exid, RIGHT_ANSWERS[exid])
    blames_the_lessons_data(exid, text)
    assert "no record of the launch" in text


def test_07_3_text_gives_the_exercise_a_folder_of_its_own():
    cells = json.loads((NOTEBOOK_DIR / "07_syncbn_eval_earlystop.ipynb").read_text())["cells"]
    text = next("".join(c["source"]) for c in cells if "".join(c["source"]).startswith("**Exercise 3.**"))
    starter = next(c["metadata"]["exercise"]["starter"][0] for c in cells
                   if c.get("metadata", {}).get("exercise", {}).get("id") == "07.3")
    solution = next("".join(c["source"]) for c in cells if "solution" in c.get("metadata", {}).get("tags", [])
                    and "07_eval_earlystop.py" in "".join(c["source"]))
    for words in (text, starter, solution):
        assert "--out" in words and "runs/07_ex3" in words and "runs/07_eval_earlystop/" not in words


# --- the launcher's records ---------------------------------------------------------------------------------

def test_a_launch_result_made_by_hand_keeps_its_old_constructor_and_is_no_launch():
    typed = LaunchResult(command="torchrun --standalone --nproc-per-node=2 scripts/x.py", stdout={0: ["a"]})
    assert (typed.script, typed.sha256, typed.nproc, typed.args, typed.ok) == ("", "", 0, [], False)
    assert not is_registered_launch(typed) and not is_registered_launch(None)
    fake_ = _launch_for_tests(SOLUTIONS / "00_max.py", 2, {0: ["max=10"]})
    assert is_registered_launch(fake_) and not is_registered_launch(copy.copy(fake_))
    assert fake_.provenance()["sha256"] == file_sha256(SOLUTIONS / "00_max.py") != ""


def test_output_targets_name_folders_output_files_and_the_argparse_default(tmp_path):
    script = tmp_path / "w.py"
    script.write_text('import argparse\np = argparse.ArgumentParser()\np.add_argument("--out", default="runs/w")\n'
                      'p.add_argument("data")\n')
    (tmp_path / "runs/w").mkdir(parents=True)
    (tmp_path / "runs/given").mkdir()
    (tmp_path / "runs/old.json").write_text("{}")
    os.utime(tmp_path / "runs/old.json", (1_000, 1_000))
    (tmp_path / "runs/new.json").write_text("{}")
    started = (tmp_path / "runs/new.json").stat().st_mtime - 1
    assert output_targets(script, ["runs/given", "runs/old.json", "runs/new.json", ".", str(tmp_path.parent)],
                          tmp_path, started) == [tmp_path / "runs/given/.launch.json", tmp_path / "runs/.new.json.launch.json",
                                                 tmp_path / "runs/w/.launch.json"]  # not an input, not cwd or above
    (tmp_path / "runs/untouched").mkdir()
    (tmp_path / "runs/untouched/model.pt").write_text("an earlier run's")
    for path in (tmp_path / "runs/untouched/model.pt", tmp_path / "runs/untouched"):
        os.utime(path, (1_000, 1_000))
    assert output_targets(script, ["--out", "runs/untouched"], tmp_path, started) == []  # it wrote nothing there
    assert output_targets(script, ["--out=runs/given"], tmp_path, started) == [tmp_path / "runs/given/.launch.json"]
    assert output_targets(script, ["--out", "runs/given"], tmp_path, started) == [tmp_path / "runs/given/.launch.json"]
    assert write_provenance(tmp_path / "runs/given/.launch.json", {"ok": True})
    assert [p.name for p in (tmp_path / "runs/given").iterdir()] == [".launch.json"]  # no temporary file left
    assert not write_provenance(tmp_path / "missing/.launch.json", {"ok": True})  # never fails the launch


def test_gitignore_keeps_the_records_out_of_git():
    ignored = subprocess.run(["git", "check-ignore", "-q", "notebooks/runs/07_eval_earlystop/.launch.json"],
                             cwd=NOTEBOOK_DIR.parent)
    assert ignored.returncode == 0


# --- real launches (run under flock /tmp/ddp_heavy.lock) ------------------------------------------------------

def test_real_launches_belong_to_the_script_they_ran(learner, capsys):
    maxed = torchrun("scripts/00_max.py", nproc=2, env=CPU, timeout=90, live="quiet", summary=False)
    assert is_registered_launch(maxed) and maxed.sha256 == file_sha256(learner / "scripts/00_max.py")
    assert maxed.nproc == 2 and maxed.nnodes == 1 and maxed.ok and maxed.started < maxed.ended
    capsys.readouterr()  # the launch's command line
    accepted("00.2", dict(maxed=maxed), capsys)
    assert "returned in this kernel" in refused("00.2", dict(maxed=copy.copy(maxed)))
    edit(learner, "00_max.py")
    assert "after launching it" in refused("00.2", dict(maxed=maxed))
    theirs = torchrun(SOLUTIONS / "00_max.py", nproc=2, env=CPU, timeout=90, live="quiet", summary=False)
    assert "a copy in another folder" in refused("00.2", dict(maxed=theirs))
    again = torchrun("scripts/00_max.py", nproc=2, env=CPU, timeout=90, live="quiet", summary=False)
    capsys.readouterr()
    accepted("00.2", dict(maxed=again), capsys)


def test_real_launches_record_the_lesson_run_and_its_overwrite(learner, capsys):
    from ddp_helpers.models import ToyModel

    run = learner / "runs/05_checkpoints/save_load"
    torchrun("scripts/05_save_load.py", nproc=2, args=[run], env=CPU, timeout=120, live="quiet", summary=False)
    record = json.loads((run / ".launch.json").read_text())
    assert record["script_name"] == "05_save_load.py" and record["nproc"] == 2 and record["ok"] is True
    assert record["args"] == [str(run)] and record["sha256"] == file_sha256(learner / "scripts/05_save_load.py")
    ex1 = ToyModel()
    ex1.load_state_dict({k.removeprefix("module."): v
                         for k, v in torch.load(run / "ddp_state_dict.pt", weights_only=True).items()})
    capsys.readouterr()  # the launch's command line
    accepted("05.1", dict(ex1=ex1), capsys)
    (learner / "scripts/reads.py").write_text("import sys\nprint('only read', sys.argv[1])\n")
    torchrun("scripts/reads.py", nproc=1, args=[run], env=CPU, timeout=60, live="quiet", summary=False)
    capsys.readouterr()
    accepted("05.1", dict(ex1=ex1), capsys)  # a launch that wrote nothing there leaves the lesson's record
    (learner / "scripts/mine.py").write_text("import pathlib, sys\npathlib.Path(sys.argv[1], 'mine.txt').write_text('x')\n")
    torchrun("scripts/mine.py", nproc=1, args=[run], env=CPU, timeout=60, live="quiet", summary=False)
    text = refused("05.1", dict(ex1=ex1))
    assert "last written by a launch of scripts/mine.py" in text and "the lesson's data is stale" in text


def test_a_real_launch_records_its_argparse_default_and_output_files_even_when_it_fails(learner):
    (learner / "scripts/w.py").write_text(
        'import argparse, pathlib, sys\np = argparse.ArgumentParser()\np.add_argument("--out", default="runs/w")\n'
        'p.add_argument("result")\na = p.parse_args()\npathlib.Path(a.out).mkdir(parents=True, exist_ok=True)\n'
        'pathlib.Path(a.result).write_text("{}")\nsys.exit(3)\n')
    (learner / "runs").mkdir()
    with pytest.raises(WorkerFailed) as info:
        torchrun("scripts/w.py", nproc=1, args=["runs/result.json"], env=CPU, timeout=60, live="quiet",
                 summary=False)
    assert is_registered_launch(info.value.result) and info.value.result.ok is False
    for target in (learner / "runs/w/.launch.json", learner / "runs/.result.json.launch.json"):
        record = json.loads(target.read_text())
        assert record["script_name"] == "w.py" and record["ok"] is False and record["ended"] >= record["started"]
