"""Render the executed notebooks to HTML handouts for a workshop.

    python tools/handouts.py [--out build/handouts] [--slides]

Writes two editions of every notebook plus an index page:
  instructor/NN_name.html   everything, solutions included
  student/NN_name.html      cells tagged ``solution`` removed (exercises kept)
  slides/NN_name.slides.html  (with --slides) reveal.js slides for the instructor
  index.html                links to both editions, in series order

The notebooks are rendered as committed (make execute refreshes them); nothing is run.
"""

from __future__ import annotations

import argparse
import html
import sys
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter, SlidesExporter
from traitlets.config import Config

ROOT = Path(__file__).resolve().parent.parent
SOLUTION_TAG = "solution"


def notebooks() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def exporter(kind: str, edition: str):
    config = Config()
    # nbconvert's own TagRemovePreprocessor drops the solution cells of the student edition.
    config.TagRemovePreprocessor.enabled = True
    config.TagRemovePreprocessor.remove_cell_tags = {SOLUTION_TAG} if edition == "student" else set()
    return (SlidesExporter if kind == "slides" else HTMLExporter)(config=config)


def retarget_links(nb, suffix: str):
    """Links between notebooks point at .ipynb files; the handouts are .html files."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for path in notebooks():
                cell.source = cell.source.replace(f"({path.name})", f"({path.stem}{suffix})")
            cell.source = cell.source.replace("(../README.md#curriculum)", "(../index.html)")
    return nb


def render(path: Path, out: Path, edition: str, kind: str = "html") -> Path:
    suffix = ".slides.html" if kind == "slides" else ".html"
    nb = retarget_links(nbformat.read(path, as_version=4), suffix)
    body, _ = exporter(kind, edition).from_notebook_node(nb, resources={"metadata": {"name": path.stem}})
    target = out / edition / f"{path.stem}{suffix}"
    if kind == "slides":
        target = out / "slides" / f"{path.stem}{suffix}"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(body, encoding="utf-8")
    return target


def title_of(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown" and "nav" not in cell.metadata.get("tags", []):
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return path.stem


def write_index(out: Path, slides: bool) -> Path:
    rows = []
    for path in notebooks():
        links = [f'<a href="student/{path.stem}.html">student</a>',
                 f'<a href="instructor/{path.stem}.html">instructor</a>']
        if slides:
            links.append(f'<a href="slides/{path.stem}.slides.html">slides</a>')
        rows.append(f"<tr><td>{html.escape(title_of(path))}</td><td>{' · '.join(links)}</td></tr>")
    page = ("<!doctype html><meta charset='utf-8'><title>DDP workshop handouts</title>"
            "<style>body{font-family:sans-serif;max-width:50em;margin:2em auto}"
            "td{padding:.3em 1em}</style>"
            "<h1>PyTorch DDP, hands-on: handouts</h1>"
            "<p>Student editions leave out the exercise solutions; instructor editions have everything.</p>"
            f"<table>{''.join(rows)}</table>")
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    return index


def build(out: Path, slides: bool = False) -> list[Path]:
    written = []
    for path in notebooks():
        for edition in ("instructor", "student"):
            written.append(render(path, out, edition))
        if slides:
            written.append(render(path, out, "instructor", kind="slides"))
    written.append(write_index(out, slides))
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "handouts")
    parser.add_argument("--slides", action="store_true", help="also reveal.js slides per notebook")
    args = parser.parse_args(argv)
    written = build(args.out, args.slides)
    print(f"wrote {len(written)} files under {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
