"""The reveal.js slides fit the slide: every slide of a deck is visited in headless Chromium and measured.

reveal.js lays a slide out at 960 x 700 px and scales it to the window; a slide whose content is taller
than ``LIMIT`` (700 px and a tenth) overflows. tools/handouts.py cuts the slides at every ``##`` heading
and into sub-slides of about one screen; built the old way (``split_slides=False``: a slide per cell that
starts with ``## ``, every cell whole) the same decks overflow, which the last test shows, so the
measurement is one that fails. Screenshots go to build/browser/.

Needs Debian's chromium (/usr/bin/chromium), the playwright package and npm: `make test-browser`.
"""

import sys
from pathlib import Path

import pytest

playwright = pytest.importorskip("playwright.sync_api")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import handouts  # noqa: E402

from ddp_helpers.series import notebooks  # noqa: E402

SHOTS = ROOT / "build" / "browser"
SLIDE_HEIGHT = 700  # nbconvert's reveal.js slide
LIMIT = SLIDE_HEIGHT * 1.1
DECKS = [p.stem for p in notebooks()]  # every deck of the series
OLD_LAYOUT_DECK = "02_samplers"

# Every slide, as (horizontal, vertical) indices: a slide without sub-slides is its own only sub-slide.
SLIDES = """() => Array.from(document.querySelectorAll('.reveal .slides > section')).flatMap((h, i) =>
    Array.from({length: Math.max(1, h.querySelectorAll(':scope > section').length)}, (_, j) => [i, j]))"""
SLIDE = """([i, j]) => { const h = document.querySelectorAll('.reveal .slides > section')[i];
    const v = h.querySelectorAll(':scope > section'); return v.length ? v[j] : h; }"""


@pytest.fixture(scope="module")
def decks(tmp_path_factory):
    if not Path(handouts.CHROMIUM).exists():
        pytest.fail(f"{handouts.CHROMIUM} not found: apt-get install chromium (or set CHROMIUM)")
    built = {}
    for split in (True, False):
        out = tmp_path_factory.mktemp("split" if split else "whole")
        handouts.copy_assets(out)
        for stem in DECKS if split else [OLD_LAYOUT_DECK]:  # the old layout: one deck shows the failure
            built[stem, split] = handouts.render(ROOT / "notebooks" / f"{stem}.ipynb", out, "instructor",
                                                 "slides", split)
    return built


@pytest.fixture(scope="module")
def browser(decks):
    with playwright.sync_playwright() as p:
        b = handouts.launch_chromium(p)
        yield b
        b.close()


def heights(browser, deck: Path, shot: Path | None = None) -> tuple[list, dict]:
    """Each slide's content height (slide px), visited in turn; and the first slide as shown at load."""
    watched = handouts.OfflinePage.open(browser, deck.as_uri(), viewport={"width": 1280, "height": 800})
    page = watched.page
    page.wait_for_selector(".reveal.ready", timeout=30_000)
    page.wait_for_timeout(500)
    first = page.evaluate(f"""() => {{ const s = ({SLIDE})([0, 0]); const css = getComputedStyle(s);
        return {{height: s.scrollHeight, shown: s.clientHeight, scrolls: ['auto', 'scroll'].includes(css.overflowY)}}; }}""")
    found = []
    for i, j in page.evaluate(SLIDES):
        page.evaluate(f"() => {{ location.hash = '#/{i}/{j}'; }}")
        page.wait_for_function(f"() => ({SLIDE})([{i}, {j}]).classList.contains('present')", timeout=10_000)
        found.append(((i, j), page.evaluate(f"() => ({SLIDE})([{i}, {j}]).scrollHeight")))
        if shot and (i, j) == (2, 0):
            page.wait_for_timeout(1000)  # the transition
            page.screenshot(path=str(shot))
    assert watched.problems() == []
    page.close()
    return found, first


@pytest.mark.parametrize("stem", DECKS)
def test_no_slide_overflows(browser, decks, stem):
    SHOTS.mkdir(parents=True, exist_ok=True)
    found, first = heights(browser, decks[stem, True], SHOTS / f"handout_slide_{stem[:2]}_3.png")
    over = [(where, h) for where, h in found if h > LIMIT]
    assert not over, f"{stem}: slides taller than {LIMIT:.0f} px: {over}"
    assert len({i for (i, _), _ in found}) >= 6 and len(found) > len({i for (i, _), _ in found})  # sub-slides
    # the title slide shows whole on load, or scrolls
    assert first["height"] <= first["shown"] + 1 or first["scrolls"], first


def test_the_old_slides_overflow(browser, decks):
    """The same measurement on deck 02 built without the splitting: it must find overflowing slides."""
    found, first = heights(browser, decks[OLD_LAYOUT_DECK, False])
    over = [h for _, h in found if h > LIMIT]
    assert len(over) >= len(found) // 2, found
