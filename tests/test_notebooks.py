"""Static checks of the committed notebooks: executed, tidy, navigable, following the template."""

import json
import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_helpers.series import notebooks

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = notebooks()
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


# Compared text (what strict nbval checks) must read the same on every machine: nothing of
# the machine's shape (notebooks/README.md, "Every machine").
# A reading ("cpu cores 2", "cuda devices: 0") or a count of this machine's CPUs; "N GPUs" only
# when N is this machine's count (the series prints hypothetical GPU counts: 2, 4, 8 GPUs).
_READING = re.compile(r"\b(?:cpu cores|cores|cpus|cpu count|cpu_count|gpus|cuda devices|device_count\(\))"
                      r"[\s:=|]*\d+", re.I)
_CPUS = re.compile(r"\b\d+\s*(?:logical )?(?:cpus|cores)\b", re.I)
_GPUS = re.compile(r"\b(\d+)\s*(?:gpus|cuda devices)\b", re.I)
_LOCAL_BUILD = re.compile(r"\b\d+\.\d+\.\d+\+(?:cpu|cu\d+|rocm[\d.]+|xpu)\b")


def machine_facts():
    """This machine's shape: strings that must not appear in compared output, and its GPU count."""
    import torch

    facts = {"Python release": platform.python_version(), "GPU count": str(torch.cuda.device_count())}
    host = socket.gethostname()
    if len(host) >= 4:
        facts["hostname"] = host
    return facts


def _ignored(cell):
    """As nbval decides (plugin.py, find_comment_markers): a comment line that is exactly the marker."""
    comments = {line.strip().lstrip("#").strip() for line in source(cell).splitlines() if line.strip().startswith("#")}
    return bool({"NBVAL_IGNORE_OUTPUT", "NBVAL_SKIP"} & comments) or bool(
        {"nbval-ignore-output", "nbval-skip"} & set(tags(cell)))


def compared_texts(nb_cells):
    """(cell index, text) of every output strict nbval compares (stderr is not compared)."""
    for i, cell in enumerate(nb_cells):
        if cell["cell_type"] != "code" or _ignored(cell):
            continue
        for out in cell.get("outputs", []):
            if out["output_type"] == "stream" and out["name"] == "stdout":
                yield i, "".join(out["text"])
            elif out["output_type"] in ("execute_result", "display_data"):
                yield i, "".join(out.get("data", {}).get("text/plain", ""))
            elif out["output_type"] == "error":
                yield i, f"{out['ename']}: {out['evalue']}"


def machine_shape(nb_cells, facts=None):
    """What of a machine's shape the compared outputs hold: [(cell, what, text)]."""
    facts = machine_facts() if facts is None else facts
    found = []
    for i, text in compared_texts(nb_cells):
        for what in ("Python release", "hostname"):
            value = facts.get(what)
            if value and re.search(rf"(?<![\w.]){re.escape(value)}(?![\w.]*\d)", text):
                found.append((i, what, value))
        found += [(i, "torch build suffix", m.group()) for m in _LOCAL_BUILD.finditer(text)]
        found += [(i, "a core or GPU reading", m.group()) for m in _READING.finditer(text)]
        found += [(i, "core count", m.group()) for m in _CPUS.finditer(text)]
        found += [(i, "GPU count", m.group()) for m in _GPUS.finditer(text)
                  if m.group(1) == facts.get("GPU count")]
    return found


def test_compared_outputs_hold_no_machine_shape(notebook):
    found = machine_shape(cells(notebook))
    assert not found, f"compared output shows the machine (ignore the cell's output, assert its facts): {found}"


# Compared text must also read the same on every supported Python and torch release (notebooks/README.md,
# "Every stack"): no line numbers outside the series' own scripts, no warning wording, no colour codes, no
# reprs of private objects, no release numbers. The series' own scripts (scripts/NN_name.py) are its text.
_RELEASE_TEXT = {
    "a line number outside the series' scripts": re.compile(
        r'File "(?:[^"]*/)?(?!\d\d_)[^"/]*", line \d+|(?<![\w/])(?:[\w.-]+/)*(?!\d\d_)[\w.-]+\.py:\d+\b'),
    "a warning's wording": re.compile(r"\b[A-Z]\w*Warning: \S"),
    "a terminal colour code": re.compile(r"\x1b\["),
    "a private object's repr": re.compile(r" object at 0x|<class '_|\(built-in\)>"),
    "a torch or Python release": re.compile(r"(?<![\w.])(?:2\.1[3-9]|3\.1[1-4])\.\d+(?![\w.]*\d)"),
}


def release_text(nb_cells):
    """What of a Python or torch release the compared outputs hold: [(cell, what, text)]."""
    return [(i, what, m.group()) for i, text in compared_texts(nb_cells)
            for what, pattern in _RELEASE_TEXT.items() for m in pattern.finditer(text)]


def test_compared_outputs_hold_no_release_text(notebook):
    found = release_text(cells(notebook))
    assert not found, f"compared output varies by release (show it on stderr or ignored, assert its meaning): {found}"


def _planted(text, ignore=False):
    src = ["# NBVAL_IGNORE_OUTPUT\n" if ignore else "", "print(report)"]
    return [{"cell_type": "code", "metadata": {}, "source": src,
             "outputs": [{"output_type": "stream", "name": "stdout", "text": [text]}]}]


@pytest.mark.parametrize("text", [
    f"python {platform.python_version()}", "torch 2.13.0+cpu", "torch 2.13.0+cu128", "cpu cores 2",
    f"{os.cpu_count()} CPUs", "cuda devices 0", "GPUs: 4", "4 GPUs visible", f"host {socket.gethostname()}"])
def test_machine_shape_guard_catches_a_planted_machine_string(text):
    facts = {**machine_facts(), "hostname": socket.gethostname(), "GPU count": "4"}
    assert machine_shape(_planted(text), facts), text
    assert not machine_shape(_planted(text, ignore=True), facts)  # shown, not compared: allowed


def test_an_ignore_marker_with_more_text_on_its_line_is_not_one():
    """nbval ignores a cell's output only for a comment that is exactly the marker."""
    cell = {"cell_type": "code", "metadata": {}, "source": ["# NBVAL_IGNORE_OUTPUT (torch's source)\n", "print(1)"]}
    assert not _ignored(cell)
    assert _ignored({**cell, "source": ["# NBVAL_IGNORE_OUTPUT\n", "# torch's source\n", "print(1)"]})


def test_machine_shape_guard_passes_portable_text():
    for text in ["torch 2.13.0 | gloo available: True", "rank=0 world=2 sum=3", "python 3.11 or newer: True",
                 "[rank 1] 2 processes, 4 steps", "shape (8, 5)", "8 GPUs: modulo  {0: (0, 1)}"]:
        facts = {"Python release": "3.11.7", "hostname": "ws-lab-07", "GPU count": "0"}
        assert not machine_shape(_planted(text), facts), text


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


@pytest.mark.parametrize("text", [
    'Traceback (most recent call last):\n  File "/usr/lib/python3.13/multiprocessing/spawn.py", line 122, in spawn_main',
    "torch/multiprocessing/spawn.py:88", "FutureWarning: The module torch.distributed.launch is deprecated",
    "UserWarning: ['torch.cuda.amp.GradScaler is enabled, but CUDA is not available.']",
    "\x1b[35mZeroDivisionError\x1b[0m", "<torch._C._distributed_c10d.ProcessGroup object at 0x7f3a>",
    "Can't get attribute 'greet' on <module '__main__' (built-in)>", "torch 2.13.0", "python 3.13.0"])
def test_release_text_guard_catches_planted_release_text(text):
    assert release_text(_planted(text)), text
    assert not release_text(_planted(text, ignore=True))  # shown, not compared: allowed


def test_release_text_guard_passes_the_series_own_text():
    for text in ['  File "scripts/00_fail.py", line 8, in <module>', "ERROR data-not-sharded  scripts/08_three_mistakes.py:15",
                 "waits in all_reduce(), called at 09_mismatch.py:35", "warnings: ['FutureWarning']",
                 "python 3.11 or newer: True", "lr 3.000e-03, 2.5 steps", "12.13.0.1 is not a release"]:
        assert not release_text(_planted(text)), text
