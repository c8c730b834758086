"""The checks that once took a tolerance, a record or lesson state from the check cell (issue 23's rule:
"a check re-derives every expected value itself, never takes one from the check cell"): 04.3, 05.1, 07.2,
07.4, 09.4, 10.1, 10.2, 10.3, 11.1, 11.3, 12.1, 12.3 (14.1: tests/test_exercises_nb14.py; 08.2 and 08.3:
tests/test_exercises_nb08.py).

Each check now reads what a lesson's launch wrote from the notebook's own folder, or re-derives it from
torch. The runs here are fake lesson folders (the running notebook's folder is JPY_SESSION_NAME's parent),
written with independent references: torch's own implementations (DDP's Reducer, ZeroRedundancyOptimizer),
plain forward passes, and values worked out by hand; never a check's private reference. Every check gets
wrong answers it refuses (one of them a copy-through: the keyword the old signature took, or a run that
is absent) and right answers in other valid forms; and the hint for a name the lesson did not define.
Each fake run also holds the record the lesson's launch writes (``.launch.json``, by
ddp_helpers.launch._launch_for_tests): tests/test_exercises_provenance.py covers runs that another launch
overwrote. 09.4's launch is a registered fake launch failure of a learner's scripts/ folder.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from exercise_calls import notebook_in, put, refused_text  # tests/ is on sys.path
from exercise_references import reducer_buckets, reducer_count, zero_partition
from torch import nn
from torch.utils.data import DataLoader

from ddp_helpers import exercises, series
from ddp_helpers.evaluation import EarlyStopping, EvalResult
from ddp_helpers.exercises import core, nb04, nb10, nb11
from ddp_helpers.launch import WorkerFailed, _launch_for_tests
from ddp_helpers.models import square_mlp
from ddp_helpers.perf import timing
from ddp_helpers.sharding import make_stack
from ddp_helpers.tensor_parallel import MLP

TMP = Path(tempfile.mkdtemp(prefix="exercise_runs_"))
atexit.register(shutil.rmtree, TMP, ignore_errors=True)
LESSON, EMPTY, ODD = TMP / "lesson", TMP / "empty_lesson", TMP / "odd_lesson"  # a run, none, a run that differs
for folder in (LESSON, EMPTY, ODD):
    folder.mkdir()


def lesson_record(folder, relative, script, nproc=2):
    """The record the lesson's launch of scripts/``script`` leaves in its run ``relative`` (a folder or an
    output file) under ``folder``, as torchrun(...) writes it after the launch."""
    return _launch_for_tests(Path("scripts") / script, nproc, args=[str(folder / relative)], outputs=True)


# the lesson launches' records of the runs below (written after them, at the end of this module's set-up)
RECORDS = [("runs/05_checkpoints/save_load", "05_save_load.py", 2), ("runs/07_eval_earlystop", "07_eval_earlystop.py", 2),
           ("runs/10_performance/controls.json", "10_step_controls.py", 2),
           ("runs/10_performance/sweep.json", "10_allreduce_sizes.py", 2),
           ("runs/11_sharding/zero", "11_zero.py", 2), ("runs/11_sharding/fsdp2", "11_fsdp2.py", 2)]


# --- 04.3: DDP's own buckets; the truth needs no run -----------------------------------------------

def tuple_buckets(items, cap, first):
    return tuple(tuple(b) for b in reducer_buckets(items, cap, first))


def memorised(items, cap, first):
    """Right on the check's small hand cases, one bucket for anything else (the worker's model too)."""
    small = {(tuple(items), cap, first) for items, cap, first in [
        ((("a", 3), ("b", 5), ("c", 2), ("d", 9)), 6, 4), ((("a", 10),), 4, 4), ((("a", 1), ("b", 1)), 8, 1),
        ((("a", 4), ("b", 4), ("c", 4)), 8, 100)]}
    items = [tuple(i) for i in items]
    return reducer_buckets(items, cap, first) if (tuple(items), cap, first) in small else [[n for n, _ in items]]


def forward_order(items, cap, first):
    """Right rule, but the items in the order they are given reversed back (registration order)."""
    return reducer_buckets(list(items)[::-1], cap, first) if len(items) > 4 else reducer_buckets(items, cap, first)


# the worker's model by hand: square_mlp(256, 2) has 0.weight 0.bias 2.weight 2.bias 4.weight 4.bias, 4 bytes a value
ARRIVAL_BY_HAND = [("4.bias", 40), ("4.weight", 10240), ("2.bias", 1024), ("2.weight", 262144), ("0.bias", 1024),
                   ("0.weight", 262144)]


def test_04_3_the_worker_model_by_hand():
    assert [(n, p.numel() * 4) for n, p in reversed(list(square_mlp(256, 2).named_parameters()))] == ARRIVAL_BY_HAND
    # what notebook 04's section 7.1 asserts on the worker's record
    assert reducer_buckets(ARRIVAL_BY_HAND, int(0.05 * 2**20), int(0.05 * 2**20)) == [
        ["4.bias", "4.weight", "2.bias", "2.weight"], ["0.bias", "0.weight"]]
    assert len(reducer_buckets(ARRIVAL_BY_HAND, int(0.001 * 2**20), int(0.001 * 2**20))) == 3


# --- 05.1: the weights the launch saved ---------------------------------------------------------------

class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1, self.net2 = nn.Linear(10, 10), nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(torch.relu(self.net1(x)))


torch.manual_seed(5)
SAVED = Toy().state_dict()
put(LESSON, "runs/05_checkpoints/save_load/module_state_dict.pt", SAVED)
put(LESSON, "runs/05_checkpoints/save_load/ddp_state_dict.pt", {f"module.{k}": v for k, v in SAVED.items()})
put(ODD, "runs/05_checkpoints/save_load/module_state_dict.pt", SAVED)
put(ODD, "runs/05_checkpoints/save_load/ddp_state_dict.pt", {f"module.{k}": v + 1 for k, v in SAVED.items()})


def loaded(state=SAVED, dtype=torch.float32):
    model = Toy().to(dtype)
    model.load_state_dict(state)
    return model


# --- 07.2 and 07.4: the eval launch's history and model -------------------------------------------------

HISTORY = [{"epoch": e, "loss": v, "accuracy": 0.5} for e, v in enumerate((1.0, 0.9, 0.95, 0.96, 0.97, 0.8))]
put(LESSON, "runs/07_eval_earlystop/rank0.json", {"history": HISTORY, "stopped_after": 5})
RULE = EarlyStopping(patience=3, mode="min")
DECISIONS = [RULE.step(h["loss"]) for h in HISTORY]  # by hand: best 0.9 at epoch 1, 3 worse epochs: stop at 4
assert DECISIONS == [False, False, False, False, True, False]


def eval_net(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 10))


put(LESSON, "runs/07_eval_earlystop/model.pt", eval_net(0).state_dict())
put(ODD, "runs/07_eval_earlystop/model.pt", {"not": torch.zeros(1)})


def correct_of(net) -> int:
    """The trained model's correct predictions on the whole test set: one plain forward pass."""
    from ddp_helpers.data import load_digits_28

    _, _, test = load_digits_28(seed=0)
    images, labels = next(iter(DataLoader(test, batch_size=len(test))))
    with torch.no_grad():
        return int((net.eval()(images).argmax(1) == labels).sum())


CORRECT, OTHER = correct_of(eval_net(0)), correct_of(eval_net(1))
SHARDS = (120, 120, 119)  # 359 test images over 3 ranks without padding, by hand


def parts(total=CORRECT, sizes=SHARDS):
    split = [total // 3, total // 3, total - 2 * (total // 3)]
    return [EvalResult(loss=0.1, accuracy=c / n, correct=c, count=n) for n, c in zip(sizes, split, strict=True)]


# --- 09.4: the launch of the barrier script ------------------------------------------------------------

BARRIER_SRC = """import datetime
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from ddp_helpers.runtime import distributed

with distributed() as ctx:
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
    if ctx.rank == 0:
        (Path(sys.argv[1]) / "barrier_passed.txt").write_text("every rank reached it")
    group = dist.new_group(timeout=datetime.timedelta(seconds=float(os.environ["HANG_TIMEOUT_S"])))
    x = torch.ones(4, device=ctx.device)
    if ctx.rank == 0:
        dist.all_reduce(x, group=group)
    else:
        dist.broadcast(x, src=0, group=group)
"""


def barrier_case(name, source, stale=False, marker=True):
    """(script, out folder) of a 09.4 run in a learner folder of its own (the script in its scripts/): the marker
    written after the script (before it when stale)."""
    folder = TMP / "09" / name
    (folder / "out").mkdir(parents=True, exist_ok=True)
    (folder / "scripts").mkdir(exist_ok=True)
    script = folder / "scripts" / "09_barrier_then_mismatch.py"
    script.write_text(source)
    if marker:
        (folder / "out" / "barrier_passed.txt").write_text("every rank reached it")
        os.utime(folder / "out" / "barrier_passed.txt", (script.stat().st_mtime + (-100 if stale else 1),) * 2)
    return script, folder / "out"


def barrier_failure(case, nproc=2, out=None, start=-1.0, end=3.3):
    """What launch_failure returns first for a launch of the case's script (a function: a module-level
    failure would be in every check's calling namespace): a WorkerFailed carrying its registered launch, which
    started ``start`` seconds after the marker was written (negative: before) and ended ``end`` seconds
    after it (the script's time when there is no marker)."""
    script, folder = case
    marker = folder / "barrier_passed.txt"
    at = marker.stat().st_mtime if marker.is_file() else script.stat().st_mtime
    result = _launch_for_tests(script, nproc, {}, args=[str(out or folder)], started=at + start, ended=at + end,
                               seconds=end - start, ok=False)
    return WorkerFailed(1, 1, "tail", result.command, result=result)


OK = barrier_case("ok", BARRIER_SRC)
NO_BARRIER = barrier_case("no_barrier", BARRIER_SRC.replace(
    "    dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))\n", ""))
RANK0_BARRIER = barrier_case("rank0", BARRIER_SRC.replace(
    "    dist.monitored_barrier(", "    if ctx.rank == 0:\n        dist.monitored_barrier("))
STALE = barrier_case("stale", BARRIER_SRC, stale=True)
STALE_START = STALE[0].stat().st_mtime - (STALE[1] / "barrier_passed.txt").stat().st_mtime  # the script's time
NO_MARKER = barrier_case("no_marker", BARRIER_SRC, marker=False)
TEN_S = barrier_case("ten_seconds", BARRIER_SRC.replace('float(os.environ["HANG_TIMEOUT_S"])', "10"))
(LESSON / "runs/09_debugging").mkdir(parents=True)
shutil.copy(OK[1] / "barrier_passed.txt", LESSON / "runs/09_debugging/barrier_passed.txt")

# --- 10.2: the controls the launch recorded ----------------------------------------------------------

WIDTH = 1024
ARRIVAL_10 = [4 * p.numel() for p in reversed(list(square_mlp(WIDTH, 4).parameters()))]
COUNTS = {c: reducer_count(ARRIVAL_10, float(c) * 2**20) for c in ("0.5", "8", "32")}  # DDP's Reducer
assert COUNTS == {"0.5": 4, "8": 2, "32": 1}  # by hand: 4 MiB square weights, 1 MiB first... see notebook 10
put(LESSON, "runs/10_performance/controls.json",
    {"width": WIDTH, "depth": 4, "variants": {f"DDP cap {c}": {"allreduces": n} for c, n in COUNTS.items()}})
put(ODD, "runs/10_performance/controls.json", {"width": WIDTH, "depth": 4, "variants": {}})

# --- 10.1 and 10.3: alpha and beta fitted to the sweep the launch wrote --------------------------------------

# a sweep of 4 KiB .. 1 MiB (timing.message_sizes(hi=MiB)) whose medians wobble around 20 us + 1 ns/byte
SWEEP_BYTES = [4096, 16384, 65536, 262144, 1048576]
SWEEP = {"bytes": SWEEP_BYTES, "seconds": [(2e-5 + 1e-9 * n) * w for n, w in
                                           zip(SWEEP_BYTES, (1.03, 0.98, 1.05, 0.97, 1.01), strict=True)],
         "correct": True}
assert SWEEP_BYTES == timing.message_sizes(hi=timing.MiB)
put(LESSON, "runs/10_performance/sweep.json", SWEEP)
put(ODD, "runs/10_performance/sweep.json", {"bytes": [4096], "seconds": [2e-5], "correct": True})  # nothing to fit
SWEEP_ONLY = TMP / "sweep_only_lesson"  # the sweep of section 2, no controls of section 4 yet
put(SWEEP_ONLY, "runs/10_performance/sweep.json", SWEEP)
# as the lesson does (notebook 10, section 2): the fit of the sweep read back from its JSON
FIT = timing.alpha_beta(json.loads((LESSON / "runs/10_performance/sweep.json").read_text()))
A, B = FIT["alpha_s"], FIT["beta_s_per_byte"]
assert math.isclose(A, 2e-5, rel_tol=0.1) and math.isclose(B, 1e-9, rel_tol=0.1) and (A, B) != (2e-5, 1e-9)
# the worker's model by hand: square_mlp(1024, 4) has 4 square Linear(1024, 1024) and a Linear(1024, 10) head
TENSOR_BYTES = [4 * 1024 * 1024, 4 * 1024] * 4 + [4 * 10 * 1024, 4 * 10]
assert TENSOR_BYTES == [4 * p.numel() for p in square_mlp(WIDTH, 4, seed=0).parameters()]
ONE_MESSAGE = A + B * sum(TENSOR_BYTES)                  # notebook 10, exercise 1's solution
PER_TENSOR = sum(A + B * b for b in TENSOR_BYTES)
CROSSOVER = A / B                                         # notebook 10, exercise 3's solution

# --- 11.1 and 11.3: the ZeRO and FSDP2 launches' records ----------------------------------------------


def sizes_of(widths):
    return [p.numel() for p in make_stack(widths).parameters()]


Z = {"partition": zero_partition(sizes_of((32, 64, 64, 8)), 2),   # ZeroRedundancyOptimizer's own
     "partition_even": zero_partition(sizes_of((32, 32, 32)), 2)}
put(LESSON, "runs/11_sharding/zero/results.json", Z)
put(ODD, "runs/11_sharding/zero/results.json", {"partition": [[1], [2]], "partition_even": [[1], [2]]})
LAYER = [4 * sum(p.numel() for p in m.parameters()) for m in make_stack() if isinstance(m, nn.Linear)]
PAYLOADS = {"forward_bytes": {"all_gather": sum(LAYER)},
            "backward_bytes": {"all_gather": sum(LAYER), "reduce_scatter": sum(LAYER)}}
put(LESSON, "runs/11_sharding/fsdp2/results.json", {"reshard_True": PAYLOADS})
put(ODD, "runs/11_sharding/fsdp2/results.json",
    {"reshard_True": {k: {c: b // 2 for c, b in v.items()} for k, v in PAYLOADS.items()}})


def in_order(sizes, world):
    ranks, totals = [[] for _ in range(world)], [0] * world
    for size in sizes:
        r = totals.index(min(totals))
        ranks[r].append(size)
        totals[r] += size
    return ranks


# --- 12.1 and 12.3: float32 answers, the check's own tolerance -------------------------------------------

torch.manual_seed(0)
DENSE, X12, Y12 = MLP(16, 64), torch.randn(8, 16), torch.randn(8, 16)
PARTS = [(torch.relu(X12 @ DENSE.up.weight[rows].T + DENSE.up.bias[rows]) @ DENSE.down.weight[:, rows].T).detach()
         for rows in (slice(0, 32), slice(32, 64))]
# 12.3's exercise cell: the same seed, then 16 samples and their targets (two halves of 8)
torch.manual_seed(0)
DENSE3, X123, Y123 = MLP(16, 64), torch.randn(16, 16), torch.randn(16, 16)
HALVES = [torch.autograd.grad(nn.functional.mse_loss(DENSE3(a), b, reduction="sum"), [DENSE3.up.weight])[0]
          for a, b in zip(X123.chunk(2), Y123.chunk(2), strict=True)]
AVERAGED = (HALVES[0] + HALVES[1]) / 2
with torch.no_grad():
    OUT_NO_BIAS = DENSE(X12) - DENSE.down.bias
C12, C123 = dict(dense=DENSE, x=X12), dict(dense=DENSE3, x=X123, y=Y123)
OFF = 5e-5  # float32's rounding on values of size ~1 is ~1e-7: 5e-5 is a wrong answer, not a rounding

for _folder in (LESSON, ODD):  # what the lesson's launches leave beside their runs
    for _relative, _script, _nproc in RECORDS:
        lesson_record(_folder, _relative, _script, _nproc)
lesson_record(SWEEP_ONLY, "runs/10_performance/sweep.json", "10_allreduce_sizes.py")

# --- the cases ---------------------------------------------------------------------------------------------
RIGHT = {
    "10.1": [dict(one_message=ONE_MESSAGE, per_tensor=PER_TENSOR),
             dict(one_message=np.float32(ONE_MESSAGE), per_tensor=torch.tensor(PER_TENSOR, dtype=torch.float64)),
             dict(one_message=np.float64(ONE_MESSAGE), per_tensor=torch.tensor(PER_TENSOR))],  # a float32 tensor
    "10.3": [dict(crossover=CROSSOVER), dict(crossover=np.float32(CROSSOVER)), dict(crossover=torch.tensor(CROSSOVER)),
             dict(crossover=repr(CROSSOVER))],  # a number as a string (core's coercion rule)
    "04.3": [dict(predict_buckets=reducer_buckets), dict(predict_buckets=tuple_buckets)],
    "05.1": [dict(ex1=loaded()), dict(ex1=loaded().requires_grad_(False))],
    "07.2": [dict(decisions=DECISIONS), dict(decisions=tuple(np.array(DECISIONS)))],
    "07.4": [dict(parts=parts(), pooled_acc=CORRECT / 359),
             dict(parts={2: parts()[2], 0: parts()[0], 1: parts()[1]}, pooled_acc=np.float32(CORRECT / 359))],
    "09.4": [dict(seconds=3.4, _late=lambda: barrier_failure(OK)),
             dict(seconds=np.float64(4.0), _late=lambda: barrier_failure(OK, start=-0.1)),
             dict(seconds=torch.tensor(3.5), _late=lambda: barrier_failure(OK, out="runs/09_debugging")),
             dict(seconds=13.4, _late=lambda: barrier_failure(OK, start=-10)),  # a slow start-up, then the hang
             dict(seconds="3.4", _late=lambda: barrier_failure(OK))],  # a number as a string (core's coercion rule)
    "10.2": [dict(predict_buckets=reducer_count, predicted_buckets=dict(COUNTS)),
             dict(predict_buckets=lambda nb, cap: np.int64(reducer_count(nb, cap)),
                  predicted_buckets={0.5: np.int64(4), 8: torch.tensor(2), 32.0: 1}),
             # the caps keyed in other forms (core.key_size): in bytes, as predict_buckets takes them...
             dict(predict_buckets=reducer_count, predicted_buckets={0.5 * 2**20: 4, 8 * 2**20: 2, 32 * 2**20: 1}),
             # ... or with a unit of their own
             dict(predict_buckets=reducer_count, predicted_buckets={"512 KiB": 4, "8 MiB": 2, "32MB": 1}),
             dict(predict_buckets=reducer_count, predicted_buckets={"512KiB": 4, "8192 KiB": 2, "0.03125 GiB": 1})],
    "11.1": [dict(predict_partition=zero_partition, found=(8, 16, 24, 24)),
             dict(predict_partition=lambda s, w: tuple(tuple(r) for r in zero_partition(s, w)),
                  found=np.array([8, 16, 24, 24]))],
    "11.3": [dict(predicted=PAYLOADS),
             dict(predicted={k: {c: np.int64(b) for c, b in v.items()} for k, v in PAYLOADS.items()}),
             # the keys named otherwise (core.key_among): the phases without "_bytes", the collectives in any spelling
             dict(predicted={"forward": {"allgather": sum(LAYER)},
                             "backward": {"AllGather": sum(LAYER), "ReduceScatter": sum(LAYER)}}),
             dict(predicted={"fwd": {"all_gather_into_tensor": sum(LAYER)},  # torch's names of the collectives
                             "bwd": {"all_gather_into_tensor": sum(LAYER), "reduce_scatter_tensor": sum(LAYER)}}),
             dict(predicted={"Forward bytes": {"all-gather": sum(LAYER), "reduce-scatter": 0},
                             "backward pass": {"All Gather": sum(LAYER), "reduce scatter": sum(LAYER)}})],
    "12.1": [dict(partials=PARTS, **C12), dict(partials=tuple(p.double().numpy() for p in PARTS), **C12)],
    "12.3": [dict(averaged=AVERAGED, **C123), dict(averaged=AVERAGED.double().numpy(), **C123),
             dict(averaged=AVERAGED + 1e-6, **C123),  # within float32's rounding of another summation order
             dict(averaged=AVERAGED.tolist(), **C123)],  # nested lists (core's coercion rule)
}

WRONG = {
    "10.1": [("copy-through: alpha = beta = 0 and zero answers", dict(
                 one_message=0.0, per_tensor=0.0, alpha=0.0, beta=0.0, model=square_mlp(WIDTH, 4, seed=0))),
             ("zero answers", dict(one_message=0.0, per_tensor=0.0)),
             ("alpha and beta not the lesson's fit", dict(one_message=2e-5 + 1e-9 * sum(TENSOR_BYTES),
                                                          per_tensor=sum(2e-5 + 1e-9 * b for b in TENSOR_BYTES))),
             ("one alpha for both", dict(one_message=ONE_MESSAGE, per_tensor=ONE_MESSAGE)),
             ("bits not bytes", dict(one_message=A + 8 * B * sum(TENSOR_BYTES), per_tensor=PER_TENSOR)),
             ("another width", dict(one_message=A + B * 4 * sum(p.numel() for p in square_mlp(512, 4).parameters()),
                                    per_tensor=PER_TENSOR)),
             ("a list", dict(one_message=[ONE_MESSAGE], per_tensor=PER_TENSOR)),
             ("no run yet", dict(one_message=ONE_MESSAGE, per_tensor=PER_TENSOR, _lesson=EMPTY)),
             ("no controls run yet", dict(one_message=ONE_MESSAGE, per_tensor=PER_TENSOR, _lesson=SWEEP_ONLY)),
             ("a sweep with nothing to fit", dict(one_message=ONE_MESSAGE, per_tensor=PER_TENSOR, _lesson=ODD))],
    "10.3": [("copy-through: alpha = beta = 0 and a zero answer", dict(crossover=0.0, alpha=0.0, beta=0.0)),
             ("zero", dict(crossover=0.0)),
             ("alpha and beta not the lesson's fit", dict(crossover=2e-5 / 1e-9)),
             ("twice", dict(crossover=2 * CROSSOVER)),
             ("inverted", dict(crossover=B / A)),
             ("a word", dict(crossover="large")),
             ("no run yet", dict(crossover=CROSSOVER, _lesson=EMPTY)),
             ("a sweep with nothing to fit", dict(crossover=CROSSOVER, _lesson=ODD))],
    "04.3": [("copy-through: the old record", dict(predict_buckets=reducer_buckets, arrival=ARRIVAL_BY_HAND,
                                                   recorded={"buckets": {}})),
             ("reference helper", dict(predict_buckets=nb04._reference_buckets)),
             ("memorised small cases", dict(predict_buckets=memorised)),
             ("registration order", dict(predict_buckets=forward_order)),
             ("ignores the first cap", dict(predict_buckets=lambda i, c, f: reducer_buckets(i, c, c))),
             ("returns a count", dict(predict_buckets=lambda i, c, f: len(reducer_buckets(i, c, f))))],
    "05.1": [("copy-through: fresh weights and their own reference",
              dict(ex1=(fresh := Toy()), reference=fresh.state_dict())),
             ("fresh weights", dict(ex1=Toy())),
             ("prefixed", dict(ex1=nn.ModuleDict({"module": loaded()}))),
             ("a state dict", dict(ex1=SAVED)),
             ("no run yet", dict(ex1=loaded(), _lesson=EMPTY)),
             ("files of two runs", dict(ex1=loaded(), _lesson=ODD))],
    "07.2": [("copy-through: decisions of another history", dict(
                 decisions=[False] * 6, history=[{"loss": 1.0 - 0.1 * e} for e in range(6)])),
             ("all False", dict(decisions=[False] * 6)),
             ("one short", dict(decisions=DECISIONS[:-1])),
             ("ints", dict(decisions=[int(d) for d in DECISIONS])),
             ("a step early", dict(decisions=[False, False, False, True, False, False])),
             ("no run yet", dict(decisions=DECISIONS, _lesson=EMPTY))],
    "07.4": [("copy-through: another model's counts and its own single", dict(
                 parts=parts(OTHER), pooled_acc=OTHER / 359,
                 single=EvalResult(loss=0.1, accuracy=OTHER / 359, correct=OTHER, count=359))),
             ("another model's counts", dict(parts=parts(OTHER), pooled_acc=OTHER / 359))
             if OTHER != CORRECT else ("another model's counts", dict(parts=parts(OTHER + 1), pooled_acc=CORRECT)),
             ("mean of ratios", dict(parts=parts(), pooled_acc=sum(p.accuracy for p in parts()) / 3)),
             ("padded shards", dict(parts=parts(sizes=(120, 120, 120)), pooled_acc=CORRECT / 359)),
             ("two parts", dict(parts=parts()[:2], pooled_acc=CORRECT / 359)),
             ("floats for parts", dict(parts=[0.9, 0.9, 0.9], pooled_acc=CORRECT / 359)),
             ("no run yet", dict(parts=parts(), pooled_acc=CORRECT / 359, _lesson=EMPTY)),
             ("not the worker's model", dict(parts=parts(), pooled_acc=CORRECT / 359, _lesson=ODD))],
    "09.4": [("copy-through: the old keywords", dict(out=OK[1], seconds=3.4, hang_timeout_s="3",
                                                      _late=lambda: barrier_failure(OK))),
             ("nothing launched", dict(seconds=3.4)),
             ("3 processes", dict(seconds=3.4, _late=lambda: barrier_failure(OK, nproc=3))),
             ("barrier deleted", dict(seconds=3.4, _late=lambda: barrier_failure(NO_BARRIER))),
             ("barrier on rank 0 only", dict(seconds=3.4, _late=lambda: barrier_failure(RANK0_BARRIER))),
             ("marker left by an earlier run", dict(seconds=3.4, _late=lambda: barrier_failure(
                 STALE, start=STALE_START + 1, end=STALE_START + 5))),
             ("no marker", dict(seconds=3.4, _late=lambda: barrier_failure(NO_MARKER))),
             ("marker older than the launch's start", dict(seconds=3.4,
                                                           _late=lambda: barrier_failure(OK, start=100, end=104))),
             ("no hang", dict(seconds=0.5, _late=lambda: barrier_failure(OK, start=-0.2, end=0.3))),
             ("a slow start-up, no hang", dict(seconds=10.5, _late=lambda: barrier_failure(OK, start=-10, end=0.5))),
             ("shorter than the script's own timeout", dict(seconds=4.0, _late=lambda: barrier_failure(TEN_S))),
             ("a word", dict(seconds="long", _late=lambda: barrier_failure(OK)))],
    "10.2": [("copy-through: counts and a record that agree", dict(
                 predict_buckets=reducer_count, predicted_buckets={"0.5": 3, "8": 2, "32": 1},
                 recorded={"0.5": 3, "8": 2, "32": 1})),
             ("reference helper", dict(predict_buckets=nb10._reference_count, predicted_buckets=COUNTS)),
             ("one bucket per tensor", dict(predict_buckets=lambda nb, cap: len(nb), predicted_buckets=COUNTS)),
             ("counts off", dict(predict_buckets=reducer_count, predicted_buckets={"0.5": 3, "8": 2, "32": 1})),
             ("a list", dict(predict_buckets=reducer_count, predicted_buckets=[4, 2, 1])),
             ("the counts keyed by caps in KiB", dict(predict_buckets=reducer_count,
                                                      predicted_buckets={"0.5 KiB": 4, "8 KiB": 2, "32 KiB": 1})),
             ("no run yet", dict(predict_buckets=reducer_count, predicted_buckets=COUNTS, _lesson=EMPTY)),
             ("a run without the variants", dict(predict_buckets=reducer_count, predicted_buckets=COUNTS,
                                                 _lesson=ODD))],
    "11.1": [("copy-through: a record that agrees with no sort", dict(
                 predict_partition=in_order, found=(8, 16, 24, 24),
                 recorded={"partition": in_order(sizes_of((32, 64, 64, 8)), 2),
                           "partition_even": in_order(sizes_of((32, 32, 32)), 2)})),
             ("reference helper", dict(predict_partition=nb11._reference_partition, found=(8, 16, 24, 24))),
             ("no sort", dict(predict_partition=in_order, found=(8, 16, 24, 24))),
             ("identical layers", dict(predict_partition=zero_partition, found=(8, 8, 8))),
             ("uneven", dict(predict_partition=zero_partition, found=(32, 64, 64, 8))),
             ("no run yet", dict(predict_partition=zero_partition, found=(8, 16, 24, 24), _lesson=EMPTY)),
             ("a run that differs", dict(predict_partition=zero_partition, found=(8, 16, 24, 24), _lesson=ODD))],
    "11.3": [("copy-through: another model and its payloads", dict(
                 predicted={"forward_bytes": {"all_gather": 8}, "backward_bytes": {"all_gather": 8,
                                                                                   "reduce_scatter": 8}},
                 model=[nn.Linear(1, 1)], recorded={"forward_bytes": {"all_gather": 8},
                                                    "backward_bytes": {"all_gather": 8, "reduce_scatter": 8}})),
             ("no backward gather", dict(predicted={"forward_bytes": {"all_gather": sum(LAYER)},
                                                    "backward_bytes": {"reduce_scatter": sum(LAYER)}})),
             ("halves", dict(predicted={k: {c: b // 2 for c, b in v.items()} for k, v in PAYLOADS.items()})),
             ("flat dict", dict(predicted={"forward_bytes": sum(LAYER), "backward_bytes": 2 * sum(LAYER)})),
             ("the phases swapped, named otherwise", dict(predicted={"fwd": PAYLOADS["backward_bytes"],
                                                                      "bwd": PAYLOADS["forward_bytes"]})),
             ("two keys for one phase", dict(predicted={**PAYLOADS, "forward": PAYLOADS["forward_bytes"]})),
             ("no run yet", dict(predicted=PAYLOADS, _lesson=EMPTY)),
             ("the run counted otherwise", dict(predicted=PAYLOADS, _lesson=ODD))],
    "12.1": [("copy-through: a loose tolerance", dict(partials=[PARTS[0] + 0.4, PARTS[1] - 0.4], tol=1.0, **C12)),
             ("out / 2 twice", dict(partials=[(OUT_NO_BIAS / 2)] * 2, **C12)),
             ("off by more than float32's rounding", dict(partials=[PARTS[0] + OFF, PARTS[1]], **C12)),
             ("first twice", dict(partials=[PARTS[0], PARTS[0]], **C12)),
             ("one partial", dict(partials=[PARTS[0]], **C12)),
             ("bias in both", dict(partials=[p + DENSE.down.bias.detach() for p in PARTS], **C12))],
    "12.3": [("copy-through: a loose tolerance", dict(averaged=AVERAGED + 0.5, tol=1.0, **C123)),
             ("off by more than float32's rounding", dict(averaged=AVERAGED + OFF, **C123)),
             ("the sum", dict(averaged=HALVES[0] + HALVES[1], **C123)),
             ("one half", dict(averaged=HALVES[0], **C123)),
             ("transposed", dict(averaged=AVERAGED.T, **C123)),
             ("a word", dict(averaged="gradient", **C123))],
}
IDS = set(RIGHT)


@pytest.fixture(autouse=True)
def lesson(monkeypatch):
    """The running notebook is LESSON/notebook.ipynb: its runs are LESSON/runs/..."""
    monkeypatch.setenv("JPY_SESSION_NAME", str(LESSON / "notebook.ipynb"))
    monkeypatch.delenv("NB09_HANG_TIMEOUT_S", raising=False)


def run_case(exid, kwargs):
    """Call the check; ``_late`` becomes a name of this frame, where check 09.4 looks for the launch (as it
    looks in a notebook's namespace); ``_lesson`` is the notebook's folder for this case."""
    kwargs = dict(kwargs)
    make_late, folder = kwargs.pop("_late", None), kwargs.pop("_lesson", LESSON)
    late = make_late() if make_late else None
    here = Path.cwd()
    if late is not None:  # the learner's scripts/ folder is the working directory, as a notebook's is
        os.chdir(Path(late.result.script).parent.parent)
    try:
        with notebook_in(folder):
            return exercises.CHECKS[exid](**kwargs)
    finally:
        os.chdir(here)


def refused(exid, kwargs):
    return refused_text(exid, lambda: run_case(exid, kwargs))


def test_every_changed_check_has_its_cases():
    for exid in IDS:
        labels = [label for label, _ in WRONG[exid]]
        assert len(RIGHT[exid]) >= 2 and len(WRONG[exid]) >= 3, exid
        assert any(label.startswith("copy-through") for label in labels), exid


@pytest.mark.parametrize(("exid", "i"), [(e, i) for e, cases in RIGHT.items() for i in range(len(cases))])
def test_right_answers_in_other_forms_pass(exid, i, capsys):
    run_case(exid, RIGHT[exid][i])
    assert capsys.readouterr().out == f"✓ Exercise {exid}: correct\n"


@pytest.mark.parametrize(("exid", "label"), [(e, label) for e, cases in WRONG.items() for label, _ in cases])
def test_wrong_answers_fail_with_a_hint(exid, label):
    refused(exid, dict(WRONG[exid])[label])


@pytest.mark.parametrize(("exid", "launch"), [("05.1", "05_save_load.py"), ("07.2", "07_eval_earlystop.py"),
                                              ("07.4", "07_eval_earlystop.py"), ("10.1", "10_allreduce_sizes.py"),
                                              ("10.2", "10_step_controls.py"), ("10.3", "10_allreduce_sizes.py"),
                                              ("11.1", "11_zero.py"), ("11.3", "11_fsdp2.py")])
def test_a_missing_run_names_the_launch_to_run_first(exid, launch):
    kwargs = next(k for label, k in WRONG[exid] if label == "no run yet")
    text = refused(exid, kwargs)
    assert f"run the launch of scripts/{launch} (section " in text and "does not exist" in text


def test_10_1_without_the_controls_run_names_that_launch():
    text = refused("10.1", dict(WRONG["10.1"])["no controls run yet"])
    assert "run the launch of scripts/10_step_controls.py (section 4)" in text


def test_10_1_and_10_3_use_the_lessons_fit_to_the_last_digit(capsys):
    """The check's alpha and beta are the lesson's (timing.alpha_beta of the same sweep.json): answers within
    REL_TOL of them pass, answers ~1e-8 off (float64 rounding could never be that large) do not."""
    run_case("10.3", dict(crossover=CROSSOVER * (1 + 1e-12)))
    run_case("10.1", dict(one_message=ONE_MESSAGE * (1 - 1e-12), per_tensor=PER_TENSOR))
    refused("10.3", dict(crossover=CROSSOVER * (1 + 1e-7)))
    refused("10.1", dict(one_message=ONE_MESSAGE, per_tensor=PER_TENSOR * (1 + 1e-7)))
    assert capsys.readouterr().out == "✓ Exercise 10.3: correct\n✓ Exercise 10.1: correct\n"


def test_runs_are_found_beside_the_notebook_not_in_the_working_directory(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs/07_eval_earlystop").mkdir(parents=True)
    (tmp_path / "runs/07_eval_earlystop/rank0.json").write_text(json.dumps({"history": [{"loss": 1.0}] * 6}))
    run_case("07.2", dict(decisions=DECISIONS))  # LESSON's history, not the working directory's
    monkeypatch.delenv("JPY_SESSION_NAME")
    assert core.lesson_folders() == [tmp_path, series.NOTEBOOK_DIR]  # no front end: the kernel's folder first


def test_the_hang_timeout_comes_from_the_lesson_setting(monkeypatch):
    monkeypatch.setenv("NB09_HANG_TIMEOUT_S", "6")
    refused("09.4", dict(seconds=4.0, _late=lambda: barrier_failure(OK)))
    refused("09.4", dict(seconds=6.5, _late=lambda: barrier_failure(OK)))  # the launch hung 3.3 s, not 6
    run_case("09.4", dict(seconds=6.5, _late=lambda: barrier_failure(OK, start=-0.2, end=6.3)))


def test_the_float32_tolerance_is_stated():
    text = refused("12.3", dict(averaged=AVERAGED + OFF, **C123))
    assert f"atol {core.F32_ATOL}" in text and "float32" in text


# --- the hint for a name the lesson did not define -----------------------------------------------------

def test_a_missing_answer_name_points_at_the_exercise_cell():
    cell = "from ddp_helpers import exercises\n\nexercises.check_11_3(predicted=predicted)"
    failure = core.missing_name_failure(NameError("name 'predicted' is not defined", name="predicted"), cell)
    assert str(failure).startswith("Exercise 11.3: `predicted` is not defined")
    assert "exercise's cell just above this check" in failure.hint and "cells above" not in failure.hint


def test_a_check_cell_passes_only_what_its_exercise_makes():
    """No check cell hands the check a lesson value (a record, a tolerance, a model): every name it reads is
    made by its exercise's solution cells, so the missing-name hint can point at the cell above."""
    import ast
    import builtins

    for path in series.notebooks():
        cells = json.loads(path.read_text())["cells"]
        made = set()
        for cell in cells:
            tags = cell.get("metadata", {}).get("tags", [])
            source = "".join(cell["source"])
            if cell["cell_type"] != "code":
                continue
            if "check" not in tags:
                if "solution" in tags and not source.startswith("%%"):
                    tree = ast.parse(source)
                    made |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
                    made |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
                continue
            tree = ast.parse(source)
            read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
            read -= {"exercises", *dir(builtins)}
            assert read - made == set(), (path.name, sorted(read - made))
            made = set()


def test_no_hint_outside_a_check_cell():
    assert core.missing_name_failure(NameError("x", name="x"), "print(x)") is None


IPYTHON_SESSION = """
from IPython.core.interactiveshell import InteractiveShell

shell = InteractiveShell.instance()
shell.run_cell("from ddp_helpers import exercises")
result = shell.run_cell("exercises.check_10_3(crossover=crossover_never_made)")
print("ERROR", type(result.error_in_exec).__name__)
print("=" * 20)
other = shell.run_cell("print(undefined_elsewhere)")
print("ERROR", type(other.error_in_exec).__name__)
"""


def test_ipython_shows_the_hint_for_a_name_error_in_a_check_cell():
    """A real IPython shell (in its own process: it stays installed): the check cell's NameError is shown as
    the CheckFailed hint, any other cell's as IPython's own."""
    import subprocess

    ran = subprocess.run([sys.executable, "-c", IPYTHON_SESSION], capture_output=True, text=True, timeout=120)
    check_cell, other_cell = ran.stdout.split("=" * 20)
    assert "Exercise 10.3: `crossover_never_made` is not defined" in check_cell, ran.stdout + ran.stderr
    assert "exercise's cell just above this check" in check_cell and "ERROR NameError" in check_cell
    assert "Exercise" not in other_cell and "NameError" in other_cell
