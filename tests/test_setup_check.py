"""Notebook 00's set-up check (ddp_helpers.setup_check and the cell that imports it), the hosted
requirements, and make kernel."""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_helpers import setup_check
from ddp_helpers.series import ROOT, notebooks

sys.path.insert(0, str(ROOT / "tools"))
import stack  # noqa: E402


def check_cell() -> str:
    cells = json.loads(notebooks()[0].read_text())["cells"]
    first_code = next(c for c in cells if c["cell_type"] == "code")
    return "".join(first_code["source"])


def test_the_supported_range_is_the_one_requirements_pins():
    low, high = stack.supported((ROOT / "requirements.txt").read_text())
    assert setup_check.SUPPORTED_TORCH == (low, high[:2])


@pytest.mark.parametrize("version, ok", [
    ("2.13.0", True), ("2.13.0+cpu", True), ("2.14.1", True), ("2.15.0", True), ("2.15.3+cu128", True),
    ("2.12.1", False), ("2.16.0", False), ("2.9.0+cu126", False), ("3.0.0", False),
])
def test_torch_releases_inside_the_range_pass_and_others_say_which_to_install(tmp_path, version, ok):
    (tmp_path / "00_orientation.ipynb").write_text("{}")
    found = setup_check.problems(version, tmp_path, widgets=True)
    assert (found == []) == ok
    assert ok or ("2.13.0 to 2.15.x" in found[0] and "pip install torch==2.15.0" in found[0])


def test_a_kernel_outside_the_notebooks_folder_is_told_where_to_go(tmp_path):
    found = setup_check.problems("2.13.0", tmp_path, widgets=True)  # Colab's /content, say
    assert len(found) == 1 and "%cd <the course folder>/notebooks" in found[0]
    student = tmp_path / "student"  # a student edition's folder holds the notebooks too
    student.mkdir()
    (student / "00_orientation.ipynb").write_text("{}")
    assert setup_check.problems("2.13.0", student, widgets=True) == []


def test_every_problem_is_listed_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(setup_check, "problems", lambda *a: ["torch ...", "the kernel runs in ...", "ipywidgets ..."])
    with pytest.raises(setup_check.SetupError) as err:
        setup_check.check_setup(tmp_path)
    assert str(err.value).count("\n- ") == 3


def test_the_series_own_folder_is_ready(capsys):
    setup_check.check_setup(notebooks()[0].parent)
    assert capsys.readouterr().out.startswith("set-up: ")


def test_the_cell_says_how_to_install_when_the_package_is_missing(tmp_path):
    # -I -S: no site-packages and no current folder on the path, so ddp_helpers cannot be found
    done = subprocess.run([sys.executable, "-I", "-S", "-c", check_cell()], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and last.startswith("ModuleNotFoundError: ddp_helpers, the course's package")
    assert "make lab" in last and "make kernel" in last and "requirements-hosted.txt" in last
    assert "During handling" not in done.stderr  # `from None`: one error, not two


def test_the_cell_runs_the_check_when_the_package_is_there(tmp_path):
    done = subprocess.run([sys.executable, "-c", check_cell()], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and "the kernel runs in" in done.stderr  # tmp_path holds no notebook


def third_party_imports() -> set[str]:
    names = set()
    sources = [p.read_text() for p in (ROOT / "ddp_helpers").rglob("*.py")]
    for notebook in notebooks():
        for cell in json.loads(notebook.read_text())["cells"]:
            if cell["cell_type"] == "code":
                lines = "".join(cell["source"]).splitlines()
                sources.append("\n".join(line for line in lines if not line.startswith(("%", "!"))))
    for text in sources:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names)


def test_the_hosted_requirements_are_what_the_notebooks_import_besides_the_runtime():
    listed = set(re.findall(r"^([A-Za-z0-9_-]+)", (ROOT / "requirements-hosted.txt").read_text(), re.M))
    import_names = {"scikit-learn": "sklearn"}
    provided = {"IPython", "torch", "ddp_helpers"}  # Jupyter's own, the runtime's torch, this package
    assert {import_names.get(p, p) for p in listed} == third_party_imports() - provided
    assert "torch" not in listed  # the runtime's torch is kept


def test_make_kernel_offers_the_venv_to_other_jupyters(tmp_path):
    venv = Path(sys.prefix)  # this test's own venv (.venv, or make test-stacks' .venv-newest), never rebuilt:
    done = subprocess.run(["make", "-s", "-o", f"{venv}/.installed", "kernel", f"VENV={venv}",  # -o: as is
                           f"BIN={Path(sys.executable).parent}"], cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "JUPYTER_DATA_DIR": str(tmp_path), "HOME": str(tmp_path)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    spec = json.loads((tmp_path / "kernels" / "ddp-course" / "kernel.json").read_text())
    assert spec["display_name"] == "DDP course (.venv)" and Path(spec["argv"][0]).parent == Path(sys.executable).parent
