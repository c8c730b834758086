"""Time the doctor against a plain torchrun of the same script at 2 ranks: what the recording costs.

    python tools/doctor_bench.py [--repeat 5] [SCRIPT [ARGS...]]

Default script: tests/doctor_scripts/c_trainer_class.py. The two kinds of run alternate (plain, doctor,
plain, ...), each in a fresh empty folder on CPU with gloo; it prints the median and the spread (min-max)
of each, and whether the doctor stays within its budget: median doctor <= 2 x median plain + 5 s.
Exit code 1 when it does not.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ddp_helpers.doctor.run import diagnose  # noqa: E402
from ddp_helpers.launch import torchrun  # noqa: E402

DEFAULT = ROOT / "tests" / "doctor_scripts" / "c_trainer_class.py"
CPU = {"CUDA_VISIBLE_DEVICES": "", "DDP_BACKEND": "gloo"}


def plain_run(script: Path, args: list[str]) -> float:
    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()):
        start = time.perf_counter()
        torchrun(script, 2, args=args, env=CPU, live="quiet", summary=False, cwd=folder)
        return time.perf_counter() - start


def doctor_run(script: Path, args: list[str]) -> float:
    start = time.perf_counter()
    report = diagnose(script, args=args)
    seconds = time.perf_counter() - start
    if report.outcome != "completed":
        raise SystemExit(f"the doctor could not complete the script: {report.render()}")
    return seconds


def summary(name: str, times: list[float]) -> str:
    return (f"{name:7s} median {statistics.median(times):6.2f} s   spread {min(times):6.2f} - {max(times):6.2f} s   "
            f"runs {', '.join(f'{t:.2f}' for t in times)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("script", nargs="?", default=str(DEFAULT))
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args()
    if options.repeat < 1:
        parser.error("--repeat must be >= 1")
    script = Path(options.script).resolve()
    plain, doctor = [], []
    for _ in range(options.repeat):
        plain.append(plain_run(script, options.args))
        doctor.append(doctor_run(script, options.args))
    budget = 2 * statistics.median(plain) + 5
    within = statistics.median(doctor) <= budget
    print(f"{script.relative_to(ROOT) if script.is_relative_to(ROOT) else script}, 2 ranks, {options.repeat} runs each")
    print(summary("plain", plain))
    print(summary("doctor", doctor))
    print(f"budget 2 x plain + 5 s = {budget:.2f} s: {'within' if within else 'OVER'} "
          f"(doctor / plain = {statistics.median(doctor) / statistics.median(plain):.2f})")
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
