"""templates/train_ddp.py, the torch-only program a learner copies: real torchrun launches on 2 CPU
processes (gloo), 3 short epochs. Resumed runs are compared with the uninterrupted one EXACTLY
(torch.equal on every final tensor, == on every logged loss, accuracy and learning rate): every random
number the program draws comes from (seed, epoch, rank), and gloo sums two ranks in a fixed order.
A variant whose resume forgets the scheduler's state is shown to fail the same comparison."""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from ddp_helpers.launch import WorkerFailed, torchrun
from ddp_helpers.series import ROOT

TEMPLATE = ROOT / "templates" / "train_ddp.py"
CPU = {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
FLAGS = ["--epochs", "3", "--workers", "1"]
STEPS = 20  # per epoch: 1258 training images, 2 ranks x 32
FAULT_STEP = STEPS + 10  # the middle of epoch 1


def launch(out: Path, *flags: str, env: dict | None = None, restarts: int = 0, script: Path = TEMPLATE):
    return torchrun(script, nproc=2, args=["--out", str(out), *FLAGS, *flags], env={**CPU, **(env or {})},
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


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    out = tmp_path_factory.mktemp("template") / "straight"
    result = launch(out)
    return out, result


def test_the_template_imports_no_ddp_helpers():
    tree = ast.parse(TEMPLATE.read_text())
    modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "ddp_helpers" not in modules
    assert modules - set(sys.stdlib_module_names) == {"torch", "sklearn"}
    assert len(TEMPLATE.read_text().splitlines()) <= 300  # the capstone exception, kept readable


def test_an_uninterrupted_run_logs_lr_and_throughput_and_saves_its_config(straight):
    out, result = straight
    assert result.stdout[0][0] == ("attempt 0: new run; 2 processes x batch 32 = global batch 64, "
                                   "1 loader workers per process")
    assert [line.split(":")[0] for line in result.stdout[0][1:]] == ["epoch 0", "epoch 1", "epoch 2", "test"]
    assert all("lr " in line and "samples/s " in line and "grad norm " in line for line in result.stdout[0][1:4])
    assert 1 not in result.stdout  # rank 0 alone prints
    rows = logged(out, with_runtime=True)
    assert [r["epoch"] for r in rows] == [0, 1, 2] and all(r["samples_per_s"] > 0 for r in rows)
    assert all(0 < r["grad_norm"] < 1e3 for r in rows)  # the mean norm before clipping, logged
    lrs = [r["lr"] for r in rows]
    assert lrs[0] > lrs[2] and lrs[2] < 1e-4  # OneCycle: the LR anneals to almost 0 at the last step
    assert json.loads((out / "config.json").read_text()) == {
        "epochs": 3, "global_batch": 64, "lr": 3e-3, "weight_decay": 1e-4, "clip": 1.0, "workers": 1, "seed": 0,
        "world_size": 2}
    result_json = json.loads((out / "result.json").read_text())
    assert result_json["test_count"] == 359 and result_json["test_accuracy"] > 0.8
    assert not list(out.glob("*.tmp"))  # atomic writes leave no temporary file


def test_a_killed_rank_under_max_restarts_resumes_and_ends_equal(straight, tmp_path):
    out = tmp_path / "killed"
    result = launch(out, env={"FAULT": "kill", "FAULT_AT_STEP": str(FAULT_STEP)}, restarts=1)
    heads = [line.split(";")[0].split(":")[0] for line in result.stdout[0]]
    assert heads == ["attempt 0", "epoch 0", "attempt 1", "epoch 1", "epoch 2", "test"]
    assert result.stdout[0][2].startswith("attempt 1: resumed at epoch 1 step 0;")  # the last epoch's snapshot
    assert [r["attempt"] for r in logged(out, with_runtime=True)] == [0, 1, 1]
    assert logged(out) == logged(straight[0])  # losses, accuracies and learning rates: exactly
    assert same_weights(out, straight[0])


def test_without_restarts_the_killed_run_fails(tmp_path):
    with pytest.raises(WorkerFailed) as info:
        launch(tmp_path / "no_restart", env={"FAULT": "kill", "FAULT_AT_STEP": "3"})
    assert info.value.rank == 1 and info.value.exitcode == -signal.SIGKILL


def test_sigterm_on_one_rank_stops_every_rank_with_a_snapshot_and_the_next_launch_resumes(straight, tmp_path):
    out = tmp_path / "preempted"
    first = launch(out, env={"FAULT": "term", "FAULT_AT_STEP": str(FAULT_STEP)})  # returns: exit code 0
    assert first.stdout[0][-1] == "SIGTERM: stopped after epoch 1 step 11, snapshot saved"
    snap = torch.load(out / "snapshot.pt", weights_only=True)
    assert (snap["state"]["epoch"], snap["state"]["step"]) == (1, 11) and not (out / "final.pt").exists()
    assert snap["scheduler"]["last_epoch"] == FAULT_STEP + 1  # the schedule's position is in the snapshot
    second = launch(out)
    assert second.stdout[0][0].startswith("attempt 0: resumed at epoch 1 step 11;")
    assert logged(out) == logged(straight[0])  # the LR logged after the resume equals the uninterrupted run's
    assert same_weights(out, straight[0])


def test_a_resume_that_forgets_the_scheduler_state_is_caught(straight, tmp_path):
    line = '        scheduler.load_state_dict(snap["scheduler"])  # the LR continues where it was\n'
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


def test_sigterm_to_the_torchrun_agent_leaves_a_complete_snapshot(tmp_path):
    """What Slurm's preemption does: the agent passes SIGTERM on to every rank's process group, the ranks
    finish their step and save; the agent itself then exits 1 (it re-raises the signal)."""
    out = tmp_path / "agent"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(TEMPLATE),
           "--out", str(out), *FLAGS]
    agent = subprocess.Popen(cmd, env={**os.environ, **CPU}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not (out / "snapshot.pt").exists() and agent.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert agent.poll() is None, "the run ended before its first snapshot"
        agent.send_signal(signal.SIGTERM)
        output, _ = agent.communicate(timeout=120)
    finally:
        for p in psutil.Process(agent.pid).children(recursive=True) if agent.poll() is None else []:
            p.kill()
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()
    assert agent.returncode == 1 and "SignalException" in output
    stopped = [line for line in output.splitlines() if line.startswith("SIGTERM: stopped after epoch")]
    assert len(stopped) == 1, output[-3000:]
    snap = torch.load(out / "snapshot.pt", weights_only=True)  # complete: it loads
    assert f"epoch {snap['state']['epoch']} step {snap['state']['step']}," in stopped[0]
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


def test_a_changed_config_is_refused(straight, tmp_path):
    out = tmp_path / "changed"
    shutil.copytree(straight[0], out)
    with pytest.raises(WorkerFailed) as info:
        launch(out, "--lr", "0.001")
    assert "config.json holds another configuration (lr: saved 0.003, now 0.001)" in info.value.traceback_tail
    assert "give a new --out" in info.value.traceback_tail


@pytest.mark.parametrize(("flags", "says"), [(["--global-batch", "63"], "not divisible by 2 processes"),
                                              (["--workers", "-1"], "--workers >= 0")])
def test_bad_input_stops_before_anything_starts(tmp_path, flags, says):
    ran = subprocess.run([sys.executable, str(TEMPLATE), "--out", str(tmp_path / "bad"), *flags],
                         env={**os.environ, **CPU, "WORLD_SIZE": "2", "RANK": "0"}, capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 2 and says in ran.stderr
    assert not (tmp_path / "bad").exists()


def template_functions() -> dict:
    """The template's module-level names, without running main() (its __main__ guard)."""
    import runpy

    return runpy.run_path(str(TEMPLATE), run_name="train_ddp_template")


@pytest.mark.parametrize(("gpus", "local_world", "local_rank", "device"), [
    (0, 2, 1, "cpu"), (1, 2, 0, "cpu"), (1, 2, 1, "cpu"),  # two processes on one GPU: the CPU, for both
    (2, 2, 1, "cuda:1"), (4, 2, 1, "cuda:1"), (1, 1, 0, "cuda:0")])
def test_a_gpu_per_local_process_or_the_cpu(monkeypatch, gpus, local_world, local_rank, device):
    choose_device = template_functions()["choose_device"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_world))
    assert choose_device(local_rank) == torch.device(device)


def test_atomic_save_fsyncs_the_file_and_the_folder(monkeypatch, tmp_path):
    atomic_save = template_functions()["atomic_save"]
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.fstat(fd).st_mode), real_fsync(fd)))
    atomic_save({"w": torch.arange(3)}, str(tmp_path / "snap.pt"))
    assert [stat.S_ISREG(m) for m in synced] == [True, False]  # the temporary file, then the folder
    assert torch.equal(torch.load(tmp_path / "snap.pt", weights_only=True)["w"], torch.arange(3))
    assert [p.name for p in tmp_path.iterdir()] == ["snap.pt"]


RESUME_DECISION = """
import os, runpy, sys
import torch, torch.distributed as dist
template = runpy.run_path(sys.argv[1], run_name="template")
dist.init_process_group("gloo")
rank = dist.get_rank()
# a file only one rank sees, as on node-local disks: rank 0's answer is everyone's
only_here = sys.argv[2] if rank == int(sys.argv[3]) else sys.argv[2] + ".elsewhere"
print(f"resume={template['snapshot_exists'](only_here, torch.device('cpu'))}")
dist.destroy_process_group()
"""


@pytest.mark.parametrize(("seen_by", "resume"), [(0, True), (1, False)])
def test_rank_0_decides_whether_to_resume(tmp_path, seen_by, resume):
    (tmp_path / "snapshot.pt").write_bytes(b"")
    script = tmp_path / "resume_decision.py"
    script.write_text(RESUME_DECISION)
    result = torchrun(script, nproc=2, args=[TEMPLATE, tmp_path / "snapshot.pt", seen_by], env=CPU, timeout=120,
                      live="quiet", summary=False)
    assert result.stdout == {0: [f"resume={resume}"], 1: [f"resume={resume}"]}
