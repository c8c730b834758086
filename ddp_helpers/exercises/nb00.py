"""Checks of notebook 00, orientation: the first launches, and the learner's first DDP conversion."""

from __future__ import annotations

import ast
import shlex
import subprocess
from pathlib import Path
from typing import Any

import torch

from ddp_helpers.exercises.core import Answer, Exercise, calls, check, find_file, numbers
from ddp_helpers.exercises.provenance import current_launch, learner_script, prints_no_literal, same_file
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


# --- 00.4: the learner's own conversion, judged by what DDP does ------------------------------------
# The exercise's contract: the plain script (notebooks/walkthrough/exercise_plain.py, which the learner converts
# into scripts/00_ex_ddp.py) trains on SAMPLES samples for EPOCHS epochs with batches of
# GLOBAL_BATCH and saves its model's state dict (these keys) to OUT/model.pt, OUT its first argument.
CONVERTED = "00_ex_ddp.py"
SAMPLES, GLOBAL_BATCH, EPOCHS, NPROC = 192, 24, 4, 2
PLAIN_KEYS = ["0.weight", "0.bias", "2.weight", "2.bias"]
# what the doctor may find that the exercise asks about (the clean exit's and the log's warnings become notes)
REFUSED = ("no-process-group", "data-not-sharded", "sampler-epoch-not-set", "model-not-wrapped", "replicas-diverge",
           "save-on-every-rank")


def _out_folder(command: str, script: Path) -> str | None:
    """The worker's first argument in the launch command (the folder it saves into)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    at = next((i for i, word in enumerate(words) if Path(word).name == script.name), None)
    return words[at + 1] if at is not None and at + 1 < len(words) else None


def _training_passes(record: Any) -> list[Any]:
    return [p for p in record.passes() if p.grad and p.keys]


@check
def check_00_4(*, converted: Answer[LaunchResult]) -> None:
    """The learner's launch, then the same script run again under the doctor (ddp_helpers.doctor), whose
    records say what each rank did: the samples of each batch, the optimizer steps, the saves."""
    from ddp_helpers.doctor.catalog import CATALOG
    from ddp_helpers.doctor.run import examine

    ex = Exercise("00.4")
    ex.given(converted=converted)
    # a result torchrun returned in this kernel, of the learner's current scripts/00_ex_ddp.py, on NPROC ranks
    script = current_launch(ex, "converted", converted, CONVERTED, nproc=NPROC)
    started = converted.started
    out = converted.args[0] if converted.args else _out_folder(converted.command, script)
    saved = find_file(Path(out) / "model.pt") if out else None
    ex.require(saved is not None and saved.stat().st_mtime >= started,
               "the launch did not write model.pt into the folder given as the script's first argument.",
               "keep the plain script's `out` argument and its `torch.save(..., out / \"model.pt\")`, on rank 0.")
    try:
        keys = list(torch.load(saved, map_location="cpu", weights_only=True))
    except Exception:
        keys = None
    ex.require(keys == PLAIN_KEYS, "model.pt does not hold the plain model's state dict (its keys differ).",
               "save `model.module.state_dict()`: the DDP wrapper's own keys start with `module.`.")

    report, evidence = examine(script, args=["out"], nproc=NPROC)
    ex.require(report.outcome == "completed",
               f"run again at {NPROC} ranks, the script did not complete ({report.outcome}"
               f"{': ' + report.reason if report.reason else ''}).",
               "run `python -m ddp_helpers.doctor scripts/00_ex_ddp.py out` in a terminal to see where it stops.")
    for finding in report.findings:
        if finding.id in REFUSED or finding.level == "error":
            ex.fail(f"{finding.message} ({finding.id}).", CATALOG[finding.id].fix.replace("\n", " "))
    steps = EPOCHS * SAMPLES // GLOBAL_BATCH
    for rank, record in sorted(evidence.records.items()):
        passes = _training_passes(record)
        sizes = {size for p in passes for size in p.batches}
        ex.require(sizes == {GLOBAL_BATCH // NPROC},
                   f"rank {rank} trained on batches of {sorted(sizes)} samples: one optimizer step then sees "
                   f"{NPROC} x that, not the plain script's {GLOBAL_BATCH}.",
                   "make the per-rank batch the global batch divided by the number of ranks.")
        ex.require(len(passes) == EPOCHS and len(record.of("step")) == steps,
                   f"rank {rank} made {len(record.of('step'))} optimizer steps in {len(passes)} passes over its "
                   f"data; the plain script makes {steps} in {EPOCHS} epochs.",
                   "keep the plain script's EPOCHS and GLOBAL_BATCH; change only what DDP needs.")
    world = sorted(evidence.records)  # the ranks of the run the doctor made (its world size)
    for epoch in range(EPOCHS):
        shards = [set(_training_passes(evidence.records[r])[epoch].keys) for r in world]
        every = [key for shard in shards for key in shard]
        ex.require(len(every) == len(set(every)) and set(every) == set(range(SAMPLES)),
                   f"in epoch {epoch} the ranks' shards overlap or miss samples.",
                   "give the DataLoader a DistributedSampler over the whole data set (and call set_epoch).")
    writers = sorted({rank for rank, record in evidence.records.items()
                      for save in record.of("save") if str(save.get("path", "")).endswith("model.pt")})
    ex.require(writers == [0], f"model.pt was written by rank(s) {writers}, not by rank 0 alone.",
               "save on rank 0 only (`if dist.get_rank() == 0:`), then a barrier.")
    for finding in report.findings:  # what the run shows beyond the exercise: the clean exit, the logged loss
        print(f"note ({finding.id}): {CATALOG[finding.id].fix.splitlines()[0]}")
    ex.correct()
