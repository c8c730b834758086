"""The learner's pages beside the notebooks: the cheat sheet, the glossary and the troubleshooting page.

The cheat sheet's script is templates/minimal_ddp.py, embedded verbatim; one torchrun launch at 2 ranks on
CPU shows its DDP semantics (own shards, equal replicas, one save by rank 0, exit code 0); the doctor finds
no mistake in it and, with the cheat sheet's lines broken, names the mistake the cheat sheet gives for each
line (three doctor runs, each breaking lines whose findings do not mask one another). Every link of the pages
lands on a notebook section that exists, and each glossary term appears in the section it links to.
"""

from __future__ import annotations

import ast
import re
import sys
import textwrap
import urllib.parse
from pathlib import Path

import nbformat
import pytest
import torch

from ddp_helpers.series import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import nav  # noqa: E402
from notebook_pages import heading_id  # noqa: E402

NOTEBOOKS_DIR = ROOT / "notebooks"
TEMPLATE = ROOT / "templates" / "minimal_ddp.py"
CHEATSHEET, GLOSSARY, TROUBLESHOOTING = (NOTEBOOKS_DIR / f"{n}.md" for n in ("cheatsheet", "glossary", "troubleshooting"))
PAGES = (CHEATSHEET, GLOSSARY, TROUBLESHOOTING)
LINK = re.compile(r"\]\(([^)\s]+)\)")
CPU = {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}


# --- links: every one lands on a file, and a notebook link on one of its headings ------------------------

def headings(path: Path) -> list[tuple[int, str, int]]:
    """Each markdown heading of a notebook outside fenced code: (level, text, cell index)."""
    found = []
    for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
        fenced = False
        for line in cell.source.splitlines() if cell.cell_type == "markdown" else []:
            fenced ^= line.lstrip().startswith(("```", "~~~"))
            m = not fenced and re.match(r"(#{1,6}) +(.+?)\s*$", line)
            if m and "nav" not in cell.metadata.get("tags", []):
                found.append((len(m[1]), m[2], i))
    return found


def section_text(path: Path, fragment: str) -> str | None:
    """The text (markdown and code) of the section whose heading id is ``fragment``, up to the next heading
    of its level or above; None when the notebook has no such heading."""
    cells = nbformat.read(path, as_version=4).cells
    marks = headings(path)
    for k, (level, text, i) in enumerate(marks):
        if heading_id(text) == fragment:
            end = next((j for lv, _, j in marks[k + 1:] if lv <= level), len(cells))
            start_text = cells[i].source[cells[i].source.index(text):]
            return "\n".join([start_text, *(c.source for c in cells[i + 1:max(end, i + 1)])])
    return None


def markdown_anchors(path: Path) -> set[str]:
    """GitHub's ids of a markdown file's headings: lower case, punctuation dropped, spaces as dashes."""
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#{1,6} (.+)$", path.read_text(), re.M)}


def link_problems(page: Path, text: str | None = None) -> list[str]:
    """What is wrong with the links of a page beside the notebooks (its own text, or ``text``)."""
    text = page.read_text() if text is None else text
    problems = []
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://")):
            continue
        name, _, fragment = target.partition("#")
        path = (page.parent / name).resolve()
        if not path.exists():
            problems.append(f"{target}: no such file")
        elif fragment and path.suffix == ".ipynb":
            if section_text(path, urllib.parse.unquote(fragment)) is None:
                problems.append(f"{target}: no such heading")
        elif fragment and path.suffix == ".md" and fragment not in markdown_anchors(path):
            problems.append(f"{target}: no such heading in {path.name}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_lands_on_a_file_and_a_heading(page):
    assert LINK.findall(page.read_text())
    assert link_problems(page) == []


def test_the_link_check_refuses_wrong_links():
    bad = ("[a](04_ddp_fundamentals.ipynb#9.-No-such-section) [b](99_missing.ipynb) "
           "[c](../README.md#no-such-part) [d](04_ddp_fundamentals.ipynb#2.-The-basic-DDP-step) [e](nothing.md)")
    assert [p.split(":")[0] for p in link_problems(CHEATSHEET, bad)] == [
        "04_ddp_fundamentals.ipynb#9.-No-such-section", "99_missing.ipynb", "../README.md#no-such-part", "nothing.md"]


def test_section_text_stops_at_the_next_heading_of_its_level():
    nb04 = NOTEBOOKS_DIR / "04_ddp_fundamentals.ipynb"
    seven = section_text(nb04, "7.-DDP's-arguments")
    two = section_text(nb04, "7.2-find_unused_parameters-and-static_graph")
    assert "find_unused_parameters" in two and two in seven and "## 8." not in seven


# --- the cheat sheet ---------------------------------------------------------------------------

def embedded_script(text: str) -> str:
    after = text.split("<!-- the block below is templates/minimal_ddp.py", 1)[1]
    return re.search(r"```python\n(.*?)```", after, re.S)[1]


def rows(text: str) -> list[list[str]]:
    """The cheat sheet's "Line by line" table: each row's cells."""
    table = text.split("## Line by line", 1)[1]
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| `")]


def test_the_cheat_sheet_embeds_the_template_verbatim():
    text = CHEATSHEET.read_text()
    assert embedded_script(text) == TEMPLATE.read_text()
    with pytest.raises(AssertionError):  # one changed character is caught
        assert embedded_script(text.replace("GLOBAL_BATCH // world", "GLOBAL_BATCH")) == TEMPLATE.read_text()


def test_the_template_is_torch_only_and_short():
    tree = ast.parse(TEMPLATE.read_text())
    modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert modules - set(sys.stdlib_module_names) == {"torch"}
    assert len(TEMPLATE.read_text().splitlines()) <= 50


def test_each_row_names_lines_of_the_script():
    script = TEMPLATE.read_text().splitlines()
    table = rows(CHEATSHEET.read_text())
    assert len(table) >= 12
    for cells in table:
        assert len(cells) == 4 and cells[3].startswith("[")
        for span in re.findall(r"`([^`]+)`", cells[0]):
            assert sum(span in line for line in script) == 1, span


# --- the cheat sheet's script, launched: DDP semantics ------------------------------------------

HOOK = '''
import os
from ddp_helpers.walk_record import install

install(os.environ["WALK_RECORD"])  # each rank's first batch and final weights

import torch

_save = torch.save


def counted(obj, f, *args, **kwargs):  # every torch.save call of this rank, by target
    with open(os.path.join(os.environ["SAVES_LOG"], "saves" + os.environ.get("RANK", "-agent")), "a") as log:
        log.write(str(f) + "\\n")
    return _save(obj, f, *args, **kwargs)


torch.save = counted
'''


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    from ddp_helpers.launch import torchrun
    from ddp_helpers.walk_record import read_record

    tmp = tmp_path_factory.mktemp("minimal")
    (tmp / "hook").mkdir()
    (tmp / "hook" / "sitecustomize.py").write_text(textwrap.dedent(HOOK))
    (tmp / "saves").mkdir()
    checkpoint = tmp / "model.pt"
    env = {**CPU, "WALK_RECORD": str(tmp / "record"), "SAVES_LOG": str(tmp / "saves"),
           "PYTHONPATH": str(tmp / "hook")}
    result = torchrun(TEMPLATE, nproc=2, args=[str(checkpoint)], env=env, timeout=180, live="quiet", summary=False)
    return result, read_record(tmp / "record"), checkpoint, tmp / "saves", tmp / "record"


def test_each_rank_trains_on_its_own_shard(launched):
    _, record, _, _, _ = launched
    first = {rank: set(r["first_batch"]) for rank, r in record.items()}
    assert sorted(first) == [0, 1] and all(len(b) == 32 // 2 for b in first.values())  # per-rank batch
    assert not first[0] & first[1]


def test_the_replicas_end_equal_and_rank_0_saved_them_once(launched):
    result, record, checkpoint, saves, recorded = launched
    assert all(torch.equal(a, b) for a, b in zip(record[0]["weights"], record[1]["weights"], strict=True))
    logged = {p.name: [f for f in p.read_text().split() if not f.startswith(str(recorded))] for p in saves.iterdir()}
    assert logged == {"saves0": [str(checkpoint)], "saves1": []}  # rank 0 once, rank 1 never (records aside)
    saved = torch.load(checkpoint, weights_only=True)
    assert list(saved) == ["weight", "bias"]  # no "module." prefix
    assert all(torch.equal(t, w) for t, w in zip(saved.values(), record[0]["weights"], strict=True))
    # rank 0 alone prints, one line per epoch (the loss averaged over the ranks); every rank exited 0
    assert [line.split(":")[0] for line in result.stdout[0]] == ["epoch 0", "epoch 1"] and not result.stdout.get(1)


# --- the doctor: nothing on the script, the cheat sheet's finding on each broken line -------------

def broken(changes: dict[str, str]) -> str:
    """The script with each line that contains a key replaced by the value (indentation kept, so every
    line keeps its number)."""
    lines = TEMPLATE.read_text().splitlines()
    for key, new in changes.items():
        [i] = [k for k, line in enumerate(lines) if key in line]
        lines[i] = lines[i][:len(lines[i]) - len(lines[i].lstrip())] + new
    return "\n".join(lines) + "\n"


def line_of(key: str) -> int:
    [i] = [k for k, line in enumerate(TEMPLATE.read_text().splitlines(), 1) if key in line]
    return i


# Each case: {the cheat sheet's line (its row's code span): (the broken line, the finding, the line it is
# reported at[, the row's code span when another line is broken])}. Warnings go together (none hides another); the errors each run alone.
CASES = {
    "warnings": {
        'local_rank = int(os.environ["LOCAL_RANK"])': ('local_rank = int(os.environ["RANK"])', "hardcoded-device",
                                                      'device = torch.device("cuda", local_rank)'),
        "sampler.set_epoch(epoch)": ("pass", "sampler-epoch-not-set", "for xb, yb in loader:"),
        "dist.all_reduce(loss, op=dist.ReduceOp.AVG)": ("pass", "unreduced-metric", 'print(f"epoch'),
        "if rank == 0:  # the replicas are equal": ("if True:", "save-on-every-rank", "torch.save("),
        "torch.load(path, map_location=device, weights_only=True)": (
            "model.module.load_state_dict(torch.load(path, map_location=device, weights_only=False))",
            "unsafe-load", "torch.load("),
        "dist.destroy_process_group()": ("pass", "no-destroy", "dist.init_process_group()"),
    },
    "no-sampler": {
        "loader = DataLoader(data, batch_size=GLOBAL_BATCH // world, sampler=sampler)": (
            "loader = DataLoader(data, batch_size=GLOBAL_BATCH // world)", "data-not-sharded", "for xb, yb in loader:",
            "sampler = DistributedSampler(data, seed=SEED)"),  # the sampler made, but not given to the loader
    },
    "no-wrap": {
        "model = DDP(torch.nn.Linear(8, 1).to(device), device_ids=[local_rank] if device.type == \"cuda\" else None)": (
            "model = torch.nn.Linear(8, 1).to(device)", "model-not-wrapped", "optimizer.step()"),
        "torch.save(model.module.state_dict(), path)": ("torch.save(model.state_dict(), path)", None, None),
        "model.module.load_state_dict": (
            "model.load_state_dict(torch.load(path, map_location=device, weights_only=True))", None, None),
    },
    "no-barrier": {
        "dist.barrier()  # no rank reads": ("pass", "load-without-barrier", "torch.load("),
    },
}


# What a case's mistake leads to, reported too: unshared gradients leave the replicas apart; a load before the
# save may fail (the file is not there yet).
CONSEQUENCES = {"no-wrap": {"replicas-diverge"}, "no-barrier": {"script-failed"}}


def doctor(tmp_path: Path, text: str):
    from ddp_helpers.doctor.run import diagnose

    script = tmp_path / "minimal_ddp.py"
    script.write_text(text)
    return diagnose(script, timeout=120)


def test_the_doctor_finds_no_mistake_in_the_script(tmp_path):
    report = doctor(tmp_path, TEMPLATE.read_text())
    assert report.outcome == "completed" and report.findings == [] and report.exit_code == 0, report.render()


@pytest.mark.parametrize("case", CASES)
def test_the_doctor_names_the_cheat_sheets_mistake_for_each_broken_line(tmp_path, case):
    table = rows(CHEATSHEET.read_text())
    expected = set()
    for key, (_, finding, at, *named) in CASES[case].items():
        if finding:
            [row] = [cells for cells in table if (named or [key])[0] in re.findall(r"`([^`]+)`", cells[0])]
            assert f"`{finding}`" in row[2], (key, row[2])  # the cheat sheet names this finding for the line
            expected.add((finding, line_of(at)))
    report = doctor(tmp_path, broken({k: new for k, (new, *_) in CASES[case].items()}))
    found = {(f.id, f.line) for f in report.findings}
    assert expected <= found, report.render()
    # the broken lines explain the report: nothing else, beyond a second sighting of the same mistake
    # (the global rank reaches the DDP line too) and what the mistake leads to
    assert {i for i, _ in found} <= {i for i, _ in expected} | CONSEQUENCES.get(case, set()), report.render()


def test_the_broken_copies_keep_every_line_number():
    for changes in CASES.values():
        text = broken({k: new for k, (new, *_) in changes.items()})
        assert len(text.splitlines()) == len(TEMPLATE.read_text().splitlines())
        assert text != TEMPLATE.read_text()


# --- the glossary: each term where its link points ----------------------------------------------

ENTRY = re.compile(r"^- \*\*(?P<term>[^*]+)\*\*(?: \((?P<aliases>[^)]*(?:\([^)]*\)[^)]*)*)\))?: (?P<text>.+)$")


def glossary() -> list[dict]:
    entries = []
    for line in GLOSSARY.read_text().splitlines():
        m = ENTRY.match(line)
        if m:
            names = [m["term"], *re.split(r",\s*", m["aliases"] or "")]
            entries.append({"term": m["term"], "names": [n.strip("` ") for n in names if n.strip("` ")],
                            "text": m["text"], "links": LINK.findall(m["text"])})
    return entries


def squashed(text: str) -> str:
    """Letters and digits only, lower case: "all-reduce", "all_reduce" and "allreduce" match."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def term_problems(entry: dict) -> list[str]:
    """Why a glossary entry's link does not teach its term: no link, no such section, the term not in it."""
    if len(entry["links"]) != 1:
        return [f"{entry['term']}: {len(entry['links'])} links, expected 1"]
    name, _, fragment = entry["links"][0].partition("#")
    section = section_text(NOTEBOOKS_DIR / name, urllib.parse.unquote(fragment)) if fragment else None
    if section is None:
        return [f"{entry['term']}: {entry['links'][0]} is no section"]
    if not any(squashed(n) in squashed(section) for n in entry["names"]):
        return [f"{entry['term']}: not in {entry['links'][0]}"]
    return []


def test_the_glossary_has_the_series_terms():
    entries = glossary()
    assert 40 <= len(entries) <= 60
    terms = {squashed(n) for e in entries for n in e["names"]}
    for term in ("rank", "local rank", "world size", "process group", "backend", "rendezvous", "store",
                 "all-reduce", "bucket", "replica", "shard", "ZeRO", "FSDP", "DTensor", "mesh", "placement",
                 "tensor parallelism", "sequence parallelism", "pipeline parallelism", "context parallelism",
                 "expert parallelism", "microbatch", "bubble"):
        assert squashed(term) in terms, term
    # every line that starts an entry parses as one, and each definition is one or two sentences
    starts = [line for line in GLOSSARY.read_text().splitlines() if line.startswith("- **")]
    assert len(starts) == len(entries)
    for e in entries:
        definition = LINK.sub("", e["text"]).split("[")[0]
        assert 1 <= len(re.findall(r"[.;:] |\.\s*$", definition.strip() + " ")) <= 4, e["term"]


def test_each_term_appears_in_the_section_it_links_to():
    assert [p for e in glossary() for p in term_problems(e)] == []


def test_the_term_check_refuses_a_wrong_section():
    entry = {"term": "Bubble", "names": ["Bubble"], "text": "", "links": ["02_samplers.ipynb#2.-The-arithmetic-of-DistributedSampler"]}
    assert term_problems(entry) == ["Bubble: not in 02_samplers.ipynb#2.-The-arithmetic-of-DistributedSampler"]
    entry["links"] = ["13_pipeline_parallelism.ipynb#9.-None"]
    assert term_problems(entry)[0].endswith("is no section")
    entry["links"] = []
    assert term_problems(entry) == ["Bubble: 0 links, expected 1"]


# --- troubleshooting: symptom, cause, fix, section; one list --------------------------------------

def troubles() -> list[dict]:
    parts = re.split(r"^### ", TROUBLESHOOTING.read_text(), flags=re.M)[1:]
    return [{"symptom": p.splitlines()[0], "body": p} for p in parts]


def trouble_problems(entry: dict) -> list[str]:
    body = entry["body"].split("\n## ")[0]
    missing = [w for w in ("**Cause.**", "**Fix.**", "**See**") if w not in body]
    if missing:
        return [f"{entry['symptom']}: no {', '.join(missing)}"]
    see = body.split("**See**", 1)[1]
    if not LINK.findall(see) and "`ddp_helpers/" not in see:
        return [f"{entry['symptom']}: links to no section"]
    return []


def test_each_trouble_has_a_cause_a_fix_and_a_section():
    entries = troubles()
    assert len(entries) >= 15
    assert [p for e in entries for p in trouble_problems(e)] == []
    assert trouble_problems({"symptom": "x", "body": "x\n**Cause.** c\n**Fix.** f\n"}) == ["x: no **See**"]
    assert trouble_problems({"symptom": "x", "body": "x\n**Cause.** c\n**Fix.** f\n**See** notebook 04"}) == [
        "x: links to no section"]


@pytest.mark.parametrize("symptom,section", [
    ("init_process_group", "03_launching.ipynb#4."), ("hangs in the middle", "09_multinode_and_debugging.ipynb#3."),
    ("Expected to have finished reduction", "04_ddp_fundamentals.ipynb#7.2"),
    ("Exit code -6", "09_multinode_and_debugging.ipynb#7.-Exit-code--6"), ("two processes on one GPU", "README.md#on-gpus"),
    ("ModuleNotFoundError: No module named 'ddp_helpers'", "00_orientation.ipynb#1."),
    ("left running after a killed", "03_launching.ipynb#2."), ("address already in use", "03_launching.ipynb#5."),
    ("CUDA out of memory", "02_samplers.ipynb#5."), ("model.to(rank)", "04_ddp_fundamentals.ipynb#1."),
    ("printed once per rank", "07_syncbn_eval_earlystop.ipynb#2."), ("module.", "05_checkpoints_and_fault_tolerance.ipynb#1.")])
def test_the_learners_failures_are_there(symptom, section):
    [entry] = [e for e in troubles() if symptom in e["body"].split("**Fix.**")[0]
               and section in e["body"].split("**See**")[1].split("\n#")[0]][:1] or [None]
    assert entry, (symptom, section)


def test_the_readme_points_to_the_one_list():
    readme = (ROOT / "README.md").read_text()
    part = readme.split("\n## Troubleshooting\n", 1)[1].split("\n## ", 1)[0]
    assert "(notebooks/troubleshooting.md)" in part
    assert not re.search(r"^- ", part, re.M), "the symptoms live in notebooks/troubleshooting.md only"


# --- every notebook's navigation line links the three pages ------------------------------------------

def test_every_navigation_line_links_the_three_pages():
    paths = nav.notebooks()
    titles = [f"{p.name[:2]} · t" for p in paths]
    for i, path in enumerate(paths):
        text = nav.nav_text(paths, titles, i)
        targets = LINK.findall(text)
        assert [t for t in targets if t.endswith(".md")] == list(nav.LEARNER_PAGES), path.name
        assert all((NOTEBOOKS_DIR / t.partition("#")[0]).exists() for t in targets), path.name
    assert set(nav.LEARNER_PAGES) == {p.name for p in PAGES}
