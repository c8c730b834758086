"""Run the launch-heavy test files many times in a row and count failures per test (`make stress-tests`).

    python tools/stress_tests.py                          # 30 rounds of LAUNCH_HEAVY
    python tools/stress_tests.py --rounds 50 tests/test_launch.py -k killing

A test that fails now and then is a bug: `make test` runs each test once, so a 1-in-10 failure
reddens one CI run in ten. Each round is one pytest run of the files (CPU path forced, as in
make test); its JUnit XML report says which tests failed. Prints one line per round and, at the
end, every test that failed at least once with its count, then exits 1 if any did.
Load the cores at the same time (`make stress-tests BUSY=1` starts one busy-loop process per core)
to see what a loaded CI machine sees.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The files whose tests start torchrun launches or kill process trees: where timing can decide.
LAUNCH_HEAVY = ["tests/test_launch.py", "tests/test_launch_watchdog.py", "tests/test_exercises_launches.py",
                "tests/test_exercises_nb08.py", "tests/test_template.py", "tests/test_results.py",
                "tests/test_plain_teardown.py", "tests/test_checkpoint.py"]


def failed_tests(report: Path) -> tuple[int, list[str]]:
    """(tests run, ids of those that failed or errored) from a pytest JUnit XML report."""
    root = ET.parse(report).getroot()
    ran, failed = 0, []
    for case in root.iter("testcase"):
        ran += 1
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(f"{case.get('classname')}::{case.get('name')}")
    return ran, failed


def busy_loop() -> None:
    while True:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="pytest runs of the files, one after another")
    parser.add_argument("--busy", action="store_true", help="keep every core busy with a spinning process meanwhile")
    parser.add_argument("pytest_args", nargs="*", default=LAUNCH_HEAVY,
                        help="test files and pytest options (default: the launch-heavy files)")
    options, pytest_options = parser.parse_known_args(argv)  # -k, -x...: pytest's, passed on in order
    options.pytest_args = [*options.pytest_args, *pytest_options]
    if options.rounds < 1:
        parser.error("--rounds must be at least 1")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "DDP_BACKEND": "gloo"}
    spinners = [multiprocessing.Process(target=busy_loop, daemon=True) for _ in range(os.cpu_count() or 1)
                ] if options.busy else []
    for s in spinners:
        s.start()
    failures: collections.Counter[str] = collections.Counter()
    bad_rounds = 0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(1, options.rounds + 1):
                report = Path(tmp) / f"round{i}.xml"
                start = time.monotonic()
                run = subprocess.run([sys.executable, "-m", "pytest", "-q", f"--junitxml={report}",
                                      *options.pytest_args], cwd=ROOT, env=env, capture_output=True, text=True)
                if not report.exists():
                    print(f"round {i}: pytest exit {run.returncode} without a report\n{run.stdout[-2000:]}", flush=True)
                    return 2
                ran, failed = failed_tests(report)
                failures.update(failed)
                bad_rounds += bool(failed)
                print(f"round {i}: {ran} tests, {len(failed)} failed in {time.monotonic() - start:.0f} s"
                      + "".join(f"\n  FAILED {t}" for t in failed), flush=True)
    finally:
        for s in spinners:
            s.terminate()
    print(f"stress tests: {bad_rounds} of {options.rounds} rounds had a failure")
    for test, count in failures.most_common():
        print(f"  {count:3d} of {options.rounds}  {test}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
