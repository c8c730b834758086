"""Kill the process that called torchrun(...) many times and count launches that left a process behind.

    python tools/kill_stress.py                 # 200 kills (part of make stress)
    python tools/kill_stress.py --kills 20

Each trial starts a fresh interpreter (the kernel) that launches a worker script which sleeps, with 1 or
2 workers in turn, and SIGKILLs that interpreter: every other trial once the workers run, the others at a
random moment of the first seconds (during start-up). A trial counts as leaking when any process of its
launch (agent, workers) is still alive 10 s after the kill; leftovers are then killed. Prints a line
per leaking trial and every 10 trials, the slowest clean-up, and exits 1 if any trial leaked.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

DEADLINE_S = 10.0
CALLER_SETUP = ""  # lines the caller runs before its launch (tests/test_stress_tools.py turns the clean-up off)
WORKER = """
import pathlib, sys, time
from ddp_helpers.runtime import distributed
with distributed() as ctx:
    pathlib.Path(sys.argv[1], f"started{ctx.rank}").touch()
    time.sleep(600)
"""


def launch_processes(mark: str) -> list[psutil.Process]:
    """Every process whose command line names this trial's worker script (agent and workers)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(mark in part for part in p.info["cmdline"] or []) and p.pid != os.getpid():
                found.append(p)
        except psutil.Error:
            pass
    return found


def trial(folder: Path, index: int, nproc: int, rng: random.Random) -> tuple[float | None, int]:
    """One launch killed with its caller: (seconds until nothing of it ran, None if it leaked; leftovers)."""
    script = folder / f"kill_stress_{index}.py"  # a unique name: this trial's processes carry it
    script.write_text(WORKER)
    out = folder / f"out{index}"
    out.mkdir()
    cell = f"{CALLER_SETUP}\nfrom ddp_helpers import torchrun\ntorchrun({str(script)!r}, nproc={nproc}, args=[{str(out)!r}], timeout=300)"
    caller = subprocess.Popen([sys.executable, "-c", cell], env={**os.environ, "DDP_HELPERS_LIVE": "quiet"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if index % 2:
        time.sleep(rng.uniform(0.2, 4.0))  # during start-up: the agent or its workers may not exist yet
    else:
        deadline = time.monotonic() + 120
        while len(list(out.glob("started*"))) < nproc and time.monotonic() < deadline and caller.poll() is None:
            time.sleep(0.05)
    caller.kill()
    caller.wait()
    killed = time.monotonic()
    while time.monotonic() - killed < DEADLINE_S:
        if not launch_processes(script.name):
            return time.monotonic() - killed, 0
        time.sleep(0.1)
    leftovers = launch_processes(script.name)
    for p in leftovers:
        try:
            p.kill()
        except psutil.Error:
            pass
    return None, len(leftovers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=200, help="trials, each a launch whose caller is killed")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random kill moments")
    options = parser.parse_args(argv)
    if options.kills < 1:
        parser.error("--kills must be at least 1")
    rng = random.Random(options.seed)
    leaked, slowest = 0, 0.0
    with tempfile.TemporaryDirectory(prefix="kill_stress_") as tmp:
        for i in range(options.kills):
            seconds, left = trial(Path(tmp), i, 1 + (i // 2) % 2, rng)  # every kill moment with 1 and 2 workers
            if seconds is None:
                leaked += 1
                print(f"trial {i + 1}: {left} process(es) still alive {DEADLINE_S:.0f} s after the kill", flush=True)
            else:
                slowest = max(slowest, seconds)
            if (i + 1) % 10 == 0:
                print(f"trial {i + 1}: {leaked} leaked so far; slowest clean-up {slowest:.1f} s", flush=True)
    print(f"kill stress: {leaked} of {options.kills} killed callers left processes behind "
          f"(slowest clean-up {slowest:.1f} s)")
    return 1 if leaked else 0


if __name__ == "__main__":
    sys.exit(main())
