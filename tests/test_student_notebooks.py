"""The student notebooks: every unmodified starter fails its check with the check's message.

tools/handouts.py writes the student notebooks (solutions replaced by starters); this test runs each one
with nbclient in its own kernel, from the folder it was written to, and asserts that

- every starter cell runs without an error, and
- every check cell right after it raises ``CheckFailed`` whose message names the exercise and has a
  hint (not a NameError, TypeError or any other crash), and shows that hint as Markdown above a
  one-line error (what JupyterLab renders).

To stay fast it does not run the lessons. It runs the lesson code the starters need (found by name:
each top-level statement of a lesson cell that defines a name a starter, or a statement already chosen,
reads), then the starters and checks. A name that only the check call passes as context (a recorded run, a trained model) and that
those cells do not define is bound to a placeholder: every check looks at the learner's names first,
so with the starters' ``...`` it must fail before it reads its context (tests/test_exercises.py checks
that for every check function with real-looking context left out). Run it alone with
``pytest -m student_notebooks``.
"""

from __future__ import annotations

import ast
import builtins
import sys
import time
from pathlib import Path

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import handouts  # noqa: E402
import notebook_pages  # noqa: E402

pytestmark = pytest.mark.student_notebooks
NOTEBOOKS = handouts.notebooks()
TRANSFORM = TransformerManager()
PLACEHOLDER = '''\
class _NotRun:
    """Stands for a lesson result this test did not compute."""
    def __getattr__(self, name): return self
    def __getitem__(self, key): return self
    def __call__(self, *a, **k): return self
    def __iter__(self): return iter(())
    def __len__(self): return 0
for _name in {names!r}:
    if _name not in globals():
        globals()[_name] = _NotRun()
'''


def names_of(tree) -> tuple[set[str], set[str]]:
    """(defined, free) names of a syntax tree; free: read and not defined in it (builtins left out)."""
    defined, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (defined if isinstance(node.ctx, ast.Store) else read).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
    return defined, read - defined - set(dir(builtins))


def names(source: str) -> tuple[set[str], set[str]]:
    """(defined, free) names of a cell, its magics turned into Python first."""
    return names_of(ast.parse(TRANSFORM.transform_cell(source)))


def top_level_defined(node) -> set[str]:
    """The names a top-level statement binds (not those inside its functions or comprehensions)."""
    if isinstance(node, ast.FunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.For | ast.With):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [i.optional_vars for i in node.items if i.optional_vars] if isinstance(node, ast.With) else [node.target])
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def plan(nb) -> tuple[list[str], list]:
    """(the lesson code the starters need, the exercise cells: starters and checks) in notebook order.

    The lesson code: from each cell before the exercises, the top-level statements that define a name a
    starter (or a statement already chosen) reads, in order; everything else (launches, plots, the
    asserts of the lessons) is skipped.
    """
    cells = nb.cells
    first = next(i for i, c in enumerate(cells) if notebook_pages.EXERCISE_TAG in notebook_pages.tags(c))
    exercise = [c for c in cells[first:] if c.cell_type == "code"
                and {notebook_pages.STARTER_TAG, notebook_pages.CHECK_TAG} & set(notebook_pages.tags(c))]
    needed = set().union(*(names(c.source)[1] for c in exercise if notebook_pages.STARTER_TAG in notebook_pages.tags(c)))
    chosen = []
    for cell in reversed([c for c in cells[:first] if c.cell_type == "code"]):
        code = TRANSFORM.transform_cell(cell.source)
        picked = []
        for node in reversed(ast.parse(code).body):
            if top_level_defined(node) & needed:
                picked.append(ast.get_source_segment(code, node))
                needed |= names_of(node)[1]
        if picked:
            chosen.append("\n".join(picked[::-1]))
    return chosen[::-1], exercise


@pytest.fixture(scope="module")
def student_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("handouts") / "student"
    for path in NOTEBOOKS:
        handouts.write_student_notebook(path, folder)
    return folder


def error_of(cell):
    return next((o for o in cell.outputs if o.output_type == "error"), None)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_unmodified_starters_fail_their_checks_with_a_hint(student_folder, notebook, monkeypatch):
    nb = nbformat.read(student_folder / notebook.name, as_version=4)
    lesson, exercise = plan(nb)
    checks = [c for c in exercise if notebook_pages.CHECK_TAG in notebook_pages.tags(c)]
    if not checks:
        pytest.skip(f"{notebook.name} has no check cells yet")
    run, kinds = [], []
    for cell in [nbformat.v4.new_code_cell(code) for code in lesson] + exercise:
        kind = "check" if notebook_pages.CHECK_TAG in notebook_pages.tags(cell) else "cell"
        if kind == "check":
            run.append(nbformat.v4.new_code_cell(PLACEHOLDER.format(names=sorted(names(cell.source)[1]))))
            kinds.append("placeholder")
        run.append(cell)
        kinds.append(kind)
    small = nbformat.v4.new_notebook(cells=run, metadata=nb.metadata)
    monkeypatch.setenv("DDP_HELPERS_LIVE", "quiet")
    start = time.monotonic()
    NotebookClient(small, timeout=300, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(student_folder)}}).execute()
    print(f"{notebook.name}: {len(lesson)} lesson cells (in part), {len(checks)} checks, {time.monotonic() - start:.1f} s")
    for kind, cell in zip(kinds, small.cells, strict=True):
        error = error_of(cell)
        if kind != "check":
            assert error is None, f"{cell.source[:80]!r} failed: {error and (error.ename, error.evalue)}"
            continue
        exid = cell.metadata["exercise"]["id"]
        assert error is not None, f"exercise {exid}: the unmodified starter passed its check"
        assert error.ename == "CheckFailed", f"exercise {exid}: a crash, not the check: {error.ename}: {error.evalue}"
        assert error.evalue.startswith(f"Exercise {exid}: ") and "\nHint: " in error.evalue, error.evalue
        # in JupyterLab the hint shows as Markdown (names in backticks as code) above a one-line error
        shown = [o.data["text/markdown"] for o in cell.outputs if "text/markdown" in o.get("data", {})]
        assert len(shown) == 1 and shown[0].startswith(f"**✗ Exercise {exid}:**") and "**Hint:**" in shown[0]
        assert error.traceback == [f"CheckFailed: Exercise {exid} is not correct yet (hint above)."]
