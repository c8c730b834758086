"""Count exit aborts of the walkthrough's plain DDP scripts over many launches (`make stress`).

    python tools/teardown_stress.py                 # 200 launches: steps 6, 7, 9 in turn
    python tools/teardown_stress.py --launches 30 --scripts notebooks/walkthrough/step6_ddp.py

Each launch is `torchrun --standalone --nproc-per-node=2 SCRIPT OUT`, one after another, with the
CPU path forced (as in make test). A launch counts as an abort when torchrun exits non-zero or a
rank's stderr says "terminate called" (gloo's teardown abort at interpreter exit: notebook 09, section 7;
the walkthrough's scripts end with the clean exit of notebook 00, step 2, so that it cannot happen).
Prints one line per script and a total, and exits 1 if any launch aborted.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WALKTHROUGH = ROOT / "notebooks" / "walkthrough"
DEFAULT_SCRIPTS = [WALKTHROUGH / f"{name}.py" for name in ("step6_ddp", "step7_batch_size", "step9_rank0_save")]


def launch(script: Path, out: Path, timeout: float) -> tuple[int, bool]:
    """(torchrun's exit code, whether any rank printed 'terminate called')."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "DDP_BACKEND": "gloo", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           str(script), str(out)], capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=WALKTHROUGH.parent)
    return proc.returncode, "terminate called" in proc.stderr


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=200, help="launches in all, the scripts in turn")
    parser.add_argument("--scripts", type=Path, nargs="+", default=DEFAULT_SCRIPTS)
    parser.add_argument("--timeout", type=float, default=120, help="seconds one launch may take")
    options = parser.parse_args(argv)
    if options.launches < 1:
        parser.error("--launches must be at least 1")
    missing = [str(s) for s in options.scripts if not s.is_file()]
    if missing:
        parser.error(f"no such script: {', '.join(missing)}")
    runs, aborts = collections.Counter(), collections.Counter()
    codes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(options.launches):
            script = options.scripts[i % len(options.scripts)]
            code, terminated = launch(script, Path(tmp) / "out", options.timeout)
            runs[script.name] += 1
            codes[script.name][code] += 1
            aborts[script.name] += code != 0 or terminated
            if code != 0 or terminated or (i + 1) % 10 == 0:  # progress, for a run stopped early
                print(f"launch {i + 1}: {script.name} exit {code}{' (terminate called)' if terminated else ''}; "
                      f"{sum(aborts.values())} aborts so far", flush=True)
    for name in runs:
        print(f"{name}: {aborts[name]} aborts in {runs[name]} launches (exit codes {dict(codes[name])})")
    print(f"teardown stress: {sum(aborts.values())} aborts in {sum(runs.values())} launches")
    return 1 if sum(aborts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
