"""Checks of notebook 08, the capstone template: convert a single-process script to DDP, kill a rank and
verify the resume, read where a preempted run continues."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ddp_helpers.doctor.conversion import Plain
from ddp_helpers.exercises.core import (
    Answer,
    Exercise,
    check,
    close,
    find_file,
    flag,
    integer,
    numbers,
    run_file,
)
from ddp_helpers.exercises.provenance import current_launch, exit_aborted, launch_of

PLAIN_TRAIN_SIZE = 1400  # scripts/08_plain_digits.py trains on the first 1400 of the 1797 digits
CONVERTED = "08_ex_ddp_digits.py"
# the notebook's folder of runs (its RUNS), which also holds the copy of templates/train_ddp.py it launches
# (its PROGRAM, RUNS / "train_ddp.py"): 08.2's launch is of that copy, not of a scripts/ file
RUNS = Path("runs/08_capstone")
TEMPLATE_COPY = "train_ddp.py"  # the notebook's copy of templates/train_ddp.py, in RUNS
# what the lesson's own launches wrote, read from the notebook's folder (never from the check cell)
STRAIGHT = RUNS / "straight" / "final.pt"
STRAIGHT_LAUNCH = "the uninterrupted launch of train_ddp.py (section 2)"
SNAPSHOT = RUNS / "preempted_snapshot.pt"
SNAPSHOT_LAUNCH = "the preempted launch of train_ddp.py (section 4)"


def _out_of(command: str) -> str | None:
    """The value of the worker script's ``--out`` argument in a launch command."""
    try:
        words = shlex.split(command or "")
    except ValueError:
        return None
    return next((words[i + 1] for i, w in enumerate(words[:-1]) if w == "--out"), None)


def _newer(path: Path, than: Path) -> bool:
    return path.stat().st_mtime >= than.stat().st_mtime


def _read_json(path: Path | None) -> Any:
    try:
        return json.loads(path.read_text()) if path is not None else None
    except (OSError, ValueError):
        return None


def _launched(ex: Exercise, name: str, result: Any, script: str, where: str | Path = "scripts"
              ) -> tuple[Path, Any]:
    """The learner's ``where``/``script`` (scripts/ by default) that ``result`` ran, and the launch (a result ``torchrun`` returned in this
    kernel, or the one a WorkerFailed carries), after refusing what :func:`provenance.current_launch` refuses (a
    typed or copied result, a launch of another script or of another folder's copy, at another world size, or
    of a version of the script edited since) and a launch whose rank 0 printed nothing."""
    path = current_launch(ex, name, result, script, nproc=2, where=where)
    launch = launch_of(result)
    ex.require(launch.stdout.get(0), f"rank 0 of `{name}` printed nothing.", "run the script the exercise names.")
    return path, launch


# --- 08.1: the learner's conversion, judged by what its ranks did (ddp_helpers.doctor.conversion) ------------
# scripts/08_plain_digits.py trains on its first 1400 digits for --epochs epochs, 64 samples per optimizer step,
# and writes <--out>/result.json; the doctor runs the conversion for DOCTOR_EPOCHS epochs
DOCTOR_EPOCHS = 2
PLAIN = Plain(samples=PLAIN_TRAIN_SIZE, global_batch=64, epochs=DOCTOR_EPOCHS, saved="result.json")
RERUN = f"python -m ddp_helpers.doctor scripts/{CONVERTED} --out out --epochs {DOCTOR_EPOCHS}"


@check
def check_08_1(*, converted: Answer[Any]) -> None:
    """The learner's launch (its script, its output, the result.json it wrote), then the same script run again
    under the doctor, whose records say what each rank did: its samples, its optimizer steps, its writes."""
    from ddp_helpers.doctor.conversion import notes, refusal, shard_sizes
    from ddp_helpers.doctor.run import examine

    ex = Exercise("08.1")
    ex.given(converted=converted)
    aborted = exit_aborted(ex, converted)
    script, launch = _launched(ex, "converted", converted, CONVERTED)
    ex.every_rank("converted", launch, 2)
    out = _out_of(launch.command)
    found = find_file(Path(out) / "result.json") if out else None
    ex.require(found is not None, "the launch wrote no result.json into its --out folder.",
               "keep the plain script's `--out` argument and its result.json, written by rank 0 only.")
    ex.require(_newer(found, script), "result.json is older than the script: it was left by an earlier run.",
               "launch the script again after writing it.")
    result = _read_json(found)
    ex.require(isinstance(result, dict) and result.get("world_size") == 2,
               "result.json does not record a world size of 2.",
               "write `dist.get_world_size()` as \"world_size\" next to the test accuracy.")

    report, evidence = examine(script, args=["--out", "out", "--epochs", str(DOCTOR_EPOCHS)], nproc=2)
    wrong = refusal(report, evidence, PLAIN, rerun=RERUN)
    if wrong is not None:
        ex.fail(wrong.what, wrong.hint)
    for rank, size in sorted(shard_sizes(evidence).items()):
        printed = [n for line in launch.stdout.get(rank, []) for n in numbers(line)]
        ex.require(size in printed, f"rank {rank} did not print how many samples its sampler gives it per epoch.",
                   "print `len(sampler)` on every rank, as the exercise asks.")
    ex.require(isinstance(result.get("test_accuracy"), float) and result["test_accuracy"] >= 0.85,
               "the converted run's test accuracy is below 85% (the plain script reaches more).",
               "keep the plain script's optimisation (its global batch, its learning rate) and launch it for its "
               "default 5 epochs; evaluate on all test samples.")
    for line in notes(report, aborted=aborted):  # the learner's launch may have aborted where the doctor's did not
        print(line)
    ex.correct()


@check
def check_08_2(*, killed_again: Answer[Any], equal: Answer[bool]) -> None:
    """The launch is of the notebook's copy of the template, runs/08_capstone/train_ddp.py (its PROGRAM); the
    uninterrupted run compared with is the lesson's own (section 2), read from the notebook's folder."""
    ex = Exercise("08.2")
    ex.given(killed_again=killed_again, equal=equal)
    exit_aborted(ex, killed_again)  # a failed launch is refused (gloo's exit abort after the work is judged)
    script, killed_again = _launched(ex, "killed_again", killed_again, TEMPLATE_COPY, where=RUNS)
    value = flag(killed_again.command, "--max-restarts")
    restarts = int(value) if value is not None and value.isdigit() else 0
    ex.require(restarts >= 1, "the launch did not allow torchrun to restart the ranks.",
               "pass `torchrun_args=[\"--max-restarts=1\"]`.")
    lines = killed_again.stdout[0]
    resumed = [i for i, line in enumerate(lines) if line.startswith("attempt 1: resumed at epoch")]
    ex.require(resumed, "no rank was restarted: rank 0 never printed `attempt 1: resumed ...`.",
               "set the template's FAULT=kill and FAULT_AT_STEP (a step inside the run) in `env=`.")
    trained = [line.split(":")[0] for line in lines[:resumed[0]] if line.startswith("epoch ")]
    ex.require(lines[0].startswith("attempt 0: new run") and trained,
               "the first attempt did not start a new run and finish an epoch before the kill.",
               "empty the --out folder before launching (shutil.rmtree), and kill at a step after epoch 0.")
    out = _out_of(killed_again.command)
    run = find_file(Path(out) / "log.json") if out else None
    ex.require(run is not None and _newer(run, script), "the run's log.json is missing or older than the script.",
               "launch PROGRAM, the copied template, with `--out` a new folder.")
    log = _read_json(run)
    ex.require(isinstance(log, list) and all(isinstance(row, dict) for row in log) and
               [(row.get("epoch"), row.get("attempt")) for row in log][-len(_printed(lines)):] == _printed(lines),
               "the run's log.json does not hold the epochs (and attempts) this launch printed.",
               "launch into a folder of its own, emptied first.")
    folder, ref = run.parent, run_file(ex, STRAIGHT, STRAIGHT_LAUNCH)
    ex.require(folder.resolve() != ref.parent.resolve(),
               "`killed_again` was launched into the uninterrupted run's folder, so it is compared with itself.",
               "launch into a folder of its own (`--out` runs/08_capstone/ex2), emptied first.")
    straight = _read_json(ref.parent / "log.json")
    ex.require(isinstance(straight, list) and straight and all(isinstance(row, dict) and row.get("attempt") == 0
                                                             for row in straight),
               f"{STRAIGHT.parent / 'log.json'} is not the log of one uninterrupted attempt.",
               f"run {STRAIGHT_LAUNCH} again, then this check.")
    ex.require((folder / "final.pt").is_file(), "the killed run's final.pt is missing.",
               "let the killed run finish: torchrun must restart it (`--max-restarts=1`).")
    ex.require(_read_json(folder / "config.json") == _read_json(ref.parent / "config.json"),
               "the killed run's config differs from the uninterrupted run's, so their weights cannot be compared.",
               "launch with the same flags (ARGS) as section 2.")
    mine, theirs = (torch.load(p, weights_only=True) for p in (folder / "final.pt", ref))
    truth = mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    ex.require(truth, "the resumed run did not end with the uninterrupted run's weights.",
               "kill with FAULT=kill (the template's hook) and change nothing else: same flags, same knobs.")
    ex.require(_boolean(equal) is True, "`equal` is not whether every final tensor of the two runs is exactly equal.",
               "load both final.pt with torch.load(..., weights_only=True) and compare each tensor with torch.equal.")
    ex.correct()


def _printed(lines: list[str]) -> list[tuple[int, int | None]]:
    """(epoch, attempt) of every epoch line rank 0 printed, the attempt from the last `attempt N:` line."""
    printed, attempt = [], None
    for line in lines:
        words = line.replace(":", " ").split()
        if len(words) > 1 and words[0] in ("attempt", "epoch") and words[1].isdigit():
            if words[0] == "attempt":
                attempt = int(words[1])
            else:
                printed.append((int(words[1]), attempt))
    return printed


def _boolean(value: object) -> bool | None:
    """A bool, a numpy bool or a one-element bool tensor as bool (None otherwise)."""
    if isinstance(value, torch.Tensor):
        return bool(value.item()) if value.numel() == 1 and value.dtype == torch.bool else None
    if isinstance(value, bool | np.bool_):
        return bool(value)
    return None


@check
def check_08_3(*, next_epoch: Answer[int], next_step: Answer[int], next_lr: Answer[float]) -> None:
    """The snapshot is the one the lesson kept in section 4, read from the notebook's folder."""
    ex = Exercise("08.3")
    ex.given(next_epoch=next_epoch, next_step=next_step, next_lr=next_lr)
    snap = torch.load(run_file(ex, SNAPSHOT, SNAPSHOT_LAUNCH), map_location="cpu", weights_only=True)
    state = snap["state"]
    ex.require(integer(next_epoch) == state["epoch"], "`next_epoch` is not the epoch the next launch continues.",
               "the snapshot's \"state\" says where the loop stopped; a preempted epoch is continued, not skipped.")
    ex.require(integer(next_step) == state["step"],
               "`next_step` is not the number of batches of that epoch the next launch skips.",
               "the preempted rank finished its step before saving: read `state[\"step\"]`.")
    lr = snap["optimizer"]["param_groups"][0]["lr"]
    ex.require(close(next_lr, lr, rel_tol=1e-12),
               "`next_lr` is not the learning rate the next optimizer step uses.",
               "the scheduler stepped after every optimizer step; the optimizer's param_groups hold the LR it set.")
    ex.correct()
