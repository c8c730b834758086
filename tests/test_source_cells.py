"""A cell that prints the source of a ddp_helpers function (or of torch.distributed, which the pin fixes)
stores that source: after the function changes, the notebook must be re-executed. nbval catches a stale
output too, but only after many minutes of notebooks; this fails in seconds and names the notebook."""

import json
import re
from pathlib import Path

import pytest
import torch.distributed

from ddp_helpers.series import ROOT, notebooks

DEFINITION = re.compile(r"\s*(@|def |async def |class )")
PRINT_CALL = re.compile(r"\bprint\(")
PRINT_SOURCE = re.compile(r"\bprint\(inspect\.getsource\(")


def helper_sources() -> list[str]:
    folders = [ROOT / "ddp_helpers", Path(torch.distributed.__file__).parent]
    return [path.read_text() for folder in folders for path in sorted(folder.rglob("*.py"))]


def source_cells() -> list[tuple[str, int, str]]:
    """(notebook, cell index, stored stdout) of every code cell whose only prints are of inspect.getsource."""
    found = []
    for path in notebooks():
        for index, cell in enumerate(json.loads(path.read_text())["cells"]):
            text = "".join(cell["source"])
            prints = len(PRINT_CALL.findall(text))
            if cell["cell_type"] != "code" or not prints or prints != len(PRINT_SOURCE.findall(text)):
                continue
            stdout = "".join("".join(out["text"]) for out in cell.get("outputs", [])
                             if out.get("output_type") == "stream" and out.get("name") == "stdout")
            found.append((path.name, index, stdout))
    return found


def stale_lines(stdout: str, sources: list[str]) -> list[str]:
    """The printed lines not covered by verbatim pieces of the sources, each piece starting at a definition
    (a decorator, def or class line). Empty when the output is the current source of whole definitions."""
    lines = stdout.splitlines(keepends=True)
    stale, start = [], 0
    while start < len(lines):
        if not lines[start].strip():  # print's own newline between two definitions
            start += 1
            continue
        end = start
        if DEFINITION.match(lines[start]):
            while end < len(lines) and any("".join(lines[start:end + 1]) in s for s in sources):
                end += 1
        if end == start:
            stale.append(lines[start].rstrip())
            start += 1
        else:
            start = end
    return stale


CELLS = source_cells()


def test_the_source_printing_cells_are_found():
    # 02's sampler, 10's timing helpers, 11's sharded Adam and layer split, 12's tensor-parallel pieces
    assert {name[:2] for name, _, _ in CELLS} >= {"02", "10", "11", "12"}, CELLS
    assert all(stdout.strip() for _, _, stdout in CELLS), "a source-printing cell without stored output"


@pytest.mark.parametrize("name, index, stdout", CELLS, ids=[f"{n[:2]}-cell{i}" for n, i, _ in CELLS])
def test_printed_source_is_the_current_source(name, index, stdout):
    stale = stale_lines(stdout, helper_sources())
    assert not stale, (f"{name} cell {index} shows source that ddp_helpers or torch no longer has (first: {stale[:3]}); "
                       f"re-execute it: make execute NB=notebooks/{name}")


def test_a_stale_signature_or_body_line_is_caught():
    name, index, stdout = next(c for c in CELLS if c[0].startswith("12"))
    sources = helper_sources()
    assert stale_lines(stdout, sources) == []
    signature = next(line for line in stdout.splitlines() if line.lstrip().startswith("def "))
    unannotated = re.sub(r"\(.*", "(ctx, x, group):", signature)  # a stale signature, as before type hints
    assert stale_lines(stdout.replace(signature, unannotated, 1), sources)[0] == unannotated
    body = next(line for line in stdout.splitlines() if "all_reduce(" in line)
    assert stale_lines(stdout.replace(body, body + "  # changed", 1), sources)[0] == body + "  # changed"
    # a piece that is verbatim source but starts mid-definition is not a whole printed definition
    lines = stdout.splitlines(keepends=True)
    assert stale_lines("".join(lines[1:]), sources)[0] == lines[1].rstrip()
    assert stale_lines("def not_in_ddp_helpers():\n    pass\n", sources) == ["def not_in_ddp_helpers():",
                                                                           "    pass"]
