"""Checks of notebook 00, orientation: the first launches."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ddp_helpers.exercises.core import Answer, Exercise, check, numbers
from ddp_helpers.launch import LaunchResult


@check
def check_00_1(*, three: Answer[LaunchResult]) -> None:
    ex = Exercise("00.1")
    ex.given(three=three)
    ex.launched("three", three, 3)
    expected = sum(r + 1 for r in range(3))
    for rank, lines in sorted(three.stdout.items()):
        values = [numbers(line.split("all_reduce")[1])[-1] for line in lines if "all_reduce" in line]
        ex.require(values and values[-1] == expected,
                   f"rank {rank} did not print the all-reduced value the worker computes.",
                   "launch scripts/00_hello.py unchanged, with `summary=False` if you like, and read its lines.")
    ex.correct()


@check
def check_00_2(*, maxed: Answer[LaunchResult], script: str | Path = "scripts/00_max.py") -> None:
    ex = Exercise("00.2")
    ex.given(maxed=maxed)
    source = Path(script).read_text() if Path(script).exists() else ""
    ex.require("ReduceOp.MAX" in source, f"{script} does not use `dist.ReduceOp.MAX`.",
               "pass `op=dist.ReduceOp.MAX` to `dist.all_reduce`.")
    ex.launched("maxed", maxed, 2)
    expected = 10.0 * (len(maxed.stdout) - 1)  # the largest rank * 10
    for rank, lines in sorted(maxed.stdout.items()):
        last = numbers(lines[-1]) if lines else []
        ex.require(last and last[-1] == expected,
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
    ex.require(plain.returncode != 0, "the process exited with code 0.",
               "run the worker script itself with `sys.executable`, without torchrun.")
    ex.require("Launch it with torchrun" in plain.stderr,
               "the runtime helper's message is not in `plain.stderr`.",
               "run scripts/00_hello.py (the worker of section 4), not another script.")
    ex.correct()
