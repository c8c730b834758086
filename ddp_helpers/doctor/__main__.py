"""``python -m ddp_helpers.doctor [--nproc N] [--timeout S] [--json FILE] SCRIPT [ARGS...]``"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from ddp_helpers.doctor.run import DEFAULT_NPROC, DEFAULT_TIMEOUT_S


def _positive(kind: type) -> Callable[[str], int | float]:
    def parse(text: str) -> int | float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ddp_helpers.doctor",
                                description="Run a DDP training script at N ranks on CPU and report its mistakes.")
    p.add_argument("--nproc", type=_positive(int), default=DEFAULT_NPROC, help="ranks (default 2)")
    p.add_argument("--timeout", type=_positive(float), default=DEFAULT_TIMEOUT_S,
                   help="seconds before a hang is ended and reported (default 120)")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE")
    p.add_argument("script", help="the training script, run unchanged")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return p


def main(argv: list[str] | None = None) -> int:
    options = parser().parse_args(argv)
    from ddp_helpers.doctor.run import diagnose

    report = diagnose(options.script, args=options.args, nproc=options.nproc, timeout=options.timeout)
    print(report.render())
    if options.json:
        Path(options.json).write_text(report.to_json() + "\n")
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
