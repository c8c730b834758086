"""The workshop handouts: both editions of every notebook, no solutions for students."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import handouts  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("handouts")
    handouts.build(out)
    return out


def tagged(path, tag):
    return sum(tag in c.get("metadata", {}).get("tags", []) for c in json.loads(path.read_text())["cells"])


@pytest.mark.parametrize("notebook", handouts.notebooks(), ids=lambda p: p.name)
def test_editions(built, notebook):
    student = (built / "student" / f"{notebook.stem}.html").read_text()
    instructor = (built / "instructor" / f"{notebook.stem}.html").read_text()
    solutions, exercises = tagged(notebook, "solution"), tagged(notebook, "exercise")
    assert solutions and exercises, "the handouts rely on the solution/exercise tags"
    # nbconvert marks each cell with a celltag_<tag> class
    assert student.count("celltag_solution") == 0
    assert instructor.count("celltag_solution") == solutions
    assert student.count("celltag_exercise") == instructor.count("celltag_exercise") == exercises
    assert ".ipynb)" not in student and f'href="{notebook.stem}.ipynb"' not in student


def test_index_links_every_edition(built):
    index = (built / "index.html").read_text()
    for notebook in handouts.notebooks():
        for edition in ("student", "instructor"):
            link = f"{edition}/{notebook.stem}.html"
            assert f'href="{link}"' in index and (built / link).exists()
