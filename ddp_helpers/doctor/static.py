"""What the doctor learns by reading the learner's script (its syntax tree), never by changing it.

Three readings: which lines sit inside a branch on the rank (``if rank == 0:``), which device
expressions are built from the global rank (``hardcoded-device``, which one node cannot show at run
time), and whether a printed metric went through a collective first (``unreduced-metric``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ddp_helpers.doctor.recorder import COLLECTIVES

_RANK_WORDS = re.compile(r"rank|is_main|main_process|is_master", re.IGNORECASE)
_METRIC_WORDS = re.compile(r"loss|acc|metric|correct|mse|mae|f1|perplex|score", re.IGNORECASE)
_DEVICE_CALLS = {"to", "cuda", "set_device"}
_DEVICE_KEYWORDS = {"device_ids", "output_device", "device", "map_location"}
_LIBRARIES = ("torch", "numpy", "math", "statistics", "sklearn")  # their functions do no collective


def _name_of(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def _key(node: ast.expr) -> str | None:
    """``x`` for a name, ``self.x`` for an attribute of self: what an assignment binds."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return f"self.{node.attr}"
    return None


def _roots(node: ast.AST) -> set[str]:
    """The names (and self attributes) whose values an expression reads, not the functions it calls."""
    found: set[str] = set()

    def visit(n: ast.AST) -> None:
        if (key := _key(n)) is not None and isinstance(getattr(n, "ctx", None), ast.Load):
            found.add(key)
            return
        if isinstance(n, ast.Call):
            if isinstance(n.func, ast.Attribute):
                visit(n.func.value)
            for child in (*n.args, *(k.value for k in n.keywords)):
                visit(child)
            return
        for child in ast.iter_child_nodes(n):
            visit(child)

    visit(node)
    return found


def _called(node: ast.AST) -> set[str]:
    return {name for n in ast.walk(node) if isinstance(n, ast.Call) and (name := _name_of(n.func))}


class Script:
    """The learner's script, parsed once."""

    def __init__(self, path: str | Path, text: str | None = None) -> None:
        self.path = Path(path)
        self.text = self.path.read_text() if text is None else text
        self.tree = ast.parse(self.text, str(path))
        self._rank_branches = self._find_rank_branches()
        self._global_rank = self._find_global_rank_names()
        self._reducing = self._find_reducing_functions()
        self._helpers = self._imported_helpers()

    # --- branches on the rank -----------------------------------------------------------------
    def _find_rank_branches(self) -> list[tuple[int, int, int]]:
        """(if line, first line, last line) of each body or else-branch of an if/while on the rank."""
        found = []
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.If, ast.While)) and self._mentions_rank(node.test):
                for block in (node.body, node.orelse):
                    if block:
                        found.append((node.lineno, block[0].lineno, block[-1].end_lineno or block[-1].lineno))
        return found

    @staticmethod
    def _mentions_rank(test: ast.expr) -> bool:
        for n in ast.walk(test):
            word = (n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute)
                    else n.value if isinstance(n, ast.Constant) and isinstance(n.value, str) else None)
            if word and _RANK_WORDS.search(word):
                return True
        return False

    def rank_branch(self, lines: list[int]) -> int | None:
        """The line of the ``if`` on the rank that encloses any of ``lines`` (a call chain), or None."""
        for line in lines:
            for if_line, first, last in self._rank_branches:
                if first <= line <= last:
                    return if_line
        return None

    # --- devices from the global rank -----------------------------------------------------------
    @staticmethod
    def _environ_rank(node: ast.expr) -> bool:
        """os.environ["RANK"], os.environ.get("RANK"), os.getenv("RANK")."""
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            return node.slice.value == "RANK" and "environ" in ast.unparse(node.value)
        if isinstance(node, ast.Call) and _name_of(node.func) in ("get", "getenv") and node.args:
            first = node.args[0]
            return isinstance(first, ast.Constant) and first.value == "RANK"
        return False

    def _is_global_rank(self, node: ast.expr, names: set[str]) -> bool:
        if (key := _key(node)) is not None:
            return key in names
        if isinstance(node, ast.Call):
            name = _name_of(node.func)
            if name == "get_rank" and not node.args and not node.keywords:
                return True
            if name == "int" and len(node.args) == 1:
                return self._is_global_rank(node.args[0], names)
        return self._environ_rank(node)

    def _find_global_rank_names(self) -> set[str]:
        names: set[str] = set()
        for _ in range(3):  # rank = dist.get_rank(); gpu = rank; ... a few hops
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        for t, v in self._pairs(target, node.value):
                            if (key := _key(t)) and self._is_global_rank(v, names):
                                names.add(key)
        return names

    @staticmethod
    def _pairs(target: ast.expr, value: ast.expr) -> list[tuple[ast.expr, ast.expr]]:
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
            return list(zip(target.elts, value.elts, strict=True))
        return [(target, value)]

    def _device_from_global_rank(self, node: ast.AST) -> bool:
        ranked = self._global_rank
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
            return "cuda" in text and any(isinstance(v, ast.FormattedValue) and self._is_global_rank(v.value, ranked)
                                          for v in node.values)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant):
            return "cuda" in str(node.left.value) and self._is_global_rank(node.right, ranked)
        if not isinstance(node, ast.Call):
            return False
        name = _name_of(node.func)
        if name == "device" and any(self._is_global_rank(a, ranked) for a in node.args):
            return True
        if name in _DEVICE_CALLS and node.args and self._is_global_rank(node.args[0], ranked):
            return True
        return any(k.arg in _DEVICE_KEYWORDS and any(isinstance(v, ast.expr) and self._is_global_rank(v, ranked)
                                                     for v in ast.walk(k.value)) for k in node.keywords)

    def global_rank_devices(self) -> list[tuple[int, str]]:
        """(line, code) of each device chosen from the global rank, first per line."""
        found: dict[int, str] = {}
        for node in ast.walk(self.tree):
            if self._device_from_global_rank(node):
                found.setdefault(node.lineno, ast.get_source_segment(self.text, node) or ast.unparse(node))
        return sorted(found.items())

    # --- printed metrics ---------------------------------------------------------------------
    def _find_reducing_functions(self) -> set[str]:
        functions = {n.name: n for n in ast.walk(self.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        reducing = {name for name, fn in functions.items() if _called(fn) & set(COLLECTIVES)}
        for _ in range(len(functions)):
            grown = reducing | {name for name, fn in functions.items() if _called(fn) & reducing}
            if grown == reducing:
                break
            reducing = grown
        return reducing

    def _imported_helpers(self) -> set[str]:
        """Functions imported by name from outside the libraries: the doctor cannot see whether they reduce."""
        return {alias.asname or alias.name for n in ast.walk(self.tree) if isinstance(n, ast.ImportFrom)
                and not (n.module or "").startswith(_LIBRARIES) for alias in n.names}

    def _scope(self, line: int) -> ast.AST:
        scopes = [n for n in ast.walk(self.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.lineno <= line <= (n.end_lineno or n.lineno)]
        return min(scopes, key=lambda n: (n.end_lineno or 0) - n.lineno) if scopes else self.tree

    def _reduced_names(self, scope: ast.AST) -> set[str]:
        reduced: set[str] = set()
        for n in ast.walk(scope):
            if isinstance(n, ast.Call) and _name_of(n.func) in COLLECTIVES:
                for arg in (*n.args, *(k.value for k in n.keywords)):
                    reduced |= _roots(arg)
        assignments = [(t, n.value) for n in ast.walk(scope) if isinstance(n, ast.Assign) for t in n.targets]
        assignments += [(n.target, n.value) for n in ast.walk(scope)
                        if isinstance(n, (ast.AugAssign, ast.AnnAssign)) and n.value is not None]
        for _ in range(len(assignments) + 1):
            grown = set(reduced)
            for target, value in assignments:
                if self._carries_reduced(value, grown):
                    grown |= {k for t in ast.walk(target) if (k := _key(t)) is not None}
            if grown == reduced:
                break
            reduced = grown
        return reduced

    def _carries_reduced(self, value: ast.AST, reduced: set[str]) -> bool:
        return bool(_roots(value) & reduced or _called(value) & (self._reducing | self._helpers))

    def unreduced_metric(self, line: int) -> str | None:
        """The code of a metric that the print call at ``line`` shows without any collective before it."""
        calls = [n for n in ast.walk(self.tree) if isinstance(n, ast.Call) and _name_of(n.func) == "print"
                 and n.lineno <= line <= (n.end_lineno or n.lineno)]
        if not calls:
            return None
        reduced = self._reduced_names(self._scope(line))
        for value, label in self._labelled_values(calls[0]):
            if _METRIC_WORDS.search(label) and _roots(value) and not self._carries_reduced(value, reduced):
                return ast.unparse(value)
        return None

    @staticmethod
    def _labelled_values(call: ast.Call) -> list[tuple[ast.expr, str]]:
        """Each printed value with the text before it and its own code (what says it is a metric)."""
        found, text = [], ""
        for arg in call.args:
            parts = arg.values if isinstance(arg, ast.JoinedStr) else [arg]
            for part in parts:
                if isinstance(part, ast.Constant):
                    text = str(part.value)
                else:
                    value = part.value if isinstance(part, ast.FormattedValue) else part
                    found.append((value, text[-24:] + " " + ast.unparse(value)))
                    text = ""
        return found
