"""What make venv installs: the lock of the venv's Python, and a torch already there to keep.

    .venv/bin/python tools/stack.py write .venv

Run with the venv's Python (make venv does), it writes VENV/stack-requirements.txt and
VENV/stack-constraints.txt for `pip install -r ... -c ...`: requirements.txt and the lock of that
Python (requirements-py3.X.lock), unchanged, or, where the venv already holds a torch in the
supported range, both with torch pinned at the installed version instead, and the lock without its
CUDA packages (nvidia-*, cuda-*, triton: the installed torch brought its own). The range runs from
the lowest torch pin of requirements.txt to any patch release of the highest pin's minor version
(2.13.0 to 2.15.x), any build (+cpu, +cu128). A torch that an earlier make venv took from a lock
(its version is recorded in VENV/.torch-from-lock) is not kept: a newer lock replaces it.
Standard library only: it runs before anything is installed.
"""

import re
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CUDA_RUNTIME = re.compile(r"(nvidia-[^=]+|cuda-[^=]+|triton)==")
FINAL = re.compile(r"(\d+)\.(\d+)\.(\d+)(\+[A-Za-z0-9.]+)?")  # a final release, any local build


def lock_path(python=sys.version_info):
    return ROOT / f"requirements-py{python[0]}.{python[1]}.lock"


def torch_pins(text):
    """The torch versions that a requirements or lock file pins (markers ignored)."""
    return re.findall(r"^torch==([^\s;]+)", text, re.M)


def supported(requirements_text):
    """The lowest and the highest torch release that requirements.txt pins, as tuples of ints."""
    pins = [tuple(map(int, v.split("."))) for v in torch_pins(requirements_text)]
    return min(pins), max(pins)


def kept_torch(installed, lock_text, requirements_text, from_lock=None):
    """The installed torch (a version string, or None) if make venv keeps it, else None: the lock's
    torch is installed. Not kept: a torch outside the range, a pre-release, the lock's own pin, and
    the torch an earlier make venv took from a lock (from_lock, compared without the local build)."""
    m = FINAL.fullmatch(installed or "")
    if not m or installed.split("+")[0] in torch_pins(lock_text) or installed.split("+")[0] == from_lock:
        return None
    low, high = supported(requirements_text)
    release = tuple(map(int, m.groups()[:3]))
    return installed if low <= release and release[:2] <= high[:2] else None


def with_torch(text, torch=None, drop=re.compile(r"torch==")):
    """A requirements or lock file as make venv applies it: unchanged, or with `torch` (a kept version)
    in place of its torch pins, the lines that `drop` matches left out, each with its `# via` lines."""
    if torch is None:
        return text
    lines, dropping = [], False
    for line in text.splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            dropping = bool(drop.match(line))
        if not dropping:
            lines.append(line)
    lines += [f"torch=={torch}", "    # kept: installed before make venv (tools/stack.py)"]
    return "\n".join(lines) + "\n"


def constraints(lock_text, torch=None):
    """The lock as make venv applies it: with a kept torch, its pin and the CUDA packages dropped."""
    return with_torch(lock_text, torch, re.compile(rf"torch==|{CUDA_RUNTIME.pattern}"))


def main(argv):
    if len(argv) != 2 or argv[0] != "write":
        sys.exit(__doc__)
    venv, lock = Path(argv[1]), lock_path()
    if not lock.exists():
        sys.exit(f"make venv: no {lock.name} for Python {sys.version.split()[0]}")
    lock_text, requirements = lock.read_text(), (ROOT / "requirements.txt").read_text()
    try:
        installed = version("torch")
    except PackageNotFoundError:
        installed = None
    record = venv / ".torch-from-lock"
    from_lock = record.read_text().strip() if record.exists() else None
    kept = kept_torch(installed, lock_text, requirements, from_lock)
    (venv / "stack-requirements.txt").write_text(with_torch(requirements, kept))
    (venv / "stack-constraints.txt").write_text(constraints(lock_text, kept))
    if kept:
        record.unlink(missing_ok=True)
        print(f"make venv: {lock.name}, keeping the installed torch {kept}", file=sys.stderr)
    else:
        record.write_text(torch_pins(lock_text)[0] + "\n")
        print(f"make venv: {lock.name}, torch {torch_pins(lock_text)[0]}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
