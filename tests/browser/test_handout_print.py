"""The A4 print rules of the handouts, measured in headless Chromium with print media.

tools/handouts.py prints each HTML page to an A4 PDF. Its print CSS (tools/handout_templates/handout) must
keep a wrapped code line's continuation right of the line's own indentation, with a wrap marker, and show
every prompt whole ("In [16]:", not "In [16…"). This test lays the pages out at the width of the A4 text
block with print media, as the PDF printer does, and measures where each visual line of each code line
starts; the same measurement with the hanging indent switched off must find lines that start left of
their indentation (so it is one that can fail). Screenshots go to build/browser/.

Needs Debian's chromium (/usr/bin/chromium), the playwright package and npm: `make test-browser`.
"""

import sys
from pathlib import Path

import pytest

playwright = pytest.importorskip("playwright.sync_api")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import handouts  # noqa: E402

SHOTS = ROOT / "build" / "browser"
CHOSEN = ["02_samplers", "04_ddp_fundamentals"]  # long comment lines in nested code, prompts past [99]
A4_TEXT_WIDTH_PX = round((210 - 2 * 12) / 25.4 * 96)  # 186 mm: the @page margins are 12 mm left and right

MEASURE = """() => {
    const probe = document.createElement('span');
    probe.textContent = '0'.repeat(50);
    const host = document.querySelector('.jp-InputArea-editor pre');
    host.appendChild(probe);
    const ch = probe.getBoundingClientRect().width / 50;
    probe.remove();
    const out = {lines: 0, wrapped: 0, left_of_indent: [], unmarked: 0, prompts: 0, cut: []};
    for (const line of document.querySelectorAll('.jp-InputArea-editor pre .code-line')) {
        out.lines++;
        const indent = parseInt(getComputedStyle(line).getPropertyValue('--i'));
        const range = document.createRange();
        range.selectNodeContents(line);
        const boxes = Array.from(range.getClientRects()).filter(r => r.width > 0.5);
        if (!boxes.length) continue;
        const top = Math.min(...boxes.map(r => r.top));
        const continued = boxes.filter(r => r.top > top + 2);
        if (!continued.length) continue;
        out.wrapped++;
        const start = line.getBoundingClientRect().left;
        const left = Math.min(...continued.map(r => r.left));
        if (left < start + (indent + 1) * ch - 0.5) out.left_of_indent.push(line.textContent.slice(0, 70));
        if (!getComputedStyle(line, '::before').content.includes('\\u21aa')) out.unmarked++;
    }
    for (const prompt of document.querySelectorAll('.jp-InputPrompt, .jp-OutputPrompt')) {
        if (!prompt.textContent.trim()) continue;
        out.prompts++;
        const range = document.createRange();
        range.selectNodeContents(prompt);
        const text = range.getBoundingClientRect();
        const box = prompt.getBoundingClientRect();
        if (text.right > box.right + 0.5 || getComputedStyle(prompt).textOverflow === 'ellipsis')
            out.cut.push(prompt.textContent.trim());
    }
    return out;
}"""
FLUSH_LEFT = ".jp-InputArea-editor pre .code-line { padding-left: 0 !important; text-indent: 0 !important; }"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if not Path(handouts.CHROMIUM).exists():
        pytest.fail(f"{handouts.CHROMIUM} not found: apt-get install chromium (or set CHROMIUM)")
    out = tmp_path_factory.mktemp("handouts")
    handouts.build(out, only=[ROOT / "notebooks" / f"{stem}.ipynb" for stem in CHOSEN])
    return out


@pytest.fixture(scope="module")
def browser(built):
    with playwright.sync_playwright() as p:
        b = handouts.launch_chromium(p)
        yield b
        b.close()


def printed(browser, page_file):
    watched = handouts.OfflinePage.open(browser, page_file.as_uri(),
                                        viewport={"width": A4_TEXT_WIDTH_PX, "height": 1100})
    watched.page.emulate_media(media="print")
    handouts.wait_rendered(watched.page, 0)
    assert watched.problems() == [], page_file
    return watched.page


@pytest.mark.parametrize("edition", handouts.EDITIONS)
@pytest.mark.parametrize("stem", CHOSEN)
def test_wrapped_code_keeps_its_indentation_and_prompts_are_whole(browser, built, stem, edition):
    page = printed(browser, built / handouts.page_path(stem, edition))
    found = page.evaluate(MEASURE)
    assert found["lines"] > 100 and found["wrapped"] >= 3, found  # the pages do have wrapped lines
    assert found["left_of_indent"] == [], found["left_of_indent"]
    assert found["unmarked"] == 0
    assert found["prompts"] > 20 and found["cut"] == [], found["cut"]
    if stem == "04_ddp_fundamentals" and edition == "instructor":
        SHOTS.mkdir(parents=True, exist_ok=True)
        line = page.locator(".code-line").filter(has_text="#").nth(0)
        page.evaluate("() => { const l = Array.from(document.querySelectorAll('.code-line'))"
                      ".find(l => l.getClientRects()[0].height > 20); if (l) l.scrollIntoView(); }")
        assert line.count() == 1
        page.screenshot(path=str(SHOTS / "handout_print_wrapped_code_04.png"))
    # the same measurement with the hanging indent switched off finds the flaw the issue describes
    page.add_style_tag(content=FLUSH_LEFT)
    flush = page.evaluate(MEASURE)
    assert flush["left_of_indent"], "the measurement cannot fail"
    page.close()
