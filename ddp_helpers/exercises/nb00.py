"""Checks of notebook 00, orientation: the first launches."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

from ddp_helpers.exercises.core import Answer, Exercise, calls, check, numbers
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
    ex.launched("three", three, 3)
    ex.script_of("three", three.command, "00_hello.py")
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
    ex.launched("maxed", maxed, 2)
    path = ex.script_of("maxed", maxed.command, "00_max.py")
    ex.require(_uses_max(ex.tree_of(path)), f"{path.name} does not all-reduce with `dist.ReduceOp.MAX`.",
               "pass `op=dist.ReduceOp.MAX` to `dist.all_reduce`.")
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
    ex.require(plain.returncode != 0, "the process exited with code 0.",
               "run the worker script itself with `sys.executable`, without torchrun.")
    ex.require("Launch it with torchrun" in plain.stderr,
               "the runtime helper's message is not in `plain.stderr`.",
               "run scripts/00_hello.py (the worker of section 4), not another script.")
    ex.correct()
