"""Regenerate the navigation cells (tag ``nav``) at the top and bottom of every notebook.

Usage: python tools/nav.py [--check]
--check exits 1 if any notebook's navigation is out of date (used by the tests).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

from ddp_helpers.series import NAV_TAG as TAG
from ddp_helpers.series import notebooks, title_of

# The learner's pages beside the notebooks (notebooks/*.md), linked from every navigation line:
# file name -> link text. tools/handouts.py renders them into the handouts too.
LEARNER_PAGES = {"cheatsheet.md": "Cheat sheet", "glossary.md": "Glossary", "troubleshooting.md": "Troubleshooting"}


def nav_text(paths: list[Path], titles: list[str], i: int) -> str:
    parts = []
    if i > 0:
        parts.append(f"[‹ {titles[i - 1]}]({paths[i - 1].name})")
    parts.append("[Contents](../README.md#curriculum)")
    parts.append(" · ".join(f"[{text}]({name})" for name, text in LEARNER_PAGES.items()))
    if i + 1 < len(paths):
        parts.append(f"[{titles[i + 1]} ›]({paths[i + 1].name})")
    return " | ".join(parts)


def with_nav(nb, text: str):
    cells = [c for c in nb.cells if TAG not in c.metadata.get("tags", [])]
    top, bottom = (nbformat.v4.new_markdown_cell(text, metadata={"tags": [TAG]}) for _ in range(2))
    nb.cells = [top, *cells, bottom]
    return nb


def main(check: bool) -> int:
    paths = notebooks()
    nbs = [nbformat.read(p, as_version=4) for p in paths]
    titles = [title_of(nb) for nb in nbs]
    stale = []
    for i, (path, nb) in enumerate(zip(paths, nbs, strict=True)):
        text = nav_text(paths, titles, i)
        navs = [c.source for c in nb.cells if TAG in c.metadata.get("tags", [])]
        ok = (len(navs) == 2 and navs == [text, text] and TAG in nb.cells[0].metadata.get("tags", [])
              and TAG in nb.cells[-1].metadata.get("tags", []))
        if ok:
            continue
        stale.append(path.name)
        if not check:
            nbformat.write(with_nav(nb, text), path)
    if stale:
        print(("out of date: " if check else "updated: ") + ", ".join(stale))
    return 1 if (check and stale) else 0


if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv))
