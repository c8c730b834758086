"""The workshop handouts as text: editions, titles, offline script URLs, print CSS, slides, plans.

The pages are built without the browser libraries (no npm here); tests/browser/test_handouts_offline.py
opens them, PDFs included, in Chromium with the network refused.
"""

import html
import json
import os
import re
import sys
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from nbconvert.filters.highlight import Highlight2HTML

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import handouts  # noqa: E402
import instructor_page  # noqa: E402
import notebook_pages  # noqa: E402
import notebook_times  # noqa: E402
import slide_copy  # noqa: E402
from notebook_pages import with_exercise_links  # noqa: E402

NOTEBOOKS = handouts.notebooks()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("handouts")
    handouts.build(out, slides=True, assets=False)
    return out


def heading(path):
    """The notebook's "# NN · Title" line, read from its JSON by the test (not by handouts/series)."""
    for cell in json.loads(path.read_text())["cells"]:
        m = re.match(r"# (\d\d · [^\n]+)", "".join(cell["source"])) if cell["cell_type"] == "markdown" else None
        if m:
            return m[1]
    raise AssertionError(f"{path.name}: no '# NN · Title' heading")


def tagged(path, tag):
    return sum(tag in c.get("metadata", {}).get("tags", []) for c in json.loads(path.read_text())["cells"])


def pages(built):
    for path in NOTEBOOKS:
        yield path, built / handouts.page_path(path.stem, "student")
        yield path, built / handouts.page_path(path.stem, "instructor")
        yield path, built / "slides" / f"{path.stem}.slides.html"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_editions(built, notebook):
    student = (built / handouts.page_path(notebook.stem, "student")).read_text()
    instructor = (built / handouts.page_path(notebook.stem, "instructor")).read_text()
    solutions, exercises = tagged(notebook, "solution"), tagged(notebook, "exercise")
    assert solutions and exercises, "the handouts rely on the solution/exercise tags"
    # nbconvert marks each cell with a celltag_<tag> class
    assert student.count("celltag_solution") == 0
    assert instructor.count("celltag_solution") == solutions
    assert student.count("celltag_exercise") == instructor.count("celltag_exercise") == exercises
    assert not re.search(r'href="[^"]*\.ipynb[#"]', student), "notebook links point at the HTML pages"
    # the student edition shows each exercise's starter cells and its check cell instead of the solution
    checks = [c for c in nbformat.read(notebook, as_version=4).cells if "check" in c.metadata.get("tags", [])]
    starters = sum(len(c.metadata["exercise"]["starter"]) for c in checks)
    assert student.count("celltag_check") == instructor.count("celltag_check") == len(checks)
    assert student.count("celltag_starter") == starters and instructor.count("celltag_starter") == 0


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_check_cells_follow_the_solutions(notebook):
    """Each exercise: its solution cells, then one check cell naming this exercise, with a starter."""
    cells = nbformat.read(notebook, as_version=4).cells
    starts = [i for i, c in enumerate(cells) if "exercise" in c.metadata.get("tags", [])]
    checks = [c for c in cells if "check" in c.metadata.get("tags", [])]
    if not checks:
        pytest.skip(f"{notebook.name}: no check cells yet")
    for k, start in enumerate(starts, 1):
        end = start + 1
        while "solution" in cells[end].metadata.get("tags", []):
            end += 1
        check = cells[end]
        assert "check" in check.metadata.get("tags", []), (notebook.name, k)
        assert check.metadata["exercise"]["id"] == f"{notebook.name[:2]}.{k}"
        assert f"exercises.check_{notebook.name[:2]}_{k}(" in check.source
        assert check.metadata["exercise"]["starter"] and all("..." in s for s in check.metadata["exercise"]["starter"])
        assert check.outputs and check.outputs[-1]["text"] == f"✓ Exercise {notebook.name[:2]}.{k}: correct\n"
    assert len(checks) == len(starts)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_student_notebooks(built, notebook):
    folder = built / "student"
    student = nbformat.read(folder / notebook.name, as_version=4)
    nbformat.validate(student)
    tags_of = [c.metadata.get("tags", []) for c in student.cells]
    assert not any("solution" in t for t in tags_of)
    assert sum("exercise" in t for t in tags_of) == tagged(notebook, "exercise")
    for cell, cell_tags in zip(student.cells, tags_of, strict=True):
        if {"check", "starter"} & set(cell_tags):
            assert not cell.outputs and cell.execution_count is None
    for i, cell_tags in enumerate(tags_of):  # after an exercise: its starters, then its check
        if "exercise" in cell_tags and "check" in sum(tags_of, []):
            j = i + 1
            while "starter" in tags_of[j]:
                j += 1
            assert j > i + 1 and "check" in tags_of[j], (notebook.name, i)
    lesson = [c for c, t in zip(student.cells, tags_of, strict=True) if not t and c.cell_type == "code"]
    assert sum(bool(c.outputs) for c in lesson) == sum(
        bool(c.outputs) for c in nbformat.read(notebook, as_version=4).cells
        if c.cell_type == "code" and not c.metadata.get("tags")), "lesson outputs are kept"
    # paths that leave notebooks/ point at the repository from the student folder
    text = "\n".join(c.source for c in student.cells)
    assert not re.search(r"""["'(]\.\./(data|cluster|README\.md)""", text)
    up = os.path.relpath(ROOT, folder) if folder.resolve().is_relative_to(ROOT) else str(ROOT)
    for name in set(re.findall(r"""["'(]\.\./(data|cluster|README\.md)""", "\n".join(
            c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"))):
        assert f"{up}/{name}" in text and (folder / up / name).resolve() == (ROOT / name).resolve()
    # markdown links stay inside the folder: the contents page beside the notebooks, the other notebooks
    links = re.findall(r"\]\(([^)#\s]+)", "\n".join(c.source for c in student.cells if c.cell_type == "markdown"))
    assert "README.md" in links and (folder / "README.md").exists()
    assert all(not link.startswith("../") for link in links if "://" not in link), links
    for name in ("scripts", "runs", "walkthrough"):
        assert (folder / name).is_dir()


def test_student_cells_put_starters_in_place_of_solutions():
    check = nbformat.v4.new_code_cell("exercises.check_99_1(a=a)", metadata={
        "tags": ["check"], "exercise": {"id": "99.1", "starter": ["a = ...", "b = ..."]}})
    check.outputs = [nbformat.v4.new_output("stream", text="✓ Exercise 99.1: correct\n")]
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("**Exercise 1.**", metadata={"tags": ["exercise"]}),
        nbformat.v4.new_code_cell("a = 1", metadata={"tags": ["solution"]}),
        nbformat.v4.new_markdown_cell("why", metadata={"tags": ["solution"]}), check])
    student = handouts.student_cells(nb)
    assert [(c.cell_type, c.source) for c in student.cells] == [
        ("markdown", "**Exercise 1.**"), ("code", "a = ..."), ("code", "b = ..."),
        ("code", "exercises.check_99_1(a=a)")]
    assert student.cells[-1].outputs == [] and nb.cells[-1].outputs  # the original is left alone
    assert len({c.id for c in student.cells}) == 4


class Loads(HTMLParser):
    """What a page loads by itself: script, stylesheet, image and iframe URLs, and module imports."""

    def __init__(self):
        super().__init__()
        self.urls, self._script = [], False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("script", "img", "iframe") and a.get("src"):
            self.urls.append(a["src"])
        if tag == "link" and a.get("href"):
            self.urls.append(a["href"])
        self._script = tag == "script"

    def handle_data(self, data):
        if self._script:
            self.urls += re.findall(r"""(?:import\s*\(?|from)\s*['"]([^'"]+)['"]""", data)
            self.urls += re.findall(r"""['"](https?://[^'"]+\.(?:js|css|mjs))['"]""", data)

    def handle_endtag(self, tag):
        self._script = False


def test_committed_notebooks_keep_their_nbval_comments():
    assert any("# NBVAL_" in p.read_text() for p in NOTEBOOKS)  # the handouts drop them from copies


def test_pages_load_only_their_assets(built):
    shipped = set(handouts.ASSETS)
    for _, page in pages(built):
        parser = Loads()
        parser.feed(page.read_text())
        urls = [u for u in parser.urls if not u.startswith("data:")]
        assert urls, page
        for url in urls:
            prefix = "../assets/" if page.parent.name == "slides" else "../../assets/"
            assert url.startswith(prefix), (page.name, url)
            local = url.removeprefix(prefix).split("?")[0]
            assert any(local == s or local.startswith(s + "/") for s in shipped), (page.name, url)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_titles_nbval_comments_print_css(built, notebook):
    title = heading(notebook)
    assert handouts.title_of(notebook) == title and title.startswith(notebook.name[:2])
    plain = title.replace("`", "")  # the heading as text: no code markup (no title uses * markup)
    assert "*" not in title
    for _, page in [p for p in pages(built) if p[0] == notebook]:
        text = page.read_text()
        suffix = " slides" if page.parent.name == "slides" else ""
        assert f"<title>{html.escape(plain, quote=False)}{suffix}</title>" in text
        assert "NBVAL_" not in text
        if not suffix:
            css = text[text.index("@media print"):]
            assert "size: A4" in text and "white-space: pre-wrap !important" in css


def headings(nb) -> int:
    """The ``## `` lines of the markdown cells outside fenced code, counted by the test itself."""
    count = 0
    for cell in nb.cells:
        fenced = False
        for line in cell.source.splitlines() if cell.cell_type == "markdown" else []:
            fenced ^= line.lstrip().startswith("```")
            count += line.startswith("## ") and not fenced
    return count


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_one_slide_per_section(built, notebook):
    nb = nbformat.read(notebook, as_version=4)
    assert not any("slideshow" in c.metadata for c in nb.cells), "slide metadata belongs to the tool"
    sections = headings(nb)  # wherever a heading stands in its cell
    slides = (built / "slides" / f"{notebook.stem}.slides.html").read_text()
    body = slides[slides.index('<div class="slides">'):]
    # nbconvert writes each slide as <section><section>...</section></section>, a sub-slide as a
    # further <section> inside the outer one
    assert len(re.findall(r"<section>\s*<section>", body)) == 1 + sections
    assert body.count("<section") >= 2 * (1 + sections)
    copy = handouts.with_slide_metadata(handouts.handout_copy(nb, ".slides.html"), notebook.name)
    kinds = [c.metadata.slideshow.slide_type for c in copy.cells]
    assert kinds.count("slide") == 2 + sections  # the first (navigation) cell, the title, the sections
    starts = [c.source.splitlines()[0] for c, k in zip(copy.cells, kinds, strict=True) if k == "slide"][2:]
    assert all(line.startswith("## ") for line in starts)
    # long inputs are shortened, with a pointer to the notebook; worker scripts show only their head
    for cell in copy.cells:
        lines = cell.source.splitlines()
        if cell.cell_type == "code" and lines:
            assert len(lines) <= slide_copy.LONG_INPUT, (notebook.name, lines[0])
            if lines[0].startswith("%%writefile") and len(lines) > slide_copy.SHOWN_SCRIPT + 1:
                pytest.fail(f"{notebook.name}: a whole script on a slide: {lines[0]}")
            if "more lines: the whole cell is in" in lines[-1]:
                assert notebook.name in lines[-1]


def test_slides_split_headings_inside_cells_and_tall_sections():
    long_code = "\n".join(f"x{i} = {i}" for i in range(40))
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# 99 · T"),
        nbformat.v4.new_markdown_cell("> **Note.** a callout\n\n## 1. First\n\ntext\n\n```\n## not a heading\n```"),
        *[nbformat.v4.new_code_cell("\n".join(["y = 1"] * 10)) for _ in range(6)],
        nbformat.v4.new_code_cell(long_code),
        nbformat.v4.new_code_cell("%%writefile scripts/w.py\n" + long_code),
        nbformat.v4.new_markdown_cell("## 2. Second")])
    copy = handouts.with_slide_metadata(handouts.handout_copy(nb, ".slides.html"), "99_t.ipynb")
    kinds = [c.metadata.slideshow.slide_type for c in copy.cells]
    sources = [c.source for c in copy.cells]
    assert sources[1] == "> **Note.** a callout" and sources[2].startswith("## 1. First")
    assert "## not a heading" in sources[2]  # a fenced "## " line is code, not a heading
    assert kinds.count("slide") == 3 and kinds.count("subslide") >= 2
    assert kinds[sources.index("## 2. Second")] == "slide"
    shortened = [s for s in sources if "more lines: the whole cell is in 99_t.ipynb" in s]
    assert len(shortened) == 2 and all(len(s.splitlines()) <= slide_copy.LONG_INPUT for s in shortened)
    old = handouts.with_slide_metadata(handouts.handout_copy(nb, ".slides.html"), split=False)
    assert [c.metadata.slideshow.slide_type for c in old.cells].count("slide") == 2  # the 1st ## missed
    assert long_code in [c.source for c in old.cells]
    assert len(nb.cells) == 11 and "slideshow" not in nb.cells[1].metadata  # the original is left alone


def test_slide_css_fits_80_characters_and_scrolls_at_load(built):
    slides = (built / "slides" / "02_samplers.slides.html").read_text()
    size = int(re.findall(r"--jp-code-font-size:\s*(\d+)px", slides)[-1])  # the last one wins
    assert 80 * 0.6 * size <= 960 - 80  # a monospace character is about 0.6 em wide
    assert 'Reveal.on("ready", setScrollingSlide)' in slides


WIDGET_NOTEBOOKS = [p for p in NOTEBOOKS if p.name[:2] in ("01", "02")]


@pytest.mark.parametrize("notebook", WIDGET_NOTEBOOKS, ids=lambda p: p.name)
def test_widgets_are_pictures_in_handouts(built, notebook):
    raw = json.loads(notebook.read_text())
    views = [o for c in raw["cells"] for o in c.get("outputs", [])
             if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert views and all("image/png" in o["data"] for o in views), "each widget stores its picture"
    for page in (built / handouts.page_path(notebook.stem, "student"), built / handouts.page_path(notebook.stem, "instructor"),
                 built / "slides" / f"{notebook.stem}.slides.html"):
        text = page.read_text()
        assert "application/vnd.jupyter.widget-view+json" not in text, page
        assert "application/vnd.jupyter.widget-state+json" not in text, page
        for view in views:
            assert view["data"]["image/png"].replace("\n", "")[:200] in text, page
        assert text.count("interactive in JupyterLab") == len(views), page
    # the student notebook keeps its widgets: they work when it runs
    student = json.loads((built / "student" / notebook.name).read_text())
    kept = [o for c in student["cells"] for o in c.get("outputs", [])
            if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(kept) == len(views) and "widgets" in student["metadata"]


def test_index_renders_markdown(built):
    index = (built / "index.html").read_text()
    assert "`" not in index and "<table>" in index and "<code>" in index
    assert 'href="instructor.html"' in index
    for notebook in NOTEBOOKS:
        name = heading(notebook).partition(" · ")[2]
        rendered = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(name, quote=False))
        assert rendered in index
        for link in (handouts.page_path(notebook.stem, "student"), handouts.page_path(notebook.stem, "instructor"),
                     f"slides/{notebook.stem}.slides.html"):
            assert f'href="{link}"' in index and (built / link).exists()


def test_instructor_page(built):
    page = html.unescape((built / "instructor.html").read_text())
    assert "`" not in page and "Half-day plan" in page and "Full-day plan: DDP core" in page
    assert "Two-day plan" in page and "Three-day plan" in page and "Set-up checklist" in page
    for notebook in NOTEBOOKS:
        nb = nbformat.read(notebook, as_version=4)
        goals, tasks = notebook_pages.objectives(nb), notebook_pages.exercises(nb)
        assert 3 <= len(goals) <= 7 and len(tasks) == tagged(notebook, "exercise")
        # the first objective and the first exercise, read from the cells by the test itself
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        goal = re.search(r"\*\*Learning objectives\*\*\s*\n- ([^\n]+)", text)[1]
        task = next(c.source for c in nb.cells if "exercise" in c.metadata.get("tags", []))
        task = re.sub(r"^\*\*Exercise 1\.\*\*\s*", "", task)
        assert goals[0].startswith(goal.strip()) and " ".join(task.split()) == tasks[0]
        for first in (goal, task):
            first_words = first.split("`")[0].split("\n")[0][:30]
            assert first_words in page, (notebook.name, first_words)


def test_plan_keeps_order_and_goes_on_after_pauses():
    s = [instructor_page.Session(f"{i:02d}", f"{i:02d} · n", m, None) for i, m in enumerate([50, 60, 50, 85, 90])]
    blocks = [("09:00", 90), ("break", 15), ("10:45", 90), ("lunch", 60), ("13:00", 60)]
    rows, left = instructor_page.plan(s, blocks)
    assert rows[2:] == ["| 09:00 | 00 · n | 50 |", "| 09:50 | 01 · n | 40 |",
                        "| | *break* | 15 |",
                        "| 10:45 | 01 · n (continued) | 20 |", "| 11:05 | 02 · n | 50 |",
                        "| 11:55 | *questions, exercises, catching up* | 20 |",
                        "| | *lunch* | 60 |", "| 13:00 | *questions, exercises, catching up* | 60 |"]
    assert [x.stem for x in left] == ["03", "04"]  # 85 min do not fit in the 80 left


def test_teaching_minutes_count_run_time_reading_and_exercises():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# 99 · T\n\n" + "word " * 236),
        nbformat.v4.new_markdown_cell("**Exercise 1.** Do it.", metadata={"tags": ["exercise"]})])
    assert notebook_pages.words(nb) == 244
    assert notebook_pages.exercises(nb) == ["Do it."]
    # 244 words / 120 per minute = 2.03 min, + 10 min exercise + 3 min run = 15.03, rounded up to 20
    assert instructor_page.teaching_minutes(nb, 180) == 20 and instructor_page.teaching_minutes(nb, 170) == 15


def test_nbval_comments_are_dropped_from_copies_only():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 99 · T"), nbformat.v4.new_code_cell(
        "# NBVAL_IGNORE_OUTPUT\nx = 1  # NBVAL_ is only a comment line\n    # NBVAL_SKIP\ny = 2")])
    copy = handouts.handout_copy(nb, ".html")  # a copy needs the title cell: it names the page
    assert copy.cells[1].source == "x = 1  # NBVAL_ is only a comment line\ny = 2"
    assert nb.cells[1].source.startswith("# NBVAL_IGNORE_OUTPUT")


def test_times_from_junit(tmp_path):
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="notebooks.03_launching.ipynb" name="Cell 0" time="1.25"/>'
        '<testcase classname="notebooks.03_launching.ipynb" name="Cell 1" time="2.5"><failure/></testcase>'
        '<testcase classname="notebooks.04_ddp_fundamentals.ipynb" name="Cell 0" time="4"/>'
        '<testcase classname="tests.test_ring" name="test_x" time="9"/>'
        '</testsuite></testsuites>')
    assert notebook_times.from_junit(report) == {
        "03_launching.ipynb": {"seconds": 3.8, "cells": 2, "passed": False},
        "04_ddp_fundamentals.ipynb": {"seconds": 4.0, "cells": 1, "passed": True}}


def test_committed_times_are_measurements():
    times = json.loads(instructor_page.TIMES.read_text())
    assert times["machine"]["cpu_count"] >= 1 and times["machine"]["date"]
    names = {p.name for p in NOTEBOOKS}
    for name, entry in times["notebooks"].items():
        assert name in names and entry["seconds"] > 0 and entry["cells"] > 0


# --- the instructor page's plans, table, checklist and banner, read back from the HTML -----------------

ALL = [p.name[:2] for p in NOTEBOOKS]
BANNER = "Instructor edition: solutions included"


def section(page: str, title: str) -> str:
    """The HTML from the <h2> that starts with ``title`` to the next <h2>."""
    start = page.index(f"<h2>{title}")
    end = page.find("<h2", start + 4)
    return page[start:end if end > 0 else len(page)]


def tables(fragment: str) -> list[list[list[str]]]:
    """Each table's body rows, as the cells' text."""
    found = []
    for body in re.findall(r"<tbody>(.*?)</tbody>", fragment, re.S):
        rows = re.findall(r"<tr>(.*?)</tr>", body, re.S)
        found.append([[html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td>(.*?)</td>", r, re.S)]
                      for r in rows])
    return found


def minutes_of(clock_text: str) -> int:
    return 60 * int(clock_text[:2]) + int(clock_text[3:])


def check_fits(rows, blocks):
    """Each row starts when the one before ends, the pauses are the day's, no row runs past its block."""
    teaching = [(minutes_of(b), n) for b, n in blocks if b[0].isdigit()]
    pauses = [(b, n) for b, n in blocks if not b[0].isdigit()]
    block, now = 0, teaching[0][0]
    for time, label, minutes in rows:
        if not time:  # a pause
            assert (label, int(minutes)) == pauses[block], (label, minutes)
            block += 1
            now = teaching[block][0]
            continue
        assert minutes_of(time) == now, (time, label)
        now += int(minutes)
        assert int(minutes) > 0 and now <= sum(teaching[block]), (time, label, minutes)
    assert block == len(pauses), "the day's last blocks are missing"


def taught(rows) -> list[str]:
    """The notebooks a plan starts, in order (a "continued" row is the same notebook after a pause)."""
    return [label[:2] for time, label, _ in rows if time and re.match(r"\d\d · ", label)
            and not label.endswith("(continued)")]


def check_core_day(page: str):
    part = section(page, "Full-day plan: DDP core")
    [rows] = tables(part)
    check_fits(rows, instructor_page.FULL_DAY_BLOCKS)
    numbers = taught(rows)
    assert {"04", "05", "08"} <= set(numbers), numbers
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers), numbers
    assert "Does not fit" not in part and "Left for self-study" in part


def check_half_day(page: str):
    part = section(page, "Half-day plan")
    [rows] = tables(part)
    check_fits(rows, instructor_page.HALF_DAY_BLOCKS)
    assert "04" in taught(rows) and "Does not fit" not in part


def check_days(page: str, title: str, days: int):
    part = section(page, title)
    found = tables(part)
    assert len(found) == days == part.count("<h3>Day "), (title, len(found))
    for rows in found:
        check_fits(rows, instructor_page.FULL_DAY_BLOCKS)
    numbers = [n for rows in found for n in taught(rows)]
    assert numbers == ALL, (title, numbers)  # every notebook once, in series order
    assert "Does not fit" not in part


def check_table(page: str):
    [rows] = tables(section(page, "The notebooks at a glance"))
    times = json.loads(instructor_page.TIMES.read_text())["notebooks"]
    assert len(rows) == len(NOTEBOOKS) + 1  # and a total
    for row, path in zip(rows, NOTEBOOKS, strict=False):
        cells = json.loads(path.read_text())["cells"]
        nb = nbformat.read(path, as_version=4)
        assert row == [path.name[:2], heading(path).partition(" · ")[2].replace("`", ""), str(len(cells)),
                       str(times[path.name]["cells"]), f"{times[path.name]['seconds']:.1f}",
                       str(instructor_page.teaching_minutes(nb, times[path.name]["seconds"])),
                       str(tagged(path, "exercise"))], path.name
    total = rows[-1]
    assert total[2] == str(sum(len(json.loads(p.read_text())["cells"]) for p in NOTEBOOKS))
    assert total[4] == f"{sum(times[p.name]['seconds'] for p in NOTEBOOKS):.1f}"
    assert total[6] == str(sum(tagged(p, "exercise") for p in NOTEBOOKS))


def check_banner(page: str):
    assert page.count(BANNER) == 1


def test_core_day_reaches_ddp_and_fits(built):
    check_core_day((built / "instructor.html").read_text())


def test_half_day_reaches_a_first_ddp_model(built):
    check_half_day((built / "instructor.html").read_text())


@pytest.mark.parametrize("title,days", [("Two-day plan", 2), ("Three-day plan", 3)])
def test_multi_day_plans_cover_every_notebook_once(built, title, days):
    check_days((built / "instructor.html").read_text(), title, days)


def test_notebook_table(built):
    check_table((built / "instructor.html").read_text())


def test_banner_on_every_instructor_page(built):
    check_banner((built / "instructor.html").read_text())
    for path in NOTEBOOKS:
        check_banner((built / handouts.page_path(path.stem, "instructor")).read_text())
        assert BANNER not in (built / handouts.page_path(path.stem, "student")).read_text()


def test_setup_checklist_and_machine_check(built):
    part = html.unescape(section((built / "instructor.html").read_text(), "Set-up checklist"))
    for words in ("Install", "offline", "ddp_helpers", "Machine check", "time make venv", "make test"):
        assert words in part, words
    command = re.search(r"<pre><code[^>]*>(.*?)</code></pre>", part, re.S)[1].strip()
    assert command == instructor_page.MACHINE_CHECK
    # what the command relies on: notebook 00 writes the hello worker, and its stored launch printed the sum
    cells = json.loads(NOTEBOOKS[0].read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells]
    assert any(s.startswith("%%writefile scripts/00_hello.py\n") for s in sources)
    launch = next(c for c, s in zip(cells, sources, strict=True)
                  if 'torchrun("scripts/00_hello.py", nproc=2, nnodes=2)' in s)
    printed = "".join("".join(o.get("text", "")) for o in launch["outputs"])
    assert printed.count("all_reduce(rank+1)=10") >= 4
    # the venv size, README's download size and CI's install time come from this machine and README.md
    readme = (ROOT / "README.md").read_text()
    size = re.search(r"installs\s+about\s+([\d.]+\s+[GMK]B)", readme)
    assert size is None or f"about {size[1]}" in " ".join(part.split())


def test_part_minutes_add_up_to_teaching_minutes():
    times = json.loads(instructor_page.TIMES.read_text())["notebooks"]
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        o = instructor_page.outline(nb)
        assert o.frame + sum(o.sections.values()) + sum(o.exercises) == notebook_pages.words(nb)
        assert len(o.exercises) == tagged(path, "exercise") and o.sections
        run = times.get(path.name, {}).get("seconds")
        whole = instructor_page.Part(path.name[:2])
        assert instructor_page.part_minutes(o, run, whole) == instructor_page.teaching_minutes(nb, run)
        none = instructor_page.Part(path.name[:2], sections=(), exercises=())
        assert instructor_page.part_minutes(o, run, none) < instructor_page.teaching_minutes(nb, run)
    with pytest.raises(ValueError):  # a plan naming a section the notebook does not have
        instructor_page.part_minutes(instructor_page.outline(nbformat.read(NOTEBOOKS[0], as_version=4)), None,
                              instructor_page.Part("00", sections=(99,)))


def test_spans():
    assert instructor_page.spans((1, 2, 3, 5)) == "1–3, 5" and instructor_page.spans((1, 2, 4)) == "1, 2, 4"


def test_plan_does_not_mark_a_notebook_continued_that_starts_after_a_pause():
    s = [instructor_page.Session(f"{i:02d}", f"{i:02d} · n", m, None) for i, m in enumerate([90, 30])]
    rows, left = instructor_page.plan(s, [("09:00", 90), ("break", 15), ("10:45", 90)])
    assert rows[2:5] == ["| 09:00 | 00 · n | 90 |", "| | *break* | 15 |", "| 10:45 | 01 · n | 30 |"]


def P(number, sections=None, exercises=None):
    return instructor_page.Part(number, sections, exercises)


# Wrong pages: each check above must fail on one. A plan change is made in handouts and the page rebuilt;
# a number or the banner is changed in the built page's HTML.
WRONG_PLANS = {
    "core day drops 08": ("CORE_DAY", lambda d: tuple(p for p in d if p.number != "08"), check_core_day),
    "core day stops at 03": ("CORE_DAY", lambda d: tuple(p for p in d if p.number < "04"), check_core_day),
    "core day overruns": ("CORE_DAY", lambda d: tuple(P(p.number) for p in d), check_core_day),
    "half day without 04": ("HALF_DAY", lambda d: tuple(p for p in d if p.number != "04"), check_half_day),
    "two days drop 12": ("TWO_DAYS", lambda d: (d[0], tuple(p for p in d[1] if p.number != "12")),
                         lambda page: check_days(page, "Two-day plan", 2)),
    "three days teach 03 twice": ("THREE_DAYS", lambda d: (d[0], (P("03", (8,), ()), *d[1]), d[2]),
                                  lambda page: check_days(page, "Three-day plan", 3)),
    "three days as two": ("THREE_DAYS", lambda d: (d[0] + d[1], d[2]),
                          lambda page: check_days(page, "Three-day plan", 3)),
}


@pytest.mark.parametrize("name", WRONG_PLANS)
def test_plan_checks_fail_on_a_wrong_plan(tmp_path, monkeypatch, name):
    attribute, change, check = WRONG_PLANS[name]
    monkeypatch.setattr(instructor_page, attribute, change(getattr(instructor_page, attribute)))
    page = instructor_page.write_instructor_page(tmp_path, NOTEBOOKS[:1]).read_text()
    with pytest.raises(AssertionError):
        check(page)


def test_table_and_banner_checks_fail_on_a_wrong_page(built):
    page = (built / "instructor.html").read_text()
    times = json.loads(instructor_page.TIMES.read_text())["notebooks"]
    run = f"<td>{times[NOTEBOOKS[0].name]['seconds']:.1f}</td>"
    assert run in page
    with pytest.raises(AssertionError):
        check_table(page.replace(run, run.replace("</td>", "1</td>"), 1))
    last = re.findall(r"<tr>.*?</tr>", section(page, "The notebooks at a glance"), re.S)[-2]
    assert last.count(f"<td>{NOTEBOOKS[-1].name[:2]}</td>") == 1
    with pytest.raises(AssertionError):  # the last notebook's row left out
        check_table(page.replace(last, ""))
    with pytest.raises(AssertionError):
        check_banner(page.replace(BANNER, "Instructor page"))
    core = section(page, "Full-day plan: DDP core")
    first = re.search(r"<td>09:00</td>\s*<td>.*?</td>\s*<td>(\d+)</td>", core, re.S)
    longer = core[:first.start(1)] + str(int(first[1]) + 60) + core[first.end(1):]
    with pytest.raises(AssertionError):  # the first notebook runs an hour longer: the day no longer fits
        check_core_day(page.replace(core, longer))


# --- print rules and the student flow, on small examples ------------------------------------------

def test_hanging_lines_mark_each_code_line_with_its_indentation():
    highlighted = Highlight2HTML(pygments_lexer="ipython3")(
        'def f(x):\n    """doc\n    more"""\n\n    return x  # <why>\n', "ipython3")
    out = handouts.hanging_lines(highlighted)
    lines = re.findall(r'<span class="code-line" style="--i:(\d+)">(.*?)\n</span>', out, re.DOTALL)
    assert [int(k) for k, _ in lines] == [0, 4, 4, 0, 4]
    assert html.unescape(re.sub(r"<[^>]+>", "", "\n".join(t for _, t in lines))).endswith("return x  # <why>")


def test_exercise_links_go_both_ways():
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook(cells=[
        md("# 99 · T"), md("## 1. Ranks and `world_size`"), code("world_size = 2"),
        md("callout\n\n## 2. Buckets"), code("cap = 25"), md("## Exercises"),
        md("**Exercise 1.** What is `cap` in MiB?", metadata={"tags": ["exercise"]}),
        code("exercises.check_99_1(cap=cap)", metadata={"tags": ["check"], "exercise": {"id": "99.1"}}),
        md("**Exercise 2.** Count `world_size`.", metadata={"tags": ["exercise"]}),
        md("**Exercise 3.** Redo section 1 by hand.", metadata={"tags": ["exercise"], "exercise": {"section": "2"}})])
    linked = with_exercise_links(nb, "99")
    text = [c.source for c in linked.cells]
    assert len(linked.cells) == len(nb.cells) + 6 and len(nb.cells) == 10  # the original is left alone
    down = [t for t in text if t.startswith("**Practise this now:**")]
    assert [re.search(r"\(#([^)]+)\)", t)[1] for t in down] == ["Exercise-99.2", "Exercise-99.1", "Exercise-99.3"]
    assert text.index(down[0]) < text.index("callout\n\n## 2. Buckets") < text.index(down[1])
    assert "#### Exercise 99.1\n\n[↑ back to section 2, Buckets](#2.-Buckets)" in text
    assert "#### Exercise 99.2\n\n[↑ back to section 1, Ranks and `world_size`](#1.-Ranks-and-world_size)" in text
    assert "#### Exercise 99.3\n\n[↑ back to section 2, Buckets](#2.-Buckets)" in text


def test_a_tall_callout_with_a_list_is_cut_between_its_items():
    item = "> - *Item.* " + "words " * 60 + "\n>   more words.\n"
    block = "> **On GPUs.** Several things change:\n" + item * 6
    pieces = slide_copy.split_tall_block(block.rstrip("\n"))
    assert len(pieces) > 1 and all(p.startswith("> ") for p in pieces)
    assert all(slide_copy.markdown_height(p) <= slide_copy.SLIDE_BUDGET for p in pieces)
    assert "\n".join(pieces) == block.rstrip("\n")  # nothing lost, nothing added
    assert pieces[0].startswith("> **On GPUs.**") and all(p.startswith("> - *Item.*") for p in pieces[1:])


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_every_exercise_is_linked_from_its_section_and_back(built, notebook):
    """In both HTML editions each exercise has a heading that a section links down to and that links back
    up; every in-page link of the page lands on an id of the page (what a click in the browser follows)."""
    for edition in handouts.EDITIONS:
        page = (built / handouts.page_path(notebook.stem, edition)).read_text()
        def decoded(found):  # as a browser matches a fragment to an id: percent-decoded
            return {urllib.parse.unquote(html.unescape(f)) for f in found}

        ids = decoded(re.findall(r' id="([^"]+)"', page))
        targets = decoded(re.findall(r' href="#([^"]+)"', page))
        assert targets <= ids, (edition, targets - ids)
        exercises = tagged(notebook, "exercise")
        down = re.findall(r'Practise this now:</strong> <a href="#(Exercise-\d\d\.\d+)"', page)
        up = re.findall(r'href="#(\d+\.-[^"]+)">↑ back to section', page)
        assert sorted(down) == [f"Exercise-{notebook.name[:2]}.{k}" for k in range(1, exercises + 1)]
        assert len(up) == exercises


# --- the learner's pages (notebooks/cheatsheet.md, glossary.md, troubleshooting.md) ----------------------

LEARNER_PAGES = [Path(name).stem for name in handouts.LEARNER_PAGES]


def broken_hrefs(page: Path, text: str | None = None) -> list[str]:
    """The links of an HTML page of the handouts that a click would not follow: a file the handouts lack, or
    a fragment that is no id of its page (ids and fragments compared percent-decoded, as a browser does)."""
    text = page.read_text() if text is None else text
    broken = []
    for href in map(html.unescape, re.findall(r' href="([^"]*)"', text)):
        if href.startswith(("http://", "https://")):
            continue
        name, _, fragment = href.partition("#")
        target = (page.parent / name) if name else page
        if not target.is_file():
            broken.append(href)
        elif fragment:
            ids = {urllib.parse.unquote(html.unescape(i)) for i in re.findall(r' id="([^"]+)"', target.read_text())}
            if urllib.parse.unquote(fragment) not in ids:
                broken.append(href)
    return broken


@pytest.mark.parametrize("edition", handouts.EDITIONS)
@pytest.mark.parametrize("name", LEARNER_PAGES)
def test_learner_pages_are_in_each_edition_and_their_links_work(built, edition, name):
    page = built / "html" / edition / f"{name}.html"
    text = page.read_text()
    source = (ROOT / "notebooks" / f"{name}.md").read_text()
    title = re.search(r"^# (.+)$", source, re.M)[1]
    assert f"<title>{html.escape(title, quote=False)}</title>" in text
    notebook_links = re.findall(r"\]\((\d\d_\w+)\.ipynb", source)
    assert notebook_links and len(re.findall(r'href="\./\d\d_\w+\.html', text)) == len(notebook_links)
    assert broken_hrefs(page) == [], name
    assert not re.search(r'href="[^"]*(\.ipynb|\.md)[#"]', text) and "harmful-link" not in text
    assert text.count('href="../../index.html"') == 1  # "Contents"
    assert "white-space: pre-wrap" in text  # the script's long lines wrap in print
    if name == "cheatsheet":  # the script itself, whole
        for line in (ROOT / "templates" / "minimal_ddp.py").read_text().splitlines():
            assert line in html.unescape(text)


def test_the_link_check_refuses_a_missing_page_and_a_missing_section(built):
    page = built / "html" / "student" / "cheatsheet.html"
    text = page.read_text()
    good = re.search(r'href="(\./04_ddp_fundamentals\.html#[^"]+)"', text)[1]
    assert broken_hrefs(page, text.replace(good, good + "-gone", 1)) == [html.unescape(good) + "-gone"]
    assert broken_hrefs(page, text.replace(good, "./99_none.html", 1)) == ["./99_none.html"]


def test_learner_pages_beside_the_student_notebooks(built):
    folder = built / "student"
    for name in LEARNER_PAGES:
        text = (folder / f"{name}.md").read_text()
        links = re.findall(r"\]\(([^)\s]+)\)", text)
        assert links and not any(link.startswith("../") for link in links)
        for link in links:
            assert (folder / link.partition("#")[0]).is_file(), (name, link)


def test_index_and_instructor_page_link_the_learner_pages(built):
    for page in (built / "index.html", built / "instructor.html"):
        text = page.read_text()
        for name in LEARNER_PAGES:
            assert f'href="html/student/{name}.html"' in text, (page.name, name)
        assert broken_hrefs(page, "".join(f'<a href="html/student/{n}.html">' for n in LEARNER_PAGES)) == []


def test_the_navigation_line_links_the_pages_in_every_copy(built, tmp_path):
    """A notebook whose navigation line is tools/nav.py's (as `make nav` writes it): in its HTML pages the
    learner's pages are the HTML ones beside it, on its slides the instructor's, in the student notebook the
    markdown copies beside it; every link works."""
    import nav

    paths = handouts.notebooks()
    i = next(k for k, p in enumerate(paths) if p.name.startswith("04"))
    text = nav.nav_text(paths, [handouts.title_of(p) for p in paths], i)
    assert all(f"({name})" in text for name in handouts.LEARNER_PAGES)
    source = tmp_path / "nb" / paths[i].name
    source.parent.mkdir()
    nbformat.write(nav.with_nav(nbformat.read(paths[i], as_version=4), text), source)
    for edition in handouts.EDITIONS:
        page = handouts.render(source, built, edition)
        rendered = page.read_text()
        assert all(rendered.count(f'href="{name}.html"') == 2 for name in LEARNER_PAGES), edition  # top, bottom
        assert [h for h in broken_hrefs(page) if not h.startswith("#")] == []
    slides = handouts.handout_copy(nbformat.read(source, as_version=4), ".slides.html")
    assert f"(../html/instructor/{LEARNER_PAGES[0]}.html)" in slides.cells[0].source
    student = handouts.write_student_notebook(source, built / "student")
    first = nbformat.read(student, as_version=4).cells[0].source
    for name in handouts.LEARNER_PAGES:
        assert f"({name})" in first and (built / "student" / name).is_file()
