"""`make gpu-check`: every recorded launch of the series on GPUs (nccl) against the CPU (gloo).

`make execute` records the notebooks' launches in tools/gpu_launches.json (script, nproc, nnodes,
args, env, torchrun flags, timeout, outcome). On a machine with GPUs this tool writes every worker
script from its notebook's %%writefile cell and runs each launch at its recorded world size twice:
the CPU reference (ddp_helpers.series.CPU_ENV: GPUs hidden, gloo forced, as `make test`), then the
GPU run (DDP_BACKEND=nccl: rank r on cuda:LOCAL_RANK). With fewer GPUs than ranks (one laptop GPU),
a script on ddp_helpers.runtime runs with its ranks sharing the GPUs over gloo (DDP_SHARE_GPUS=1:
NCCL refuses two ranks on one device), and a script that picks a GPU per rank itself runs at world
size 1 on both sides (skipped if that does not end as recorded). A launch recorded with
DDP_BACKEND=gloo needs gloo (monitored_barrier, say): both sides run it as recorded, "gloo by
design". Simulated nodes are skipped and listed (not a failure). `--plan` runs nothing and prints
each launch's plan for `--gpus N` and the line `GPU path: N of M launches on G GPU(s)`.

A launch that ran passes when both sides end alike (both succeed, or both fail with the same
exception; both failing passes only for a launch recorded "failed", a failure demo, which must
still fail), and when on both sides
* every rank printed the same lines, rank by rank: words and integers equal after naming
  device-dependent words alike (DEVICE_WORDS), floats within ABS_TOL + REL_TOL * |cpu| (fp16
  autocast on GPUs vs bf16 on CPUs, TF32 matmuls, another summation order);
* the JSON files the launch wrote under its output paths (args `runs/...`, and a script's
  `default="runs/..."` for an option not passed) are the same files holding the same values: keys
  and lengths equal, bools, ints and None exact, strings as lines, floats within the tolerance;
  values under keys that measure the machine (timings, load, pids, ports: MEASURED_KEY) are skipped.
Each side keeps its own copy of the output paths (a resumed run resumes from its own side's
checkpoint), starting empty as the notebooks do; the notebooks' files are put back at the end.
Exit 1 if a launch that ran did not pass. Without a GPU it says so and exits 0; with CUDA present
but unusable (torch built for CUDA, a driver, no usable GPU; or a GPU that cannot run a kernel), 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ddp_helpers.runtime import SHARE_GPUS_ENV
from ddp_helpers.series import CPU_ENV, write_worker_scripts

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
    "08_plain_digits.py": "plain python: the single-process script that exercise 08.1 converts",
    "08_three_mistakes.py": "run by the doctor (CPU and gloo by design), which records no launch",
    "08_three_mistakes_fixed.py": "run by the doctor (CPU and gloo by design), which records no launch",
}
FLOAT = re.compile(r"[-+]?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|nan|inf)")
# Words that name the device or its precision recipe, not a result.
DEVICE_WORDS = [
    (re.compile(r"\b(nccl|gloo)\b"), "<backend>"),
    (re.compile(r"\bcuda(:\d+)?\b|\bcpu\b"), "<device>"),
    (re.compile(r"\b(torch\.)?b?float16\b"), "<half>"),
    # the SyncBatchNorm for the device (ddp_helpers.syncbn.convert_sync_batchnorm: torch's on CUDA)
    (re.compile(r"\b(ddp_helpers\.syncbn|torch\.nn\.modules\.batchnorm)\.SyncBatchNorm\b"), "<SyncBatchNorm>"),
    (re.compile(r"(grad scaler|GradScaler) (on|off|True|False)"), r"\1 <on/off>"),
    (re.compile(r"(MASTER_PORT=|port[ =:]|127\.0\.0\.1:|localhost:)\d+"), r"\1<port>"),
    (re.compile(r"\b\d+(\.\d+)? ?(s|ms|seconds)\b"), "<time>"),
]
# JSON keys whose values measure the machine or the moment, not the result: timings (..._s,
# seconds, times, spread, ratio and efficiency of timings, cost models), load, pids, ports.
MEASURED_KEY = re.compile(r"(.*_)?(s|seconds|times|timestamp|spread|load|pid|ppid|port|cmdline)"
                          r"|ratio|efficiency|residuals|threshold|verdict|.*_per_(s|byte)", re.I)
EXCEPTION = re.compile(r"([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Timeout))(?::|$)")
SIMULATED_NODES = "simulated nodes use gloo on every machine"


def normalise(line: str) -> tuple[str, list[float]]:
    """(the line with device words named alike and floats replaced by <f>, the floats)."""
    for pattern, repl in DEVICE_WORDS:
        line = pattern.sub(repl, line)
    floats = [float(f) for f in FLOAT.findall(line)]
    return FLOAT.sub("<f>", line), floats


def close(cpu: float, gpu: float) -> bool:
    """gpu within ABS_TOL + REL_TOL * |cpu| of cpu (nan matches nan, inf matches itself)."""
    return cpu == gpu or (math.isnan(cpu) and math.isnan(gpu)) or abs(gpu - cpu) <= ABS_TOL + REL_TOL * abs(cpu)


def compare_text(a: str, b: str) -> str | None:
    """None when two lines agree (device words, floats within the tolerance), else why not."""
    (text_a, floats_a), (text_b, floats_b) = normalise(a), normalise(b)
    if text_a != text_b:
        return f"{a!r} vs {b!r}"
    for x, y in zip(floats_a, floats_b, strict=True):
        if not close(x, y):
            return f"{x} vs {y} (tolerance {ABS_TOL} + {REL_TOL}*|cpu|)"
    return None


def compare_lines(cpu: list[str], gpu: list[str]) -> str | None:
    """None when the outputs agree within the tolerances, else what differs first."""
    if len(cpu) != len(gpu):
        return f"{len(cpu)} lines on the CPU, {len(gpu)} on the GPU"
    for k, (a, b) in enumerate(zip(cpu, gpu, strict=True)):
        diff = compare_text(a, b)
        if diff:
            return f"line {k}: {diff}"
    return None


def compare_ranks(cpu: dict[int, list[str]], gpu: dict[int, list[str]]) -> str | None:
    """compare_lines for every rank's stdout, in rank order; the first difference, with its rank."""
    for rank in sorted(set(cpu) | set(gpu)):
        diff = compare_lines(cpu.get(rank, []), gpu.get(rank, []))
        if diff:
            return f"rank {rank} stdout, {diff}"
    return None


def compare_json(cpu, gpu, where: str) -> str | None:
    """None when two JSON values agree by the rules of the module docstring, else where and how not."""
    if isinstance(cpu, dict) and isinstance(gpu, dict):
        if cpu.keys() != gpu.keys():
            return f"{where}: keys {sorted(cpu.keys() - gpu.keys())} only on the CPU, {sorted(gpu.keys() - cpu.keys())} only on the GPU"
        diffs = (compare_json(cpu[k], gpu[k], f"{where}.{k}") for k in cpu if not MEASURED_KEY.fullmatch(k))
        return next((d for d in diffs if d), None)
    if isinstance(cpu, list) and isinstance(gpu, list):
        if len(cpu) != len(gpu):
            return f"{where}: {len(cpu)} items on the CPU, {len(gpu)} on the GPU"
        diffs = (compare_json(a, b, f"{where}[{i}]") for i, (a, b) in enumerate(zip(cpu, gpu, strict=True)))
        return next((d for d in diffs if d), None)
    if isinstance(cpu, str) and isinstance(gpu, str):
        diff = compare_text(cpu, gpu)
        return diff and f"{where}: {diff}"
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (cpu, gpu))
    if numbers and float in (type(cpu), type(gpu)):
        return None if close(cpu, gpu) else f"{where}: {cpu} vs {gpu} (tolerance {ABS_TOL} + {REL_TOL}*|cpu|)"
    return None if type(cpu) is type(gpu) and cpu == gpu else f"{where}: {cpu!r} vs {gpu!r}"


def compare_files(cpu: dict[str, object], gpu: dict[str, object]) -> str | None:
    """compare_json for every result file; files written on one side only differ too."""
    if cpu.keys() != gpu.keys():
        return (f"result files {sorted(cpu.keys() - gpu.keys())} only on the CPU, "
                f"{sorted(gpu.keys() - cpu.keys())} only on the GPU")
    return next((d for d in (compare_json(cpu[f], gpu[f], f) for f in sorted(cpu)) if d), None)


# Programs a notebook copies into place rather than writes (08's copy of the template), so that
# a fresh clone has every recorded launch's script without running the notebook first.
COPIED = {"runs/08_capstone/train_ddp.py": ROOT / "templates" / "train_ddp.py"}


def write_scripts() -> int:
    """Every notebook's worker scripts, written where the notebooks write them, and COPIED."""
    for target, source in COPIED.items():
        (NOTEBOOKS / target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, NOTEBOOKS / target)
    return write_worker_scripts(NOTEBOOKS) + len(COPIED)


def script_text(launch: dict) -> str:
    script = NOTEBOOKS / launch["script"]
    return script.read_text() if script.is_file() else ""


def output_paths(launch: dict) -> list[str]:
    """The launch's output paths (relative to notebooks/): its arguments that are `runs/...`
    paths (also as --opt=runs/...), and the script's `default="runs/..."` for an option not passed."""
    args = launch.get("args") or []
    paths = [a.split("=", 1)[-1] for a in args if a.split("=", 1)[-1].startswith("runs/")]
    for option, default in re.findall(r"add_argument\(\s*[\"'](--[\w-]+)[\"'][^)]*?default=[\"'](runs/[^\"']+)",
                                      script_text(launch)):
        if not any(a == option or a.startswith(option + "=") for a in args):
            paths.append(default)
    return list(dict.fromkeys(p.rstrip("/") for p in paths))


def mirror(paths: list[str], source: Path, target: Path) -> None:
    """Make each path under target what it is under source (copied, mtimes kept; absent: removed)."""
    for p in paths:
        src, dst = source / p, target / p
        if dst.is_dir() and not dst.is_symlink():
            shutil.rmtree(dst)
        else:
            dst.unlink(missing_ok=True)
        if src.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)


def file_clock_now() -> int:
    """A moment on the clock that stamps files' mtimes, past every file written before the call.
    The kernel stamps files with a coarse clock (one timer tick, up to ~10 ms, behind
    time.time_ns()), so a file written right after time.time_ns() can look older than that moment,
    and two files written in one tick look the same age. So: wait for the stamp clock to tick."""
    def stamp() -> int:
        with tempfile.NamedTemporaryFile(dir=NOTEBOOKS, prefix=".gpu-check-clock-") as f:
            return os.fstat(f.fileno()).st_mtime_ns

    first = stamp()
    while (now := stamp()) == first:
        time.sleep(0.001)
    return now


def result_files(paths: list[str], since_ns: int) -> dict[str, object]:
    """{file: its JSON} for the .json files under the output paths written since since_ns. Hidden files are
    left out: the launcher's own records (.launch.json: which script ran, when) differ between any two runs."""
    found: dict[str, object] = {}
    for p in paths:
        root = NOTEBOOKS / p
        for f in [root] if root.is_file() else sorted(root.rglob("*.json")) if root.is_dir() else []:
            if f.suffix == ".json" and not f.name.startswith(".") and f.stat().st_mtime_ns >= since_ns:
                try:
                    found[str(f.relative_to(NOTEBOOKS))] = json.loads(f.read_text())
                except (OSError, ValueError) as err:
                    found[str(f.relative_to(NOTEBOOKS))] = f"<unreadable: {type(err).__name__}>"
    return found


def failure(err: Exception) -> str:
    """A failed run's outcome: the last exception named in the failing rank's traceback,
    else the launcher's error (and the exit code: a signal, for a rank killed or aborted)."""
    tail = (getattr(err, "traceback_tail", "") or "").splitlines()
    names = [m.group(1) for line in tail if (m := EXCEPTION.match(line.strip()))]
    code = getattr(err, "exitcode", None)
    return "failed: " + (names[-1] if names else type(err).__name__ + (f" exit {code}" if code is not None else ""))


def run(launch: dict, nproc: int, env: dict[str, str]) -> tuple[str, dict[int, list[str]]]:
    """(outcome, stdout lines of every rank) of one launch with the extra env; outcome "ok" or failure()."""
    from ddp_helpers import LaunchError, torchrun

    try:
        result = torchrun(launch["script"], nproc=nproc, args=launch.get("args", []), env=env,
                          torchrun_args=launch.get("torchrun_args", []), timeout=launch.get("timeout", 300),
                          live="quiet", summary=False)
    except LaunchError as err:
        return failure(err), {}
    return "ok", dict(result.stdout)


def side(launch: dict, nproc: int, env: dict[str, str], store: Path) -> tuple[str, dict, dict]:
    """Run one side with nproc processes on that side's own copy of the output paths:
    (outcome, stdout per rank, result files)."""
    paths = output_paths(launch)
    mirror(paths, store, NOTEBOOKS)  # this side's files as its last launch left them
    for p in paths:  # as the notebooks make them: the folder, or a file's folder
        (NOTEBOOKS / p).parent.mkdir(parents=True, exist_ok=True)
        if not Path(p).suffix:
            (NOTEBOOKS / p).mkdir(exist_ok=True)
    since = file_clock_now()
    outcome, stdout = run(launch, nproc, env)
    files = result_files(paths, since)
    mirror(paths, NOTEBOOKS, store)
    return outcome, stdout, files


@dataclass
class Plan:
    """How one launch runs: the two sides' env (None: skipped, and why in `how`), at how many
    processes (None: as recorded), and whether its GPU side runs on a GPU (`GPU path: N of M`)."""
    how: str
    cpu: dict | None = None
    gpu: dict | None = None
    gpu_path: bool = False
    nproc: int | None = None


def plan(launch: dict, gpus: int, reference_only: bool = False) -> Plan:
    """The CPU reference (gloo) against the GPU side:
    * a GPU per rank: nccl (scripts on ddp_helpers.runtime), or the script's own choice;
    * fewer GPUs than ranks, a script on ddp_helpers.runtime: gloo with the ranks sharing the GPUs
      (DDP_SHARE_GPUS=1; NCCL refuses two ranks on one GPU);
    * fewer GPUs than ranks, a script that picks a GPU per rank itself: both sides at world size 1;
    * recorded with DDP_BACKEND=gloo, or a script that never touches CUDA: as recorded (no GPU path);
    * simulated nodes: skipped."""
    recorded = dict(launch.get("env") or {})
    cpu = {**recorded, **CPU_ENV}
    world = launch["nproc"] * launch.get("nnodes", 1)
    if launch.get("nnodes", 1) > 1:
        return Plan(f"skipped: {SIMULATED_NODES}")
    if recorded.get("DDP_BACKEND") == "gloo":
        return Plan("gloo by design", cpu, recorded)
    if reference_only:
        return Plan("gloo vs gloo (reference only)", cpu, cpu)
    text = script_text(launch)
    on_runtime = "ddp_helpers.runtime" in text
    own = bool(text) and not on_runtime  # the script picks its backend and device itself
    nccl = {**recorded, "DDP_BACKEND": "nccl"}
    if own and "cuda" not in text:
        return Plan("gloo vs its own (CPU only)", cpu, nccl)
    if world <= gpus:
        return Plan("gloo vs its own GPU per rank" if own else "gloo vs nccl", cpu, nccl, gpu_path=True)
    if gpus and on_runtime:
        return Plan(f"gloo vs gloo, {world} ranks on {gpus} shared GPU(s)", cpu, {**recorded, SHARE_GPUS_ENV: "1"},
                    gpu_path=True)
    if gpus and own:
        return Plan("gloo vs its own GPU, both at world size 1", cpu, nccl, gpu_path=True, nproc=1)
    return Plan(f"skipped: needs {world} GPUs, {gpus} visible")


def judge(recorded: str, cpu: tuple, gpu: tuple) -> tuple[bool, str]:
    """(passed, verdict) for the two sides' (outcome, stdout, files)."""
    if cpu[0] != gpu[0]:
        return False, "DIFFERS: outcome"
    failed = cpu[0] != "ok"
    if failed and recorded != "failed":
        return False, "FAILED: both failed (recorded ok)"
    if not failed and recorded == "failed":
        return False, "DIFFERS from the record: both ok (recorded failed, a failure demo)"
    diff = (None if failed else compare_ranks(cpu[1], gpu[1])) or compare_files(cpu[2], gpu[2])
    if diff:
        return False, f"DIFFERS: {diff}"
    return True, "ok (both failed, as recorded)" if failed else "ok"


def check(number: int, launch: dict, gpus: int, reference_only: bool, store: Path) -> dict:
    """One row: the launch run on both sides and judged, or why it was skipped."""
    world = launch["nproc"] * launch.get("nnodes", 1)
    args = " ".join(launch.get("args") or [])
    row = {"n": str(number), "launch": f"{launch['script'].removeprefix('scripts/')} {args}".strip(),
           "ws": str(world), "backends": "", "cpu": "", "gpu": ""}
    how = plan(launch, gpus, reference_only)
    if how.gpu is None:
        return {**row, "status": "skipped", "verdict": how.how.removeprefix("skipped: ")}
    row["backends"] = how.how
    nproc = how.nproc or launch["nproc"]
    cpu = side(launch, nproc, how.cpu, store / "cpu")
    if nproc != launch["nproc"] and (cpu[0] == "ok") != (launch.get("outcome", "ok") == "ok"):
        return {**row, "cpu": cpu[0], "status": "skipped",
                "verdict": f"does not run as recorded at world size {nproc} (CPU: {cpu[0]})"}
    gpu = side(launch, nproc, how.gpu, store / "gpu")
    passed, verdict = judge(launch.get("outcome", "ok"), cpu, gpu)
    return {**row, "cpu": cpu[0], "gpu": gpu[0], "status": "ok" if passed else "FAILED", "verdict": verdict}


def report(rows: list[dict]) -> int:
    """Print the rows that ran, then the skipped ones and the counts; the exit code."""
    ran = [r for r in rows if r["status"] != "skipped"]
    skipped = [r for r in rows if r["status"] == "skipped"]
    width = max([len(r["launch"]) for r in rows] + [6])
    print(f"{'#':>2}  {'launch':{width}}  ws  {'backends':30}  {'cpu':26}  {'gpu':26}  verdict")
    for r in ran:
        print(f"{r['n']:>2}  {r['launch']:{width}}  {r['ws']:>2}  {r['backends']:30}  {r['cpu'][:26]:26}  "
              f"{r['gpu'][:26]:26}  {r['verdict']}")
    if skipped:
        print(f"skipped (not failures): {len(skipped)}")
        for r in skipped:
            print(f"{r['n']:>2}  {r['launch']:{width}}  {r['ws']:>2}  skipped: {r['verdict']}")
    failed = sum(r["status"] != "ok" for r in ran)
    why = "; ".join(f"{k} x{v}" for k, v in Counter(r["verdict"] for r in skipped).items())
    print(f"gpu-check: {len(ran) - failed} of {len(ran)} launches that ran agree, {failed} do not; "
          f"{len(skipped)} skipped" + (f" ({why})" if why else ""))
    return 1 if failed else 0


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


def check_all(launches: list[tuple[int, dict]], gpus: int, reference_only: bool) -> list[dict]:
    """Every row; the notebooks' own files under the output paths are put back at the end."""
    every_path = list(dict.fromkeys(p for _, la in launches for p in output_paths(la)))
    made = {q for p in every_path for q in (NOTEBOOKS / p).parents if not q.exists()}
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        store = Path(tmp)
        mirror(every_path, NOTEBOOKS, store / "notebooks")
        try:
            return [check(n, la, gpus, reference_only, store) for n, la in launches]
        finally:
            mirror(every_path, store / "notebooks", NOTEBOOKS)
            for q in sorted(made, key=lambda q: -len(q.parts)):  # folders the runs made, now empty
                if q.is_dir() and not any(q.iterdir()):
                    q.rmdir()


def print_plan(launches: list[tuple[int, dict]], gpus: int) -> int:
    """What a run on `gpus` GPUs would do with each launch, and the GPU-path coverage line."""
    plans = [(n, la, plan(la, gpus)) for n, la in launches]
    width = max([len(la["script"].removeprefix("scripts/")) for _, la, _ in plans] + [6])
    print(f"{'#':>3}  {'script':{width}}  ws  how")
    for n, la, how in plans:
        world = la["nproc"] * la.get("nnodes", 1)
        print(f"{n:>3}  {la['script'].removeprefix('scripts/'):{width}}  {world:>2}  {how.how}")
    print(f"GPU path: {sum(how.gpu_path for *_, how in plans)} of {len(plans)} launches on {gpus} GPU(s)")
    return 0


def nvidia_driver() -> bool:
    """An NVIDIA driver is installed (its control device, or its nvidia-smi)."""
    return Path("/dev/nvidiactl").exists() or shutil.which("nvidia-smi") is not None


def usable_gpus() -> tuple[int, str]:
    """(GPUs that ran a kernel, "") or (0, why CUDA is present but unusable); (0, "") without CUDA."""
    import torch

    hidden = os.environ.get("CUDA_VISIBLE_DEVICES") == ""
    if not torch.cuda.is_available():
        if torch.version.cuda and nvidia_driver() and not hidden:
            return 0, (f"this torch is built for CUDA {torch.version.cuda} and an NVIDIA driver is here, but "
                       "torch.cuda.is_available() is False: a driver too old for this build, or no GPU "
                       "attached (see `nvidia-smi`)")
        return 0, ""
    for index in range(torch.cuda.device_count()):
        try:
            torch.ones(1, device=f"cuda:{index}").add_(1).item()
        except Exception as err:  # noqa: BLE001 - any failure means the GPU cannot run the check
            return 0, f"cuda:{index} cannot run a kernel: {type(err).__name__}: {str(err).splitlines()[0]}"
    return torch.cuda.device_count(), ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="regex: run only launches whose script matches "
                        "(keep a launch's predecessors, e.g. 11_dcp for the save and the load)")
    parser.add_argument("--collect", type=Path, help="merge a DDP_HELPERS_RECORD file into gpu_launches.json")
    parser.add_argument("--reference-only", action="store_true",
                        help="run the CPU side twice, at every recorded size (checks this tool without GPUs)")
    parser.add_argument("--plan", action="store_true", help="run nothing: print how each launch would run")
    parser.add_argument("--gpus", type=int, help="with --plan: plan for this many GPUs (default: those visible)")
    options = parser.parse_args(argv)
    if options.collect:
        if options.collect.exists():
            print(f"gpu-check: {collect(options.collect)} launches in {LAUNCHES.relative_to(ROOT)}")
        return 0
    if options.gpus is not None and (not options.plan or options.gpus < 0):
        parser.error("--gpus N (N >= 0) goes with --plan: a real run uses the GPUs it finds")
    launches = [(n, la) for n, la in enumerate(json.loads(LAUNCHES.read_text()))
                if re.search(options.only, la["script"])]
    if options.plan:
        write_scripts()  # the plan reads each script: which runtime it uses
        return print_plan(launches, usable_gpus()[0] if options.gpus is None else options.gpus)

    gpus, unusable = usable_gpus()
    if unusable:
        print(f"gpu-check: CUDA is here but unusable, so nothing was run (exit 2): {unusable}.")
        return 2
    if gpus == 0 and not options.reference_only:
        print("gpu-check: no CUDA GPU is visible here, so nothing was run (exit 0). "
              "Run `make gpu-check` on a machine with GPUs (`make gpu-check PLAN=1 GPUS=1` shows what it would run).")
        return 0
    print(f"gpu-check: {write_scripts()} worker scripts written; {len(launches)} launches; {gpus} GPU(s)"
          + ("; --reference-only: the CPU side twice" if options.reference_only else ""))
    with contextlib.chdir(NOTEBOOKS):  # the scripts' paths are relative to notebooks/
        return report(check_all(launches, gpus, options.reference_only))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
