"""templates/train_ddp.py, the torch-only program a learner copies: real torchrun launches on 2 CPU
processes (gloo), 3 short epochs, with bf16 autocast, 2 micro-batches per optimizer step, a log line and a
checkpoint every 5 steps, the last 2 kept. Resumed runs are compared with the uninterrupted one EXACTLY
(torch.equal on every final tensor, == on every logged loss, accuracy and learning rate): every random
number the program draws comes from (seed, epoch, rank), and gloo sums two ranks in a fixed order.
A variant whose resume forgets the scheduler's state is shown to fail the same comparison.
Launches are shared through module fixtures (the uninterrupted run, the preempted one): CI's time is short."""

from __future__ import annotations

import ast
import io
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

import psutil
import pytest
import torch

from ddp_helpers.launch import WorkerFailed, torchrun
from ddp_helpers.series import ROOT

TEMPLATE = ROOT / "templates" / "train_ddp.py"
CPU = {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
FLAGS = ["--epochs", "3", "--workers", "1", "--precision", "bf16", "--accumulate", "2", "--log-every", "5",
         "--checkpoint-every", "5", "--keep-last", "2"]
STEPS = 20  # optimizer steps per epoch: 1258 training images, 2 ranks x 2 micro-batches of 16
FAULT_STEP = STEPS + 10  # the middle of epoch 1: checkpointed (every 5), so a restart resumes right there
HEAD = ("2 processes x 2 micro-batches of 16 = global batch 64, bf16 on cpu (gloo), 1 loader workers per process")
SAMPLES_PER_S = re.compile(r"samples/s [\d.]+")


def launch(out: Path, *flags: str, env: dict | None = None, restarts: int = 0, script: Path = TEMPLATE,
           nproc: int = 2):
    return torchrun(script, nproc=nproc, args=["--out", str(out), *FLAGS, *flags], env={**CPU, **(env or {})},
                    torchrun_args=[f"--max-restarts={restarts}"] if restarts else [], timeout=240,
                    live="quiet", summary=False)


def logged(out: Path, *, with_runtime: bool = False) -> list[dict]:
    """The run's log; without the fields that differ between equal runs (attempt, throughput)."""
    rows = json.loads((out / "log.json").read_text())
    return rows if with_runtime else [{k: v for k, v in r.items() if k not in ("attempt", "samples_per_s")}
                                      for r in rows]


def final(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out / "final.pt", weights_only=True)


def same_weights(a: Path, b: Path) -> bool:
    x, y = final(a), final(b)
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def saved(out: Path) -> list[int]:
    """The checkpoints in out, by optimizer steps done."""
    return sorted(int(p.name[5:13]) for p in out.glob("ckpt_*.pt"))


def step_lines(lines: list[str]) -> list[str]:
    """Rank 0's log-every lines, without the throughput (it differs between equal runs)."""
    return [SAMPLES_PER_S.sub("samples/s -", line) for line in lines if line.startswith("step ")]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    out = tmp_path_factory.mktemp("template") / "straight"
    result = launch(out)
    return out, result


@pytest.fixture(scope="module")
def preempted(tmp_path_factory):
    """A run that rank 1's SIGTERM stopped in epoch 1, and a copy of its folder as the stop left it."""
    out = tmp_path_factory.mktemp("template") / "preempted"
    first = launch(out, env={"FAULT": "term", "FAULT_AT_STEP": str(FAULT_STEP)})  # returns: exit code 0
    shutil.copytree(out, out.with_name("as_stopped"))
    return out, first, out.with_name("as_stopped")


def test_the_template_imports_no_ddp_helpers():
    tree = ast.parse(TEMPLATE.read_text())
    modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "ddp_helpers" not in modules
    assert modules - set(sys.stdlib_module_names) == {"torch", "sklearn"}
    assert len(TEMPLATE.read_text().splitlines()) <= 430  # the capstone exception, kept readable


def test_an_uninterrupted_run_logs_lr_and_throughput_and_saves_its_config(straight):
    out, result = straight
    assert result.stdout[0][0] == f"attempt 0: new run; {HEAD}"
    heads = [line.split(":")[0] for line in result.stdout[0][1:] if not line.startswith("step ")]
    assert heads == ["epoch 0", "epoch 1", "epoch 2", "test"]
    assert all("lr " in line and "samples/s " in line and "grad norm " in line for line in result.stdout[0][1:-1])
    assert 1 not in result.stdout  # rank 0 alone prints
    rows = logged(out, with_runtime=True)
    assert [r["epoch"] for r in rows] == [0, 1, 2] and all(r["samples_per_s"] > 0 for r in rows)
    assert all(0 < r["grad_norm"] < 1e3 for r in rows)  # the mean norm before clipping, logged
    lrs = [r["lr"] for r in rows]
    assert lrs[0] > lrs[2] and lrs[2] < 1e-4  # OneCycle: the LR anneals to almost 0 at the last step
    assert json.loads((out / "config.json").read_text()) == {
        "epochs": 3, "global_batch": 64, "accumulate": 2, "precision": "bf16", "lr": 3e-3, "weight_decay": 1e-4,
        "clip": 1.0, "workers": 1, "seed": 0, "log_every": 5, "checkpoint_every": 5, "keep_last": 2, "world_size": 2}
    result_json = json.loads((out / "result.json").read_text())
    assert result_json["test_count"] == 359 and result_json["test_accuracy"] > 0.8
    assert not list(out.glob("*.tmp"))  # atomic writes leave no temporary file


def test_keep_last_k_leaves_exactly_k_checkpoints_the_newest_at_the_end(straight):
    out = straight[0]
    assert saved(out) == [3 * STEPS - 5, 3 * STEPS]  # --keep-last 2 of a checkpoint every 5 steps
    snap = torch.load(out / f"ckpt_{3 * STEPS:08d}.pt", weights_only=True)
    assert (snap["state"]["epoch"], snap["state"]["step"]) == (3, 0) and snap["scheduler"]["last_epoch"] == 3 * STEPS
    assert snap["scaler"] == {}  # bf16 needs no GradScaler: a disabled one saves an empty state


def test_log_every_lines_hold_the_step_loss_grad_norm_lr_and_throughput(straight):
    out, result = straight
    lines = [line for line in result.stdout[0] if line.startswith("step ")]
    numbers = r"step (\d+): loss ([\d.]+)  grad norm ([\d.]+)  lr ([\d.e+-]+)  samples/s ([\d.]+)"
    parsed = [re.fullmatch(numbers, line) for line in lines]
    assert all(parsed), lines
    assert [int(m[1]) for m in parsed] == list(range(5, 3 * STEPS + 1, 5))  # optimizer steps, every 5
    assert all(float(m[5]) > 0 for m in parsed)
    rows = logged(out)
    for epoch, row in enumerate(rows):  # the epoch's 4 lines are its 4 windows of 5 steps
        window = parsed[4 * epoch:4 * epoch + 4]
        assert window[-1][4] == f"{row['lr']:.3e}"  # the LR after the epoch's last step
        assert abs(sum(float(m[3]) for m in window) / 4 - row["grad_norm"]) < 2e-3  # norms before clipping
        samples = [320, 320, 320, 1258 - 3 * 320]  # 5 steps of 64; the epoch's last micro-batches are short
        loss = sum(float(m[2]) * n for m, n in zip(window, samples, strict=True)) / 1258
        assert abs(loss - row["train_loss"]) < 1e-3  # each line: the window's mean over every rank's samples


def test_a_killed_rank_under_max_restarts_resumes_and_ends_equal(straight, tmp_path):
    out = tmp_path / "killed"
    result = launch(out, env={"FAULT": "kill", "FAULT_AT_STEP": str(FAULT_STEP)}, restarts=1)
    heads = [line.split(";")[0].split(":")[0] for line in result.stdout[0] if not line.startswith("step ")]
    assert heads == ["attempt 0", "epoch 0", "attempt 1", "epoch 1", "epoch 2", "test"]
    restart = next(i for i, line in enumerate(result.stdout[0]) if line.startswith("attempt 1"))
    assert result.stdout[0][restart] == f"attempt 1: resumed at epoch 1 step 10 (ckpt_{FAULT_STEP:08d}.pt); {HEAD}"
    assert [r["attempt"] for r in logged(out, with_runtime=True)] == [0, 1, 1]
    assert logged(out) == logged(straight[0])  # losses, accuracies and learning rates: exactly
    assert same_weights(out, straight[0])
    after = step_lines(result.stdout[0][restart:])  # each log line after the restart, as the uninterrupted run's
    assert after == step_lines(straight[1].stdout[0])[FAULT_STEP // 5:]


def test_without_restarts_the_killed_run_fails(tmp_path):
    with pytest.raises(WorkerFailed) as info:
        launch(tmp_path / "no_restart", env={"FAULT": "kill", "FAULT_AT_STEP": "3"})
    assert info.value.rank == 1 and info.value.exitcode == -signal.SIGKILL


def test_sigterm_on_one_rank_stops_every_rank_with_a_checkpoint_and_the_next_launch_resumes(straight, preempted):
    """The ranks learn of the signal at the next log or checkpoint step (no host sync in between): step 35."""
    out, first, _ = preempted
    assert first.stdout[0][-1] == "SIGTERM: stopped at epoch 1 step 15, ckpt_00000035.pt saved"
    assert saved(out) == [STEPS, 30, 35]  # the last 2, and the newest at an epoch's end (a resize starts there)
    snap = torch.load(out / "ckpt_00000035.pt", weights_only=True)
    assert (snap["state"]["epoch"], snap["state"]["step"]) == (1, 15) and not (out / "final.pt").exists()
    assert snap["scheduler"]["last_epoch"] == 35  # the schedule's position is in the checkpoint
    (out / "ckpt_00000040.pt.tmp").write_bytes(b"half a file")  # a save cut short: never resumed from
    second = launch(out)
    assert second.stdout[0][0] == f"attempt 0: resumed at epoch 1 step 15 (ckpt_00000035.pt); {HEAD}"
    assert logged(out) == logged(straight[0])  # the LR logged after the resume equals the uninterrupted run's
    assert same_weights(out, straight[0])
    assert saved(out) == [3 * STEPS - 5, 3 * STEPS] and not list(out.glob("*.tmp"))


def test_a_resume_that_forgets_the_scheduler_state_is_caught(straight, tmp_path):
    line = '    scheduler.load_state_dict(snap["scheduler"])  # the LR continues where it was\n'
    source = TEMPLATE.read_text()
    assert source.count(line) == 1
    variant = tmp_path / "train_ddp.py"
    variant.write_text(source.replace(line, ""))
    out = tmp_path / "forgot"
    launch(out, env={"FAULT": "kill", "FAULT_AT_STEP": str(FAULT_STEP)}, restarts=1, script=variant)
    before, after = logged(out)[:1], logged(out)[1:]
    assert before == logged(straight[0])[:1]
    assert [r["lr"] for r in after] != [r["lr"] for r in logged(straight[0])[1:]]
    assert not same_weights(out, straight[0])


def test_sigterm_to_the_torchrun_agent_leaves_a_complete_checkpoint(tmp_path):
    """What Slurm's preemption does: the agent passes SIGTERM on to every rank's process group, the ranks
    finish their step and save; the agent itself then exits 1 (it re-raises the signal)."""
    out = tmp_path / "agent"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(TEMPLATE),
           "--out", str(out), *FLAGS]
    agent = subprocess.Popen(cmd, env={**os.environ, **CPU}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not saved(out) and agent.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert agent.poll() is None, "the run ended before its first checkpoint"
        agent.send_signal(signal.SIGTERM)
        output, _ = agent.communicate(timeout=120)
    finally:
        for p in psutil.Process(agent.pid).children(recursive=True) if agent.poll() is None else []:
            p.kill()
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()
    assert agent.returncode == 1 and "SignalException" in output
    stopped = [line for line in output.splitlines() if line.startswith("SIGTERM: stopped at epoch")]
    assert len(stopped) == 1, output[-3000:]
    snap = torch.load(out / f"ckpt_{saved(out)[-1]:08d}.pt", weights_only=True)  # complete: it loads
    assert f"epoch {snap['state']['epoch']} step {snap['state']['step']}, ckpt_{saved(out)[-1]:08d}.pt" in stopped[0]
    resumed = launch(out)
    assert resumed.stdout[0][0].startswith(f"attempt 0: resumed at epoch {snap['state']['epoch']} step ")
    assert (out / "final.pt").exists()


STORM_SCRIPT = """
import os, runpy, signal, sys
import torch
from torch.utils.data import DataLoader, TensorDataset
template = runpy.run_path(sys.argv[1], run_name="template")
signal.signal(signal.SIGTERM, template["on_sigterm"])
loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2, num_workers=2,
                    worker_init_fn=template["init_worker"])
start = template["start_workers"] if sys.argv[2] == "held" else iter
print("ready", flush=True)
for epoch in range(int(sys.argv[3])):
    try:
        assert sum(len(batch[0]) for batch in start(loader)) == 8
    except RuntimeError as exc:  # a worker died: say so and leave now (workers that ignore SIGTERM
        print(exc, file=sys.stderr, flush=True)  # would keep multiprocessing's exit handler waiting)
        os._exit(3)
print("epochs", epoch + 1, "stop requested", template["on_sigterm"].__globals__["stop_requested"], flush=True)
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # Python's exit restores the default action: the storm goes on
"""


def epochs_under_a_sigterm_storm(tmp_path: Path, how: str, epochs: int = 30) -> subprocess.CompletedProcess:
    """Epochs of a 2-worker loader while SIGTERM hits its process group every 0.2 ms: what a preemption
    does to a rank, aimed at the moment an epoch starts its workers."""
    script = tmp_path / "storm.py"
    script.write_text(STORM_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), str(TEMPLATE), how, str(epochs)], env={**os.environ, **CPU},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                break
            time.sleep(0.0002)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, "ready\n" + out, err)


def test_loader_workers_survive_a_sigterm_that_lands_while_they_start(tmp_path):
    ran = epochs_under_a_sigterm_storm(tmp_path, "held")
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.splitlines()[-1] == "epochs 30 stop requested True"  # the rank saw the signal, as a flag


def test_without_start_workers_the_storm_kills_a_loader_worker(tmp_path):
    """The control: plain iter(loader), workers start with SIGTERM deliverable and torch's handler dies of it."""
    ran = epochs_under_a_sigterm_storm(tmp_path, "plain")
    assert ran.returncode == 3 and "DataLoader worker" in ran.stderr, (ran.returncode, ran.stderr[-3000:])


def test_every_epoch_of_the_template_starts_its_workers_with_start_workers():
    """main() iterates the training loader through start_workers (not plain iter), every epoch."""
    main = next(n for n in ast.parse(TEMPLATE.read_text()).body if isinstance(n, ast.FunctionDef) and n.name == "main")
    loops = [ast.unparse(n.iter) for n in ast.walk(main) if isinstance(n, ast.For)]
    assert "enumerate(start_workers(loader))" in loops and "enumerate(loader)" not in loops


def template_functions() -> dict:
    """The template's module-level names, without running main() (its __main__ guard)."""
    import runpy

    return runpy.run_path(str(TEMPLATE), run_name="train_ddp_template")


def refusal(monkeypatch, out: Path, *flags: str, world: int = 2, gpus: int = 0) -> tuple[object, str]:
    """main() as rank 0 of `world` processes on a machine with `gpus` GPUs, in this process: it must stop
    before anything starts. Returns the exit code (a message for sys.exit) and what went to stderr."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    for name, value in {"WORLD_SIZE": world, "RANK": 0, "LOCAL_RANK": 0, "LOCAL_WORLD_SIZE": world}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.setattr(sys, "argv", ["train_ddp.py", "--out", str(out), *FLAGS, *flags])
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with pytest.raises(SystemExit) as info, warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Unable to enable fault handler")  # @record's, on this StringIO
        template_functions()["main"]()
    return info.value.code, err.getvalue()


def test_a_changed_config_is_refused(straight, tmp_path, monkeypatch):
    out = tmp_path / "changed"
    out.mkdir()
    shutil.copy(straight[0] / "config.json", out)
    code, _ = refusal(monkeypatch, out, "--lr", "0.001")
    assert "config.json holds another configuration (lr: saved 0.003, now 0.001)" in code
    assert "give a new --out" in code and saved(out) == []


def test_bad_input_stops_every_rank_before_anything_starts(tmp_path):
    """As torchrun starts it: a usage message and exit code 2, no run folder."""
    ran = subprocess.run([sys.executable, str(TEMPLATE), "--out", str(tmp_path / "bad"), "--global-batch", "63"],
                         env={**os.environ, **CPU, "WORLD_SIZE": "2", "RANK": "0"}, capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 2 and "not divisible by 2 processes" in ran.stderr
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize(("flags", "gpus", "says"), [
    (["--workers", "-1"], 0, "--workers, --weight-decay and --checkpoint-every >= 0"),
    (["--keep-last", "0"], 0, "--log-every and --keep-last >= 1"),
    (["--accumulate", "3"], 0, "--global-batch 64 is not divisible by 2 processes x --accumulate 3: choose a "
                               "multiple of 6, or --accumulate 1, 2, 4, 8, 16, 32"),
    (["--global-batch", "62", "--accumulate", "2"], 0, "choose a multiple of 4, or --accumulate 1, 31\n"),
    (["--precision", "fp16"], 0, "--precision fp16 needs a GPU per process (its GradScaler works on CUDA), and "
                                 "this process runs on the CPU: use --precision bf16 (no scaler needed) or fp32"),
    (["--precision", "fp16"], 1, "runs on the CPU: 1 GPU for 2 processes on this node, NCCL needs one each: use "
                                 "--precision bf16"),
    (["--precision", "fp8"], 0, "invalid choice: 'fp8'")])
def test_bad_input_is_refused_with_the_way_forward(monkeypatch, tmp_path, flags, gpus, says):
    code, err = refusal(monkeypatch, tmp_path / "bad", *flags, gpus=gpus)
    assert code == 2 and says in err
    assert not (tmp_path / "bad").exists()


def test_another_process_count_is_refused_with_the_way_forward(straight, tmp_path, monkeypatch):
    out = tmp_path / "resize"
    out.mkdir()
    shutil.copy(straight[0] / "config.json", out)
    code, _ = refusal(monkeypatch, out, world=1)
    assert code == (f"{out / 'config.json'}: the run was made by 2 processes, this launch has 1. Relaunch with 2 "
                    "processes in all to continue where it stopped, or add --allow-resize to continue with 1 from its "
                    "newest checkpoint at an epoch's end (later steps run again).")


def test_allow_resize_continues_on_one_process_from_the_epoch_end(straight, preempted):
    """From the preempted run's folder as its stop left it (epoch 1, step 15): the newest checkpoint at an
    epoch's end is epoch 1's start; the two later ones, made by 2 processes, go. The learning rate follows the
    optimizer steps, so it equals the uninterrupted run's exactly; the data split per rank does not."""
    out = preempted[2]
    result = launch(out, "--allow-resize", nproc=1)
    assert result.stdout[0][0] == ("attempt 0: resumed at epoch 1 step 0 (ckpt_00000020.pt), made by 2 processes; "
                                   "2 later checkpoints removed; 1 processes x 2 micro-batches of 32 = global batch "
                                   "64, bf16 on cpu (gloo), 1 loader workers per process")
    rows, reference = logged(out), logged(straight[0])
    assert rows[0] == reference[0]  # epoch 0, made by 2 processes, kept in the log
    assert [r["lr"] for r in rows] == [r["lr"] for r in reference]
    assert json.loads((out / "config.json").read_text())["world_size"] == 1  # the next resume needs no flag
    assert json.loads((out / "result.json").read_text())["test_accuracy"] > 0.8
    assert saved(out) == [3 * STEPS - 5, 3 * STEPS]


@pytest.mark.parametrize(("gpus", "local_world", "local_rank", "device", "why"), [
    (0, 2, 1, "cpu", ""),
    (1, 2, 0, "cpu", ": 1 GPU for 2 processes on this node, NCCL needs one each"),  # two processes, one GPU
    (1, 2, 1, "cpu", ": 1 GPU for 2 processes on this node, NCCL needs one each"),
    (2, 2, 1, "cuda:1", ""), (4, 2, 1, "cuda:1", ""), (1, 1, 0, "cuda:0", "")])
def test_a_gpu_per_local_process_or_the_cpu_and_why(monkeypatch, gpus, local_world, local_rank, device, why):
    choose_device = template_functions()["choose_device"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_world))
    assert choose_device(local_rank) == (torch.device(device), why)


def test_nothing_but_choose_device_picks_a_gpu():
    """torch.cuda only in choose_device and in main's set_device under `device.type == "cuda"`; no .cuda();
    pinned memory (it starts CUDA) only for a CUDA device; the rest follows `device`."""
    tree = ast.parse(TEMPLATE.read_text())
    uses = {}
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "torch.cuda":
                uses.setdefault(fn.name, set()).add(node.attr)
            assert not (isinstance(node, ast.Attribute) and node.attr == "cuda" and
                        ast.unparse(node.value) != "torch"), ast.unparse(node)
            if isinstance(node, ast.keyword) and node.arg == "pin_memory":
                assert ast.unparse(node.value) == "device.type == 'cuda'"
    assert uses == {"choose_device": {"is_available", "device_count"}, "main": {"set_device"}}
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    guarded = [n for n in ast.walk(main) if isinstance(n, ast.If) and ast.unparse(n.test) == "device.type == 'cuda'"]
    assert [ast.unparse(n.body[0]) for n in guarded] == ["torch.cuda.set_device(device)"]


SYNCS = ("item", "tolist", "cpu", "numpy", "print", "float", "bool", "save", "synchronize")


def host_syncs_outside_the_gate(source: str) -> list[str]:
    """Calls in the training loop that make the host wait for the device (.item(), .tolist(), a print, a
    collective, a tensor made from host values on the device, a blocking copy, ...) and are not under
    `if sync_now:`."""
    main = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "main")
    loop = next(n for n in ast.walk(main) if isinstance(n, ast.For) and "start_workers" in ast.unparse(n.iter))
    body = [n for statement in loop.body for n in ast.walk(statement)]  # each step (the for-else: the epoch end)
    gated = {id(n) for g in body if isinstance(g, ast.If) and ast.unparse(g.test) == "sync_now" for n in ast.walk(g)}
    found = []
    for node in body:
        if not isinstance(node, ast.Call) or id(node) in gated:
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else ast.unparse(node.func)
        collective = isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) == "dist"
        made_on_device = name in ("tensor", "torch.tensor") and any(k.arg == "device" for k in node.keywords)
        blocking_copy = name == "to" and not any(k.arg == "non_blocking" for k in node.keywords)
        if name in SYNCS or collective or made_on_device or blocking_copy:
            found.append(ast.unparse(node))
    return found


def test_the_training_loop_syncs_the_host_only_at_log_checkpoint_and_epoch_end_steps():
    source = TEMPLATE.read_text()
    assert host_syncs_outside_the_gate(source) == []
    assert source.count("sync_now = log_now or save_now or step == steps_per_epoch\n") == 1
    # the check finds the pattern it replaced: the SIGTERM flag read after every step
    every_step = source.replace("            if sync_now:\n", "            if True:\n")
    assert "window.tolist()" in host_syncs_outside_the_gate(every_step)
    assert "dist.all_reduce(window)" in host_syncs_outside_the_gate(every_step)


def test_atomic_save_fsyncs_the_file_and_the_folder(monkeypatch, tmp_path):
    atomic_save = template_functions()["atomic_save"]
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.fstat(fd).st_mode), real_fsync(fd)))
    atomic_save({"w": torch.arange(3)}, str(tmp_path / "snap.pt"))
    assert [stat.S_ISREG(m) for m in synced] == [True, False]  # the temporary file, then the folder
    assert torch.equal(torch.load(tmp_path / "snap.pt", weights_only=True)["w"], torch.arange(3))
    assert [p.name for p in tmp_path.iterdir()] == ["snap.pt"]


def test_prune_keeps_the_last_k_and_the_newest_epoch_end(tmp_path):
    names = template_functions()
    for steps in range(5, 40, 5):
        (tmp_path / f"ckpt_{steps:08d}.pt").write_bytes(b"")
    (tmp_path / "ckpt_00000040.pt.tmp").write_bytes(b"")  # not a checkpoint: a save cut short
    assert names["checkpoints"](str(tmp_path)) == [5, 10, 15, 20, 25, 30, 35]
    names["prune"](str(tmp_path), 2, 20)
    assert names["checkpoints"](str(tmp_path)) == [20, 30, 35]
    names["prune"](str(tmp_path), 1, 10)  # epoch ends every 10 steps: 30 is the newest of them
    assert names["checkpoints"](str(tmp_path)) == [30, 35]


def test_restore_brings_back_the_grad_scaler_state():
    """fp16's GradScaler state (loss scale, growth tracker) goes into the checkpoint and comes back."""
    restore = template_functions()["restore"]
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-3, total_steps=10)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    scaler.load_state_dict({**scaler.state_dict(), "scale": 512.0, "_growth_tracker": 7})
    snap = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(), "state": {"epoch": 1, "step": 3}}
    fresh = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    fresh_opt = torch.optim.AdamW(model.parameters())
    fresh_sched = torch.optim.lr_scheduler.OneCycleLR(fresh_opt, max_lr=1e-3, total_steps=10)
    assert restore(snap, torch.nn.Linear(2, 2), fresh_opt, fresh_sched, fresh) == {"epoch": 1, "step": 3}
    assert fresh.state_dict() == scaler.state_dict() != torch.amp.GradScaler("cpu").state_dict()


RESUME_DECISION = """
import os, runpy, sys
import torch, torch.distributed as dist
template = runpy.run_path(sys.argv[1], run_name="template")
dist.init_process_group("gloo")
rank = dist.get_rank()
for seen_by in (0, 1):  # checkpoints only one rank sees, as on node-local disks: rank 0's answer is everyone's
    folder = sys.argv[2] if rank == seen_by else sys.argv[2] + ".elsewhere"
    print(f"seen by rank {seen_by}: {template['resume_point'](folder, None, torch.device('cpu'))}")
# with steps per epoch (a resize): the newest checkpoint at an epoch's end
print(f"at an epoch's end: {template['resume_point'](sys.argv[2], 20, torch.device('cpu'))}")
dist.destroy_process_group()
"""


def test_rank_0_decides_where_to_resume(tmp_path):
    for steps in (20, 30, 35):
        (tmp_path / "run").mkdir(exist_ok=True)
        (tmp_path / "run" / f"ckpt_{steps:08d}.pt").write_bytes(b"")
    script = tmp_path / "resume_decision.py"
    script.write_text(RESUME_DECISION)
    result = torchrun(script, nproc=2, args=[TEMPLATE, tmp_path / "run"], env=CPU, timeout=120,
                      live="quiet", summary=False)
    expected = ["seen by rank 0: 35", "seen by rank 1: -1", "at an epoch's end: 20"]
    assert result.stdout == {0: expected, 1: expected}
