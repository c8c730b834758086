"""Checks of notebook 03, launching: scripts read as code, and the runs they make."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

from ddp_helpers.exercises.core import Answer, Exercise, check, find_file, flag, integer, script_in, sequence
from ddp_helpers.exercises.provenance import current_launch, learner_script, same_file
from ddp_helpers.launch import WorkerFailed


def _parsed(script: str | Path | None) -> ast.Module:
    """The script's syntax tree (empty when it does not exist or does not parse)."""
    try:
        return ast.parse(Path(script).read_text()) if script is not None else ast.Module(body=[], type_ignores=[])
    except (OSError, SyntaxError, ValueError):
        return ast.Module(body=[], type_ignores=[])


def _script_run(ex: Exercise, name: str, process: object, expected: str, hint: str) -> Path:
    """The learner's scripts/<expected> that a finished process ran: its argument list must name it (no
    default when it names another script), and it must be the file beside the notebook, not another
    folder's copy."""
    args = getattr(process, "args", None)
    named = script_in(list(args) if isinstance(args, list | tuple) else str(args or ""), expected)
    ex.require(named is not None, f"`{name}` did not run scripts/{expected}.", hint)
    ran, mine = find_file(named), learner_script(expected)
    ex.require(ran is not None and mine is not None and same_file(ran, mine),
               f"`{name}` ran {named}, not your scripts/{expected} beside this notebook.",
               f"run your own file by its relative path, scripts/{expected}: {hint}")
    return mine


def _finished(ex: Exercise, name: str, process: object, hint: str) -> None:
    ex.require(isinstance(getattr(process, "returncode", None), int) and
               isinstance(getattr(process, "stderr", None), str),
               f"`{name}` is not a finished subprocess with its output captured as text.", hint)


def _called(node: ast.AST) -> str:
    """The last name of what a call or decorator refers to: ``mp.spawn(...)`` -> ``spawn``."""
    node = node.func if isinstance(node, ast.Call) else node
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


@check
def check_03_1(*, no_guard: Answer[subprocess.CompletedProcess],
               script: str | Path = "scripts/03_ex_no_guard.py") -> None:
    ex = Exercise("03.1")
    ex.given(no_guard=no_guard)
    _finished(ex, "no_guard", no_guard, "use `run_python(script)`.")
    script = "scripts/03_ex_no_guard.py"  # the exercise's file, whatever older check cells pass
    tree = _parsed(_script_run(ex, "no_guard", no_guard, Path(script).name,
                               "use `run_python(\"scripts/03_ex_no_guard.py\")`."))
    # a spawn call in a top-level statement: `mp.spawn(...)`, `context = mp.spawn(..., join=False)`, ...
    top_spawn = any(isinstance(n, ast.Expr | ast.Assign | ast.AnnAssign) and
                    any(isinstance(c, ast.Call) and _called(c) == "spawn" for c in ast.walk(n)) for n in tree.body)
    guarded = any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body)
    ex.require(top_spawn and not guarded,
               f"{script} does not call `mp.spawn` at top level without a `__main__` guard.",
               "write a `worker(index)` function and call `mp.spawn(worker, nprocs=1)` at the end of the file.")
    ex.require(no_guard.returncode != 0, "the script exited with code 0.",
               "without the guard the children re-run the spawn line; look at the parent's exit code.")
    ex.require("bootstrapping phase" in no_guard.stderr,
               "the children's refusal (multiprocessing's bootstrapping error) is not in stderr.",
               "the spawn call must run when a child imports the file, so keep it at top level.")
    ex.correct()


@check
def check_03_2(*, bare: Answer[subprocess.CompletedProcess],
               script: str | Path = "scripts/03_ex_no_record.py") -> None:
    ex = Exercise("03.2")
    ex.given(bare=bare)
    hint = ("launch it with `run_python(\"-m\", \"torch.distributed.run\", \"--standalone\", "
            "\"--nproc-per-node=1\", script)`.")
    _finished(ex, "bare", bare, hint)
    script = "scripts/03_ex_no_record.py"  # the exercise's file, whatever older check cells pass
    tree = _parsed(_script_run(ex, "bare", bare, Path(script).name, hint))
    decorators = {_called(d) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                  for d in n.decorator_list}
    # the worker fails: a raise, or sys.exit/exit with a message or a code (not a bare exit(), which is 0)
    raises = any(isinstance(n, ast.Raise) or (isinstance(n, ast.Call) and _called(n) == "exit" and n.args)
                 for n in ast.walk(tree))
    ex.require(raises and "record" not in decorators,
               f"{script} should raise like scripts/03_record_report.py, without `@record`.",
               "copy the worker, then delete the import of `record` and the decorator.")
    args = " ".join(map(str, bare.args)) if isinstance(bare.args, list | tuple) else str(bare.args)
    ex.require(bare.returncode != 0 and "Root Cause" in bare.stderr and "torch.distributed.run" in args,
               "`bare` is not a failed torchrun launch with its Root Cause block.", hint)
    block = bare.stderr.split("Root Cause")[1]
    ex.require("<N/A>" in block and "learning rate must be positive" not in block,
               "the Root Cause block still shows the worker's error: was the script run with @record?",
               "compare `error_file` and `traceback` with section 7.")
    ex.correct()


def _restarts_right(value: str | None) -> bool:
    return value == "2"


def _counts_right(counts: object) -> bool:
    """One restart count per start, 0 to max_restarts, as strings or numbers."""
    items = sequence(counts)
    if items is None:
        return False
    as_ints = [integer(c) for c in items]  # core.integer reads "3" too
    return as_ints == list(range(3))


@check
def check_03_3(*, counts: Answer[list[str]], caught: Answer[WorkerFailed]) -> None:
    ex = Exercise("03.3")
    ex.given(counts=counts, caught=caught)
    ex.require(isinstance(caught, WorkerFailed), "`caught` is not the WorkerFailed exception.",
               "`except WorkerFailed as failure: caught = failure`.")
    ex.require(script_in(caught.command, "03_ex_always_fails.py"),
               "`caught` is not the failure of scripts/03_ex_always_fails.py.", "launch the exercise's script.")
    current_launch(ex, "caught", caught, "03_ex_always_fails.py")  # raised by a launch of the current script
    ex.require(_restarts_right(flag(caught.command, "--max-restarts")),
               "the launch that failed did not allow the restarts the exercise asks for.",
               "pass `torchrun_args=[\"--max-restarts=2\"]` to the launch.")
    ex.require(_counts_right(counts),
               "`counts` is not the list of restart counts the file recorded, one per start.",
               "append `os.environ[\"TORCHELASTIC_RESTART_COUNT\"]` and a newline each time; delete the file "
               "before launching; read it back with `.read_text().split()`.")
    ex.require(caught.exitcode == 3, "the worker did not exit with code 3.", "end the script with `sys.exit(3)`.")
    ex.correct()
