"""Reading a notebook for the handouts, and writing a plain HTML page: what tools/handouts.py and
tools/instructor_page.py share."""

from __future__ import annotations

import re
from pathlib import Path

import mistune

from ddp_helpers.series import NAV_TAG, title_cell

SOLUTION_TAG, EXERCISE_TAG = "solution", "exercise"
CHECK_TAG, STARTER_TAG = "check", "starter"
# A proof cell: verification a learner may skip (notebooks/README.md, "Proof cells"). Its input is folded:
# in JupyterLab by the metadata jupyter.source_hidden, in the handouts by a <details> element.
PROOF_TAG = "proof"
INSTRUCTOR_BANNER = ('<p class="edition-banner" style="background:#fff4d6;border:1px solid #e6c36a;'
                     'padding:.4em .8em;font-weight:600">Instructor edition: solutions included</p>')


def tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def source_hidden(cell) -> bool:
    return bool(cell.get("metadata", {}).get("jupyter", {}).get("source_hidden", False))


def mark_proof(cell):
    """Make a code cell a proof cell: the tag, and its input folded in JupyterLab."""
    metadata = cell.setdefault("metadata", {})
    if PROOF_TAG not in metadata.setdefault("tags", []):
        metadata["tags"].append(PROOF_TAG)
    metadata.setdefault("jupyter", {})["source_hidden"] = True
    return cell


def proof_problems(nb) -> list[str]:
    """What breaks the proof-cell convention in a notebook (a dict as read from its JSON, or a node):
    a proof cell that is not a code cell or whose input JupyterLab shows, and a folded code cell not
    tagged proof (folded code that neither the tag nor the handouts would explain)."""
    problems = []
    for i, cell in enumerate(nb.get("cells", [])):
        where = f"cell {i} ({cell.get('id', 'no id')})"
        proof, hidden = PROOF_TAG in tags(cell), source_hidden(cell)
        if proof and cell.get("cell_type") != "code":
            problems.append(f"{where}: a {cell.get('cell_type')} cell tagged {PROOF_TAG!r}; only code cells are proofs")
        elif proof and not hidden:
            problems.append(f"{where}: tagged {PROOF_TAG!r} but its input is shown (set jupyter.source_hidden)")
        elif hidden and not proof and cell.get("cell_type") == "code":
            problems.append(f"{where}: input hidden but not tagged {PROOF_TAG!r}")
    return problems


def plain(markdown: str) -> str:
    """A heading's text without its inline markup, for a page's <title>."""
    return re.sub(r"[`*]", "", markdown)


def objectives(nb) -> list[str]:
    """The bullets under **Learning objectives** in the title cell (continuation lines joined)."""
    cell, items, inside = title_cell(nb), [], False
    for line in (cell.source.splitlines() if cell else []):
        if line.strip().lower().startswith("**learning objectives"):
            inside = True
        elif inside and line.startswith("- "):
            items.append(line[2:].strip())
        elif inside and line.startswith("  ") and items:
            items[-1] += " " + line.strip()
        elif inside and line.strip():
            break
    return items


def exercises(nb) -> list[str]:
    """Each exercise's text on one line, its "**Exercise N.**" label dropped."""
    return [re.sub(r"^\*\*Exercise \d+\.?\*\*\s*", "", " ".join(cell.source.split()))
            for cell in nb.cells if EXERCISE_TAG in tags(cell)]


def words(nb) -> int:
    return sum(len(c.source.split()) for c in nb.cells if NAV_TAG not in tags(c))


# --- a plain page ------------------------------------------------------------------------------

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 60em; margin: 2em auto; padding: 0 1em; line-height: 1.45; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border-bottom: 1px solid #ddd; padding: .3em .8em; text-align: left; vertical-align: top; }}
code {{ background: #f3f3f3; padding: 0 .2em; }}
@page {{ size: A4; margin: 14mm 12mm; }}
</style></head><body>
{body}
</body></html>
"""
MARKDOWN = mistune.create_markdown(escape=False, plugins=["table"])


def write_page(target: Path, title: str, markdown: str) -> Path:
    target.write_text(PAGE.format(title=title, body=MARKDOWN(markdown)), encoding="utf-8")
    return target


def cell_text(text: str) -> str:
    """Markdown that stays inside one table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def page_path(stem: str, edition: str, kind: str = "html") -> str:
    """Where a notebook's page lies in the handouts, from their root: html/EDITION/ and pdf/EDITION/,
    and the student notebooks alone in student/ (the folder learners copy and run)."""
    return f"student/{stem}.ipynb" if kind == "ipynb" else f"{kind}/{edition}/{stem}.{kind}"


def links(stem: str, edition: str, pdf: bool) -> str:
    parts = [f"[HTML]({page_path(stem, edition)})"] + ([f"[PDF]({page_path(stem, edition, 'pdf')})"] if pdf else [])
    if edition == "student":
        parts.append(f"[notebook]({page_path(stem, edition, 'ipynb')})")
    return " · ".join(parts)


# --- the student flow: links between a section and the exercise that practises it -----------------

LINK_TAG = "flow-link"  # the cells with_exercise_links adds (left out of the slides)
SECTION = re.compile(r"^## +(\d+)\.? +(.+)$")
NAMED_SECTION = re.compile(r"\b[Ss]ections? ?-?(\d+)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")


def heading_id(text: str) -> str:
    """The id JupyterLab and nbconvert give a heading: its text (inline markup dropped), spaces as dashes."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"`([^`]*)`", r"\1", text)
    text = re.sub(r"(\*\*|\*|__)(.+?)\1", r"\2", text)
    return text.strip().replace(" ", "-")


def sections(nb) -> list[tuple[str, str, int, int]]:
    """Each numbered ``## N. Title`` section as (N, title, first cell, end cell); fenced code aside."""
    found = []
    for i, cell in enumerate(nb.cells):
        fenced = False
        for line in cell.source.splitlines() if cell.cell_type == "markdown" and NAV_TAG not in tags(cell) else []:
            fenced ^= line.lstrip().startswith(("```", "~~~"))
            match = not fenced and SECTION.match(line)
            if match:
                found.append([match[1], match[2].strip(), i, len(nb.cells)])
            elif not fenced and line.startswith("## ") and found and found[-1][3] == len(nb.cells):
                found[-1][3] = i  # an unnumbered section (Exercises, Summary) ends the numbered ones
        if found and len(found) > 1 and found[-2][3] == len(nb.cells):
            found[-2][3] = found[-1][2]
    return [tuple(s) for s in found]


def practised_section(nb, index: int, numbered: list) -> tuple | None:
    """The section an exercise (the markdown cell at ``index``) practises: ``exercise.section`` in its
    metadata or its check cell's if set, else the section its text names, else the section whose cells share the
    most of its `code` names (the earliest on a tie); None when nothing matches."""
    by_number = {s[0]: s for s in numbered}
    check = next((c for c in nb.cells[index + 1:] if CHECK_TAG in tags(c)), None)
    chosen = str(nb.cells[index].metadata.get("exercise", {}).get("section", "")
                 or (check.metadata.get("exercise", {}) if check else {}).get("section", ""))
    if chosen in by_number:
        return by_number[chosen]
    text = nb.cells[index].source
    named = NAMED_SECTION.search(text)
    if named and named[1] in by_number:
        return by_number[named[1]]
    names = {n.strip() for n in CODE_SPAN.findall(text) if len(n.strip()) > 2 and n.strip() != "..."}
    best, score = None, 0
    for section in numbered:
        body = "\n".join(c.source for c in nb.cells[section[2]:section[3]])
        hits = sum(name in body for name in names)
        if hits > score:
            best, score = section, hits
    if best is None:  # no shared names: the section whose title shares the most words with the text
        words = set(re.findall(r"[a-z]{5,}", text.lower()))
        for section in numbered:
            hits = len(words & set(re.findall(r"[a-z]{5,}", section[1].lower())))
            if hits > score:
                best, score = section, hits
    return best


def with_exercise_links(nb, notebook_id: str):
    """A copy in which each exercise is reachable from the section it practises, and back.

    The exercises stay where they are (an exercise may use names the notebook defines after its section);
    at the end of the practised section a cell links down to the exercise, and a heading ``Exercise NN.k``
    before the exercise links back up. Both work in JupyterLab and in the HTML pages (heading ids)."""
    import copy

    import nbformat

    nb = copy.deepcopy(nb)
    numbered = sections(nb)
    after, before = {}, {}
    k = 0
    for i, cell in enumerate(nb.cells):
        if EXERCISE_TAG not in tags(cell):
            continue
        k += 1
        label = f"Exercise {notebook_id}.{k}"
        section = practised_section(nb, i, numbered)
        back = (f"[↑ back to section {section[0]}, {section[1]}](#{heading_id(f'{section[0]}. {section[1]}')})"
                if section else "")
        before[i] = f"#### {label}\n\n{back}".strip()
        if section:
            after.setdefault(section[3], []).append(
                f"**Practise this now:** [{label} ↓](#{heading_id(label)}) (in the Exercises below; "
                "its heading links back here).")
    cells = []
    for i, cell in enumerate([*nb.cells, None]):
        for text in after.get(i, []):
            cells.append(nbformat.v4.new_markdown_cell(text, metadata={"tags": [LINK_TAG]}))
        if i in before:
            cells.append(nbformat.v4.new_markdown_cell(before[i], metadata={"tags": [LINK_TAG]}))
        if cell is not None:
            cells.append(cell)
    for j, cell in enumerate(cells):
        if LINK_TAG in tags(cell):
            cell.id = f"link-{j}"
    nb.cells = cells
    return nb
