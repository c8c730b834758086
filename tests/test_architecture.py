"""The package's shape: no import cycle (deferred imports included) and no module too long to read whole."""

import ast
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ddp_helpers"
MAX_LINES = 600


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package modules it imports, at the top or inside a function alike."""
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from . import x, from .a import b
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                # `from pkg import sub` imports the submodule sub; `from mod import name` imports mod
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in files and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_no_import_cycle_in_the_package():
    graph = import_graph(PACKAGE)
    assert len(graph) > 20 and graph["ddp_helpers.viz.timelines"] >= {"ddp_helpers.viz.figures"}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_no_module_longer_than_a_reader_takes_in():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these modules (over {MAX_LINES} lines): {long}"


def write_package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


@pytest.mark.parametrize("files", [
    {"__init__.py": "", "a.py": "from pkg.b import f\n", "b.py": "def f():\n    from pkg import a\n"},
    {"__init__.py": "", "a.py": "import pkg.sub.c\n", "sub/__init__.py": "", "sub/c.py": "from ..a import x\n"},
    {"__init__.py": "", "a.py": "from pkg import b\n", "b.py": "from . import c\n", "c.py": "from pkg.a import y\n"},
], ids=["deferred", "relative", "three"])
def test_the_cycle_finder_finds_planted_cycles(tmp_path, files):
    cycle = find_cycle(import_graph(write_package(tmp_path, files)))
    assert cycle is not None and cycle[0] == cycle[-1]


def test_the_cycle_finder_accepts_a_chain(tmp_path):
    root = write_package(tmp_path, {"__init__.py": "from pkg.a import f\n", "a.py": "from pkg.b import g\n",
                                    "b.py": "import os\n\ndef g():\n    from pkg import c\n", "c.py": ""})
    graph = import_graph(root)
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c"}, "pkg.c": set()}
    assert find_cycle(graph) is None
