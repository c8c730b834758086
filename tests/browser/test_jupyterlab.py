"""A learner's session in a real browser: JupyterLab (127.0.0.1, token on) in headless Chromium.

Runs all cells of notebooks 00 and 02 and checks: no error outputs except the cells that
demonstrate an error on purpose, the launch helper's live output appears, and the sampler
explorer renders and redraws when a control changes. Runs notebook 01's ring stepper cells and
clicks its step button and Play. Opens the stored notebooks unrun (untrusted, as after a
clone) and checks that every widget and figure cell shows a picture, never a widget's text repr.
Opens notebook 02's student edition (tools/handouts.py), runs it up to its first check and sees the
hint, then types the instructor's solution into the starter cell and sees the check pass.
Screenshots go to build/browser/.

Needs Debian's chromium (/usr/bin/chromium) and the playwright package: `make test-browser`.
"""

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ddp_helpers.launch import terminate

playwright = pytest.importorskip("playwright.sync_api")

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "build" / "browser"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
RUN_TIMEOUT_MS = int(os.environ.get("BROWSER_RUN_TIMEOUT_S", "240")) * 1000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: apt-get install chromium (or set CHROMIUM)")
    # Work on a copy so the browser session never rewrites the committed notebooks.
    root = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "notebooks", root / "notebooks",
                    ignore=shutil.ignore_patterns("runs", ".ipynb_checkpoints"))
    shutil.copy(ROOT / "requirements.txt", root / "requirements.txt")
    port, token = free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k not in ("DDP_HELPERS_LIVE", "MPLBACKEND")}
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", f"--IdentityProvider.token={token}",
           f"--ServerApp.root_dir={root}", "--allow-root"]
    server = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            assert time.monotonic() < deadline and server.poll() is None, "JupyterLab did not start"
            time.sleep(0.5)
    yield base, token, root
    terminate([server], grace=15)  # the server and its kernels: SIGTERM, then SIGKILL


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        yield b
        b.close()


def test_token_is_required(lab):
    base, _, _ = lab
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"{base}/api/contents", timeout=5)
    assert info.value.code == 403


def open_notebook(browser, lab, name, folder="notebooks"):
    """Open FOLDER/NAME (of the lab's copy) in a fresh page; wait for its kernel to be idle."""
    base, token, root = lab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    # a workspace of its own, reset: only this notebook is open
    page.goto(f"{base}/lab/workspaces/{folder}-{Path(name).stem}/tree/{folder}/{name}?reset&token={token}")
    n_cells = len(json.loads((root / folder / name).read_text())["cells"])
    page.wait_for_function(f"() => document.querySelectorAll('.jp-Notebook .jp-Cell').length === {n_cells}",
                           timeout=60_000)
    # A fresh JupyterLab may ask which kernel to start: wait for that question or an idle kernel,
    # whichever comes first (a fixed wait for a question that never comes cost 10 s a notebook).
    select = ".jp-Dialog button:has-text('Select')"
    page.wait_for_selector(f"{IDLE}, {select}", state="attached", timeout=60_000)
    if page.locator(select).count():
        page.locator(select).first.click()
    page.wait_for_selector(IDLE, state="attached", timeout=60_000)
    return page


IDLE = ".jp-Notebook-ExecutionIndicator[data-status='idle']"
# The input prompts a reader sees: a proof cell's input is folded (jupyter.source_hidden), and
# JupyterLab leaves the prompt of a folded input blank, so those are judged by the cells after them
# (Run All stops at the first error of an untagged cell).
SHOWN_PROMPTS = ("Array.from(document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt'))"
                 ".filter(p => !p.closest('.jp-Cell').querySelector('.jp-InputPlaceholder'))")


def run_all(browser, lab, name):
    page = open_notebook(browser, lab, name)
    idle = IDLE
    page.click("text=Run", timeout=10_000)  # the Run menu
    page.click("text=Run All Cells", timeout=10_000)
    # Done when every code cell shows an execution count ([12]:, not [ ]: or [*]:).
    try:
        page.wait_for_function(
            f"() => {SHOWN_PROMPTS}.every(p => /\\[\\d+\\]/.test(p.textContent))", timeout=RUN_TIMEOUT_MS)
    except playwright.TimeoutError:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{Path(name).stem}_timeout.png"), full_page=False)
        prompts = page.evaluate(f"() => {SHOWN_PROMPTS}.map(p => p.textContent)"
                                ".filter(t => !/\\[\\d+\\]/.test(t))")
        pytest.fail(f"{name}: Run All did not finish in {RUN_TIMEOUT_MS // 1000} s; "
                    f"prompts without an execution count: {prompts[:8]}")
    page.wait_for_selector(idle, state="attached", timeout=60_000)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{Path(name).stem}.png"), full_page=False)
    return page


def error_cells(page):
    """[cell index, end of the traceback] for every cell whose output shows an error."""
    return page.evaluate(r"""() => {
        const cells = Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell'));
        const errs = [];
        cells.forEach((c, i) => {
            // Lab renders an error output like stderr; its text holds the traceback header.
            const outs = Array.from(c.querySelectorAll('.jp-OutputArea-output'))
                // skip the launcher's live log: a failing rank's traceback is expected there
                .filter(o => !o.closest('.widget-output') && !o.querySelector('.widget-output'));
            const bad = outs.filter(o => /Traceback \(most recent call last\)/.test(o.textContent));
            if (bad.length) errs.push([i, bad[0].textContent.slice(-1500)]);
        });
        return errs;
    }""")


def tagged_raises(name):
    cells = json.loads((ROOT / "notebooks" / name).read_text())["cells"]
    return sum("raises-exception" in c.get("metadata", {}).get("tags", []) for c in cells)


def test_orientation_runs_with_live_output(browser, lab):
    page = run_all(browser, lab, "00_orientation.ipynb")
    errors = error_cells(page)
    assert len(errors) == tagged_raises("00_orientation.ipynb") == 1, errors
    # the launcher's live box shows the ranks' raw, prefixed lines while they run
    assert page.locator(".widget-output", has_text="[rank0]:").count() >= 1
    # 2 nodes x 2 processes: rank 3 is the second process of the second node
    assert page.get_by_text("[rank 3] RANK=3 LOCAL_RANK=1 GROUP_RANK=1 WORLD_SIZE=4", exact=False).count() >= 1
    page.close()


def test_sampler_explorer_redraws(browser, lab):
    page = run_all(browser, lab, "02_samplers.ipynb")
    errors = error_cells(page)
    assert len(errors) == tagged_raises("02_samplers.ipynb"), errors
    slider = page.locator(".widget-slider", has_text="dataset size").first
    slider.scroll_into_view_if_needed()
    assert slider.is_visible()
    explorer = slider.locator("xpath=ancestor::div[contains(@class,'widget-vbox')][1]")
    image = explorer.locator("img").first
    before = image.get_attribute("src")
    explorer.locator(".widget-checkbox", has_text="drop_last").locator("input").click()
    page.wait_for_function("(b) => { const i = document.querySelectorAll('.widget-vbox img');"
                           " return Array.from(i).some(x => x.src && x.src !== b); }",
                           arg=before, timeout=30_000)
    assert explorer.locator("img").first.get_attribute("src") != before
    explorer.screenshot(path=str(SHOTS / "02_explorer.png"))
    page.close()


# Cells that draw a figure from ddp_helpers.viz or build a widget: each must show a picture.
PICTURE_CALLS = ("ring_stepper(", "sampler_explorer(", "parallelism_overview(", "launch_tree(",
                 "checkpoint_flow(", "ddp_step_timeline(", "ring_step_figure(", "draw_sampler_grid(")
STORED = ["00_orientation.ipynb", "01_collectives_and_ring_allreduce.ipynb", "02_samplers.ipynb",
          "03_launching.ipynb", "04_ddp_fundamentals.ipynb", "05_checkpoints_and_fault_tolerance.ipynb"]


def picture_cells(name):
    cells = json.loads((ROOT / "notebooks" / name).read_text())["cells"]
    return [i for i, c in enumerate(cells) if c["cell_type"] == "code"
            and any(call in "".join(c["source"]) for call in PICTURE_CALLS)]


@pytest.mark.parametrize("name", STORED)
def test_stored_notebook_shows_pictures_before_it_runs(browser, lab, name):
    """An unrun, untrusted notebook: widget cells fall back to their PNG, figure cells show theirs."""
    wanted = picture_cells(name)
    if name.startswith(("01", "02")):
        assert wanted, "the widget notebooks have picture cells"
    page = open_notebook(browser, lab, name)
    shown = page.evaluate("""(wanted) => {
        const cells = Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell'));
        return wanted.map(i => [i, cells[i].querySelectorAll('.jp-OutputArea-output img').length,
                                /VBox\\(children=/.test(cells[i].textContent)]);
    }""", wanted)
    assert all(images >= 1 and not text_repr for _, images, text_repr in shown), shown
    page.screenshot(path=str(SHOTS / f"{Path(name).stem}_unrun.png"), full_page=False)
    page.close()


def scratch_notebook(lab, name, sources):
    import nbformat

    _, _, root = lab
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nbformat.write(nb, root / "notebooks" / name)


def cells_with(name, text):
    cells = json.loads((ROOT / "notebooks" / name).read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code" and text in "".join(c["source"])]


def test_ring_stepper_buttons_and_play(browser, lab):
    """Notebook 01's own static-figure and stepper cells: ▶ and Play change the picture."""
    nb01 = "01_collectives_and_ring_allreduce.ipynb"
    (static,) = cells_with(nb01, "ring_step_figure(")
    (stepper,) = cells_with(nb01, "ring_stepper(")
    scratch_notebook(lab, "zz_stepper.ipynb", ["import matplotlib.pyplot as plt", static, stepper])
    page = open_notebook(browser, lab, "zz_stepper.ipynb")
    page.click("text=Run", timeout=10_000)
    page.click("text=Run All Cells", timeout=10_000)
    box = page.locator(".widget-vbox", has=page.locator(".widget-slider", has_text="N ranks")).first
    box.wait_for(timeout=RUN_TIMEOUT_MS)
    image = box.locator(".widget-output img").first
    image.wait_for(timeout=60_000)
    step_readout = box.locator(".widget-slider", has_text="step").locator(".widget-readout")

    def changes_from(src):
        page.wait_for_function("([b, s]) => { const i = document.querySelector(s);"
                               " return i && i.src && i.src !== b; }",
                               arg=[src, ".widget-vbox .widget-output img"], timeout=30_000)

    first = image.get_attribute("src")
    box.locator("button", has_text="▶").click()
    changes_from(first)
    page.wait_for_function("(e) => e.textContent.trim() === '1'", arg=step_readout.element_handle(),
                           timeout=30_000)
    after_next = box.locator(".widget-output img").first.get_attribute("src")
    box.locator(".widget-play button").first.click()  # Play
    changes_from(after_next)
    page.wait_for_function("(e) => Number(e.textContent.trim()) >= 2", arg=step_readout.element_handle(),
                           timeout=30_000)
    box.screenshot(path=str(SHOTS / "01_stepper.png"))
    page.close()


def test_student_notebook_check_gives_a_hint_then_accepts_the_solution(browser, lab):
    """Notebook 02's student edition: its first check fails with a hint; with the solution it passes."""
    import nbformat

    sys.path.insert(0, str(ROOT / "tools"))
    import handouts

    _, _, root = lab
    name = "02_samplers.ipynb"
    handouts.write_student_notebook(ROOT / "notebooks" / name, root / "student")
    cells = nbformat.read(root / "student" / name, as_version=4).cells
    starter = next(i for i, c in enumerate(cells) if "starter" in c.metadata.get("tags", []))
    check = starter + 1
    assert "check" in cells[check].metadata["tags"] and cells[check].metadata["exercise"]["id"] == "02.1"
    instructor = nbformat.read(ROOT / "notebooks" / name, as_version=4).cells
    first = next(i for i, c in enumerate(instructor) if "exercise" in c.metadata.get("tags", []))
    solution = instructor[first + 1]
    assert "solution" in solution.metadata["tags"] and "check" in instructor[first + 2].metadata["tags"]
    solution = solution.source  # exercise 1 has one solution cell
    page = open_notebook(browser, lab, name, folder="student")
    notebook_cells = page.locator(".jp-Notebook .jp-Cell")

    def run_cell(index):
        cell = notebook_cells.nth(index)
        cell.scroll_into_view_if_needed()
        cell.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Shift+Enter")

    def output_of(index, text):
        out = notebook_cells.nth(index).locator(".jp-OutputArea-output", has_text=text)
        out.wait_for(timeout=RUN_TIMEOUT_MS)
        return out.first.text_content()

    notebook_cells.nth(check).locator(".jp-InputArea-editor").click()
    page.keyboard.press("Escape")  # command mode, the check cell selected
    page.click("text=Run", timeout=10_000)
    page.click("text=Run All Above Selected Cell", timeout=10_000)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='busy']", state="attached", timeout=30_000)
    page.wait_for_selector(IDLE, state="attached", timeout=RUN_TIMEOUT_MS)
    run_cell(check)
    assert "hint above" in output_of(check, "CheckFailed")
    # the hint as Markdown: its names in backticks rendered as code, no raw backticks left
    rendered = notebook_cells.nth(check).locator(".jp-OutputArea-output.jp-RenderedMarkdown", has_text="Hint:")
    hint = rendered.first.text_content()
    assert "Exercise 02.1: padded_len is still ...." in hint and "`" not in hint, hint
    assert rendered.first.locator("code", has_text="padded_len").count() == 1
    assert "[3, 7, 1]" not in hint
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "02_student_hint.png"), full_page=False)
    # the instructor's solution, typed into the starter cell in place of its text
    notebook_cells.nth(starter).locator(".jp-InputArea-editor").click()
    page.keyboard.press("Control+a")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(solution)
    run_cell(starter)
    page.wait_for_selector(IDLE, state="attached", timeout=60_000)
    run_cell(check)
    assert output_of(check, "Exercise 02.1: correct").strip() == "✓ Exercise 02.1: correct"
    assert notebook_cells.nth(check).locator(".jp-OutputArea-output", has_text="CheckFailed").count() == 0
    page.screenshot(path=str(SHOTS / "02_student_correct.png"), full_page=False)
    # the section links down to its exercise, and the exercise's heading links back up
    down = next(i for i, c in enumerate(cells) if "Exercise 02.1 ↓" in c.source)
    notebook_cells.nth(down).scroll_into_view_if_needed()
    notebook_cells.nth(down).locator("a", has_text="Exercise 02.1 ↓").click()
    heading = page.locator(".jp-RenderedMarkdown h4", has_text="Exercise 02.1").first
    playwright.expect(heading).to_be_in_viewport(timeout=10_000)
    heading.locator("xpath=..").locator("a", has_text="back to section 2").click()
    section = page.locator(".jp-RenderedMarkdown h2", has_text="2. The arithmetic of DistributedSampler").first
    playwright.expect(section).to_be_in_viewport(timeout=10_000)
    page.close()
