"""`make gpu-check`: every worker script of the series on GPUs (nccl) against the CPU (gloo).

The notebooks' launches are recorded in tools/gpu_launches.json (written by `make execute`,
which sets DDP_HELPERS_RECORD). On a machine with GPUs this tool writes every worker script
from its notebook's %%writefile cell, then runs each recorded launch at world size 1 and
min(2, GPUs), once on the CPU (DDP_BACKEND=gloo, the reference) and once as the runtime
helper chooses (nccl, cuda:LOCAL_RANK). A launch passes when both runs end alike (both
succeed, or both fail with the same exception) and rank 0 printed the same lines:

* words and integers equal, after naming device-dependent words alike (backend, device,
  the autocast dtype, whether a GradScaler is on: see DEVICE_WORDS);
* floats within |gpu - cpu| <= ABS_TOL + REL_TOL * |cpu| (fp16 autocast on GPUs vs bf16 on
  CPUs, TF32 matmuls, another summation order).

It prints one row per run and exits 1 if any run differs. Without a GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from ddp_helpers.series import notebooks

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
LAUNCHES = ROOT / "tools" / "gpu_launches.json"
ABS_TOL, REL_TOL = 0.02, 0.05
# Worker scripts the notebooks start without the launcher, so no launch is recorded: they
# choose gloo and the CPU themselves (mp.spawn demos, plain python, torchrun's own report).
NOT_LAUNCHED = {
    "03_spawn_basics.py": "mp.spawn", "03_spawn_errors.py": "mp.spawn", "03_pdeathsig.py": "mp.spawn",
    "03_init_methods.py": "mp.spawn, gloo by design", "03_ex_no_guard.py": "mp.spawn",
    "03_record_report.py": "raw torchrun, for its report", "03_ex_no_record.py": "raw torchrun",
    "05_kill_mid_save.py": "plain python, no process group", "09_fake_slurm.py": "a stand-in for srun",
    "09_elastic.py": "two torchrun agents started by hand (per-node settings, one node killed), gloo by design",
}
FLOAT = re.compile(r"[-+]?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|nan|inf)")
# Words that name the device or its precision recipe, not a result.
DEVICE_WORDS = [
    (re.compile(r"\b(nccl|gloo)\b"), "<backend>"),
    (re.compile(r"\bcuda(:\d+)?\b|\bcpu\b"), "<device>"),
    (re.compile(r"\b(torch\.)?b?float16\b"), "<half>"),
    (re.compile(r"(grad scaler|GradScaler) (on|off|True|False)"), r"\1 <on/off>"),
    (re.compile(r"(MASTER_PORT=|port[ =:]|127\.0\.0\.1:|localhost:)\d+"), r"\1<port>"),
    (re.compile(r"\b\d+(\.\d+)? ?(s|ms|seconds)\b"), "<time>"),
]


def normalise(line: str) -> tuple[str, list[float]]:
    """(the line with device words named alike and floats replaced by <f>, the floats)."""
    for pattern, repl in DEVICE_WORDS:
        line = pattern.sub(repl, line)
    floats = [float(f) for f in FLOAT.findall(line)]
    return FLOAT.sub("<f>", line), floats


def compare_lines(cpu: list[str], gpu: list[str]) -> str | None:
    """None when the outputs agree within the tolerances, else what differs first."""
    if len(cpu) != len(gpu):
        return f"{len(cpu)} lines on the CPU, {len(gpu)} on the GPU"
    for k, (a, b) in enumerate(zip(cpu, gpu, strict=True)):
        (text_a, floats_a), (text_b, floats_b) = normalise(a), normalise(b)
        if text_a != text_b:
            return f"line {k}: {a!r} vs {b!r}"
        for x, y in zip(floats_a, floats_b, strict=True):
            if not abs(y - x) <= ABS_TOL + REL_TOL * abs(x):
                return f"line {k}: {x} vs {y} (tolerance {ABS_TOL} + {REL_TOL}*|cpu|)"
    return None


def write_scripts() -> int:
    """Write every %%writefile cell of the notebooks (in order, so a later cell wins)."""
    count = 0
    for notebook in notebooks():
        for cell in json.loads(notebook.read_text())["cells"]:
            source = "".join(cell["source"])
            m = re.match(r"%%writefile (\S+)\n", source)
            if cell["cell_type"] == "code" and m:
                target = NOTEBOOKS / m.group(1)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(source[m.end():])
                count += 1
    return count


def run(launch: dict, nproc: int, backend: str | None) -> tuple[str, list[str]]:
    """(outcome, rank-0 stdout) of one launch; outcome "ok" or the failing rank's last line."""
    from ddp_helpers import LaunchError, torchrun

    env = dict(launch.get("env") or {})
    env.pop("DDP_BACKEND", None)
    if backend:
        env["DDP_BACKEND"] = backend
    for arg in launch.get("args", []):  # output folders the notebook would have made
        if "/" in arg and not arg.startswith("-"):
            (NOTEBOOKS / arg).parent.mkdir(parents=True, exist_ok=True)
    try:
        result = torchrun(launch["script"], nproc=nproc, args=launch.get("args", []), env=env,
                          torchrun_args=launch.get("torchrun_args", []), timeout=launch.get("timeout", 300),
                          live="quiet", summary=False)
    except LaunchError as err:
        tail = getattr(err, "traceback_tail", "") or str(err)
        return "failed: " + (tail.strip().splitlines() or ["?"])[-1].split(":")[0], []
    return "ok", result.stdout.get(0, [])


def collect(recorded: Path) -> int:
    """Merge the launches `make execute` recorded into tools/gpu_launches.json.

    A notebook that was re-executed replaces all the launches of its number (NN_); the
    others keep theirs. Identical launches are kept once, in the order they ran.
    """
    new = [json.loads(line) for line in recorded.read_text().splitlines() if line.strip()]
    redone = {Path(la["script"]).name[:2] for la in new}
    old = json.loads(LAUNCHES.read_text()) if LAUNCHES.exists() else []
    merged, seen = [], set()
    for la in [o for o in old if Path(o["script"]).name[:2] not in redone] + new:
        key = json.dumps({k: la.get(k) for k in ("script", "args", "env", "torchrun_args", "nnodes")}, sort_keys=True)
        if key not in seen:
            seen.add(key)
            merged.append(la)
    merged.sort(key=lambda la: Path(la["script"]).name[:2])  # stable: notebook order, then run order
    LAUNCHES.write_text(json.dumps(merged, indent=1) + "\n")
    recorded.unlink()
    return len(merged)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="regex: run only launches whose script matches")
    parser.add_argument("--collect", type=Path, help="merge a DDP_HELPERS_RECORD file into gpu_launches.json")
    parser.add_argument("--reference-only", action="store_true",
                        help="run the CPU side twice (checks this tool on a machine without GPUs)")
    options = parser.parse_args(argv)
    if options.collect:
        if options.collect.exists():
            print(f"gpu-check: {collect(options.collect)} launches in {LAUNCHES.relative_to(ROOT)}")
        return 0

    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 0 and not options.reference_only:
        print("gpu-check: no CUDA GPU is visible here, so nothing was run (exit 0). "
              "Run `make gpu-check` on a machine with GPUs.")
        return 0
    launches = [la for la in json.loads(LAUNCHES.read_text()) if re.search(options.only, la["script"])]
    print(f"gpu-check: {write_scripts()} worker scripts written; {len(launches)} launches; {gpus} GPU(s)")
    os.chdir(NOTEBOOKS)
    sizes = sorted({1, min(2, gpus)}) if gpus else [1, 2]
    rows, failures = [], 0
    for launch in launches:
        if launch.get("nnodes", 1) > 1:
            rows.append((launch["script"], "-", "simulated nodes use gloo on every machine", "", "skipped"))
            continue
        for nproc in sizes:
            cpu_outcome, cpu_lines = run(launch, nproc, "gloo")
            gpu_outcome, gpu_lines = run(launch, nproc, "gloo" if options.reference_only else None)
            if cpu_outcome != gpu_outcome:
                verdict = "DIFFERS: outcome"
            else:
                diff = compare_lines(cpu_lines, gpu_lines)
                verdict = "ok" if diff is None else f"DIFFERS: {diff}"
            failures += verdict != "ok"
            rows.append((launch["script"], str(nproc), cpu_outcome, gpu_outcome, verdict))
    width = max(len(r[0]) for r in rows) if rows else 10
    print(f"{'script':{width}}  ws  {'cpu (gloo)':28}  {'gpu (nccl)':28}  verdict")
    for script, ws, cpu_outcome, gpu_outcome, verdict in rows:
        print(f"{script:{width}}  {ws:>2}  {cpu_outcome[:28]:28}  {gpu_outcome[:28]:28}  {verdict}")
    print(f"gpu-check: {len(rows) - failures} of {len(rows)} rows agree")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
