"""Static checks of the committed notebooks: executed, tidy, navigable, following the template."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MACHINE_PATH = re.compile(r"(/work/|/root/|/home/\w+/|/tmp/pytest|site-packages/)")


def cells(path):
    return json.loads(path.read_text())["cells"]


def source(cell):
    return "".join(cell["source"])


def tags(cell):
    return cell.get("metadata", {}).get("tags", [])


@pytest.fixture(params=NOTEBOOKS, ids=lambda p: p.name)
def notebook(request):
    return request.param


def test_series_starts_at_00():
    assert NOTEBOOKS and NOTEBOOKS[0].name == "00_orientation.ipynb"


def test_every_code_cell_is_executed(notebook):
    for i, cell in enumerate(cells(notebook)):
        if cell["cell_type"] == "code" and source(cell).strip():
            assert cell["execution_count"] is not None, f"cell {i} not executed: run make execute"


def test_no_machine_paths_in_outputs(notebook):
    for i, cell in enumerate(cells(notebook)):
        for out in cell.get("outputs", []):
            text = json.dumps(out)  # tracebacks too: make execute shortens their paths
            assert not MACHINE_PATH.search(text), f"cell {i} output shows a path of this machine"


def test_code_cells_are_short(notebook):
    for i, cell in enumerate(cells(notebook)):
        src = source(cell)
        if cell["cell_type"] == "code" and not src.lstrip().startswith("%%writefile"):
            lines = [line for line in src.splitlines() if line.strip()]
            assert len(lines) <= 30, f"cell {i} has {len(lines)} lines"


def test_template_sections(notebook):
    text = "\n".join(source(c) for c in cells(notebook) if c["cell_type"] == "markdown")
    assert re.search(r"^# \d\d · ", text, re.M), "title '# NN · Title'"
    for heading in ("**Learning objectives**", "## Exercises", "## Summary"):
        assert heading in text, heading
    all_tags = [t for c in cells(notebook) for t in tags(c)]
    assert "exercise" in all_tags and "solution" in all_tags


def test_every_exercise_is_followed_by_a_runnable_solution(notebook):
    nb = cells(notebook)
    starts = [i for i, c in enumerate(nb) if "exercise" in tags(c)]
    for k, i in enumerate(starts):
        assert nb[i]["cell_type"] == "markdown", f"exercise cell {i} should be markdown"
        end = starts[k + 1] if k + 1 < len(starts) else len(nb)
        solution = [c for c in nb[i + 1:end] if "solution" in tags(c)]
        assert any(c["cell_type"] == "code" for c in solution), f"exercise cell {i} has no solution code"


def test_ignored_outputs_still_assert(notebook):
    for i, cell in enumerate(cells(notebook)):
        src = source(cell)
        if src.startswith("# NBVAL_IGNORE_OUTPUT"):
            assert "assert" in src, f"cell {i} ignores its output and checks nothing"


def test_worker_scripts_are_named_after_their_notebook(notebook):
    number = notebook.name[:2]
    for cell in cells(notebook):
        m = re.match(r"%%writefile (\S+)", source(cell))
        if m:
            assert re.fullmatch(rf"scripts/{number}_\w+\.py", m.group(1)), m.group(1)


def test_no_raw_torchrun_shell_escapes(notebook):
    for cell in cells(notebook):
        if cell["cell_type"] == "code":
            assert not re.search(r"^\s*!\s*(torchrun|python3? -m torch\.distributed)", source(cell), re.M)


def test_navigation_is_current_and_links_resolve():
    check = subprocess.run([sys.executable, str(ROOT / "tools" / "nav.py"), "--check"],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + " (run make nav)"
    for path in NOTEBOOKS:
        for cell in cells(path):
            if cell["cell_type"] != "markdown":
                continue
            for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", source(cell)):
                if not target.startswith(("http://", "https://")):
                    assert (path.parent / target).exists(), f"{path.name}: broken link {target}"
