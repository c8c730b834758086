"""Learners' words: a notebook names only files a learner has.

A learner has the repository (its tracked files) and what the notebooks write themselves (``%%writefile``
cells, outputs under ``runs/``). They do not have the tutorials this series was first written from, and
do not know what "the seed tutorials" or "the seeds" are. This test reads every notebook's markdown and
code, and the starters that check cells keep in their metadata (the student edition's code), and fails on:

- a name like the source tutorials' files (``002_ddp.txt``, ``002_…``: three digits, ``_``, a name);
- the words that point at them: "seed tutorial(s)", "seed file(s)", "Tutorial 002", "the seeds'" ...;
- a path under ``../shared`` (the source material's folder, not in this repository);
- ``scripts/NN_name.py`` that no ``%%writefile`` cell of this notebook or an earlier one writes;
- a repository path (``../x``, ``ddp_helpers/x``, ``cluster/x``, ``walkthrough/x`` ...) or a relative
  markdown link that is not a tracked file or folder of the repository.

The planted cases below show each rule failing on a fake notebook; the clean case shows what it lets be.
"""

import json
import re
import subprocess
from pathlib import Path

import pytest

from ddp_helpers import series

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = series.notebooks()

WRITEFILE = re.compile(r"^%%writefile\s+(?:-a\s+|--append\s+)?(\S+)", re.MULTILINE)
WORDS = [  # (rule, pattern): names and words of the source tutorials
    ("a source tutorial's file name", re.compile(r"(?<![\w.])\d{3}_(?:[A-Za-z…]|\.\.\.)[^\s`'\")\]]*")),
    ("the words 'seed tutorial'", re.compile(r"\bseed[- ]tutorials?\b", re.IGNORECASE)),
    ("the words 'seed file/program/script'", re.compile(r"\bseed (?:files?|programs?|scripts?|notebooks?)\b",
                                                          re.IGNORECASE)),
    ("a numbered tutorial", re.compile(r"\btutorials? \d{3}\b", re.IGNORECASE)),
    ("'the seeds' as a source", re.compile(r"\bthe seeds(?:'|\s+(?:pass|use|show|call|do|say|write|put|run)s?\b)",
                                           re.IGNORECASE)),
    ("a path under ../shared", re.compile(r"(?:\.\./)+shared\b")),
]
SCRIPT = re.compile(r"(?<![\w/.])(?:notebooks/)?(scripts/\d\d_[\w.-]*\.py)\b")
# Paths into the repository: relative to notebooks/ (../x) or from its root or notebooks/ (folder/x).
REPO_FOLDERS = ("cluster", "data", "ddp_helpers", "notebooks", "tests", "tools", "walkthrough")
REPO_PATH = re.compile(r"(?<![\w/.-])(?:(?:\.\./)+|(?:%s)/)[\w./-]*[\w-]" % "|".join(REPO_FOLDERS))
LINK = re.compile(r"\]\(\s*([^)\s#]+)[^)]*\)")
MADE_BY_RUNNING = ("runs/", "scripts/", "notebooks/runs/", "notebooks/scripts/")  # git-ignored outputs


def tracked() -> set[str]:
    """The repository's tracked files and their folders (the filesystem's, where git cannot answer)."""
    try:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True,
                               timeout=60).stdout.decode().split("\0")
    except (OSError, subprocess.SubprocessError):
        skip = {".git", ".venv", "build", "node_modules", "__pycache__"}
        files = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
                 if p.is_file() and not skip & set(p.relative_to(ROOT).parts)]
    names = {f for f in files if f}
    return names | {str(Path(f).parents[i]) for f in names for i in range(len(Path(f).parts) - 1)}


TRACKED = tracked()


def in_repository(path: str) -> bool:
    """``path`` as a notebook names it: relative to notebooks/, or from the repository's root."""
    path = path.rstrip("/.").removeprefix("./")
    here = Path("notebooks", path)
    resolved = Path(*[p for p in here.parts if p != "."])
    parts: list[str] = []
    for part in resolved.parts:
        if part == "..":
            if not parts:
                return False
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts) in TRACKED or path in TRACKED


def texts(cell: dict):
    """(where, text): the cell's source, then each starter its exercise metadata keeps."""
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    yield cell["cell_type"], source
    for k, starter in enumerate(cell.get("metadata", {}).get("exercise", {}).get("starter", [])):
        yield f"starter {k}", starter


def written_by(notebooks: list[dict]) -> list[set[str]]:
    """For each notebook, the files its %%writefile cells and those of the notebooks before it write."""
    seen, result = set(), []
    for nb in notebooks:
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                seen |= {m.removeprefix("./") for m in WRITEFILE.findall(next(texts(cell))[1])}
        result.append(set(seen))
    return result


def offences(nb: dict, written: set[str]) -> list[str]:
    """Every name in ``nb`` of a file a learner does not have, as "cell N (where): rule: 'text'"."""
    found = []
    for i, cell in enumerate(nb["cells"]):
        for where, text in texts(cell):
            hits = [(rule, m[0]) for rule, pattern in WORDS for m in pattern.finditer(text)]
            hits += [("a script no %%writefile cell writes", m[0]) for m in SCRIPT.finditer(text)
                     if m[1] not in written]
            hits += [("a repository path that does not exist", m[0]) for m in REPO_PATH.finditer(text)
                     if not m[0].startswith(MADE_BY_RUNNING) and not in_repository(m[0])]
            if where == "markdown":
                hits += [("a link to a file not in the repository", m[1]) for m in LINK.finditer(text)
                         if ":" not in m[1] and not in_repository(m[1])]
            found += [f"cell {i} ({where}): {rule}: {hit!r}" for rule, hit in hits]
    return found


REAL = [json.loads(p.read_text()) for p in NOTEBOOKS]
WRITTEN = dict(zip((p.name for p in NOTEBOOKS), written_by(REAL), strict=True))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_name_only_files_learners_have(notebook):
    assert offences(json.loads(notebook.read_text()), WRITTEN[notebook.name]) == []


def fake(markdown="", code="", starter=None) -> dict:
    """A notebook JSON: a markdown cell, a code cell, and a check cell whose metadata keeps ``starter``."""
    check = {"cell_type": "code", "source": "exercises.check_99_1()", "outputs": [], "execution_count": None,
             "metadata": {"tags": ["check"], "exercise": {"id": "99.1", "starter": [starter or "x = ..."]}}}
    return {"cells": [{"cell_type": "markdown", "source": markdown, "metadata": {}},
                      {"cell_type": "code", "source": code, "outputs": [], "execution_count": None,
                       "metadata": {}}, check]}


PLANTED = {  # name: (where the text goes, the text, the rule it breaks)
    "tutorial file": ("markdown", "As `002_ddp_basics.txt` shows, ...", "a source tutorial's file name"),
    "elided tutorial file": ("markdown", "the seed tutorial (`002_…txt`) calls it so",
                             "a source tutorial's file name"),
    "seed tutorial words": ("markdown", "The seed tutorials' first program does this.",
                            "the words 'seed tutorial'"),
    "seed file words": ("code", "# as in the seed files", "the words 'seed file/program/script'"),
    "numbered tutorial": ("markdown", "Tutorial 002 passes `device_ids` always.", "a numbered tutorial"),
    "the seeds' demos": ("markdown", "The seeds' basic demos pass `device_ids=[rank]`.", "'the seeds' as a source"),
    "the seeds pass": ("code", "model = DDP(net)  # the seeds pass device_ids always", "'the seeds' as a source"),
    "shared folder": ("code", "text = open('../shared/notes.md').read()", "a path under ../shared"),
    "unwritten script": ("code", "torchrun('scripts/99_missing.py', nproc=2)", "a script no %%writefile cell writes"),
    "unwritten script in a starter": ("starter 0", "result = torchrun('scripts/99_other.py', nproc=...)",
                                      "a script no %%writefile cell writes"),
    "missing repository file": ("markdown", "See `ddp_helpers/no_such_module.py`.",
                                "a repository path that does not exist"),
    "missing ../ file": ("code", "Path('../cluster/no_such.sbatch').read_text()",
                         "a repository path that does not exist"),
    "broken link": ("markdown", "[the notes](no_such_notes.md)", "a link to a file not in the repository"),
}


@pytest.mark.parametrize("name", PLANTED)
def test_planted_names_are_caught(name):
    where, text, rule = PLANTED[name]
    nb = fake(**{"starter" if where.startswith("starter") else where: text})
    found = offences(nb, written=set())
    assert any(line.startswith(f"cell {2 if where.startswith('starter') else ('markdown', 'code').index(where)} "
                               f"({where}): {rule}:") for line in found), found


def test_clean_text_passes():
    """What the notebooks rightly say: RNG seeds, big integer literals, their own scripts, torch's sources,
    the repository's files, outputs under runs/, links to other notebooks."""
    nb = fake(markdown="Every rank seeds its RNG alike (`torch.manual_seed(0)`); the sampler's seed is the same "
                       "on every rank, and worker seeds differ. Older tutorials say otherwise. See "
                       "`torch/distributed/run.py`, `ddp_helpers/ring.py`, `walkthrough/step0_plain.py` and "
                       "[notebook 02](02_samplers.ipynb), [the README](../README.md#curriculum).",
              code="%%writefile scripts/99_mine.py\nsame_second = 1_700_000_000\nn = 7_500_000_000\n"
                   "Path('../cluster/slurm_ddp.sbatch'); Path('runs/99/out.json')",
              starter="torchrun('scripts/99_mine.py', nproc=...)")
    assert offences(nb, written_by([nb])[0]) == []
