"""Checks of notebook 03, launching: scripts read as code, and the runs they make."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

from ddp_helpers.exercises.core import Answer, Exercise, check
from ddp_helpers.launch import WorkerFailed


def _parsed(script: str | Path) -> ast.Module:
    """The script's syntax tree (empty when it does not exist or does not parse)."""
    try:
        return ast.parse(Path(script).read_text())
    except (OSError, SyntaxError):
        return ast.Module(body=[], type_ignores=[])


def _called(node: ast.AST) -> str:
    """The last name of what a call or decorator refers to: ``mp.spawn(...)`` -> ``spawn``."""
    node = node.func if isinstance(node, ast.Call) else node
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


@check
def check_03_1(*, no_guard: Answer[subprocess.CompletedProcess],
               script: str | Path = "scripts/03_ex_no_guard.py") -> None:
    ex = Exercise("03.1")
    ex.given(no_guard=no_guard)
    tree = _parsed(script)
    top_spawn = any(isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and _called(n.value) == "spawn"
                    for n in tree.body)
    guarded = any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body)
    ex.require(top_spawn and not guarded,
               f"{script} does not call `mp.spawn` at top level without a `__main__` guard.",
               "write a `worker(index)` function and call `mp.spawn(worker, nprocs=1)` at the end of the file.")
    ex.require(hasattr(no_guard, "returncode") and isinstance(getattr(no_guard, "stderr", None), str),
               "`no_guard` is not a finished subprocess with captured output.", "use `run_python(script)`.")
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
    tree = _parsed(script)
    names = {_called(d) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) for d in n.decorator_list}
    names |= {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    raises = any(isinstance(n, ast.Raise) for n in ast.walk(tree))
    ex.require(raises and "record" not in names,
               f"{script} should raise like scripts/03_record_report.py, without `@record`.",
               "copy the worker, then delete the import of `record` and the decorator.")
    ex.require(getattr(bare, "returncode", 0) != 0 and "Root Cause" in getattr(bare, "stderr", ""),
               "`bare` is not a failed torchrun launch with its Root Cause block.",
               "launch it with `run_python(\"-m\", \"torch.distributed.run\", \"--standalone\", "
               "\"--nproc-per-node=1\", script)`.")
    block = bare.stderr.split("Root Cause")[1]
    ex.require("<N/A>" in block and "learning rate must be positive" not in block,
               "the Root Cause block still shows the worker's error: was the script run with @record?",
               "compare `error_file` and `traceback` with section 7.")
    ex.correct()


@check
def check_03_3(*, counts: Answer[list[str]], caught: Answer[WorkerFailed]) -> None:
    ex = Exercise("03.3")
    ex.given(counts=counts, caught=caught)
    max_restarts = 2
    ex.require(list(counts) == [str(i) for i in range(1 + max_restarts)],
               "`counts` is not the list of restart counts the file recorded, one per start.",
               "append `os.environ[\"TORCHELASTIC_RESTART_COUNT\"]` and a newline each time; delete the file "
               "before launching; read it back with `.read_text().split()`.")
    ex.require(isinstance(caught, WorkerFailed), "`caught` is not the WorkerFailed exception.",
               "`except WorkerFailed as failure: caught = failure`.")
    ex.require(caught.exitcode == 3, "the worker did not exit with code 3.", "end the script with `sys.exit(3)`.")
    ex.correct()
