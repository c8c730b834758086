"""cluster/slurm_ddp.sbatch with stand-ins for srun, scontrol and torchrun: the decisions the script
makes before it starts anything (workers per node, threads, the job's port, srun's options) and its
report of a failed srun. A real Slurm runs it in `make test-slurm` (tests/slurm/test_slurm.py)."""

import os
import subprocess
from pathlib import Path

import pytest

SBATCH = Path(__file__).resolve().parent.parent / "cluster" / "slurm_ddp.sbatch"
STANDINS = {
    # srun prints its arguments, one a line, and exits with FAKE_SRUN_STATUS
    "srun": 'printf "srun-arg %s\\n" "$@"\nexit "${FAKE_SRUN_STATUS:-0}"\n',
    "scontrol": 'printf "gpu03\\ngpu04\\n"\n',
    "torchrun": "exit 0\n",
}


@pytest.fixture
def run_sbatch(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STANDINS.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)

    def run(without=(), **env):
        for name in without:
            (bin_dir / name).unlink()
        slurm = {"SLURM_JOB_ID": "1234", "SLURM_JOB_NODELIST": "gpu[03-04]", "SLURM_NNODES": "2",
                 "SLURM_CPUS_PER_TASK": "32"}
        base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "NPROC_PER_NODE", "RDZV_"))}
        full = {**base, **slurm, "PATH": f"{bin_dir}:/usr/bin:/bin", **env}
        done = subprocess.run(["bash", str(SBATCH), "worker.py", "--steps", "3"], env=full,
                              capture_output=True, text=True, timeout=30)
        args = [line.removeprefix("srun-arg ") for line in done.stdout.splitlines()
                if line.startswith("srun-arg ")]
        return done, args

    return run


def test_a_gpu_node_runs_one_worker_per_gpu(run_sbatch):
    done, args = run_sbatch(SLURM_GPUS_ON_NODE="4")
    assert done.returncode == 0, done.stderr
    assert "--nproc-per-node=4" in args and "--cpus-per-task=32" in args
    assert "--rdzv-endpoint=gpu03:21234" in args and "--rdzv-id=1234" in args   # 20000 + 1234
    assert args[-3:] == ["worker.py", "--steps", "3"]
    assert "4 worker(s) per node, OMP_NUM_THREADS=8, rendezvous gpu03:21234" in done.stdout


def test_a_cpu_node_needs_nproc_per_node(run_sbatch):
    done, args = run_sbatch()
    assert done.returncode == 2 and not args
    assert "no GPU on this node: set NPROC_PER_NODE" in done.stderr
    done, args = run_sbatch(NPROC_PER_NODE="3")
    assert done.returncode == 0, done.stderr
    assert "--nproc-per-node=3" in args and "OMP_NUM_THREADS=10," in done.stdout   # 32 // 3


def test_settings_that_cannot_be_right_are_refused(run_sbatch):
    for env, message in (({"NPROC_PER_NODE": "two"}, "is not a positive whole number"),
                         ({"NPROC_PER_NODE": "0"}, "is not a positive whole number"),
                         ({"SLURM_GPUS_ON_NODE": "4", "NPROC_PER_NODE": "2"}, "one worker per GPU")):
        done, args = run_sbatch(**env)
        assert done.returncode == 2 and not args and message in done.stderr, (env, done.stderr)
    done, args = run_sbatch(without=["torchrun"], NPROC_PER_NODE="2")
    assert done.returncode == 2 and "torchrun is not on PATH" in done.stderr


def test_threads_port_and_failure_report(run_sbatch):
    done, args = run_sbatch(NPROC_PER_NODE="64", RDZV_PORT="29999", SLURM_JOB_ID="98765")
    assert "OMP_NUM_THREADS=1," in done.stdout                   # 32 CPUs over 64 workers: at least 1
    assert "--rdzv-endpoint=gpu03:29999" in args                 # the override wins
    done, _ = run_sbatch(NPROC_PER_NODE="2", SLURM_JOB_ID="98765")
    assert "rendezvous gpu03:28765" in done.stdout               # 20000 + 98765 % 10000
    done, _ = run_sbatch(NPROC_PER_NODE="2", FAKE_SRUN_STATUS="143")
    assert done.returncode == 143
    assert 'srun exited with 143: the failed worker\'s rank and exit code are in the "Root Cause"' in done.stderr


# What bash 4 and later added and macOS's /bin/bash (3.2) lacks: notebook 09 dry-runs the script there.
BASH4_ONLY = {"mapfile": r"\bmapfile\b", "readarray": r"\breadarray\b", "case change": r"\$\{\w+(,,|\^\^|,|\^)\}",
              "associative array": r"declare -A|local -A", "&>> redirection": r"&>>", "|& pipe": r"\|&",
              "coproc": r"\bcoproc\b", "negative index": r"\$\{\w+\[-\d+\]\}", "globstar": r"globstar"}


def test_the_script_uses_nothing_bash_3_2_lacks():
    """Static (no bash 3.2 here): none of bash 4's additions; each pattern finds its own example."""
    import re

    text = "\n".join(line for line in SBATCH.read_text().splitlines() if not line.lstrip().startswith("#"))
    found = {name: re.findall(rx, text) for name, rx in BASH4_ONLY.items()}
    assert not any(found.values()), found
    examples = ["mapfile -t a < f", "readarray a", "${x,,}", "declare -A m", "cmd &>> log", "a |& b",
                "coproc x", "${a[-1]}", "shopt -s globstar"]
    assert all(re.search(rx, ex) for rx, ex in zip(BASH4_ONLY.values(), examples, strict=True))


def test_every_node_of_the_allocation_is_read(run_sbatch):
    done, args = run_sbatch(NPROC_PER_NODE="2")
    assert done.returncode == 0, done.stderr
    assert "nodes gpu03 gpu04," in done.stdout  # scontrol's two names, read one a line
