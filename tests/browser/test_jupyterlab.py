"""A learner's session in a real browser: JupyterLab (127.0.0.1, token on) in headless Chromium.

Runs all cells of notebooks 00 and 02 and checks: no error outputs except the cells that
demonstrate an error on purpose, the launch helper's live output appears, and the sampler
explorer renders and redraws when a control changes. Screenshots go to build/browser/.

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
RUN_TIMEOUT_MS = 240_000


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


def run_all(browser, lab, name):
    base, token, _ = lab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    # a workspace of its own, reset: only this notebook is open
    page.goto(f"{base}/lab/workspaces/{Path(name).stem}/tree/notebooks/{name}?reset&token={token}")
    n_cells = len(json.loads((ROOT / "notebooks" / name).read_text())["cells"])
    page.wait_for_function(f"() => document.querySelectorAll('.jp-Notebook .jp-Cell').length === {n_cells}",
                           timeout=60_000)
    select = page.locator(".jp-Dialog button", has_text="Select")
    try:  # a fresh JupyterLab may ask which kernel to start
        select.wait_for(timeout=10_000)
        select.click()
    except playwright.TimeoutError:
        pass
    idle = ".jp-Notebook-ExecutionIndicator[data-status='idle']"
    page.wait_for_selector(idle, state="attached", timeout=60_000)
    page.click("text=Run", timeout=10_000)  # the Run menu
    page.click("text=Run All Cells", timeout=10_000)
    # Done when every code cell shows an execution count ([12]:, not [ ]: or [*]:).
    page.wait_for_function(
        """() => Array.from(document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt'))
                   .every(p => /\\[\\d+\\]/.test(p.textContent))""", timeout=RUN_TIMEOUT_MS)
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
    assert page.get_by_text("[rank 1] RANK=1 LOCAL_RANK=1 WORLD_SIZE=2").count() >= 1
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
