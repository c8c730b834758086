"""Proof cells (notebooks/README.md, "Proof cells"): verification a learner may skip, folded, never lost.

A code cell tagged ``proof`` carries ``"jupyter": {"source_hidden": true}``, so JupyterLab shows its input
folded; strict nbval runs it like any cell. The handouts fold its input into a ``<details>`` element and
keep its outputs in view; the student notebook keeps the metadata.
"""

import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import handouts  # noqa: E402
import slide_copy  # noqa: E402
from notebook_pages import PROOF_TAG, mark_proof, proof_problems  # noqa: E402

NOTEBOOKS = handouts.notebooks()
DETAILS = '<details class="proof-cell">'


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_proof_cells_are_folded_code_cells(notebook):
    assert proof_problems(json.loads(notebook.read_text())) == []


def raw(*cells):
    return {"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def code(source, tags=(), hidden=None, cell_id="c"):
    metadata = {"tags": list(tags)} if tags else {}
    if hidden is not None:
        metadata["jupyter"] = {"source_hidden": hidden}
    return {"cell_type": "code", "id": cell_id, "source": source, "metadata": metadata, "outputs": [],
            "execution_count": None}


def test_a_mismatch_is_reported():
    good = raw(code("x = 1"), code("assert x == 1", [PROOF_TAG], True, "p"))
    assert proof_problems(good) == []
    untagged = proof_problems(raw(code("assert x == 1", hidden=True, cell_id="h")))
    assert untagged == ["cell 0 (h): input hidden but not tagged 'proof'"]
    shown = proof_problems(raw(code("x = 1"), code("assert x == 1", [PROOF_TAG], cell_id="p")))
    assert shown == ["cell 1 (p): tagged 'proof' but its input is shown (set jupyter.source_hidden)"]
    shown_explicitly = proof_problems(raw(code("assert x == 1", [PROOF_TAG], False, "p")))
    assert len(shown_explicitly) == 1 and "its input is shown" in shown_explicitly[0]
    markdown = {"cell_type": "markdown", "id": "m", "source": "why", "metadata": {
        "tags": [PROOF_TAG], "jupyter": {"source_hidden": True}}}
    assert proof_problems(raw(markdown)) == ["cell 0 (m): a markdown cell tagged 'proof'; only code cells are proofs"]
    # a folded markdown cell is a reader's choice in JupyterLab, not a proof
    assert proof_problems(raw({**markdown, "metadata": {"jupyter": {"source_hidden": True}}})) == []


def test_mark_proof_makes_a_consistent_cell():
    cell = code("assert 1 + 1 == 2", ["solution"])
    mark_proof(mark_proof(cell))  # twice: one tag
    assert cell["metadata"] == {"tags": ["solution", PROOF_TAG], "jupyter": {"source_hidden": True}}
    assert proof_problems(raw(cell)) == []


# --- rendering: the handouts fold a proof cell's input, not its outputs, and not other cells' inputs ----------

def small_notebook():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# 99 · Proofs"),
        nbformat.v4.new_code_cell("total = 1 + 2\nprint('visible', total)"),
        nbformat.v4.new_code_cell("assert total == 3  # the folded check\nprint('proved: total is 3')"),
        nbformat.v4.new_markdown_cell("## Exercises"),
        nbformat.v4.new_markdown_cell("**Exercise 1.** Add.", metadata={"tags": ["exercise"]}),
        nbformat.v4.new_code_cell("answer = 3", metadata={"tags": ["solution"]}),
        nbformat.v4.new_code_cell("assert answer == 3  # a folded solution", metadata={"tags": ["solution"]}),
        nbformat.v4.new_code_cell("exercises.check_99_1(answer=answer)", metadata={
            "tags": ["check"], "exercise": {"id": "99.1", "starter": ["answer = ..."]}})])
    for cell, ident in zip(nb.cells, "abcdefgh", strict=True):
        cell.id = f"cell{ident}"
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="visible 3\n")]
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", text="proved: total is 3\n")]
    mark_proof(nb.cells[2])
    mark_proof(nb.cells[6])
    return nb


def cell_html(page: str) -> dict[str, str]:
    """Each cell's HTML by cell id (nbconvert anchors every cell with id="cell-id=...")."""
    starts = [(m.start(), m[1]) for m in re.finditer(r'<div [^>]*\bid="cell-id=([^"]+)"', page)]
    return {ident: page[start:(starts[k + 1][0] if k + 1 < len(starts) else len(page))]
            for k, (start, ident) in enumerate(starts)}


def check_folded(page: str, proof_ids: set[str], other_ids: set[str]):
    """Each proof cell's input, and only its input, inside a details element; every other input outside one."""
    cells = cell_html(page)
    assert proof_ids | other_ids <= set(cells), set(cells)
    for ident in proof_ids:
        html_of = cells[ident]
        assert html_of.count(DETAILS) == 1 and "Proof" in html_of[html_of.index(DETAILS):], ident
        folded = html_of[html_of.index(DETAILS):html_of.index("</details>")]
        assert "jp-InputArea-editor" in folded and "jp-OutputArea" not in folded, ident
        outputs = html_of[html_of.index("</details>"):]
        assert ("jp-OutputArea-output" in outputs) == ("jp-OutputArea-output" in html_of), ident
    for ident in other_ids:
        assert DETAILS not in cells[ident], ident
    assert page.count(DETAILS) == len(proof_ids)


@pytest.mark.parametrize("edition", handouts.EDITIONS)
def test_a_proof_cell_is_folded_in_the_pages(edition):
    nb = small_notebook()
    copy = handouts.handout_copy(handouts.student_cells(nb) if edition == "student" else nb, ".html")
    page, _ = handouts.exporter("html", edition).from_notebook_node(copy)
    proofs = {"cellc"} | ({"cellg"} if edition == "instructor" else set())
    check_folded(page, proofs, {"cellb", "cellh"})
    assert "proved: total is 3" in cell_html(page)["cellc"].split("</details>")[1]  # its output in view
    assert "(click to show)" in page
    with pytest.raises(AssertionError):  # the check fails on a page that shows the proof's input
        check_folded(page.replace(DETAILS, "<div>").replace("</details>", "</div>"), proofs, {"cellb"})
    with pytest.raises(AssertionError):  # and on one that folds a normal cell too
        check_folded(page, proofs, {"cellb", "cellc"})


def test_a_proof_cell_is_folded_on_the_slides():
    nb = small_notebook()
    nb.cells[2].outputs += [nbformat.v4.new_output("stream", text=f"line {i}\n") for i in range(60)]
    nb = handouts.with_slide_metadata(handouts.handout_copy(nb, ".slides.html"), "99_proofs.ipynb")
    continued = [c for c in nb.cells if slide_copy.OUTPUTS_TAG in c.metadata.get("tags", [])]
    assert continued and all(PROOF_TAG in c.metadata.tags for c in continued)  # its tall outputs go on
    page, _ = handouts.exporter("slides", "instructor").from_notebook_node(nb)
    check_folded(page, {"cellc", "cellg"}, {"cellb", "cellh"} | {c.id for c in continued})  # one fold, not one per slide


def test_the_student_notebook_keeps_a_proof_folded(tmp_path):
    path = tmp_path / "notebooks" / "99_proofs.ipynb"
    path.parent.mkdir()
    nbformat.write(small_notebook(), path)
    student = json.loads(handouts.write_student_notebook(path, tmp_path / "student").read_text())
    by_id = {c["id"]: c for c in student["cells"]}
    assert by_id["cellc"]["metadata"]["jupyter"] == {"source_hidden": True}
    assert "cellg" not in by_id  # the folded solution went with the solutions
    assert proof_problems(student) == []


@pytest.mark.parametrize("notebook", [p for p in NOTEBOOKS if f'"{PROOF_TAG}"' in p.read_text()],
                         ids=lambda p: p.name)
def test_the_series_proof_cells_are_folded_in_its_pages(notebook, tmp_path):
    cells = nbformat.read(notebook, as_version=4).cells
    proofs = {c.id for c in cells if PROOF_TAG in c.metadata.get("tags", []) and "solution" not in c.metadata.tags}
    others = {c.id for c in cells if c.cell_type == "code" and PROOF_TAG not in c.metadata.get("tags", [])
              and "solution" not in c.metadata.get("tags", [])}
    page = handouts.render(notebook, tmp_path, "student").read_text()
    check_folded(page, proofs, others)
