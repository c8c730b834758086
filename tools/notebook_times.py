"""Measure how long each notebook runs under strict nbval, for the instructor page.

    python tools/notebook_times.py                       # run nbval on every notebook, one at a time
    python tools/notebook_times.py notebooks/03_*.ipynb  # only these (the others keep their entry)
    python tools/notebook_times.py --junit build/nbval.xml   # take the times of an nbval run already made

Writes tools/notebook_times.json: per notebook the seconds its cells took (pytest's junit
durations, summed per notebook), its cell count and whether every cell passed, plus the machine
(CPU count, load average before and after) and the date. `make handouts` reads it; it never runs
notebooks itself. Refresh it after a notebook changes, on an idle 2-core machine, e.g. from the
lead's full run: PYTEST_ADDOPTS=--junitxml=build/nbval.xml make nbval, then --junit build/nbval.xml.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from ddp_helpers.launch import terminate
from ddp_helpers.series import ROOT, nbval_command, nbval_env, notebooks

TIMES = ROOT / "tools" / "notebook_times.json"


def from_junit(path: Path) -> dict[str, dict]:
    """{notebook file name: {seconds, cells, passed}} from a pytest junit XML of an nbval run."""
    per = defaultdict(lambda: {"seconds": 0.0, "cells": 0, "passed": True})
    for case in ET.parse(path).getroot().iter("testcase"):
        # nbval items: classname "notebooks.04_ddp_fundamentals.ipynb", name "Cell 12"
        found = re.search(r"(\d\d_\w+\.ipynb)", case.get("file") or case.get("classname", ""))
        if not found:
            continue
        entry = per[found.group(1)]
        entry["seconds"] += float(case.get("time", 0))
        entry["cells"] += 1
        entry["passed"] &= not any(child.tag in ("failure", "error") for child in case)
    return {k: {**v, "seconds": round(v["seconds"], 1)} for k, v in per.items()}


def run_one(notebook: Path, timeout: float) -> dict[str, dict]:
    """Strict nbval on one notebook (as `make nbval` runs it), timed through its junit report."""
    load_before = round(os.getloadavg()[0], 2)  # other work on the machine inflates the times
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        command = [*nbval_command(sys.executable, [notebook.relative_to(ROOT)]), f"--junitxml={report}"]
        proc = subprocess.Popen(command, cwd=ROOT, env=nbval_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=timeout)
        finally:  # on a timeout or ^C: pytest, its kernel and the kernel's workers
            if proc.poll() is None:
                terminate([proc])
        measured = from_junit(report) if report.exists() else {}
    return {k: {**v, "load_average_1min": load_before} for k, v in measured.items()}


def machine() -> dict:
    return {"cpu_count": os.cpu_count(), "date": datetime.date.today().isoformat()}


def load() -> dict:
    return json.loads(TIMES.read_text()) if TIMES.exists() else {"notebooks": {}}


def save(data: dict, measured: dict, source: str) -> None:
    data["notebooks"] = dict(sorted({**data["notebooks"], **measured}.items()))
    data["machine"] = {**machine(), "source": source}
    TIMES.write_text(json.dumps(data, indent=1) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--junit", type=Path, help="a junit XML of an nbval run to take the times from")
    parser.add_argument("--timeout", type=float, default=1200, help="per notebook, seconds")
    args = parser.parse_args(argv)
    data = load()
    if args.junit:
        measured = from_junit(args.junit)
        save(data, measured, f"junit report {args.junit.name}")
    else:
        paths = [p.resolve() for p in args.notebooks] or notebooks()
        measured = {}
        for path in paths:  # one at a time: the times are those of a learner's 2-core machine
            measured.update(run_one(path, args.timeout))
            save(data, measured, "tools/notebook_times.py (one notebook at a time)")  # kept if stopped
            print(path.name, measured.get(path.name), flush=True)
    print(f"wrote {TIMES.relative_to(ROOT)} ({len(measured)} notebooks measured)")
    return 0 if measured else 1


if __name__ == "__main__":
    sys.exit(main())
