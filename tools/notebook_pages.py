"""Reading a notebook for the handouts, and writing a plain HTML page: what tools/handouts.py and
tools/instructor_page.py share."""

from __future__ import annotations

import re
from pathlib import Path

import mistune

from ddp_helpers.series import NAV_TAG, title_cell

SOLUTION_TAG, EXERCISE_TAG = "solution", "exercise"
CHECK_TAG, STARTER_TAG = "check", "starter"
INSTRUCTOR_BANNER = ('<p class="edition-banner" style="background:#fff4d6;border:1px solid #e6c36a;'
                     'padding:.4em .8em;font-weight:600">Instructor edition: solutions included</p>')


def tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


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


def links(stem: str, edition: str, pdf: bool) -> str:
    parts = [f"[HTML]({edition}/{stem}.html)"] + ([f"[PDF]({edition}/{stem}.pdf)"] if pdf else [])
    if edition == "student":
        parts.append(f"[notebook]({edition}/{stem}.ipynb)")
    return " · ".join(parts)
