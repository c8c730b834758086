"""Checks of notebook 00, orientation: the first launches, and the learner's first DDP conversion."""

from __future__ import annotations

import ast
import shlex
import subprocess
from pathlib import Path

import torch

from ddp_helpers.doctor.catalog import CATALOG
from ddp_helpers.doctor.conversion import REFUSED, Plain
from ddp_helpers.exercises.core import Answer, Exercise, calls, check, find_file, numbers
from ddp_helpers.exercises.provenance import (
    current_launch,
    exit_aborted,
    launch_of,
    learner_script,
    prints_no_literal,
    same_file,
)
from ddp_helpers.launch import LaunchResult


def _hello_value(nproc: int) -> float:
    """What scripts/00_hello.py all-reduces: the sum of rank + 1 over the ranks."""
    return float(sum(r + 1 for r in range(nproc)))


def _reduced(lines: list[str]) -> list[float]:
    return [numbers(line.split("all_reduce")[1])[-1] for line in lines
            if "all_reduce" in line and numbers(line.split("all_reduce")[1])]


@check
def check_00_1(*, three: Answer[LaunchResult]) -> None:
    ex = Exercise("00.1")
    ex.given(three=three)
    script = current_launch(ex, "three", three, "00_hello.py", nproc=3)
    prints_no_literal(ex, ex.tree_of(script), [_hello_value(3)], "00_hello.py")
    ex.every_rank("three", three, 3)
    for rank in range(3):
        values = _reduced(three.stdout[rank])
        ex.require(values and values[-1] == _hello_value(3),
                   f"rank {rank} did not print the all-reduced value the worker computes.",
                   "launch scripts/00_hello.py unchanged, with `summary=False` if you like, and read its lines.")
    ex.correct()


def _uses_max(tree: ast.Module) -> bool:
    """An all_reduce call whose op (keyword or second argument) is ReduceOp.MAX."""
    for call in calls(tree, "all_reduce"):
        ops = [k.value for k in call.keywords if k.arg == "op"] + call.args[1:2]
        if any(ast.unparse(op).split(".")[-1] == "MAX" for op in ops):
            return True
    return False


def _max_value(nproc: int) -> float:
    return 10.0 * (nproc - 1)


@check
def check_00_2(*, maxed: Answer[LaunchResult], script: str | Path = "scripts/00_max.py") -> None:
    """``script`` is not read: the script is the one the launch ran (kept for older check cells)."""
    ex = Exercise("00.2")
    ex.given(maxed=maxed)
    path = current_launch(ex, "maxed", maxed, "00_max.py", nproc=2)
    tree = ex.tree_of(path)
    ex.require(_uses_max(tree), f"{path.name} does not all-reduce with `dist.ReduceOp.MAX`.",
               "pass `op=dist.ReduceOp.MAX` to `dist.all_reduce`.")
    prints_no_literal(ex, tree, [_max_value(2)], path.name)
    ex.every_rank("maxed", maxed, 2)
    for rank in range(2):
        last = numbers(maxed.stdout[rank][-1])
        ex.require(last and last[-1] == _max_value(2),
                   f"rank {rank}'s last printed number is not the maximum of `rank * 10` over the ranks.",
                   "all-reduce a tensor holding `ctx.rank * 10` with the MAX op, then print `value.item()`.")
    ex.correct()


@check
def check_00_3(*, plain: Answer[subprocess.CompletedProcess]) -> None:
    ex = Exercise("00.3")
    ex.given(plain=plain)
    ex.require(hasattr(plain, "returncode") and isinstance(getattr(plain, "stderr", None), str),
               "`plain` is not a finished subprocess with its stderr captured as text.",
               "use `subprocess.run([...], capture_output=True, text=True)`.")
    args = plain.args if isinstance(plain.args, list | tuple) else str(plain.args).split()
    ex.require(any(Path(str(a)).name == "00_hello.py" for a in args) and
               not any("torch.distributed.run" in str(a) or Path(str(a)).name == "torchrun" for a in args),
               "`plain` did not run scripts/00_hello.py with plain python.",
               "run the worker script itself with `[sys.executable, \"scripts/00_hello.py\"]`, without torchrun.")
    ran = find_file(next(str(a) for a in args if Path(str(a)).name == "00_hello.py"))
    mine = learner_script("00_hello.py")
    ex.require(ran is not None and mine is not None and same_file(ran, mine),
               "`plain` ran a copy of 00_hello.py in another folder, not the scripts/00_hello.py beside this "
               "notebook.",
               "run the notebook's own script by its relative path: `[sys.executable, \"scripts/00_hello.py\"]`.")
    ex.require(plain.returncode != 0, "the process exited with code 0.",
               "run the worker script itself with `sys.executable`, without torchrun.")
    ex.require("Launch it with torchrun" in plain.stderr,
               "the runtime helper's message is not in `plain.stderr`.",
               "run scripts/00_hello.py (the worker of section 4), not another script.")
    ex.correct()


# --- 00.4: the learner's own conversion, judged by what DDP does (ddp_helpers.doctor.conversion, as 08.1) ----
# The exercise's contract: the plain script (notebooks/walkthrough/exercise_plain.py, which the learner converts
# into scripts/00_ex_ddp.py) trains on SAMPLES samples for EPOCHS epochs (fixed in the script) with batches of
# GLOBAL_BATCH and saves its model's state dict (these keys) to OUT/model.pt, OUT its first argument.
CONVERTED = "00_ex_ddp.py"
SAMPLES, GLOBAL_BATCH, EPOCHS, NPROC = 192, 24, 4, 2
PLAIN_KEYS = ["0.weight", "0.bias", "2.weight", "2.bias"]
PLAIN = Plain(samples=SAMPLES, global_batch=GLOBAL_BATCH, epochs=EPOCHS, saved="model.pt", nproc=NPROC,
              epochs_arg=None)
RERUN = f"python -m ddp_helpers.doctor scripts/{CONVERTED} out"
# what the doctor finds beyond what the exercise asks about becomes a note (the clean exit, the logged loss...)
NOTED = tuple(finding for finding in CATALOG if finding not in REFUSED)


def _out_folder(command: str, script: Path) -> str | None:
    """The worker's first argument in the launch command (the folder it saves into)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    at = next((i for i, word in enumerate(words) if Path(word).name == script.name), None)
    return words[at + 1] if at is not None and at + 1 < len(words) else None


@check
def check_00_4(*, converted: Answer[LaunchResult]) -> None:
    """The learner's launch (its script, the model.pt it saved), then the same script run again under the doctor
    (ddp_helpers.doctor), judged by the rules of every conversion exercise (ddp_helpers.doctor.conversion): each
    rank trained on its own shard at the plain script's global batch for its epochs, the replicas stayed equal
    and rank 0 alone saved model.pt."""
    from ddp_helpers.doctor.conversion import notes, refusal
    from ddp_helpers.doctor.run import examine

    ex = Exercise("00.4")
    ex.given(converted=converted)
    aborted = exit_aborted(ex, converted)  # gloo's exit abort after the work: judged, with the clean exit's note
    # a result torchrun returned in this kernel, of the learner's current scripts/00_ex_ddp.py, on NPROC ranks
    script = current_launch(ex, "converted", converted, CONVERTED, nproc=NPROC)
    launch = launch_of(converted)
    out = launch.args[0] if launch.args else _out_folder(launch.command, script)
    saved = find_file(Path(out) / "model.pt") if out else None
    ex.require(saved is not None and saved.stat().st_mtime >= launch.started,
               "the launch did not write model.pt into the folder given as the script's first argument.",
               "keep the plain script's `out` argument and its `torch.save(..., out / \"model.pt\")`, on rank 0.")
    try:
        keys = list(torch.load(saved, map_location="cpu", weights_only=True))
    except Exception:
        keys = None
    ex.require(keys == PLAIN_KEYS, "model.pt does not hold the plain model's state dict (its keys differ).",
               "save `model.module.state_dict()`: the DDP wrapper's own keys start with `module.`.")

    report, evidence = examine(script, args=["out"], nproc=NPROC)
    wrong = refusal(report, evidence, PLAIN, rerun=RERUN)
    if wrong is not None:
        ex.fail(wrong.what, wrong.hint)
    for line in notes(report, NOTED, aborted=aborted):
        print(line)
    ex.correct()
