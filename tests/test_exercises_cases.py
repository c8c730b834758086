"""Every check against wrong answers (refused with a hint, never a crash) and right answers in other valid
forms (accepted): issue 23's cases. Launch checks get fake launch results whose commands name real
scripts (the notebooks' own solutions, or wrong ones written here); tests/test_exercises_launches.py
adds one real launch of a wrong script per notebook with launch exercises. A fake launch is registered as
torchrun's own (ddp_helpers.launch._launch_for_tests, for tests only) with the script's provenance, and each
case runs from the learner folder that holds its scripts/ (the fake scripts live in TMP/<variant>/scripts/),
as a notebook beside its own scripts/ would; tests/test_exercises_provenance.py covers stale, copied and
foreign launches.

Each case is (exercise id, a label, the keyword arguments); ``RIGHT`` cases must print
``✓ Exercise NN.k: correct``, ``WRONG`` cases must raise CheckFailed naming the exercise, with a hint.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from exercise_calls import refused_text  # tests/ is on sys.path
from torch import nn

from ddp_helpers import exercises
from ddp_helpers.exercises import nb10
from ddp_helpers.exercises.core import find_file
from ddp_helpers.exercises.provenance import launch_of
from ddp_helpers.launch import WorkerFailed, _launch_for_tests
from ddp_helpers.models import ToyModel
from ddp_helpers.series import NOTEBOOK_DIR
from ddp_helpers.sharding import zero_formula

SCRIPTS = NOTEBOOK_DIR / "scripts"


def launch(script, nproc, stdout, *, flags="", args="", nnodes=1):
    """A fake launch of ``script`` (an absolute path, or one relative to a notebook folder) as torchrun(...)
    records it: registered, with the script's provenance as it is now."""
    path = find_file(script) or Path(script)
    return _launch_for_tests(path, nproc, stdout, args=shlex.split(args), torchrun_args=flags.split(),
                             nnodes=nnodes)


def write(tmp, name, text):
    """A file in the learner folder ``tmp``'s scripts/, where a notebook's %%writefile cell puts it."""
    path = Path(tmp) / "scripts" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _learner_folder(kwargs):
    """The folder whose scripts/ holds the script a case's launch or process ran (None: the series' own)."""
    for value in kwargs.values():
        launch_ = launch_of(value)
        named = [launch_.script] if launch_ is not None else \
            [str(a) for a in getattr(value, "args", ()) or () if str(a).endswith(".py")] \
            if isinstance(value, subprocess.CompletedProcess) else []
        for path in map(Path, named):
            if path.is_absolute() and path.parent.name == "scripts" and path.is_relative_to(TMP):
                return path.parent.parent
    return None


@contextlib.contextmanager
def _inside(folder):
    before = Path.cwd()
    if folder is not None:
        os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def run_case(exid, kwargs):
    """Call the check from the case's learner folder; ``_three`` becomes a name of this frame, where check
    09.2 looks for the launch (as it looks in a notebook's namespace)."""
    kwargs = dict(kwargs)
    three = kwargs.pop("_three", None)  # noqa: F841
    with _inside(_learner_folder({**kwargs, "_three": three})):
        return exercises.CHECKS[exid](**kwargs)


def refused(exid, kwargs):
    return refused_text(exid, lambda: run_case(exid, kwargs))


TMP = Path(tempfile.mkdtemp(prefix="exercise_cases_"))  # the cases' scripts and files, made at import
atexit.register(shutil.rmtree, TMP, ignore_errors=True)

# --- scripts the fake launches name -----------------------------------------------------------------
HELLO = SCRIPTS / "00_hello.py"
MAX_OK = write(TMP, "00_max.py", (SCRIPTS / "00_max.py").read_text())
(TMP / "sum").mkdir(exist_ok=True)
MAX_COMMENT = write(TMP / "sum", "00_max.py", (SCRIPTS / "00_max.py").read_text().replace(
    "dist.all_reduce(value, op=dist.ReduceOp.MAX)", "dist.all_reduce(value)  # ReduceOp.MAX"))
GATHER_OK = write(TMP, "01_ex_all_gather.py", (SCRIPTS / "01_ex_all_gather.py").read_text())
(TMP / "printonly").mkdir(exist_ok=True)
GATHER_PRINT = write(TMP / "printonly", "01_ex_all_gather.py", 'print("ring all_gather == dist.all_gather: True")\n')
FIXED_OK = write(TMP, "05_rank0_collective_fixed.py", (SCRIPTS / "05_rank0_collective_fixed.py").read_text())
(TMP / "inside").mkdir(exist_ok=True)
FIXED_INSIDE = write(TMP / "inside", "05_rank0_collective_fixed.py", FIXED_OK.read_text().replace(
    "    dist.all_reduce(loss)  # every rank: the collective is outside the if\n    loss /= ctx.world_size\n"
    "    if ctx.rank == 0:\n", "    if ctx.rank == 0:\n        dist.all_reduce(loss)\n        loss /= ctx.world_size\n"))
SAMPLER = SCRIPTS / "02_sampler_epochs.py"

hello3 = {r: ["hello", f"rank {r}: all_reduce(rank+1)=6"] for r in range(3)}
max2 = {0: ["max=10"], 1: ["max=10"]}
gather3 = {r: ["ring all_gather == dist.all_gather: True"] for r in range(3)}
fixed2 = {0: ["would save mean loss 1.500", "after the barrier"], 1: ["after the barrier"]}


def proc(args, code, stderr):
    return subprocess.CompletedProcess(args, code, stdout="", stderr=stderr)


HELLO_ERR = "RuntimeError: ... Launch it with torchrun: torchrun --nproc-per-node=2 scripts/00_hello.py"

# --- 03's scripts -------------------------------------------------------------------------------------
NO_GUARD = write(TMP, "03_ex_no_guard.py", "import torch.multiprocessing as mp\n\n\ndef worker(i):\n    print(i)\n\n\n"
                 "mp.spawn(worker, nprocs=1)\n")
(TMP / "guarded").mkdir(exist_ok=True)
GUARDED = write(TMP / "guarded", "03_ex_no_guard.py", NO_GUARD.read_text().replace(
    "mp.spawn(", "if __name__ == '__main__':\n    mp.spawn("))
(TMP / "context").mkdir(exist_ok=True)
SPAWN_CONTEXT = write(TMP / "context", "03_ex_no_guard.py", NO_GUARD.read_text().replace(
    "mp.spawn(worker, nprocs=1)\n", "context = mp.spawn(worker, nprocs=1, join=False)\ncontext.join()\n"))
BOOT = "RuntimeError: An attempt has been made ... has finished its bootstrapping phase."
RECORD_SRC = ("import os\n\nfrom torch.distributed.elastic.multiprocessing.errors import record\n\n\n@record\n"
              "def main():\n    raise ValueError('learning rate must be positive')\n\n\nif __name__ == '__main__':\n"
              "    main()\n")
NO_RECORD = write(TMP, "03_ex_no_record.py", RECORD_SRC.replace("from torch.distributed.elastic.multiprocessing.errors "
                                                               "import record\n", "").replace("@record\n", ""))
(TMP / "only_decorator").mkdir(exist_ok=True)
ONLY_DECORATOR = write(TMP / "only_decorator", "03_ex_no_record.py", RECORD_SRC.replace("@record\n", ""))
(TMP / "with_record").mkdir(exist_ok=True)
WITH_RECORD = write(TMP / "with_record", "03_ex_no_record.py", RECORD_SRC)
(TMP / "exit_message").mkdir(exist_ok=True)
EXIT_MESSAGE = write(TMP / "exit_message", "03_ex_no_record.py", NO_RECORD.read_text().replace(
    "raise ValueError('learning rate must be positive')", "sys.exit('learning rate must be positive')").replace(
    "import os\n", "import os\nimport sys\n"))
(TMP / "bare_exit").mkdir(exist_ok=True)
BARE_EXIT = write(TMP / "bare_exit", "03_ex_no_record.py", EXIT_MESSAGE.read_text().replace(
    "sys.exit('learning rate must be positive')", "sys.exit()"))
ROOT_NA = "... Root Cause (first observed failure):\n  error_file: <N/A>\n  traceback : To enable traceback see ...\n"


def torchrun_proc(script, code=1, stderr=ROOT_NA):
    return proc([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1", str(script)],
                code, stderr)


def failed(script=None, exitcode=3, flags=("--max-restarts=2",)):
    """The WorkerFailed a launch of ``script`` (the exercise's, by default) raises, carrying its registered launch."""
    result = _launch_for_tests(find_file(script or ALWAYS) or Path(script or ALWAYS), 1, {},
                               args=["runs/03_launching/attempts.txt"], torchrun_args=list(flags), ok=False)
    return WorkerFailed(0, exitcode, "tail", result.command, result=result)


ALWAYS = "scripts/03_ex_always_fails.py"

# --- in-process context -----------------------------------------------------------------------------


def ring(n, s, a, b):
    return 2 * (n - 1) * a + 2 * (n - 1) / n * s * b


def tree(n, s, a, b):
    return 2 * math.ceil(math.log2(n)) * (a + s * b)


L = 2 * math.ceil(math.log2(64))
CROSS = (2 * 63 - L) * 20e-6 / ((L - 2 * 63 / 64) * 0.1e-9)
F32 = [np.float32(v) for v in (1e8, 1.0, -1e8, 1.0)]

torch.manual_seed(0)  # 04.2's exercise cell: the seed, the model, the batch
M4 = ToyModel()
X4, Y4 = torch.randn(8, 10), torch.randn(8, 5)


def _g(loss):
    return list(torch.autograd.grad(loss, list(M4.parameters())))


G0 = _g(nn.functional.mse_loss(M4(X4[:6]), Y4[:6]))
G1 = _g(nn.functional.mse_loss(M4(X4[6:]), Y4[6:]))
PLAIN = [(a + b) / 2 for a, b in zip(G0, G1, strict=True)]
WEIGHTED = [(1.5 * a + 0.5 * b) / 2 for a, b in zip(G0, G1, strict=True)]


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1, self.net2 = nn.Linear(10, 10), nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(torch.relu(self.net1(x)))


REFERENCE_SD = Toy().state_dict()


def checkpoint(name, obj):
    path = TMP / name
    torch.save(obj, path)
    return path


NS = argparse.Namespace(lr=0.1, epochs=3)
NS_FILE = checkpoint("ns.pt", {"model": REFERENCE_SD, "args": NS})
NS_BARE = checkpoint("ns_bare.pt", NS)
DICT_FILE = checkpoint("dict.pt", {"model": REFERENCE_SD, "args": vars(NS)})
DICT_BARE = checkpoint("dict_bare.pt", vars(NS))
NS_WRONG = checkpoint("ns_wrong.pt", {"args": argparse.Namespace(lr=0.2, epochs=3)})
NOT_TORCH = write(TMP, "not_torch.pt", "plain text")


def save_rotating(obj, folder, epoch, keep=2):
    from ddp_helpers.checkpoint import atomic_save

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_save(obj, folder / f"snapshot_{epoch:04d}.pt")
    for old in sorted(folder.glob("snapshot_*.pt"))[:-keep]:
        old.unlink()


def latest(folder):
    return max(Path(folder).glob("snapshot_*.pt"))


def latest_str(folder):
    return str(latest(folder))


def keeps_all(obj, folder, epoch, keep=2):
    save_rotating(obj, folder, epoch, keep=100)


def saves_other(obj, folder, epoch, keep=2):
    save_rotating({"epoch_next": 0}, folder, epoch, keep)


SCALES = [64, 32, 32, 64, 64, 32, 32, 64]


def accumulated(per_micro=False, divide=True):
    torch.manual_seed(0)
    net = Toy()
    xs, ys = torch.randn(32, 10), torch.randn(32, 5)
    opt = torch.optim.SGD(net.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=100)
    full = torch.autograd.grad(nn.functional.mse_loss(net(xs), ys), list(net.parameters()))
    for micro in range(4):
        rows = slice(8 * micro, 8 * micro + 8)
        scaler.scale(nn.functional.mse_loss(net(xs[rows]), ys[rows]) / (4 if divide else 1)).backward()
        if per_micro:
            scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()
    if not per_micro:
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
    return net, full, scaler


NET, FULL, SCALER = accumulated()
NET_PM, FULL_PM, SCALER_PM = accumulated(per_micro=True)
NET_ND, FULL_ND, SCALER_ND = accumulated(divide=False)
BF16 = {"recipe": "cpu: autocast bfloat16, GradScaler off", "saved_scaler": {}, "resumed_equal": True}
FP16_GPU = {"recipe": "cuda: autocast float16, GradScaler on", "resumed_equal": True,
            "saved_scaler": {"scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                             "growth_interval": 5, "_growth_tracker": 1}}

VALUES = torch.tensor([1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0, 14.0]).view(8, 1)
SHARDS = [VALUES[:3], VALUES[3:]]
def record(exact=359, padded=360):
    return {"exact": {"count": exact, "correct": 350}, "padded": {"count": padded, "correct": 351}}


def env(n):
    return [{"RANK": r, "LOCAL_RANK": 0, "GROUP_RANK": r, "WORLD_SIZE": n, "LOCAL_WORLD_SIZE": 1} for r in range(n)]


def two_nodes():
    """A fake launch of scripts/09_two_nodes.py on 3 nodes (a function: a module global would be in every
    check's calling namespace)."""
    return launch("scripts/09_two_nodes.py", 1, {r: [" ".join(f"{k}={v}" for k, v in e.items()), "x"]
                                                 for r, e in enumerate(env(3))}, nnodes=3)



SHAPE_MSG = ("Detected mismatch between collectives on ranks. Rank 0 is running collective: "
             "CollectiveFingerPrint(SequenceNumber=1, OpType=ALLREDUCE, TensorShape=[4], ...). Rank 1 is running "
             "collective: CollectiveFingerPrint(SequenceNumber=1, OpType=ALLREDUCE, TensorShape=[5], ...)")



# what rank 0 of scripts/02_sampler_epochs.py prints (the other ranks print nothing)
COUNTS_LINE = "correct/count: padded [7, 12], unpadded+all_reduce [6, 10], gather+dedup [6, 10]"
PER_GPU = [sum(zero_formula(7_500_000_000, 64, s, bytes_per_value=2, moments=6).values()) / 1e9 for s in range(4)]

# --- the cases ---------------------------------------------------------------------------------------
RIGHT = {
    "00.1": [dict(three=launch(HELLO, 3, hello3)),
             dict(three=launch(HELLO, 3, {r: ["other line", *hello3[r]] for r in (2, 0, 1)}))],
    "00.2": [dict(maxed=launch(MAX_OK, 2, max2)), dict(maxed=launch(MAX_OK, 2, {1: ["max=10.0"], 0: ["max=10"]}))],
    "00.3": [dict(plain=proc([sys.executable, "scripts/00_hello.py"], 1, HELLO_ERR)),
             dict(plain=proc(("python3", str(HELLO)), 2, HELLO_ERR))],
    "01.1": [dict(gathered=launch(GATHER_OK, 3, gather3)),
             dict(gathered=launch(GATHER_OK, 3, {r: ["log", "same: True"] for r in (2, 1, 0)}))],
    "01.2": [dict(t_ring=ring, t_tree=tree, crossover=CROSS),
             dict(t_ring=lambda *a: np.float32(ring(*a)), t_tree=lambda *a: torch.tensor(tree(*a)),
                  crossover=np.float32(CROSS))],
    "01.3": [dict(ring_result=np.float32(0.0), rank_order=np.float32(1.0)),
             dict(ring_result=torch.tensor(0.0), rank_order=1)],
    "02.1": [dict(padded_len=3, dropped_len=2, rank3_padded=[3, 7, 1], rank3_dropped=[3, 7], repeated=[0, 1],
                  unseen=[8, 9]),
             dict(padded_len=np.int64(3), dropped_len=torch.tensor(2), rank3_padded=(3, 7, 1),
                  rank3_dropped=torch.tensor([3, 7]), repeated={1, 0}, unseen=np.array([9, 8]))],
    "02.2": [dict(twice=[1, 6, 10], never=[3, 7, 8]), dict(twice=(10, 1, 6), never=torch.tensor([3, 7, 8]))],
    "02.3": [dict(global_batch=2048, steps=25, scaled_lr=0.8),
             dict(global_batch=torch.tensor(2048), steps=np.int32(25), scaled_lr=np.float32(0.8))],
    "02.4": [dict(four=launch(SAMPLER, 4, {0: [COUNTS_LINE]}, args="--dataset-size 10 --epochs 1"),
                  padded_count=12, exact_count=10),
             dict(four=launch(SAMPLER, 4, {0: [COUNTS_LINE]}, args="--epochs 1 --dataset-size 10"),
                  padded_count=np.int64(12), exact_count=10.0)],
    "03.1": [dict(no_guard=proc([sys.executable, str(NO_GUARD)], 1, BOOT)),
             dict(no_guard=proc((sys.executable, str(NO_GUARD)), 1, "x\n" + BOOT), script=NO_GUARD),
             dict(no_guard=proc([sys.executable, str(SPAWN_CONTEXT)], 1, BOOT))],  # spawn's context kept
    "03.2": [dict(bare=torchrun_proc(NO_RECORD)), dict(bare=torchrun_proc(ONLY_DECORATOR)),
             dict(bare=torchrun_proc(EXIT_MESSAGE))],  # sys.exit(message): the worker fails without a raise
    "03.3": [dict(counts=["0", "1", "2"], caught=failed()),
             dict(counts=(0, 1, 2), caught=failed(flags=("--max_restarts", "2")))],
    "04.1": [dict(unused=["head_b.bias", "head_b.weight"]), dict(unused=("head_b.weight", "head_b.bias"))],
    "04.2": [dict(ddp_like=PLAIN, weighted=WEIGHTED, model=M4, x=X4, y=Y4),
             dict(ddp_like=tuple(p.numpy() for p in PLAIN), weighted=[w.double() for w in WEIGHTED],
                  model=M4, x=X4, y=Y4)],
    "05.2": [dict(ns_file=NS_FILE, dict_file=DICT_FILE), dict(ns_file=str(NS_BARE), dict_file=DICT_BARE)],
    "05.3": [dict(save_rotating=save_rotating, latest=latest), dict(save_rotating=save_rotating, latest=latest_str)],
    "05.4": [dict(fixed_run=launch(FIXED_OK, 2, fixed2)),
             dict(fixed_run=launch(FIXED_OK, 2, {1: ["after the barrier"],
                                                 0: ["would save mean loss 1.5", "after the barrier"]}))],
    "06.1": [dict(by_hand=SCALES, measured=[float(s) for s in SCALES]),
             dict(by_hand=tuple(SCALES), measured=np.array(SCALES, dtype=np.float32))],
    "06.2": [dict(k_small=16, k_large=12), dict(k_small=np.int64(16), k_large=torch.tensor(12))],
    "06.3": [dict(net=NET, full=FULL, acc_scaler=SCALER), dict(net=NET, full=list(FULL), acc_scaler=SCALER)],
    "06.4": [dict(bf16=BF16), dict(bf16=FP16_GPU)],  # a machine with GPUs: its default recipe
    "07.1": [dict(shards=SHARDS, mean_of_means=torch.tensor(7.0), pooled=torch.tensor(8.25)),
             dict(shards=tuple(SHARDS), mean_of_means=np.float32(7.0), pooled=8.25)],
    "07.3": [dict(res3=[record()] * 3), dict(res3={2: record(), 0: record(), 1: record()})],
    "09.1": [dict(group_rank=2, local_rank=1, world_size=24),
             dict(group_rank=np.int64(2), local_rank=torch.tensor(1), world_size=24.0)],
    "09.2": [dict(three_env=env(3), _three=two_nodes()),
             dict(three_env=env(3)[::-1], _three=two_nodes()),
             dict(three_env={r: {k: str(v) for k, v in e.items()} for r, e in enumerate(env(3))},
                  _three=two_nodes())],
    "09.3": [dict(shapes=["4", "5"], shape_message=SHAPE_MSG), dict(shapes=(5, 4), shape_message=SHAPE_MSG)],
    "11.2": [dict(per_gpu=PER_GPU, smallest_stage=1),
             dict(per_gpu=np.array(PER_GPU, dtype=np.float32), smallest_stage=torch.tensor(1))],
    "12.2": [dict(crossover=3), dict(crossover=np.int64(3))],
}

WRONG = {
    "00.1": [("silent script", dict(three=launch(HELLO, 3, {}))),
             ("another script", dict(three=launch(MAX_OK, 3, hello3))),
             ("2 ranks", dict(three=launch(HELLO, 2, {r: hello3[r] for r in (0, 1)}))),
             ("wrong value", dict(three=launch(HELLO, 3, {r: ["all_reduce(rank+1)=5"] for r in range(3)}))),
             ("not a launch", dict(three=hello3))],
    "00.2": [("MAX only in a comment", dict(maxed=launch(MAX_COMMENT, 2, max2))),
             ("silent script", dict(maxed=launch(MAX_OK, 2, {}))),
             ("3 ranks", dict(maxed=launch(MAX_OK, 3, {r: ["max=20"] for r in range(3)}))),
             ("wrong value", dict(maxed=launch(MAX_OK, 2, {0: ["max=0"], 1: ["max=10"]}))),
             ("a string", dict(maxed="max=10"))],
    "00.3": [("under torchrun", dict(plain=proc([sys.executable, "-m", "torch.distributed.run", "scripts/00_hello.py"],
                                                1, HELLO_ERR))),
             ("exit 0", dict(plain=proc([sys.executable, "scripts/00_hello.py"], 0, HELLO_ERR))),
             ("another script", dict(plain=proc([sys.executable, "scripts/00_fail.py"], 1, "boom"))),
             ("bytes output", dict(plain=subprocess.CompletedProcess(["python", "scripts/00_hello.py"], 1, b"", b"x")))],
    "01.1": [("prints True only", dict(gathered=launch(GATHER_PRINT, 3, gather3))),
             ("silent script", dict(gathered=launch(GATHER_OK, 3, {}))),
             ("False on a rank", dict(gathered=launch(GATHER_OK, 3, {**gather3, 1: ["...: False"]}))),
             ("2 ranks", dict(gathered=launch(GATHER_OK, 2, {0: ["True"], 1: ["True"]})))],
    "01.2": [("reference helper", dict(t_ring=nb10._reference_count, t_tree=tree, crossover=CROSS)),
             ("crossover off", dict(t_ring=ring, t_tree=tree, crossover=CROSS * 1.01)),
             ("returns None", dict(t_ring=lambda *a: None, t_tree=tree, crossover=CROSS)),
             ("string crossover", dict(t_ring=ring, t_tree=tree, crossover="1e6")),
             ("tree without the bytes", dict(t_ring=ring, t_tree=lambda n, s, a, b: 2 * math.ceil(math.log2(n)) * a,
                                             crossover=CROSS))],
    "01.3": [("exact sum", dict(ring_result=2.0, rank_order=2.0)),
             ("swapped", dict(ring_result=np.float32(1.0), rank_order=np.float32(0.0))),
             ("a list", dict(ring_result=[0.0], rank_order=1.0)),
             ("a word", dict(ring_result="zero", rank_order=1.0))],
    "02.1": [("wrong repeat", dict(padded_len=3, dropped_len=2, rank3_padded=[3, 7, 0], rank3_dropped=[3, 7],
                                   repeated=[0, 1], unseen=[8, 9])),
             ("lengths swapped", dict(padded_len=2, dropped_len=3, rank3_padded=[3, 7, 1], rank3_dropped=[3, 7],
                                      repeated=[0, 1], unseen=[8, 9])),
             ("an int for a list", dict(padded_len=3, dropped_len=2, rank3_padded=3, rank3_dropped=[3, 7],
                                        repeated=[0, 1], unseen=[8, 9])),
             ("a word", dict(padded_len="three", dropped_len=2, rank3_padded=[3, 7, 1], rank3_dropped=[3, 7],
                               repeated=[0, 1], unseen=[8, 9]))],
    "02.2": [("empty", dict(twice=[], never=[])), ("swapped", dict(twice=[3, 7, 8], never=[1, 6, 10])),
             ("an int", dict(twice=1, never=[3, 7, 8])), ("strings", dict(twice="1610", never=[3, 7, 8]))],
    "02.3": [("steps without the sampler", dict(global_batch=2048, steps=196, scaled_lr=0.8)),
             ("lr unscaled", dict(global_batch=2048, steps=25, scaled_lr=0.1)),
             ("per-GPU batch", dict(global_batch=256, steps=25, scaled_lr=0.8)),
             ("a list", dict(global_batch=[2048], steps=25, scaled_lr=0.8))],
    "02.4": [("silent launch", dict(four=launch(SAMPLER, 4, {}, args="--dataset-size 10 --epochs 1"),
                                    padded_count=12, exact_count=10)),
             ("another dataset size", dict(four=launch(SAMPLER, 4, {0: [COUNTS_LINE]},
                                                       args="--dataset-size 12 --epochs 1"),
                                           padded_count=12, exact_count=10)),
             ("2 ranks", dict(four=launch(SAMPLER, 2, {0: [COUNTS_LINE]}, args="--dataset-size 10 --epochs 1"),
                              padded_count=12, exact_count=10)),
             ("counts swapped", dict(four=launch(SAMPLER, 4, {0: [COUNTS_LINE]},
                                                 args="--dataset-size 10 --epochs 1"), padded_count=10, exact_count=12))],
    "03.1": [("guarded", dict(no_guard=proc([sys.executable, str(GUARDED)], 1, BOOT))),
             ("exit 0", dict(no_guard=proc([sys.executable, str(NO_GUARD)], 0, BOOT))),
             ("no bootstrap error", dict(no_guard=proc([sys.executable, str(NO_GUARD)], 1, "other"))),
             ("not a process", dict(no_guard="exit code 1"))],
    "03.2": [("still @record", dict(bare=torchrun_proc(WITH_RECORD))),
             ("a bare sys.exit(): the worker does not fail", dict(bare=torchrun_proc(BARE_EXIT))),
             ("not torchrun", dict(bare=proc([sys.executable, str(NO_RECORD)], 1, ROOT_NA))),
             ("no Root Cause", dict(bare=torchrun_proc(NO_RECORD, stderr="ValueError"))),
             ("worker error in the block", dict(bare=torchrun_proc(NO_RECORD, stderr="Root Cause\n error_file: x\n"
                                                                   "learning rate must be positive")))],
    "03.3": [("no --max-restarts", dict(counts=["0", "1", "2"], caught=failed(flags=()))),
             ("one start", dict(counts=["0"], caught=failed())),
             ("exit code 1", dict(counts=["0", "1", "2"], caught=failed(exitcode=1))),
             ("another script", dict(counts=["0", "1", "2"], caught=failed("scripts/00_fail.py"))),
             ("a string", dict(counts="012", caught=failed())),
             ("not the failure", dict(counts=["0", "1", "2"], caught=RuntimeError("x")))],
    "04.1": [("one name", dict(unused=["head_b.weight"])), ("joined string of the used head", dict(unused="head_a.bias, head_a.weight")),
             ("a duplicate", dict(unused=["head_b.bias", "head_b.weight", "head_b.bias"])),
             ("the used head", dict(unused=["head_a.bias", "head_a.weight"]))],
    "04.2": [("plain for both", dict(ddp_like=PLAIN, weighted=PLAIN, model=M4, x=X4, y=Y4)),
             ("one tensor short", dict(ddp_like=PLAIN[:-1], weighted=WEIGHTED, model=M4, x=X4, y=Y4)),
             ("a shape off", dict(ddp_like=[p.flatten() for p in PLAIN], weighted=WEIGHTED, model=M4, x=X4, y=Y4)),
             ("a tensor for a list", dict(ddp_like=PLAIN[0], weighted=WEIGHTED, model=M4, x=X4, y=Y4))],
    "05.2": [("dict for both", dict(ns_file=DICT_FILE, dict_file=DICT_FILE)),
             ("namespace for both", dict(ns_file=NS_FILE, dict_file=NS_FILE)),
             ("wrong lr", dict(ns_file=NS_WRONG, dict_file=DICT_FILE)),
             ("not a checkpoint", dict(ns_file=NOT_TORCH, dict_file=DICT_FILE)),
             ("missing file", dict(ns_file=TMP / "nothing.pt", dict_file=DICT_FILE))],
    "05.3": [("keeps all", dict(save_rotating=keeps_all, latest=latest)),
             ("saves another object", dict(save_rotating=saves_other, latest=latest)),
             ("does nothing", dict(save_rotating=lambda *a, **k: None, latest=lambda f: None)),
             ("latest is oldest", dict(save_rotating=save_rotating, latest=lambda f: min(Path(f).glob("*.pt"))))],
    "05.4": [("all_reduce inside the if", dict(fixed_run=launch(FIXED_INSIDE, 2, fixed2))),
             ("silent script", dict(fixed_run=launch(FIXED_OK, 2, {}))),
             ("rank 1 prints the loss", dict(fixed_run=launch(FIXED_OK, 2, {0: fixed2[0], 1: ["would save 1.5",
                                                                                            "after the barrier"]}))),
             ("the sum, not the mean", dict(fixed_run=launch(FIXED_OK, 2, {0: ["would save mean loss 3.000",
                                                                               "after the barrier"], 1: fixed2[1]})))],
    "06.1": [("never resets", dict(by_hand=[64, 32, 64, 64, 128, 64, 128, 128], measured=SCALES)),
             ("one short", dict(by_hand=SCALES[:-1], measured=SCALES)),
             ("an int", dict(by_hand=64, measured=SCALES)),
             ("measured wrong", dict(by_hand=SCALES, measured=[64] * 8))],
    "06.2": [("subnormal", dict(k_small=15, k_large=12)), ("overflows", dict(k_small=16, k_large=13)),
             ("a float", dict(k_small=16.5, k_large=12)), ("a word", dict(k_small="sixteen", k_large=12))],
    "06.3": [("update per micro-batch", dict(net=NET_PM, full=FULL_PM, acc_scaler=SCALER_PM)),
             ("loss not divided", dict(net=NET_ND, full=FULL_ND, acc_scaler=SCALER_ND)),
             ("no gradients", dict(net=Toy(), full=FULL, acc_scaler=SCALER)),
             ("not a scaler", dict(net=NET, full=FULL, acc_scaler=64.0))],
    "06.4": [("float32 recipe", dict(bf16={**BF16, "recipe": "cpu: autocast off (float32), GradScaler off"})),
             ("fp16 on CPU", dict(bf16={**BF16, "recipe": "cpu: autocast float16, GradScaler on"})),
             ("not resumed equal", dict(bf16={**BF16, "resumed_equal": False})),
             ("no recipe", dict(bf16={"saved_scaler": {}})), ("a list", dict(bf16=[BF16]))],
    "07.1": [("swapped", dict(shards=SHARDS, mean_of_means=8.25, pooled=7.0)),
             ("other split", dict(shards=[VALUES[:4], VALUES[4:]], mean_of_means=7.0, pooled=8.25)),
             ("same means", dict(shards=[torch.ones(3), torch.ones(5)], mean_of_means=1.0, pooled=1.0)),
             ("a word", dict(shards=SHARDS, mean_of_means="seven", pooled=8.25))],
    "07.3": [("two ranks", dict(res3=[record()] * 2)),
             ("padded counted as exact", dict(res3=[record(360, 360)] * 3)),
             ("ranks disagree", dict(res3=[record(), record(), {**record(), "exact": {"count": 359, "correct": 1}}])),
             ("one image short", dict(res3=[record(358, 360)] * 3)),
             ("copy-through: a size of its own", dict(res3=[record(358, 360)] * 3, test_size=358)),
             ("records without counts", dict(res3=[{}, {}, {}]))],
    "09.1": [("local rank 9", dict(group_rank=1, local_rank=9, world_size=24)),
             ("per-node world", dict(group_rank=2, local_rank=1, world_size=8)),
             ("swapped", dict(group_rank=1, local_rank=2, world_size=24)),
             ("a tuple", dict(group_rank=(2, 1), local_rank=1, world_size=24))],
    "09.2": [("copied through, no launch", dict(three_env=env(3))),
             ("2 nodes", dict(three_env=env(2), _three=two_nodes())),
             ("one dict", dict(three_env=env(3)[0], _three=two_nodes())),
             ("local ranks wrong", dict(three_env=[{**e, "LOCAL_RANK": e["RANK"]} for e in env(3)],
                                        _three=two_nodes()))],
    "09.3": [("one shape", dict(shapes=[4], shape_message=SHAPE_MSG)),
             ("other shapes", dict(shapes=[4, 6], shape_message=SHAPE_MSG)),
             ("not the error", dict(shapes=[4, 5], shape_message="timeout")),
             ("a string of shapes", dict(shapes="45", shape_message=SHAPE_MSG))],
    "11.2": [("GiB", dict(per_gpu=[g * 1e9 / 2**30 for g in PER_GPU], smallest_stage=1)),
             ("stage 2", dict(per_gpu=PER_GPU, smallest_stage=2)),
             ("three stages", dict(per_gpu=PER_GPU[:3], smallest_stage=1)),
             ("a generator", dict(per_gpu=(g for g in PER_GPU), smallest_stage=1))],
    "12.2": [("too small", dict(crossover=2)), ("too large", dict(crossover=4)), ("a fraction", dict(crossover=2.5)),
             ("a list", dict(crossover=[3]))],
}


# Exercise 00.4 and notebooks 08, 13, 14 and 15 keep their cases next to their fixtures, with the same rules:
# tests/test_exercises_nb00.py and tests/test_exercises_nb08.py (launches of real scripts), tests/test_exercises_nb13.py,
# tests/test_exercises_nb14.py and tests/test_exercises_nb15.py; so do the checks that read a lesson's run
# (tests/test_exercises_runs.py).
OWN_FILES = ("00.4", "08.", "13.", "14.", "15.")
# Checks that read a lesson's run or take no tolerance any more keep their cases in tests/test_exercises_runs.py.
RUN_IDS = {"04.3", "05.1", "07.2", "07.4", "09.4", "10.1", "10.2", "10.3", "11.1", "11.3", "12.1", "12.3"}


def test_every_check_has_its_cases():
    ids = [exid for exid in exercises.exercise_ids() if not exid.startswith(OWN_FILES) and exid not in RUN_IDS]
    assert set(RIGHT) == set(WRONG) == set(ids)
    for exid in ids:
        assert len(RIGHT[exid]) >= 2 and len(WRONG[exid]) >= 3, exid


@pytest.mark.parametrize(("exid", "i"), [(e, i) for e, cases in RIGHT.items() for i in range(len(cases))])
def test_right_answers_in_other_forms_pass(exid, i, capsys):
    run_case(exid, RIGHT[exid][i])
    assert capsys.readouterr().out == f"✓ Exercise {exid}: correct\n"


@pytest.mark.parametrize(("exid", "label"), [(e, label) for e, cases in WRONG.items() for label, _ in cases])
def test_wrong_answers_fail_with_a_hint(exid, label):
    kwargs = dict(WRONG[exid])[label]
    refused(exid, kwargs)
