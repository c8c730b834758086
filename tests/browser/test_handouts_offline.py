"""The workshop handouts in headless Chromium with the network refused.

Builds the handouts of three notebooks (text only, widgets, figures) into a temporary folder with
tools/handouts.py, PDFs and slides included, then opens every page with each non-file request
aborted and recorded: a page that asks for the network, fails to load one of its files, or throws
a script error fails. A widget shows as its stored picture, captioned "interactive in JupyterLab".
The slides must run (reveal.js ready, one slide per ``##`` section, the arrow
key moves on), and each PDF is opened with pdf.js (a pinned npm package, loaded from file): A4
pages, the notebook's title, every figure painted, code lines inside the page. Screenshots go to
build/browser/: a slide, the PDF page that shows 01's ring widget as a picture, the instructor page.

Needs Debian's chromium (/usr/bin/chromium), the playwright package and npm: `make test-browser`.
"""

import base64
import json
import sys
from pathlib import Path

import pytest

playwright = pytest.importorskip("playwright.sync_api")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import handouts  # noqa: E402

SHOTS = ROOT / "build" / "browser"
CHOSEN = ["01_collectives_and_ring_allreduce", "02_samplers", "08_capstone_digits"]  # icon fonts, widgets, figures
A4_POINTS = (595.28, 841.89)


def notebook(stem):
    return json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if not Path(handouts.CHROMIUM).exists():
        pytest.fail(f"{handouts.CHROMIUM} not found: apt-get install chromium (or set CHROMIUM)")
    out = tmp_path_factory.mktemp("handouts")
    only = [ROOT / "notebooks" / f"{stem}.ipynb" for stem in CHOSEN]
    handouts.build(out, slides=True, pdf=True, only=only)  # printing refuses the network too
    return out


@pytest.fixture(scope="module")
def browser(built):  # after the build: its PDF printing runs a Playwright of its own
    with playwright.sync_playwright() as p:
        b = handouts.launch_chromium(p)
        yield b
        b.close()


def offline(browser, path, **kw):
    return handouts.OfflinePage.open(browser, path.as_uri(), **kw)


def widget_views(page):
    """The widget views a page draws: none, each widget of the handouts is its stored picture."""
    stem = page.name.split(".")[0]
    nb = handouts.nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
    return handouts.widget_views(handouts.handout_copy(nb, ".html"))


def stored_widgets(page):
    stem = page.name.split(".")[0]
    return handouts.widget_views(handouts.nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4))


def pages(built):
    found = [built / "index.html", built / "instructor.html"]
    for stem in CHOSEN:
        found += [built / handouts.page_path(stem, e) for e in handouts.EDITIONS]
        found.append(built / "slides" / f"{stem}.slides.html")
    return found


def test_no_page_asks_the_network(browser, built):
    for path in pages(built):
        watched = offline(browser, path)
        views = widget_views(path) if path.parent != built else 0
        handouts.wait_rendered(watched.page, views)
        watched.page.wait_for_timeout(500)  # late requests (fonts, lazy scripts) still count
        assert watched.problems() == [], path
        assert views == 0
        if path.parent != built and stored_widgets(path):  # a picture, captioned, and no dead controls
            assert watched.page.locator(".jupyter-widgets").count() == 0, path
            caption = watched.page.locator(".widget-caption")
            assert caption.count() == stored_widgets(path) and "interactive in JupyterLab" in caption.first.inner_text()
            picture = caption.first.locator("xpath=preceding::img[1]")
            assert picture.evaluate("img => img.naturalWidth") > 100, path
            if path.parent.name == "student" and path.name.startswith("01"):
                SHOTS.mkdir(parents=True, exist_ok=True)
                caption.first.scroll_into_view_if_needed()
                watched.page.screenshot(path=str(SHOTS / "handout_widget_picture_01.png"))
        watched.page.close()


def test_titles_are_the_notebook_titles(browser, built):
    for stem in CHOSEN:
        title = handouts.plain(handouts.title_of(ROOT / "notebooks" / f"{stem}.ipynb"))
        watched = offline(browser, built / handouts.page_path(stem, "student"))
        assert watched.page.title() == title and title.startswith(stem[:2] + " · ")
        watched.page.close()


def section_count(stem):
    """The title and every ``## `` heading, wherever it stands in a markdown cell (fenced code aside)."""
    count = 1
    for cell in notebook(stem)["cells"]:
        fenced = False
        for line in "".join(cell["source"]).splitlines() if cell["cell_type"] == "markdown" else []:
            fenced ^= line.lstrip().startswith("```")
            count += line.startswith("## ") and not fenced and "nav" not in cell["metadata"].get("tags", [])
    return count


def test_slides_run_offline(browser, built):
    stem = "02_samplers"
    watched = offline(browser, built / "slides" / f"{stem}.slides.html", viewport={"width": 1280, "height": 800})
    page = watched.page
    page.wait_for_selector(".reveal.ready", timeout=30_000)
    assert page.locator(".reveal .slides > section").count() == section_count(stem)
    first = page.evaluate("() => document.querySelector('.slides > section.present h1').textContent")
    assert first.startswith("02 · Samplers")
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => document.querySelector('.slides > section.present h2')", timeout=10_000)
    heading = page.evaluate("() => document.querySelector('.slides > section.present h2').textContent")
    assert heading.startswith("1.")
    page.wait_for_timeout(1000)  # the slide transition
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "handout_slide_2.png"))
    assert watched.problems() == []
    page.close()


PDF_PROBE = """async (data) => {
    pdfjsLib.GlobalWorkerOptions.workerSrc = document.getElementById('worker').src;
    const bytes = Uint8Array.from(atob(data), c => c.charCodeAt(0));
    const pdf = await pdfjsLib.getDocument({data: bytes, isEvalSupported: false}).promise;
    const OPS = pdfjsLib.OPS, out = {pages: pdf.numPages, sizes: [], text: '', images: 0, right: 0};
    for (let n = 1; n <= pdf.numPages; n++) {
        const page = await pdf.getPage(n), view = page.getViewport({scale: 1});
        out.sizes.push([view.width, view.height]);
        const content = await page.getTextContent();
        for (const item of content.items) {
            out.text += item.str + (item.hasEOL ? '\\n' : ' ');
            // a run of spaces (before an aligned comment) is reported wider than it is drawn: text only
            if (item.str.trim()) out.right = Math.max(out.right, item.transform[4] + item.width);
        }
        const ops = await page.getOperatorList();
        out.images += ops.fnArray.filter(f => f === OPS.paintImageXObject).length;
        if (n === 1) {
            const canvas = document.getElementById('page');
            const scaled = page.getViewport({scale: 1.2});
            canvas.width = scaled.width; canvas.height = scaled.height;
            await page.render({canvasContext: canvas.getContext('2d'), viewport: scaled}).promise;
        }
    }
    return out;
}"""


def pdf_viewer(tmp_path):
    """A file:// page that loads pdf.js (build/npm, pinned) from file, no worker thread."""
    dist = handouts.npm_modules() / "pdfjs-dist" / "build"
    page = tmp_path / "viewer.html"
    page.write_text(f"<!doctype html><meta charset=utf-8><script src='{(dist / 'pdf.min.js').as_uri()}'></script>"
                    f"<script id=worker src='{(dist / 'pdf.worker.min.js').as_uri()}'></script><canvas id=page>")
    return page


def images_in(stem, edition):
    cells = [c for c in notebook(stem)["cells"]
             if edition == "instructor" or "solution" not in c["metadata"].get("tags", [])]
    return sum("image/png" in o.get("data", {}) for c in cells for o in c.get("outputs", []))


def longest_code_line(stem, edition):
    lines = [line for c in notebook(stem)["cells"] if c["cell_type"] == "code"
             and (edition == "instructor" or "solution" not in c["metadata"].get("tags", []))
             for line in "".join(c["source"]).splitlines() if "NBVAL_" not in line]
    return max(lines, key=len)


@pytest.mark.parametrize("edition", handouts.EDITIONS)
@pytest.mark.parametrize("stem", ["02_samplers", "08_capstone_digits"])
def test_pdf_opens_offline(browser, built, tmp_path, stem, edition):
    pdf = built / handouts.page_path(stem, edition, "pdf")
    watched = offline(browser, pdf_viewer(tmp_path))
    found = watched.page.evaluate(PDF_PROBE, base64.b64encode(pdf.read_bytes()).decode())
    assert watched.problems() == []
    assert found["pages"] == handouts.pdf_pages(pdf) > 1
    assert all(abs(w - A4_POINTS[0]) < 1 and abs(h - A4_POINTS[1]) < 1 for w, h in found["sizes"])
    text = " ".join(found["text"].split())
    assert handouts.plain(handouts.title_of(ROOT / "notebooks" / f"{stem}.ipynb")) in text
    assert "NBVAL_" not in text
    # Figures: every stored PNG is painted (a widget's own picture may add more).
    assert found["images"] >= images_in(stem, edition) >= 1
    # Code wraps: no text runs into the right margin, and the longest code line is all there.
    assert found["right"] < A4_POINTS[0] - 20, found["right"]
    squeeze = "".join(longest_code_line(stem, edition).split())
    assert squeeze in "".join(found["text"].split())
    SHOTS.mkdir(parents=True, exist_ok=True)
    watched.page.locator("#page").screenshot(path=str(SHOTS / f"handout_{edition}_{stem}_p1.png"))
    watched.page.close()


PAGE_WITH = """async ([data, words]) => {
    pdfjsLib.GlobalWorkerOptions.workerSrc = document.getElementById('worker').src;
    const bytes = Uint8Array.from(atob(data), c => c.charCodeAt(0));
    const pdf = await pdfjsLib.getDocument({data: bytes, isEvalSupported: false}).promise;
    for (let n = 1; n <= pdf.numPages; n++) {
        const page = await pdf.getPage(n);
        const text = (await page.getTextContent()).items.map(i => i.str).join(' ');
        if (!text.includes(words)) continue;
        const ops = await page.getOperatorList();
        const canvas = document.getElementById('page'), view = page.getViewport({scale: 1.2});
        canvas.width = view.width; canvas.height = view.height;
        await page.render({canvasContext: canvas.getContext('2d'), viewport: view}).promise;
        return {page: n, images: ops.fnArray.filter(f => f === pdfjsLib.OPS.paintImageXObject).length};
    }
    return null;
}"""


def test_pdf_page_with_a_widget_picture(browser, built, tmp_path):
    """The ring stepper of 01 in the student PDF: its picture painted on the page of its caption."""
    pdf = built / handouts.page_path("01_collectives_and_ring_allreduce", "student", "pdf")
    watched = offline(browser, pdf_viewer(tmp_path))
    found = watched.page.evaluate(PAGE_WITH, [base64.b64encode(pdf.read_bytes()).decode(), handouts.WIDGET_CAPTION])
    assert watched.problems() == []
    assert found and found["images"] >= 1, found
    SHOTS.mkdir(parents=True, exist_ok=True)
    watched.page.locator("#page").screenshot(path=str(SHOTS / "handout_pdf_widget_page_01.png"))
    watched.page.close()


def test_instructor_page_screenshot(browser, built):
    watched = offline(browser, built / "instructor.html", viewport={"width": 1280, "height": 900})
    assert watched.problems() == []
    assert watched.page.locator("h1").first.inner_text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    watched.page.screenshot(path=str(SHOTS / "instructor_page.png"))
    watched.page.screenshot(path=str(SHOTS / "instructor_page_full.png"), full_page=True)
    watched.page.close()
