"""The slides' copy of a notebook for the handouts: a slide at every ``## `` heading, wherever it stands,
and vertical sub-slides of about one screen. tools/handouts.py renders the copy with reveal.js; the
heights are estimates for the CSS of handout_templates/handout_slides, and
tests/browser/test_handout_slides.py measures the real ones."""

from __future__ import annotations

import base64
import copy
import hashlib
import re

from notebook_pages import tags, title_cell

from ddp_helpers.series import NAV_TAG

# --- the slides' copy: a slide per ``## `` heading, sub-slides of about one screen ----------------
# Heights are estimated in reveal.js's slide pixels (960 x 700, before scaling) for the CSS of
# handout_templates/handout_slides; tests/browser/test_handout_slides.py measures the real ones.

SLIDE_BUDGET = 600          # estimated content height of one (sub-)slide, px
LONG_INPUT = 15             # code cells of more lines are shortened to their first lines ...
SHOWN_INPUT, SHOWN_SCRIPT = 12, 4  # ... and a pointer to the notebook; a %%writefile script to its head
LONG_OUTPUT, SHOWN_OUTPUT = 14, 10  # the same for long text outputs
CODE_LINE, CODE_CHARS = 21, 88      # px per code line, characters per line before it wraps
TEXT_LINE, TEXT_CHARS = 31, 95      # the same for markdown text
OUTPUT_LINE, OUTPUT_CHARS = 19, 96  # text outputs
IMAGE_WIDTH, IMAGE_HEIGHT = 900, 440  # the largest picture a slide shows (CSS max-height)
FENCE = re.compile(r"^\s*(```|~~~)")
OUTPUTS_TAG = "slide-outputs"  # a code cell's outputs that go on in the next sub-slide, its input hidden


def markdown_blocks(source: str) -> list[str]:
    """The markdown split at blank lines, a fenced code block kept whole."""
    blocks, current, fenced = [], [], False
    for line in source.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        if not line.strip() and not fenced:
            if current:
                blocks.append("\n".join(current))
            current = []
        else:
            current.append(line)
    if current:
        blocks.append("\n".join(current))
    return blocks


LIST_ITEM = re.compile(r"^(?:[-*+]|\d+\.) ")
CODE_SPAN = re.compile(r"`([^`\n]+)`")


def split_tall_block(block: str) -> list[str]:
    """A table or a list (after a lead-in line or not, in a ``>`` callout or not) taller than a slide, cut
    between its rows (the header repeated) or its items; any other block whole."""
    if markdown_height(block) <= SLIDE_BUDGET:
        return [block]
    lines, head, quote = block.splitlines(), [], all(line.startswith(">") for line in block.splitlines())
    if quote:  # a callout: its inside is cut, and each piece is a callout again
        lines = [line[2:] if line.startswith("> ") else line[1:] for line in lines]
    if len(lines) > 3 and all(line.startswith("|") for line in lines):
        head, groups = lines[:2], [[row] for row in lines[2:]]
    else:
        groups = []
        for line in lines:
            if LIST_ITEM.match(line) or not groups:
                groups.append([line])
            else:
                groups[-1].append(line)  # an item's continuation lines stay with it
        if len(groups) < 2 or not LIST_ITEM.match(groups[1][0]):
            return [block]

    def joined(part: list[str]) -> str:
        return "\n".join((f"> {line}" if line else ">") if quote else line for line in head + part)

    pieces, current = [], []
    for group in groups:
        if current and markdown_height(joined(current + group)) > SLIDE_BUDGET:
            pieces.append(joined(current))
            current = []
        current += group
    return pieces + [joined(current)]


def split_at_headings(source: str) -> list[str]:
    """The markdown cut before every ``## `` line that is not inside a fenced code block."""
    parts, current, fenced = [], [], False
    for line in source.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        if line.startswith("## ") and not fenced and any(x.strip() for x in current):
            parts.append("\n".join(current).strip("\n"))
            current = []
        current.append(line)
    parts.append("\n".join(current).strip("\n"))
    return [p for p in parts if p.strip()]


def is_section(cell) -> bool:
    return cell.cell_type == "markdown" and cell.source.startswith("## ")


def wrapped(lines: list[str], width: int) -> int:
    return sum(max(1, -(-len(line) // width)) for line in lines)


def markdown_height(source: str) -> int:
    height, fenced = 0, False
    for block in markdown_blocks(source):
        for line in block.splitlines():
            if FENCE.match(line):
                fenced = not fenced
                height += 8
            elif fenced:
                height += CODE_LINE
            elif line.startswith("# "):
                height += 20 + 70 * wrapped([line], 30)
            elif line.startswith("## "):
                height += 20 + 45 * wrapped([line], 45)
            elif line.startswith("#"):
                height += 12 + 36 * wrapped([line], 60)
            elif line.startswith("|"):
                height += 10 + TEXT_LINE * wrapped([line], TEXT_CHARS)  # long cells wrap inside narrow columns
            else:
                height += TEXT_LINE * text_lines(line)
            height += 200 * len(re.findall(r"!\[[^\]]*\]\(", line))
        height += 18 + 30 * block.startswith(">")  # between paragraphs; a quote's padding
    return height


def text_lines(line: str) -> int:
    """Rendered lines of a markdown text line: `code` spans are set wider than text (a monospace font and
    padding), and a ``>`` callout is narrower than the slide (its border and padding)."""
    line = re.sub(r"\[([^\]]*)\]\([^)\s]*\)", r"\1", line)  # a link shows its text, not its address
    spans = CODE_SPAN.findall(line)
    length = len(line) + 0.35 * sum(map(len, spans)) + 2 * len(spans)
    chars = TEXT_CHARS - (10 if line.startswith(">") else 0)
    return max(1, -(-int(length) // chars))


def png_size(data: str) -> tuple[int, int]:
    head = base64.b64decode(data[:44])
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def output_height(output) -> int:
    data = output.get("data", {})
    if "image/png" in data:
        w, h = png_size(data["image/png"])
        return 12 + min(IMAGE_HEIGHT, h * min(1, IMAGE_WIDTH / max(w, 1)))
    if "text/html" in data:
        text = data["text/html"]
        return 16 + TEXT_LINE * max(1, text.count("<tr"), len(re.sub(r"<[^>]+>", "", text)) // TEXT_CHARS)
    text = output.get("text") or data.get("text/plain") or "\n".join(output.get("traceback", []))
    return 12 + OUTPUT_LINE * wrapped(str(text).splitlines() or [""], OUTPUT_CHARS)


def cell_height(cell) -> int:
    if cell.cell_type == "markdown":
        return markdown_height(cell.source)
    inputs = 30 + CODE_LINE * wrapped(cell.source.splitlines() or [""], CODE_CHARS)
    return 10 + inputs + sum(output_height(o) for o in cell.get("outputs", []))


def shortened(lines: list[str], shown: int, what: str, name: str) -> list[str]:
    return [*lines[:shown], f"{what} … {len(lines) - shown} more lines: the whole cell is in {name}"]


def slide_cells(nb, name: str) -> list:
    """The cells of the slides' copy: markdown cut at every ``## `` heading and, where a block of text is
    taller than a slide, between its paragraphs; long code cells and long text outputs shortened."""
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "markdown" and NAV_TAG not in tags(cell):
            parts = []
            for part in split_at_headings(cell.source):
                chunk = []
                for block in (piece for raw in markdown_blocks(part) for piece in split_tall_block(raw)):
                    if chunk and markdown_height("\n\n".join([*chunk, block])) > SLIDE_BUDGET:
                        parts.append("\n\n".join(chunk))
                        chunk = []
                    chunk.append(block)
                parts.append("\n\n".join(chunk))
            for k, part in enumerate(parts):
                piece = copy.deepcopy(cell)
                piece.source = part
                if k:
                    piece.id = hashlib.sha1(f"{cell.id}-part-{k}".encode()).hexdigest()[:8]
                cells.append(piece)
            continue
        if cell.cell_type == "code":
            cell = shorten_cell(cell, name)
            if cell_height(cell) > SLIDE_BUDGET and cell.outputs:
                cells += split_outputs(cell)
                continue
        cells.append(cell)
    return cells


def split_outputs(cell) -> list:
    """A code cell taller than a slide as the cell with the outputs that fit, then a cell per slide of the
    rest of its outputs (tagged ``OUTPUTS_TAG``: the slides' CSS hides its input). Where even the first
    output does not fit under the input, the input has a slide of its own."""
    outputs, cell.outputs = cell.outputs, []
    parts = [cell]
    for output in outputs:
        crowded = parts[-1].outputs or parts[-1] is cell
        if crowded and cell_height(parts[-1]) + output_height(output) > SLIDE_BUDGET:
            rest = copy.deepcopy(cell)
            rest.outputs = []
            rest.metadata["tags"] = [*tags(cell), OUTPUTS_TAG]
            rest.id = hashlib.sha1(f"{cell.id}-outputs-{len(parts)}".encode()).hexdigest()[:8]
            parts.append(rest)
        parts[-1].outputs.append(output)
    return parts


def shorten_cell(cell, name: str):
    """A long input or text output cut to its first lines and a line that says where the rest is."""
    lines = cell.source.splitlines()
    shown = SHOWN_SCRIPT if lines and lines[0].startswith("%%writefile") else SHOWN_INPUT
    if len(lines) > max(shown + 1, LONG_INPUT if shown == SHOWN_INPUT else 0):
        cell.source = "\n".join(shortened(lines, shown, "#", name))
    for output in cell.get("outputs", []):
        text = output.get("text")
        if isinstance(text, str) and len(text.splitlines()) > LONG_OUTPUT:
            output.text = "\n".join(shortened(text.splitlines(), SHOWN_OUTPUT, "", name)).lstrip() + "\n"
    return cell


def with_slide_metadata(nb, name: str = "the notebook", split: bool = True):
    """reveal.js metadata on every cell: the title cell and each ``## `` heading start a slide.

    With ``split`` (the handouts), headings are found wherever they stand in a markdown cell, long inputs
    and outputs are shortened (see ``slide_cells``), and a section taller than one screen goes on in
    sub-slides (reveal.js vertical slides) of at most ``SLIDE_BUDGET`` estimated pixels each.
    """
    if not split:
        for i, cell in enumerate(nb.cells):
            starts = i == 0 or cell is title_cell(nb) or is_section(cell)
            cell.metadata["slideshow"] = {"slide_type": "slide" if starts else "-"}
        return nb
    nb.cells = slide_cells(nb, name)
    title, used = title_cell(nb), 0
    for i, cell in enumerate(nb.cells):
        height = cell_height(cell) if NAV_TAG not in tags(cell) else 0
        if i == 0 or cell is title or is_section(cell):
            kind, used = "slide", height
        elif used and used + height > SLIDE_BUDGET:
            kind, used = "subslide", height
        else:
            kind, used = "-", used + height
        cell.metadata["slideshow"] = {"slide_type": kind}
    return nb
