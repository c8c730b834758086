"""ddp_helpers.releases: the supported releases, and the one list of private torch APIs the series uses.
Each listed API resolves on the stack this suite runs on (make test: the reference; make test-stacks: the
newest), and every private torch name in the package, the template and the notebooks' code is listed."""

from __future__ import annotations

import io
import json
import re
import tokenize

import pytest

from ddp_helpers.releases import PRIVATE_TORCH_APIS, resolve, torch_release
from ddp_helpers.series import ROOT, notebooks

_PRIVATE = re.compile(r"\btorch(?:\.\w+)*\._[a-z]\w*(?:\.\w+)*")
_FROM_IMPORT = re.compile(r"^[ \t]*from[ \t]+(torch[\w.]*)[ \t]+import[ \t]+(?:\(([^)]*)\)|([^\n]*))", re.M)


def code_without_comments_and_strings(source: str) -> str:
    """Python source with comments and string literals blanked in place (citations of torch's source are
    text, not uses); lines kept. Magics (%%writefile, !cmd) are dropped."""
    lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()]
    chars = [list(line) for line in lines]
    try:
        for tok in tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline):
            if tok.type in (tokenize.COMMENT, tokenize.STRING) or tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
                (row, col), (end_row, end_col) = tok.start, tok.end
                for r in range(row, end_row + 1):
                    start, stop = (col if r == row else 0), (end_col if r == end_row else len(chars[r - 1]))
                    chars[r - 1][start:stop] = " " * (stop - start)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return "\n".join("".join(line) for line in chars)


def private_uses(code: str) -> set[str]:
    """Dotted torch names with a private part: torch.x._y, and from torch.x import _y / from torch._x import y."""
    code = code_without_comments_and_strings(code)
    found = {m.group() for m in _PRIVATE.finditer(code)}
    for module, grouped, single in _FROM_IMPORT.findall(code):
        for name in ((grouped or single).replace("\n", " ").split(",")):
            name = name.split(" as ")[0].strip()
            if name and ("._" in f".{module}" or name.startswith("_")):
                found.add(f"{module}.{name}")
    return found


def listed(use: str) -> bool:
    return any(use == api or api.startswith(use + ".") or use.startswith(api + ".") for api in PRIVATE_TORCH_APIS)


def series_sources():
    for path in sorted((ROOT / "ddp_helpers").rglob("*.py")) + [ROOT / "templates" / "train_ddp.py"]:
        if path.name != "releases.py":
            yield path.relative_to(ROOT).as_posix(), path.read_text()
    for nb in notebooks():
        for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
            if cell["cell_type"] == "code":
                yield f"{nb.name} cell {i}", "".join(cell["source"])


@pytest.mark.parametrize("api", sorted(PRIVATE_TORCH_APIS))
def test_every_listed_private_api_resolves_on_this_stack(api):
    assert resolve(api) is not None
    assert len(PRIVATE_TORCH_APIS[api]) > 40  # each says why no public API serves


def test_every_private_torch_name_the_series_uses_is_listed():
    unlisted = [(where, use) for where, code in series_sources() for use in sorted(private_uses(code)) if not listed(use)]
    assert not unlisted, f"list these in ddp_helpers/releases.py with why no public API serves: {unlisted}"


@pytest.mark.parametrize(("code", "use"), [
    ("from torch.utils._pytree import tree_map", "torch.utils._pytree.tree_map"),
    ("from torch.distributed import _symmetric_memory as symm", "torch.distributed._symmetric_memory"),
    ("x = torch.distributed.distributed_c10d._world.pg_map", "torch.distributed.distributed_c10d._world.pg_map"),
    ("y = torch._C._get_tracing_state()", "torch._C._get_tracing_state")])
def test_an_unlisted_private_use_is_found(code, use):
    assert use in private_uses(code) and not listed(use)


def test_citations_and_public_names_are_not_uses():
    code = ('# see torch._dynamo.utils.counters\nx = "torch._C._foo"\nfrom torch.distributed import init_process_group\n'
            "torch.compiler.reset()\n")
    assert private_uses(code) == set()
    assert listed("torch.distributed._functional_collectives") and listed("torch._dynamo.utils.counters")


@pytest.mark.parametrize(("version", "release"), [("2.13.0+cpu", (2, 13, 0)), ("2.15.0+cu132", (2, 15, 0)),
                                                  ("2.16.0.dev20261201", (2, 16, 0)), ("2.14.1", (2, 14, 1))])
def test_torch_release_reads_the_base_version(version, release):
    assert torch_release(version) == release


def test_torch_release_refuses_a_non_version():
    with pytest.raises(ValueError, match="not a torch version"):
        torch_release("nightly")
    assert (2, 13, 0) <= torch_release() < (3, 0, 0)
