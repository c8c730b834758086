"""The environment files agree: one source of versions, exact pins, conda installs the same."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def requirement_lines():
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_every_requirement_is_an_exact_pin():
    for line in requirement_lines():
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9][A-Za-z0-9_.+\-]*", line), line


def test_torch_pin_is_the_cpu_installable_one():
    assert "torch==2.13.0" in requirement_lines()


def test_environment_yml_installs_requirements_and_the_package():
    text = (ROOT / "environment.yml").read_text()
    pip_section = text.split("- pip:")[1]
    assert "-r requirements.txt" in pip_section and "-e ." in pip_section
    # no second list of versions: conda pins nothing that requirements.txt pins
    names = {line.split("==")[0].lower() for line in requirement_lines()}
    conda_deps = re.findall(r"^\s+- ([A-Za-z0-9_.\-]+)[=<>]", text, re.M)
    assert not names & {d.lower() for d in conda_deps}, conda_deps
    assert re.search(r"^\s+- python=3\.11$", text, re.M)


def test_installed_versions_match_the_pins():
    from importlib.metadata import PackageNotFoundError, version

    for line in requirement_lines():
        name, pinned = line.split("==")
        try:
            installed = version(name)
        except PackageNotFoundError:
            raise AssertionError(f"{name} is pinned but not installed; run make venv") from None
        assert installed.split("+")[0] == pinned, (name, installed, pinned)


def test_make_lab_binds_localhost_and_keeps_the_token():
    makefile = (ROOT / "Makefile").read_text()
    lab = makefile.split("\nlab:")[1].split("\n\n")[0]
    assert "--ServerApp.ip=127.0.0.1" in lab
    assert "token=" not in lab.lower() and "password" not in lab.lower()
