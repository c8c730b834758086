"""Render the executed notebooks to offline workshop handouts.

    python tools/handouts.py [--out build/handouts] [--slides] [--pdf]

Writes, from the notebooks as committed (nothing is executed):
  student/NN_name.ipynb           the student notebook, to run in JupyterLab from that folder: each
                                  exercise's ``solution`` cells replaced by its starter cells (kept in
                                  the metadata of the exercise's ``check`` cell), the check cell kept,
                                  exercise outputs cleared; paths to the repository (../data, ../cluster)
                                  rewritten for the folder, walkthrough/ copied beside it; its links
                                  (contents: student/README.md, other notebooks, exercises) stay inside
                                  the folder, so they work wherever it is copied
  html/student/NN_name.html       the same cells as the student notebook (starters and checks)
  html/instructor/NN_name.html    everything
  pdf/student/, pdf/instructor/   (--pdf) the HTML pages printed to A4
  slides/NN_name.slides.html      (--slides) reveal.js, a slide per ``##`` heading (wherever it stands in
                                  a cell), sub-slides of about one screen, long inputs shortened
  html/EDITION/cheatsheet.html    the learner's pages beside the notebooks (notebooks/cheatsheet.md,
  html/EDITION/glossary.html      glossary.md, troubleshooting.md: tools/nav.py's LEARNER_PAGES), in both
  html/EDITION/troubleshooting.html  editions so that their links to the notebooks' pages stay in the edition;
                                  student/*.md the same pages beside the student notebooks; in the PDFs too
  index.html                      links to every edition and to the learner's pages, the titles' markdown rendered
  instructor.html                 (tools/instructor_page.py) set-up checklist, a table of the notebooks
                                  (cells, run and teaching times, exercises), half-day, one-day (DDP
                                  core), 2- and 3-day plans, each notebook's sections, objectives and
                                  exercises
  assets/                         require.js, MathJax 2, jQuery, reveal.js and the widget manager

Every page loads its scripts from assets/ (pinned npm packages, package-lock.json, installed by
``npm ci`` into build/npm): the folder works offline and can be copied as it is. The PDFs
(--pdf, A4) are printed by headless Chromium (Debian's chromium) with every non-file request
refused; a page that asks for the network, or fails to load a file, fails the build.

The handouts are made from in-memory copies: ``# NBVAL_*`` comment lines dropped, the page titled
with the notebook's ``# NN · Title`` heading, notebook links (and links to the learner's pages) pointed at
the HTML pages, each widget
shown as its stored picture captioned "interactive in JupyterLab" (the student .ipynb keeps its widgets),
and, for the slides, reveal.js slide metadata written on every cell. In the pages and the student
notebooks each exercise is linked from the end of the section it practises, and links back
(``notebook_pages.with_exercise_links``). A proof cell's input (tag ``proof``, notebooks/README.md) is
folded into a ``<details>`` element in the pages and on the slides (the templates' ``input_group`` block),
its outputs in view; the student notebook keeps the cell's ``jupyter.source_hidden``, so JupyterLab folds it too.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import html
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from instructor_page import write_instructor_page
from nav import LEARNER_PAGES
from nbconvert import HTMLExporter, SlidesExporter
from notebook_pages import (
    CHECK_TAG,
    INSTRUCTOR_BANNER,
    LINK_TAG,
    SOLUTION_TAG,
    STARTER_TAG,
    cell_text,
    links,
    page_path,
    plain,
    tags,
    with_exercise_links,
    write_page,
)
from slide_copy import with_slide_metadata
from traitlets.config import Config

from ddp_helpers.series import NAV_TAG, notebooks, title_of

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = Path(__file__).resolve().parent / "handout_templates"
NPM = ROOT / "build" / "npm"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# the launch flags of tests/browser/test_jupyterlab.py
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Notebook-relative paths that leave notebooks/ (rewritten in the student notebooks), and the folders a
# notebook's cells read or write next to it (copied, or made empty, beside the student notebooks).
REPO_PATH = re.compile(r"""(?<=["'(])\.\./(data|cluster|README\.md|requirements\.txt)\b""")
COPIED_FOLDERS, EMPTY_FOLDERS = ("walkthrough",), ("scripts", "runs")
EDITIONS = ("student", "instructor")
CONTENTS_LINK = "(../README.md#curriculum)"
NOTEBOOK_LINK = re.compile(r"\((\d\d_\w+)\.ipynb(#[^)\s]*)?\)")  # a link to a notebook of the series
# a link to one of the learner's pages beside the notebooks (cheatsheet.md, ...)
PAGE_LINK = re.compile(r"\((" + "|".join(re.escape(Path(name).stem) for name in LEARNER_PAGES) + r")\.md(#[^)\s]*)?\)")
# a markdown link that leaves notebooks/ (the README, templates/, cluster/): nothing of it is in the handouts
OUTSIDE_LINK = re.compile(r"\[([^\]]+)\]\(\.\./(?!\.\./)([^)#\s]+)(#[^)\s]*)?\)")
# a learner's page prints its code whole: long lines wrap, in a smaller font
PAGE_CSS = "pre { white-space: pre-wrap; overflow-wrap: anywhere; font-size: 85%; background: #f6f6f6; padding: .5em; }\n"
# On every instructor page (the notebooks' instructor edition and instructor.html).
WIDGET_VIEW, WIDGET_CAPTION = "application/vnd.jupyter.widget-view+json", "interactive in JupyterLab"
NBVAL_COMMENT = re.compile(r"^[ \t]*#[ \t]*NBVAL_[A-Z_]+\b.*(?:\n|$)", re.MULTILINE)

# What the pages load, copied from the npm packages into assets/ (nothing else is served).
ASSETS = {
    "require.js": "requirejs/require.js",
    "jquery.min.js": "jquery/dist/jquery.min.js",
    "reveal.js/dist": "reveal.js/dist",
    "reveal.js/plugin/notes": "reveal.js/plugin/notes",
    "html-manager": "@jupyter-widgets/html-manager/dist",
    # MathJax 2 (the API nbconvert's templates call): the TeX -> CommonHTML configuration only
    "mathjax/MathJax.js": "mathjax/MathJax.js",
    "mathjax/config/TeX-AMS_CHTML-full.js": "mathjax/config/TeX-AMS_CHTML-full.js",
    "mathjax/config/Safe.js": "mathjax/config/Safe.js",
    "mathjax/extensions": "mathjax/extensions",
    "mathjax/jax/input/TeX": "mathjax/jax/input/TeX",
    "mathjax/jax/output/CommonHTML": "mathjax/jax/output/CommonHTML",
    "mathjax/jax/element": "mathjax/jax/element",
    "mathjax/fonts/HTML-CSS/TeX/woff": "mathjax/fonts/HTML-CSS/TeX/woff",
    "mathjax/localization/en": "mathjax/localization/en",
}
SKIP_FILES = shutil.ignore_patterns("*.map", "embed.js", "embed.js.LICENSE.txt", "libembed-amd.js",
                                    "reveal.esm.js", "notes.esm.js")

# The plans: teaching time per notebook = measured run time + reading + exercises.



# --- the in-memory copies ----------------------------------------------------------------------

def handout_copy(nb, suffix: str):
    """A copy for the handouts: no NBVAL comment lines, titled, links pointed at the HTML pages, and each
    widget shown as its stored picture (``widget_pictures``)."""
    nb = widget_pictures(copy.deepcopy(nb))
    nb.metadata["title"] = plain(title_of(nb))
    # the learner's pages lie beside the HTML pages; the slides (one folder up) link the instructor's
    page = "../html/instructor/" if suffix == ".slides.html" else ""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = NBVAL_COMMENT.sub("", cell.source)
        elif cell.cell_type == "markdown":
            # every notebook of the series, also one linked before it lands (a nav cell's "next")
            cell.source = NOTEBOOK_LINK.sub(lambda m: f"({m[1]}{suffix}{m[2] or ''})", cell.source)
            cell.source = PAGE_LINK.sub(lambda m: f"({page}{m[1]}.html{m[2] or ''})", cell.source)
            cell.source = cell.source.replace(CONTENTS_LINK, "(../index.html)" if suffix == ".slides.html"
                                              else "(../../index.html)")
    return nb


def student_cells(nb):
    """A copy with each exercise's solution cells replaced by its starter cells.

    The starters are the ``exercise.starter`` list in the metadata of the exercise's check cell (the code
    cell tagged ``check`` that follows the solutions); they become code cells tagged ``starter``. Check and
    starter cells carry no outputs.
    """
    nb = copy.deepcopy(nb)
    cells = []
    for cell in nb.cells:
        if SOLUTION_TAG in tags(cell):
            continue
        if CHECK_TAG in tags(cell):
            exercise = cell.metadata.get("exercise", {})
            for i, source in enumerate(exercise.get("starter", [])):
                starter = nbformat.v4.new_code_cell(source, metadata={"tags": [STARTER_TAG]})
                starter.id = hashlib.sha1(f"{cell.id}-starter-{i}".encode()).hexdigest()[:8]
                cells.append(starter)
            cell.outputs, cell.execution_count = [], None
        cells.append(cell)
    nb.cells = cells
    return nb


def write_student_notebook(path: Path, folder: Path) -> Path:
    """``folder``/NN_name.ipynb: the student notebook, runnable from ``folder`` (see the module docstring)."""
    nb = student_cells(nbformat.read(path, as_version=4))
    nb = with_exercise_links(nb, path.name[:2])
    up = os.path.relpath(ROOT, folder) if folder.resolve().is_relative_to(ROOT) else str(ROOT)
    for cell in nb.cells:
        if cell.cell_type == "markdown":  # links inside the folder: they survive a copy of it
            cell.source = cell.source.replace(CONTENTS_LINK, "(README.md)")
        cell.source = REPO_PATH.sub(lambda m: f"{up}/{m.group(1)}", cell.source)
        if cell.cell_type == "code":
            cell.source = NBVAL_COMMENT.sub("", cell.source)
            cell.metadata.pop("execution", None)
    folder.mkdir(parents=True, exist_ok=True)
    for name in COPIED_FOLDERS:
        if (path.parent / name).is_dir():
            shutil.copytree(path.parent / name, folder / name, dirs_exist_ok=True)
    for name in EMPTY_FOLDERS:
        (folder / name).mkdir(exist_ok=True)
    target = folder / path.name
    nbformat.write(nb, target)
    return target


def write_student_contents(folder: Path, paths: list[Path]) -> Path:
    """``folder``/README.md: the student notebooks' contents page (their "Contents" link), with links
    to the notebooks beside it only, so it works wherever the folder is copied."""
    rows = ["| # | notebook |", "|---|---|"]
    for path in paths:
        number, _, name = title_of(path).partition(" · ")
        rows.append(f"| {number} | [{cell_text(name)}]({path.name}) |")
    text = "\n".join([
        "# PyTorch DistributedDataParallel, hands-on: the student notebooks", "",
        "Run them in order, in JupyterLab, from this folder. Each exercise has a starter cell to complete "
        "and a check cell: it prints a line starting with ✓ when your answer is right, or says what is "
        "wrong with a hint. Each section that has an exercise links to it, and the exercise links back.", "",
        *rows, ""])
    target = folder / "README.md"
    folder.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target


def widget_pictures(nb):
    """Each widget output that stores its own picture shows the picture, captioned, not dead controls.

    A widget's saved state draws its sliders and buttons in a page, but nothing runs them there. Where the
    output bundle has an ``image/png`` next to the widget view (``ddp_helpers.viz.figures.figure_box``
    stores one on every redraw), the view is dropped and a caption follows the picture; the notebook's
    widget state goes too once no widget view is left.
    """
    for cell in nb.cells:
        outputs = []
        for output in cell.get("outputs", []):
            outputs.append(output)
            data = output.get("data", {})
            if WIDGET_VIEW in data and "image/png" in data:
                del data[WIDGET_VIEW]
                name = data.get("text/plain", "").partition(" (a widget)")[0].strip() or "A widget"
                caption = (f'<p class="widget-caption" style="font-family: sans-serif; font-style: italic; '
                           f'margin: .2em 0 .6em">{html.escape(name)}: a picture here, '
                           f'{WIDGET_CAPTION} (run the notebook to use it).</p>')
                outputs.append(nbformat.v4.new_output("display_data", data={
                    "text/html": caption, "text/plain": f"{name}: {WIDGET_CAPTION}"}))
        if cell.cell_type == "code":
            cell.outputs = outputs
    if not widget_views(nb):
        nb.metadata.pop("widgets", None)
    return nb


# --- the learner's pages -----------------------------------------------------------------------

def learner_page_markdown(text: str, where: str) -> str:
    """A learner's page (notebooks/NAME.md) for the handouts: ``where`` is "html" (beside the HTML pages of an
    edition: notebook and page links point at the HTML pages, "Contents" at the index) or "student" (beside
    the student notebooks: "Contents" is their README.md). A link that leaves notebooks/ becomes its text and
    the file's name in the course's repository, which the handouts do not hold."""
    text = text.replace(CONTENTS_LINK, "(../../index.html)" if where == "html" else "(README.md)")
    if where == "html":  # "./": the page's markdown renderer takes "NN_name.html#1.-Title:" for a URL scheme
        text = NOTEBOOK_LINK.sub(lambda m: f"(./{m[1]}.html{m[2] or ''})", text)
        text = PAGE_LINK.sub(lambda m: f"(./{m[1]}.html{m[2] or ''})", text)
    return OUTSIDE_LINK.sub(lambda m: f"{m[1]} (`{m[2]}` in the course's repository)", text)


def write_learner_pages(out: Path, source: Path = ROOT / "notebooks") -> tuple[list[Path], list[Path]]:
    """The learner's pages as HTML in each edition's folder, and as markdown beside the student notebooks:
    (the HTML pages, the markdown copies)."""
    pages, copies = [], []
    for name in LEARNER_PAGES:
        text = (source / name).read_text(encoding="utf-8")
        title = plain(re.search(r"^# (.+)$", text, re.M)[1])
        for edition in EDITIONS:
            target = out / "html" / edition / f"{Path(name).stem}.html"
            target.parent.mkdir(parents=True, exist_ok=True)
            write_page(target, title, learner_page_markdown(text, "html"))
            target.write_text(target.read_text(encoding="utf-8").replace("</style>", PAGE_CSS + "</style>", 1),
                              encoding="utf-8")
            pages.append(target)
        copy = out / "student" / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(learner_page_markdown(text, "student"), encoding="utf-8")
        copies.append(copy)
    return pages, copies


# --- rendering -------------------------------------------------------------------------------

PRE = re.compile(r"(<pre>)(.*?)(</pre>)", re.DOTALL)


def hanging_lines(highlighted: str) -> str:
    """Each line of highlighted code as ``<span class="code-line" style="--i:K">``, K its indentation.

    Pygments closes its token spans at every line end, so each line is balanced HTML. The handout's CSS
    turns the spans into blocks whose wrapped continuation hangs right of the indentation, with a marker.
    """
    def lines(match):
        parts = match[2].split("\n")
        if parts and not parts[-1]:
            parts.pop()
        out = []
        for part in parts:
            text = html.unescape(re.sub(r"<[^>]*>", "", part)).expandtabs(4)
            indent = len(text) - len(text.lstrip(" "))
            out.append(f'<span class="code-line" style="--i:{indent}">{part}\n</span>')
        return match[1] + "".join(out) + match[3]

    return PRE.sub(lines, highlighted)


def exporter(kind: str, edition: str):
    config = Config()
    # nbconvert's own TagRemovePreprocessor drops the solution cells of the student edition
    # and the navigation cells of the slides.
    remove = {SOLUTION_TAG} if edition == "student" else set()
    if kind == "slides":
        remove |= {NAV_TAG, LINK_TAG}
    config.TagRemovePreprocessor.enabled = True
    config.TagRemovePreprocessor.remove_cell_tags = remove
    # the slides sit one folder below the handouts' root, the pages two (html/EDITION/)
    assets = "../assets" if kind == "slides" else "../../assets"
    common = dict(config=config, extra_template_basedirs=[str(TEMPLATES)],
                  require_js_url=f"{assets}/require.js",
                  mathjax_url=f"{assets}/mathjax/MathJax.js?config=TeX-AMS_CHTML-full,Safe",
                  jquery_url=f"{assets}/jquery.min.js",
                  widget_renderer_url=f"{assets}/html-manager/embed-amd.js")
    if kind == "slides":
        return SlidesExporter(template_name="handout_slides", reveal_url_prefix=f"{assets}/reveal.js",
                              reveal_theme="white", reveal_scroll=True, **common)
    return HTMLExporter(template_name="handout", filters={"hanging_lines": hanging_lines}, **common)


def render(path: Path, out: Path, edition: str, kind: str = "html", split: bool = True) -> Path:
    suffix = ".slides.html" if kind == "slides" else ".html"
    nb = nbformat.read(path, as_version=4)
    nb = handout_copy(student_cells(nb) if edition == "student" else nb, suffix)
    if kind == "slides":
        nb = with_slide_metadata(nb, path.name, split=split)
    else:
        nb = with_exercise_links(nb, path.name[:2])
    body, _ = exporter(kind, edition).from_notebook_node(nb, resources={"metadata": {"name": path.stem}})
    if edition == "instructor" and kind == "html":
        body = re.sub(r"(<main>|<body[^>]*>)", lambda m: m[1] + INSTRUCTOR_BANNER, body, count=1)
    target = out / (f"slides/{path.stem}{suffix}" if kind == "slides" else page_path(path.stem, edition))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(body, encoding="utf-8")
    return target


# --- the browser libraries -------------------------------------------------------------------

def npm_modules() -> Path:
    """build/npm/node_modules as package-lock.json pins it (npm ci, only when the lock changed)."""
    lock = ROOT / "package-lock.json"
    stamp, digest = NPM / ".lock-sha256", hashlib.sha256(lock.read_bytes()).hexdigest()
    if not (stamp.exists() and stamp.read_text() == digest):
        NPM.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copy(ROOT / name, NPM / name)
        subprocess.run(["npm", "ci", "--ignore-scripts", "--omit=optional", "--no-audit", "--no-fund"],
                       cwd=NPM, check=True, timeout=600)
        stamp.write_text(digest)
    return NPM / "node_modules"


def copy_assets(out: Path) -> Path:
    modules, target = npm_modules(), out / "assets"
    shutil.rmtree(target, ignore_errors=True)
    for dest, src in ASSETS.items():
        (target / dest).parent.mkdir(parents=True, exist_ok=True)
        if (modules / src).is_dir():
            shutil.copytree(modules / src, target / dest, ignore=SKIP_FILES)
        else:
            shutil.copy(modules / src, target / dest)
    return target


# --- PDFs ------------------------------------------------------------------------------------

class NetworkRequested(RuntimeError):
    pass


@dataclass
class OfflinePage:
    """A page whose non-file requests are refused and recorded, as are failed loads and script errors."""
    page: object
    refused: list = field(default_factory=list)
    failed: list = field(default_factory=list)
    errors: list = field(default_factory=list)

    @classmethod
    def open(cls, browser, url: str, **kw):
        watched = cls(browser.new_page(**kw))

        def route(r):
            if r.request.url.startswith("file:"):
                r.continue_()
            else:
                watched.refused.append(r.request.url)
                r.abort()

        watched.page.route("**/*", route)
        watched.page.on("requestfailed", lambda r: watched.failed.append(r.url))
        watched.page.on("pageerror", lambda e: watched.errors.append(str(e)))
        watched.page.goto(url, wait_until="load")
        return watched

    def problems(self) -> list[str]:
        return ([f"network request: {u}" for u in self.refused]
                + [f"failed to load: {u}" for u in self.failed if not u.startswith(("http:", "https:"))]
                + [f"script error: {e}" for e in self.errors])


def wait_rendered(page, widget_views: int):
    """Until the embedded widgets are drawn and MathJax has typeset (when the page has them)."""
    if widget_views:
        page.wait_for_function("n => document.querySelectorAll('.jupyter-widgets.widget-vbox, "
                               ".jupyter-widgets.widget-box').length >= n", arg=widget_views, timeout=60_000)
    page.wait_for_function("() => !window.MathJax || (MathJax.Hub && MathJax.Hub.queue.pending === 0)",
                           timeout=60_000)


def widget_views(nb) -> int:
    return sum(WIDGET_VIEW in o.get("data", {})
               for c in nb.cells for o in c.get("outputs", []))


def launch_chromium(playwright):
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} not found: apt-get install -y chromium (or set CHROMIUM)")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def print_pdfs(pages: list[tuple[Path, int]]) -> list[Path]:
    """Each (HTML page, number of widget views) printed to an A4 PDF next to it."""
    from playwright.sync_api import sync_playwright

    written = []
    with sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            for html_page, views in pages:
                watched = OfflinePage.open(browser, html_page.as_uri())
                wait_rendered(watched.page, views)
                if watched.problems():
                    raise NetworkRequested(f"{html_page}: " + "; ".join(watched.problems()))
                target = pdf_path(html_page)
                target.parent.mkdir(parents=True, exist_ok=True)
                watched.page.pdf(path=str(target), format="A4", print_background=True,
                                 prefer_css_page_size=True)
                watched.page.close()
                written.append(target)
        finally:
            browser.close()
    return written


def pdf_path(html_page: Path) -> Path:
    """html/EDITION/NN.html -> pdf/EDITION/NN.pdf"""
    return html_page.parent.parent.parent / "pdf" / html_page.parent.name / f"{html_page.stem}.pdf"


def pdf_pages(path: Path) -> int:
    """Page count of a PDF that Chromium wrote (its page objects are not compressed)."""
    return len(re.findall(rb"/Type\s*/Page\b", path.read_bytes()))


# --- index and instructor page ---------------------------------------------------------------

def write_index(out: Path, slides: bool, pdf: bool = False, paths: list[Path] | None = None) -> Path:
    head = "| # | notebook | student | instructor |" + (" slides |" if slides else "")
    rows = [head, "|---" * (4 + slides) + "|"]
    for path in paths or notebooks():
        number, _, name = title_of(path).partition(" · ")
        row = f"| {number} | {cell_text(name)} | {links(path.stem, 'student', pdf)} | " \
              f"{links(path.stem, 'instructor', pdf)} |"
        if slides:
            row += f" [slides](slides/{path.stem}.slides.html) |"
        rows.append(row)
    learner = " · ".join(f"[{text}](html/student/{Path(name).stem}.html)" for name, text in LEARNER_PAGES.items())
    text = "\n".join([
        "# PyTorch DistributedDataParallel, hands-on: workshop handouts", "",
        f"For every learner, linked from every notebook: {learner}.", "",
        "Student editions leave out the exercise solutions: each exercise has a starter cell and a check "
        "cell instead (the student notebooks run in JupyterLab from `student/`, with the course's "
        "environment); instructor editions have everything. "
        "Every page works offline: its scripts come from `assets/` in this folder.", "",
        "For the instructor: [objectives, run times, exercises and day plans](instructor.html).", "",
        *rows])
    return write_page(out / "index.html", "DDP workshop handouts", text)


# --- the whole build -------------------------------------------------------------------------

def _pages_of(job: tuple[Path, Path, bool, bool]) -> tuple[list[Path], int, list[Path]]:
    """One notebook's HTML editions, its number of widget views, and its slides (if asked for)."""
    path, out, slides, split = job
    views = widget_views(handout_copy(nbformat.read(path, as_version=4), ".html"))
    pages = [render(path, out, edition) for edition in EDITIONS]
    return pages, views, [render(path, out, "instructor", "slides", split)] if slides else []


def build(out: Path, slides: bool = False, pdf: bool = False, only: list[Path] | None = None,
          assets: bool = True, split_slides: bool = True) -> list[Path]:
    """Every edition of every notebook (or of those in ``only``), the index and the instructor page.

    ``assets=False`` leaves out the browser libraries (and so the npm install): pages to read as text.
    ``split_slides=False`` makes the slides as they were before sub-slides: one slide per cell that starts
    with ``## `` and every cell whole (to show what tests/browser/test_handout_slides.py measures).
    """
    written, to_print, paths = [copy_assets(out)] if assets or pdf else [], [], only or notebooks()
    # The pages of one notebook per process (nbconvert is single-threaded; each page is a file of its
    # own); spawn, not fork: the caller (a test run, a kernel) may have threads. The student notebooks
    # share copied folders, so they are written here, one after another.
    workers = min(len(paths), os.cpu_count() or 1)
    jobs = [(path, out, slides, split_slides) for path in paths]
    if workers > 1:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(pool.map(_pages_of, jobs))
    else:
        results = [_pages_of(job) for job in jobs]
    for path, (pages, views, slide_pages) in zip(paths, results, strict=True):
        written += [*pages, write_student_notebook(path, out / "student"), *slide_pages]
        to_print += [(page, views) for page in pages]
    written.append(write_student_contents(out / "student", paths))
    learner_pages, learner_copies = write_learner_pages(out)
    written += [*learner_pages, *learner_copies]
    to_print += [(page, 0) for page in learner_pages]
    if pdf:
        written += print_pdfs(to_print)
    written += [write_index(out, slides, pdf, paths), write_instructor_page(out, paths)]
    return written


def summary(out: Path) -> str:
    lines = []
    for folder in ("html", "pdf", "student", "slides", "assets"):
        files = [f for f in (out / folder).rglob("*") if f.is_file()]
        size = sum(f.stat().st_size for f in files) / 2**20
        pdfs = [f for f in files if f.suffix == ".pdf"]
        pages = f", {sum(map(pdf_pages, pdfs))} PDF pages in {len(pdfs)} PDFs" if pdfs else ""
        lines.append(f"  {folder}: {len(files)} files, {size:.1f} MiB{pages}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "handouts")
    parser.add_argument("--slides", action="store_true", help="also reveal.js slides per notebook")
    parser.add_argument("--pdf", action="store_true", help="also A4 PDFs of both editions (headless Chromium)")
    parser.add_argument("--no-slide-split", dest="split", action="store_false",
                        help="slides as before: a slide per cell starting with '## ', no sub-slides")
    args = parser.parse_args(argv)
    written = build(args.out, args.slides, args.pdf, split_slides=args.split)
    shown = args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out
    print(f"wrote {len(written)} files under {shown}\n{summary(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
