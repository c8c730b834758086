"""Answer checks for the exercises of the series.

Every exercise of a notebook is followed by a check cell (tagged ``check``) that calls one function
of this module with the learner's names, for example::

    exercises.check_02_1(padded_len=padded_len, dropped_len=dropped_len, ...)

A check re-derives the truth from torch (or from the run the learner launched) and compares.

- On success it prints one line, ``Exercise 02.1: correct``, the same on every machine.
- On a wrong answer, or a name still set to ``...`` (the student starter), it raises
  :class:`CheckFailed` (an ``AssertionError``) whose message names the exercise, says what is wrong
  and gives a hint. It never prints the expected answer.

Floats are compared with the tolerance stated in each check (``REL_TOL``, ``ATOL`` or the notebook's
own ``tol``); integers, lists and strings exactly. The functions set ``__tracebackhide__`` so that
IPython and pytest show a short traceback that ends at the check cell.
"""

from __future__ import annotations

import ast
import math
import pickle
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, DistributedSampler

REL_TOL = 1e-9   # closed-form arithmetic (alpha-beta models, byte counts in floats)
ATOL = 1e-6      # float32 tensors computed two ways in the same process


class CheckFailed(AssertionError):
    """An exercise's answer is missing or wrong; the message says what and gives a hint."""

    def __init__(self, exercise: str, what: str, hint: str):
        self.exercise, self.what, self.hint = exercise, what, hint
        super().__init__(f"Exercise {exercise}: {what}\nHint: {hint}")

    def _render_traceback_(self):  # IPython: show only the message, not this module's frames
        return [f"CheckFailed: {self}"]


# --- the building blocks -------------------------------------------------------------------------

def fail(exercise: str, what: str, hint: str):
    __tracebackhide__ = True
    raise CheckFailed(exercise, what, hint)


def require(condition, exercise: str, what: str, hint: str) -> None:
    __tracebackhide__ = True
    if not condition:
        fail(exercise, what, hint)


def given(exercise: str, **names) -> None:
    """Every name is set: not ``...`` (the starter) and not None."""
    __tracebackhide__ = True
    for name, value in names.items():
        if value is ...:
            fail(exercise, f"`{name}` is still `...`.",
                 "replace the `...` in the cell above with your code, run it, then run this check again.")
        if value is None:
            fail(exercise, f"`{name}` is None.", "did a function forget to `return` its result?")


def correct(exercise: str) -> None:
    print(f"Exercise {exercise}: correct")


def _same_numbers(a, b, rel_tol=REL_TOL) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=0.0)
    except (TypeError, ValueError):
        return False


def _as_int_list(values) -> list[int] | None:
    try:
        return sorted(int(v) for v in values)
    except (TypeError, ValueError):
        return None


def _is_launch(result) -> bool:
    return isinstance(getattr(result, "stdout", None), dict) and isinstance(getattr(result, "command", None), str)


def _processes(result) -> int:
    """How many processes a launch ran: --nproc-per-node (times --nnodes) of its command."""
    per_node = re.search(r"--nproc[-_]per[-_]node[= ](\d+)", result.command or "")
    nodes = re.search(r"--nnodes[= ](\d+)", result.command or "")
    if per_node is None:
        return len(result.stdout)
    return int(per_node.group(1)) * (int(nodes.group(1)) if nodes else 1)


def _launched(exercise: str, name: str, result, nproc: int) -> None:
    __tracebackhide__ = True
    require(_is_launch(result), exercise, f"`{name}` is not what `torchrun(...)` returns.",
            f"assign the result of the launch: `{name} = torchrun(...)`.")
    ran = _processes(result)
    require(ran == nproc, exercise, f"`{name}` ran {ran} process(es), the exercise asks for {nproc}.",
            "look at the `nproc=` argument of the launch.")


def _numbers(line: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", line)]


def _callable(exercise: str, name: str, value) -> None:
    __tracebackhide__ = True
    require(callable(value), exercise, f"`{name}` is not a function.", f"define it with `def {name}(...):`.")


def _parsed(script) -> ast.Module:
    """The script's syntax tree (empty when it does not exist or does not parse)."""
    try:
        return ast.parse(Path(script).read_text())
    except (OSError, SyntaxError):
        return ast.Module(body=[], type_ignores=[])


def _called(node) -> str:
    """The last name of what a call or decorator refers to: ``mp.spawn(...)`` -> ``spawn``."""
    node = node.func if isinstance(node, ast.Call) else node
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


# --- 00 orientation ------------------------------------------------------------------------------

def check_00_1(three) -> None:
    __tracebackhide__ = True
    given("00.1", three=three)
    _launched("00.1", "three", three, 3)
    expected = sum(r + 1 for r in range(3))
    for rank, lines in sorted(three.stdout.items()):
        values = [_numbers(line.split("all_reduce")[1])[-1] for line in lines if "all_reduce" in line]
        require(values and values[-1] == expected, "00.1",
                f"rank {rank} did not print the all-reduced value the worker computes.",
                "launch scripts/00_hello.py unchanged, with `summary=False` if you like, and read its lines.")
    correct("00.1")


def check_00_2(maxed, script="scripts/00_max.py") -> None:
    __tracebackhide__ = True
    given("00.2", maxed=maxed)
    source = Path(script).read_text() if Path(script).exists() else ""
    require("ReduceOp.MAX" in source, "00.2", f"{script} does not use `dist.ReduceOp.MAX`.",
            "pass `op=dist.ReduceOp.MAX` to `dist.all_reduce`.")
    _launched("00.2", "maxed", maxed, 2)
    expected = 10.0 * (len(maxed.stdout) - 1)  # the largest rank * 10
    for rank, lines in sorted(maxed.stdout.items()):
        last = _numbers(lines[-1]) if lines else []
        require(last and last[-1] == expected, "00.2",
                f"rank {rank}'s last printed number is not the maximum of `rank * 10` over the ranks.",
                "all-reduce a tensor holding `ctx.rank * 10` with the MAX op, then print `value.item()`.")
    correct("00.2")


def check_00_3(plain) -> None:
    __tracebackhide__ = True
    given("00.3", plain=plain)
    require(hasattr(plain, "returncode") and isinstance(getattr(plain, "stderr", None), str), "00.3",
            "`plain` is not a finished subprocess with its stderr captured as text.",
            "use `subprocess.run([...], capture_output=True, text=True)`.")
    require(plain.returncode != 0, "00.3", "the process exited with code 0.",
            "run the worker script itself with `sys.executable`, without torchrun.")
    require("Launch it with torchrun" in plain.stderr, "00.3",
            "the runtime helper's message is not in `plain.stderr`.",
            "run scripts/00_hello.py (the worker of section 4), not another script.")
    correct("00.3")


# --- 01 collectives ------------------------------------------------------------------------------

def check_01_1(gathered) -> None:
    __tracebackhide__ = True
    given("01.1", gathered=gathered)
    _launched("01.1", "gathered", gathered, 3)
    for rank, lines in sorted(gathered.stdout.items()):
        require(lines and lines[-1].rstrip().endswith("True"), "01.1",
                f"rank {rank}'s last line does not end with `True` (the comparison with dist.all_gather).",
                "end the script with `print(f\"...: {same}\")` where `same` compares every piece with "
                "`dist.all_gather`'s; check which chunk you send and which you receive at each step.")
    correct("01.1")


def check_01_2(t_ring, t_tree, crossover) -> None:
    __tracebackhide__ = True
    given("01.2", t_ring=t_ring, t_tree=t_tree, crossover=crossover)
    _callable("01.2", "t_ring", t_ring)
    _callable("01.2", "t_tree", t_tree)

    def ring(n, s, a, b):
        return 2 * (n - 1) * a + 2 * (n - 1) / n * s * b

    def tree(n, s, a, b):
        return 2 * math.ceil(math.log2(n)) * (a + s * b)

    for n, s, a, b in [(64, 1024, 20e-6, 0.1e-9), (64, 100 * 2**20, 20e-6, 0.1e-9), (8, 4096, 5e-6, 1e-9)]:
        require(_same_numbers(t_ring(n, s, a, b), ring(n, s, a, b)), "01.2",
                f"t_ring({n}, {s}, {a}, {b}) does not follow the ring formula.",
                "2(N-1) latencies plus 2(N-1)/N of the message's bytes times beta.")
        require(_same_numbers(t_tree(n, s, a, b), tree(n, s, a, b)), "01.2",
                f"t_tree({n}, {s}, {a}, {b}) does not follow the tree formula.",
                "2*ceil(log2 N) messages, each costing alpha + S*beta (math.ceil, math.log2).")
    n, a, b = 64, 20e-6, 0.1e-9
    require(isinstance(crossover, int | float) and crossover > 0 and
            math.isclose(ring(n, crossover, a, b), tree(n, crossover, a, b), rel_tol=1e-6), "01.2",
            "at `crossover` bytes the two costs are not equal (relative tolerance 1e-6).",
            "set the two formulas equal and solve the linear equation for S, in bytes.")
    correct("01.2")


def check_01_3(ring_result, rank_order) -> None:
    __tracebackhide__ = True
    given("01.3", ring_result=ring_result, rank_order=rank_order)
    from ddp_helpers.ring import simulate_ring

    values = [np.float32(v) for v in (1e8, 1.0, -1e8, 1.0)]
    truth_ring = simulate_ring([[v] * 4 for v in values])[-1][0][0]
    truth_order = ((values[0] + values[1]) + values[2]) + values[3]
    require(np.float32(ring_result) == truth_ring, "01.3",
            "`ring_result` is not what simulate_ring gives for chunk 0 (on rank 0, after the last step).",
            "every chunk of rank r holds that rank's float32 value; read states[-1][0][0].")
    require(np.float32(rank_order) == truth_order, "01.3",
            "`rank_order` is not the float32 sum taken in rank order 0, 1, 2, 3.",
            "add np.float32 values left to right; the exact sum of the real numbers is not the answer.")
    correct("01.3")


# --- 02 samplers ---------------------------------------------------------------------------------

def check_02_1(padded_len, dropped_len, rank3_padded, rank3_dropped, repeated, unseen) -> None:
    __tracebackhide__ = True
    given("02.1", padded_len=padded_len, dropped_len=dropped_len, rank3_padded=rank3_padded,
          rank3_dropped=rank3_dropped, repeated=repeated, unseen=unseen)

    def rank(r, drop_last):
        return list(DistributedSampler(range(10), num_replicas=4, rank=r, shuffle=False, drop_last=drop_last))

    require(padded_len == len(rank(0, False)), "02.1", "`padded_len` is not num_samples with drop_last=False.",
            "without drop_last the sampler rounds 10 / 4 up and pads.")
    require(dropped_len == len(rank(0, True)), "02.1", "`dropped_len` is not num_samples with drop_last=True.",
            "with drop_last the sampler rounds 10 / 4 down.")
    require(list(rank3_padded) == rank(3, False), "02.1", "`rank3_padded` is not rank 3's index list (in order).",
            "rank r takes every 4th index of the padded list, starting at r.")
    require(list(rank3_dropped) == rank(3, True), "02.1", "`rank3_dropped` is not rank 3's index list (in order).",
            "with drop_last the global list is cut to a multiple of 4 before the stride.")
    everything = [i for r in range(4) for i in rank(r, False)]
    require(_as_int_list(repeated) == sorted({i for i in everything if everything.count(i) > 1}), "02.1",
            "`repeated` is not the set of indices that the padding repeats.",
            "the padding appends indices from the start of the list.")
    seen = {i for r in range(4) for i in rank(r, True)}
    require(_as_int_list(unseen) == sorted(set(range(10)) - seen), "02.1",
            "`unseen` is not the set of indices that drop_last leaves out.", "which tail does the cut remove?")
    correct("02.1")


def check_02_2(twice, never) -> None:
    __tracebackhide__ = True
    given("02.2", twice=twice, never=never)
    r0 = DistributedSampler(range(12), num_replicas=2, rank=0, seed=0)
    r1 = DistributedSampler(range(12), num_replicas=2, rank=1, seed=0)
    r0.set_epoch(1)
    a, b = set(r0), set(r1)
    require(_as_int_list(twice) == sorted(a & b), "02.2",
            "`twice` is not the set of samples both ranks see at epoch 1.",
            "rank 0 calls set_epoch(1), rank 1 stays at epoch 0 (seed 0, 12 samples); intersect their index sets.")
    require(_as_int_list(never) == sorted(set(range(12)) - a - b), "02.2",
            "`never` is not the set of samples no rank sees.", "the samples in neither rank's set.")
    correct("02.2")


def check_02_3(global_batch, steps, scaled_lr) -> None:
    __tracebackhide__ = True
    given("02.3", global_batch=global_batch, steps=steps, scaled_lr=scaled_lr)
    n, b, gpus, lr = 50_000, 256, 8, 0.1
    require(global_batch == gpus * b, "02.3", "`global_batch` is wrong.",
            "each optimizer step averages the batches of every GPU.")
    loader = DataLoader(range(n), batch_size=b, sampler=DistributedSampler(range(n), num_replicas=gpus, rank=0))
    require(steps == len(loader), "02.3", "`steps` is not the number of batches per epoch on one rank.",
            "build `DataLoader(range(50_000), batch_size=256, sampler=DistributedSampler(..., num_replicas=8, "
            "rank=...))` and take its len().")
    require(_same_numbers(scaled_lr, lr * gpus), "02.3", "`scaled_lr` is not what the linear scaling rule gives.",
            "the rule scales the learning rate by the same factor as the global batch.")
    correct("02.3")


def check_02_4(four, padded_count, exact_count) -> None:
    __tracebackhide__ = True
    given("02.4", four=four, padded_count=padded_count, exact_count=exact_count)
    _launched("02.4", "four", four, 4)
    sampler = DistributedSampler(range(10), num_replicas=4, rank=0, shuffle=False)
    require(padded_count == sampler.total_size, "02.4", "`padded_count` is not what the padded evaluation counts.",
            "read the count from runs/02_samplers/world4.json (`padded` is [correct, count]).")
    require(exact_count == 10, "02.4", "`exact_count` is not what the exact evaluation counts.",
            "read the count of the unpadded evaluation from the same JSON file.")
    correct("02.4")


# --- 03 launching --------------------------------------------------------------------------------

def check_03_1(no_guard, script="scripts/03_ex_no_guard.py") -> None:
    __tracebackhide__ = True
    given("03.1", no_guard=no_guard)
    tree = _parsed(script)
    top_spawn = any(isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and _called(n.value) == "spawn"
                    for n in tree.body)
    guarded = any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body)
    require(top_spawn and not guarded, "03.1",
            f"{script} does not call `mp.spawn` at top level without a `__main__` guard.",
            "write a `worker(index)` function and call `mp.spawn(worker, nprocs=1)` at the end of the file.")
    require(hasattr(no_guard, "returncode") and isinstance(getattr(no_guard, "stderr", None), str), "03.1",
            "`no_guard` is not a finished subprocess with captured output.", "use `run_python(script)`.")
    require(no_guard.returncode != 0, "03.1", "the script exited with code 0.",
            "without the guard the children re-run the spawn line; look at the parent's exit code.")
    require("bootstrapping phase" in no_guard.stderr, "03.1",
            "the children's refusal (multiprocessing's bootstrapping error) is not in stderr.",
            "the spawn call must run when a child imports the file, so keep it at top level.")
    correct("03.1")


def check_03_2(bare, script="scripts/03_ex_no_record.py") -> None:
    __tracebackhide__ = True
    given("03.2", bare=bare)
    tree = _parsed(script)
    names = {_called(d) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) for d in n.decorator_list}
    names |= {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    raises = any(isinstance(n, ast.Raise) for n in ast.walk(tree))
    require(raises and "record" not in names, "03.2",
            f"{script} should raise like scripts/03_record_report.py, without `@record`.",
            "copy the worker, then delete the import of `record` and the decorator.")
    require(getattr(bare, "returncode", 0) != 0 and "Root Cause" in getattr(bare, "stderr", ""), "03.2",
            "`bare` is not a failed torchrun launch with its Root Cause block.",
            "launch it with `run_python(\"-m\", \"torch.distributed.run\", \"--standalone\", "
            "\"--nproc-per-node=1\", script)`.")
    block = bare.stderr.split("Root Cause")[1]
    require("<N/A>" in block and "learning rate must be positive" not in block, "03.2",
            "the Root Cause block still shows the worker's error: was the script run with @record?",
            "compare `error_file` and `traceback` with section 7.")
    correct("03.2")


def check_03_3(counts, caught) -> None:
    __tracebackhide__ = True
    given("03.3", counts=counts, caught=caught)
    from ddp_helpers.launch import WorkerFailed

    max_restarts = 2
    require(list(counts) == [str(i) for i in range(1 + max_restarts)], "03.3",
            "`counts` is not the list of restart counts the file recorded, one per start.",
            "append `os.environ[\"TORCHELASTIC_RESTART_COUNT\"]` and a newline each time; delete the file "
            "before launching; read it back with `.read_text().split()`.")
    require(isinstance(caught, WorkerFailed), "03.3", "`caught` is not the WorkerFailed exception.",
            "`except WorkerFailed as failure: caught = failure`.")
    require(caught.exitcode == 3, "03.3", "the worker did not exit with code 3.", "end the script with `sys.exit(3)`.")
    correct("03.3")


# --- 04 DDP fundamentals -------------------------------------------------------------------------

def check_04_1(unused) -> None:
    __tracebackhide__ = True
    given("04.1", unused=unused)
    # the worker's head_b is an nn.Linear that the forward never calls
    heads = {f"head_b.{n}" for n, _ in torch.nn.Linear(10, 5).named_parameters()}
    require(isinstance(unused, list | tuple | set) and set(unused) == heads, "04.1",
            "`unused` is not the set of parameter names that the INFO error lists.",
            "catch WorkerFailed, find the line starting with \"Parameters which\" in `.traceback_tail`, "
            "and split the names after the colon at \", \".")
    correct("04.1")


def _grads_of(model, loss) -> list[torch.Tensor]:
    return [g.detach() for g in torch.autograd.grad(loss, list(model.parameters()))]


def _max_diff(a, b) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))


def check_04_2(ddp_like, weighted, model, x, y) -> None:
    __tracebackhide__ = True
    given("04.2", ddp_like=ddp_like, weighted=weighted)
    mse = torch.nn.functional.mse_loss
    full = _grads_of(model, mse(model(x), y))
    n = len(full)
    for name, value in (("ddp_like", ddp_like), ("weighted", weighted)):
        require(isinstance(value, list | tuple) and len(value) == n, "04.2",
                f"`{name}` is not a list of one gradient tensor per parameter ({n}).",
                "use `grads(model)` (ddp_helpers.checks) after each backward.")
    g0, g1 = _grads_of(model, mse(model(x[:6]), y[:6])), _grads_of(model, mse(model(x[6:]), y[6:]))
    require(_max_diff(ddp_like, [(a + b) / 2 for a, b in zip(g0, g1, strict=True)]) <= ATOL, "04.2",
            f"`ddp_like` is not the plain average of the two shards' gradients (atol {ATOL}).",
            "rank 0 has samples 0-5, rank 1 samples 6-7, each with the mean loss of its own samples.")
    require(_max_diff(weighted, full) <= ATOL, "04.2",
            f"`weighted` does not equal the gradient of the mean loss over all 8 samples (atol {ATOL}).",
            "DDP still divides by the world size: weight each rank's mean by its share of the samples times 2.")
    correct("04.2")


def _reference_buckets(names_and_bytes, cap, first):
    buckets, current, size = [], [], 0
    for name, nbytes in names_and_bytes:
        current.append(name)
        size += nbytes
        if size >= (first if not buckets else cap):
            buckets.append(current)
            current, size = [], 0
    return buckets + ([current] if current else [])


def check_04_3(predict_buckets, arrival, recorded) -> None:
    __tracebackhide__ = True
    given("04.3", predict_buckets=predict_buckets)
    _callable("04.3", "predict_buckets", predict_buckets)
    cases = [([("a", 3), ("b", 5), ("c", 2), ("d", 9)], 6, 4), ([("a", 10)], 4, 4), ([("a", 1), ("b", 1)], 8, 1),
             ([("a", 4), ("b", 4), ("c", 4)], 8, 100)]
    for items, cap, first in cases:
        got = predict_buckets(items, cap, first)
        require(isinstance(got, list | tuple) and [list(b) for b in got] == _reference_buckets(items, cap, first),
                "04.3",
                f"predict_buckets({items}, {cap}, {first}) is wrong.",
                "a bucket closes as soon as its size reaches the cap (>=), the first bucket uses first_cap_bytes, "
                "and a last partly filled bucket counts too.")
    mib = 2**20
    caps = {"None": (25 * mib, mib), "0.05": (0.05 * mib,) * 2, "0.001": (0.001 * mib,) * 2}
    for cap, (cap_bytes, first) in caps.items():
        require(predict_buckets(arrival, cap_bytes, first) == recorded["buckets"][cap][1], "04.3",
                f"the prediction for bucket_cap_mb={cap} differs from the buckets the worker recorded.",
                "walk the parameters in reverse order of model.named_parameters(); the default cap is 25 MiB "
                "with a first bucket of 1 MiB.")
    correct("04.3")


# --- 05 checkpoints ------------------------------------------------------------------------------

def check_05_1(ex1, reference) -> None:
    __tracebackhide__ = True
    given("05.1", ex1=ex1)
    require(isinstance(ex1, torch.nn.Module), "05.1", "`ex1` is not a model.", "`ex1 = ToyModel()`, then load.")
    state = ex1.state_dict()
    require(set(state) == set(reference), "05.1", "`ex1`'s parameter names differ from the plain model's.",
            "strip the prefix \"module.\" (with the dot) before `load_state_dict`.")
    require(all(torch.equal(state[k], reference[k]) for k in reference), "05.1",
            "`ex1`'s weights differ from module_state_dict.pt.",
            "load runs/05_checkpoints/save_load/ddp_state_dict.pt into it, not a fresh model's weights.")
    correct("05.1")


def check_05_2(ns_file, dict_file) -> None:
    __tracebackhide__ = True
    import argparse

    given("05.2", ns_file=ns_file, dict_file=dict_file)
    for name, path in (("ns_file", ns_file), ("dict_file", dict_file)):
        require(Path(path).is_file(), "05.2", f"`{name}` is not a saved file.", "save it with torch.save first.")
    try:
        torch.load(ns_file, weights_only=True)
        refused = False
    except pickle.UnpicklingError:
        refused = True
    require(refused, "05.2", "`ns_file` loads with weights_only=True, so it holds no Namespace.",
            "save `{\"model\": ..., \"args\": argparse.Namespace(lr=0.1, epochs=3)}`.")
    with torch.serialization.safe_globals([argparse.Namespace]):
        args = torch.load(ns_file, weights_only=True).get("args")
    require(getattr(args, "lr", None) == 0.1, "05.2", "the Namespace in `ns_file` does not have lr == 0.1.",
            "save the colleague's `argparse.Namespace(lr=0.1, epochs=3)`.")
    plain = torch.load(dict_file, weights_only=True).get("args")
    require(isinstance(plain, dict) and plain.get("lr") == 0.1, "05.2",
            "`dict_file`'s \"args\" is not a plain dict with lr == 0.1.", "save `vars(args)` instead of the Namespace.")
    correct("05.2")


def check_05_3(save_rotating, latest) -> None:
    __tracebackhide__ = True
    given("05.3", save_rotating=save_rotating, latest=latest)
    _callable("05.3", "save_rotating", save_rotating)
    _callable("05.3", "latest", latest)
    for keep, epochs in ((2, range(5)), (3, range(12))):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "rotating"
            for epoch in epochs:
                save_rotating({"epoch_next": epoch + 1}, folder, epoch, keep=keep)
            names = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
            require(names == [f"snapshot_{e:04d}.pt" for e in list(epochs)[-keep:]], "05.3",
                    f"after saving epochs {epochs.start}..{epochs.stop - 1} with keep={keep} the folder does not "
                    f"hold exactly the newest {keep} snapshots.",
                    "name files snapshot_{epoch:04d}.pt, write with atomic_save (it makes no folder: mkdir first), "
                    "then delete the oldest by sorted name.")
            newest = latest(folder)
            require(newest is not None and Path(newest).name == f"snapshot_{epochs.stop - 1:04d}.pt", "05.3",
                    "`latest(folder)` does not return the newest snapshot.", "zero-padded names sort by epoch.")
            require(torch.load(newest, weights_only=True) == {"epoch_next": epochs.stop}, "05.3",
                    "the newest snapshot does not hold the object saved last.", "save `obj` itself.")
    correct("05.3")


def check_05_4(fixed_run, script="scripts/05_rank0_collective_fixed.py") -> None:
    __tracebackhide__ = True
    given("05.4", fixed_run=fixed_run)
    _launched("05.4", "fixed_run", fixed_run, 2)
    mean = sum(1.0 + r for r in range(2)) / 2
    rank0 = [x for line in fixed_run.stdout[0] for x in _numbers(line)]
    require(any(math.isclose(x, mean, rel_tol=1e-6) for x in rank0), "05.4",
            "rank 0 did not print the mean loss over the ranks.",
            "all-reduce the loss on every rank, divide by the world size, print only on rank 0.")
    require(not any(_numbers(line) for line in fixed_run.stdout[1]), "05.4",
            "rank 1 printed a loss: only rank 0 should \"save\".", "keep the print inside `if ctx.rank == 0:`.")
    require(all(any("barrier" in line for line in fixed_run.stdout[r]) for r in range(2)), "05.4",
            "not every rank printed its line after the barrier.", "call `dist.barrier()` on every rank, then print.")
    correct("05.4")


# --- 06 mixed precision --------------------------------------------------------------------------

def _scales(pattern, init_scale=64.0, growth_interval=2) -> list[float]:
    param = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([param], lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    out = []
    for bad in pattern:
        optimizer.zero_grad()
        scaler.scale(param.sum()).backward()
        if bad is not None:
            param.grad.fill_(bad)
        scaler.step(optimizer)
        scaler.update()
        out.append(scaler.get_scale())
    return out


def check_06_1(by_hand, measured) -> None:
    __tracebackhide__ = True
    given("06.1", by_hand=by_hand, measured=measured)
    truth = _scales([None, float("inf"), None, None, None, float("nan"), None, None])
    require(len(by_hand) == len(truth), "06.1", f"`by_hand` should hold {len(truth)} scales, one per update().",
            "one entry per step of the pattern.")
    require([float(s) for s in by_hand] == truth, "06.1", "your hand-worked scales are not what GradScaler does.",
            "an inf/nan step halves the scale and resets the clean-step count; growth_interval clean steps in a "
            "row double it.")
    require([float(s) for s in measured] == truth, "06.1",
            "`measured` does not hold a fresh GradScaler's scale after each update().",
            "create the scaler with init_scale=64, growth_interval=2, and record `scaler.get_scale()` per step.")
    correct("06.1")


def check_06_2(k_small, k_large) -> None:
    __tracebackhide__ = True
    given("06.2", k_small=k_small, k_large=k_large)
    tiny = torch.finfo(torch.float16).tiny

    def cast(value, k):
        return torch.tensor(value * 2.0**k).half()

    truth_small = next(k for k in range(64) if cast(1e-9, k).item() >= tiny)
    truth_large = max(k for k in range(64) if not torch.isinf(cast(10.0, k)))
    require(k_small == truth_small, "06.2", "`k_small` is not the smallest exponent that makes 1e-9 a normal float16.",
            "compare the cast value with `torch.finfo(torch.float16).tiny` (normal), not with 0 (subnormal).")
    require(k_large == truth_large, "06.2", "`k_large` is not the largest exponent for which 10 * 2**k stays finite.",
            "cast `10.0 * 2.0**k` to float16 and test `torch.isinf`.")
    correct("06.2")


def check_06_3(net, full, acc_scaler) -> None:
    __tracebackhide__ = True
    given("06.3", net=net, full=full, acc_scaler=acc_scaler)
    params = list(net.parameters())
    require(all(p.grad is not None for p in params), "06.3", "`net` has no gradients.",
            "call `acc_scaler.scale(loss / 4).backward()` for each micro-batch.")
    require(all(torch.allclose(p.grad, g, atol=ATOL) for p, g in zip(params, full, strict=True)), "06.3",
            f"the unscaled accumulated gradients differ from the full-batch gradient (atol {ATOL}).",
            "divide each micro-batch loss by the number of micro-batches and call `unscale_` before comparing.")
    require(acc_scaler.state_dict().get("_growth_tracker") == 1, "06.3",
            "the scaler's clean-step count is not one per optimizer step.",
            "call unscale_/step/update once, after the last micro-batch, not per micro-batch.")
    correct("06.3")


def check_06_4(bf16) -> None:
    __tracebackhide__ = True
    given("06.4", bf16=bf16)
    require(isinstance(bf16, dict) and "recipe" in bf16, "06.4", "`bf16` is not the worker's rank-0 JSON record.",
            "`json.load(open(\"<your --out folder>/rank0.json\"))`.")
    require(bf16["recipe"].startswith("cpu: autocast bfloat16"), "06.4",
            "the run did not use the default CPU recipe.", "pass `env={\"AMP_DTYPE\": \"\"}` to the launch.")
    require(bf16.get("saved_scaler") == {} and bf16.get("resumed_equal") is True, "06.4",
            "the saved scaler state or the resume comparison is not what the default recipe gives.",
            "run with `--overflow-step -1` and read `saved_scaler` and `resumed_equal`.")
    correct("06.4")


# --- 07 SyncBN, evaluation, early stopping -------------------------------------------------------

def check_07_1(shards, mean_of_means, pooled) -> None:
    __tracebackhide__ = True
    given("07.1", shards=shards, mean_of_means=mean_of_means, pooled=pooled)
    sizes = [len(s) for s in shards]
    require(sizes == [3, 5], "07.1", f"the shards hold {sizes} values, the exercise asks for 3 and 5.",
            "split an 8-value tensor into its first 3 and last 5 rows.")
    truth = torch.cat(list(shards)).double().mean().item()
    means = [s.double().mean().item() for s in shards]
    require(math.isclose(float(pooled), truth, abs_tol=ATOL), "07.1",
            f"`pooled` is not the mean of all 8 values (atol {ATOL}).", "combine sums: sum(mean * count) / sum(count).")
    require(math.isclose(float(mean_of_means), sum(means) / 2, abs_tol=ATOL), "07.1",
            f"`mean_of_means` is not the plain average of the two shard means (atol {ATOL}).",
            "average the two means from batch_stats, ignoring the counts.")
    require(abs(sum(means) / 2 - truth) > 1e-3, "07.1",
            "with your values the two averages agree, so they show nothing.",
            "use values whose two shards have clearly different means.")
    correct("07.1")


def check_07_2(decisions, history) -> None:
    __tracebackhide__ = True
    given("07.2", decisions=decisions)
    from ddp_helpers.evaluation import EarlyStopping

    rule = EarlyStopping(patience=3, mode="min")
    truth = [rule.step(h["loss"]) for h in history]
    require(list(decisions) == truth, "07.2",
            "`decisions` is not what EarlyStopping(patience=3, mode=\"min\") returns epoch by epoch.",
            "feed each recorded epoch's validation loss (not accuracy) to one fresh rule, in order.")
    correct("07.2")


def check_07_3(res3, test_size) -> None:
    __tracebackhide__ = True
    given("07.3", res3=res3)
    require(isinstance(res3, list | tuple) and len(res3) == 3, "07.3", "`res3` is not the three ranks' JSON records.",
            "launch with nproc=3 and load runs/<your out>/rank{r}.json for r in 0, 1, 2.")
    padded = len(DistributedSampler(range(test_size), num_replicas=3, rank=0)) * 3
    require(all(r["exact"]["count"] == test_size for r in res3), "07.3",
            "the exact evaluation does not count every test image exactly once.", "read `exact` of each record.")
    require(all(r["padded"]["count"] == padded for r in res3), "07.3",
            "the padded count is not what DistributedSampler gives for 3 ranks.", "read `padded` of each record.")
    require(res3[0]["exact"] == res3[1]["exact"] == res3[2]["exact"], "07.3",
            "the ranks disagree on the exact result.", "were the three files written by the same run?")
    correct("07.3")


def check_07_4(parts, pooled_acc, single) -> None:
    __tracebackhide__ = True
    given("07.4", parts=parts, pooled_acc=pooled_acc)
    require(isinstance(parts, list | tuple) and len(parts) == 3, "07.4", "`parts` is not one evaluation per shard.",
            "one `evaluate(...)` per rank r in 0, 1, 2.")
    require(sum(p.count for p in parts) == single.count, "07.4", "the shards do not cover the test set exactly once.",
            "use UnpaddedDistributedSampler(test_ds, num_replicas=3, rank=r).")
    require(math.isclose(float(pooled_acc), single.accuracy, abs_tol=1e-12), "07.4",
            "`pooled_acc` is not the exact accuracy.", "pool the correct counts and the counts, then divide.")
    correct("07.4")


# --- 08 capstone ---------------------------------------------------------------------------------

def check_08_1(log_p, test_p, epochs) -> None:
    __tracebackhide__ = True
    given("08.1", log_p=log_p, test_p=test_p)
    log, test = log_p, test_p
    require(isinstance(log, list) and log and "improved" in log[0], "08.1", "`log_p` is not the run's epoch log.",
            "`log_p, test_p = load_run(\"patience1\")` after launching with --out runs/08_capstone/patience1.")
    first_flat = next((row["epoch"] for row in log if not row["improved"]), None)
    require(len(log) == (first_flat + 1 if first_flat is not None else epochs), "08.1",
            "the run did not end at its first epoch without improvement.", "launch with env {..., \"PATIENCE\": \"1\"}.")
    require(test["best_epoch"] == max(r["epoch"] for r in log if r["improved"]), "08.1",
            "the test evaluation did not use the best epoch's weights.", "read `best_epoch` of the test record.")
    correct("08.1")


def check_08_2(recall, true_c, pred_c, confusion) -> None:
    __tracebackhide__ = True
    given("08.2", recall=recall, true_c=true_c, pred_c=pred_c)
    truth = confusion.diag().double() / confusion.sum(1).double()
    got = torch.as_tensor(recall, dtype=torch.float64).flatten()
    require(got.shape == truth.shape and torch.allclose(got, truth, atol=ATOL), "08.2",
            f"`recall` is not correct / true count per class (atol {ATOL}).",
            "rows of the confusion matrix are the true classes: diag / row sums.")
    off = confusion.clone()
    off.fill_diagonal_(0)
    require(true_c != pred_c and off[int(true_c), int(pred_c)] == off.max(), "08.2",
            "(true_c, pred_c) is not a largest off-diagonal entry.",
            "zero the diagonal, take argmax and turn the flat index into (row, column) with divmod.")
    correct("08.2")


def check_08_3(predictions_fp32, changed, acc_fp32, model, images, labels, predictions) -> None:
    __tracebackhide__ = True
    given("08.3", predictions_fp32=predictions_fp32, changed=changed, acc_fp32=acc_fp32)
    with torch.no_grad():
        truth = model(images).argmax(1)
    require(torch.equal(torch.as_tensor(predictions_fp32), truth), "08.3",
            "`predictions_fp32` are not the float32 predictions of the best weights.",
            "run the model outside autocast, under torch.no_grad(), and take argmax(1).")
    require(int(changed) == int((truth != predictions).sum()), "08.3",
            "`changed` does not count the predictions that differ from the bf16 ones.", "compare with `predictions`.")
    require(math.isclose(float(acc_fp32), (truth == labels).double().mean().item(), abs_tol=ATOL), "08.3",
            f"`acc_fp32` is not the float32 accuracy (atol {ATOL}).", "the mean of (predictions_fp32 == labels).")
    correct("08.3")


# --- 09 multi-node and debugging -----------------------------------------------------------------

def check_09_1(group_rank, local_rank, world_size) -> None:
    __tracebackhide__ = True
    given("09.1", group_rank=group_rank, local_rank=local_rank, world_size=world_size)
    nodes, per_node, rank = 3, 8, 17
    require(world_size == nodes * per_node, "09.1", "`world_size` is wrong.", "every process of every node counts.")
    require((group_rank, local_rank) == divmod(rank, per_node), "09.1",
            "(`group_rank`, `local_rank`) do not satisfy RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK "
            "with 0 <= LOCAL_RANK < 8.", "read row 17 of `torchrun_env(3, 8)`.")
    correct("09.1")


def check_09_2(three_env, expected) -> None:
    __tracebackhide__ = True
    given("09.2", three_env=three_env)
    require(isinstance(three_env, list) and len(three_env) == 3, "09.2",
            "`three_env` is not one parsed environment per process (3).",
            "launch with nproc=1, nnodes=3 and `parse_env` each rank's first line.")
    require(three_env == expected, "09.2", "the launched run's environment differs from torchrun_env(3, 1).",
            "compare every key; did you pass nnodes=3 and nproc=1?")
    correct("09.2")


def check_09_3(shapes, shape_message) -> None:
    __tracebackhide__ = True
    given("09.3", shapes=shapes, shape_message=shape_message)
    require("Detected mismatch between collectives" in shape_message, "09.3",
            "`shape_message` is not the DETAIL mismatch error.",
            "launch with env TORCH_DISTRIBUTED_DEBUG=DETAIL and read the saved error of a rank.")
    named = sorted(set(re.findall(r"TensorShape=\[(\d+)\]", shape_message)))
    require(len(named) == 2 and _as_int_list(shapes) == _as_int_list(named), "09.3",
            "`shapes` are not the two tensor shapes the error names.", "look for `TensorShape=[...]` in the message.")
    correct("09.3")


def check_09_4(out, seconds, hang_timeout_s) -> None:
    __tracebackhide__ = True
    given("09.4", seconds=seconds)
    marker = Path(out) / "barrier_passed.txt"
    require(marker.exists(), "09.4", f"{marker} does not exist: rank 0 did not get past monitored_barrier.",
            "call `dist.monitored_barrier(...)` on every rank before the mismatched collectives, then write the file.")
    require(float(seconds) >= float(hang_timeout_s), "09.4",
            "the run ended before the hang's timeout, so the mismatch after the barrier did not hang.",
            "keep the mismatched collectives (rank 0 all_reduce, rank 1 broadcast) after the barrier, in a group "
            "with the HANG_TIMEOUT_S timeout.")
    correct("09.4")


# --- 10 performance ------------------------------------------------------------------------------

def check_10_1(one_message, per_tensor, alpha, beta, model) -> None:
    __tracebackhide__ = True
    given("10.1", one_message=one_message, per_tensor=per_tensor)
    sizes = [p.numel() * p.element_size() for p in model.parameters()]
    require(_same_numbers(one_message, alpha + beta * sum(sizes)), "10.1",
            f"`one_message` is not the alpha-beta time of one message of all gradients (rel. tol. {REL_TOL}).",
            "alpha + beta * (total bytes); float32 gradients have 4 bytes per value.")
    require(_same_numbers(per_tensor, sum(alpha + beta * b for b in sizes)), "10.1",
            f"`per_tensor` is not the time of one message per parameter tensor (rel. tol. {REL_TOL}).",
            "each tensor pays its own alpha.")
    correct("10.1")


def _reference_count(nbytes, cap):
    buckets, size = 0, 0
    for b in nbytes:
        size += b
        if size >= cap:
            buckets, size = buckets + 1, 0
    return buckets + (size > 0)


def check_10_2(predict_buckets, predicted_buckets, recorded) -> None:
    __tracebackhide__ = True
    given("10.2", predict_buckets=predict_buckets, predicted_buckets=predicted_buckets)
    _callable("10.2", "predict_buckets", predict_buckets)
    for nbytes, cap in (([3, 5, 2, 9], 6), ([10], 4), ([1, 1], 8), ([4, 4, 4], 8)):
        require(predict_buckets(nbytes, cap) == _reference_count(nbytes, cap), "10.2",
                f"predict_buckets({nbytes}, {cap}) is wrong.",
                "close a bucket when its size reaches the cap (>=) and count a last partly filled one.")
    require(dict(predicted_buckets) == dict(recorded), "10.2",
            "`predicted_buckets` differs from the counts the worker recorded.",
            "walk the parameters in reversed(list(model.parameters())) order, caps in MiB (bench.MiB).")
    correct("10.2")


def check_10_3(crossover, alpha, beta) -> None:
    __tracebackhide__ = True
    given("10.3", crossover=crossover)
    require(_same_numbers(alpha + beta * crossover, 2 * alpha), "10.3",
            f"at `crossover` bytes the bandwidth term is not equal to the latency (rel. tol. {REL_TOL}).",
            "solve beta * S = alpha for S.")
    correct("10.3")


# --- 11 sharding ---------------------------------------------------------------------------------

def _reference_partition(sizes, world_size):
    ranks, totals = [[] for _ in range(world_size)], [0] * world_size
    for size in sorted(sizes, reverse=True):
        r = totals.index(min(totals))
        ranks[r].append(size)
        totals[r] += size
    return ranks


def check_11_1(predict_partition, found, recorded) -> None:
    __tracebackhide__ = True
    given("11.1", predict_partition=predict_partition, found=found)
    _callable("11.1", "predict_partition", predict_partition)
    from ddp_helpers.sharding import make_stack

    def sizes_of(widths):
        return [p.numel() for p in make_stack(widths).parameters()]

    for sizes, n in (([5, 9, 1, 7, 3], 2), ([4, 4, 4, 4], 3), ([100, 1, 1, 1], 2), ([2, 8, 6], 4)):
        require(predict_partition(sizes, n) == _reference_partition(sizes, n), "11.1",
                f"predict_partition({sizes}, {n}) is wrong.",
                "largest first; each goes to the first rank with the smallest total so far.")
    for key, widths in (("partition", (32, 64, 64, 8)), ("partition_even", (32, 32, 32))):
        require(predict_partition(sizes_of(widths), 2) == recorded[key], "11.1",
                f"your partition of make_stack{widths} differs from the recorded `{key}`.", "see the small cases above.")
    found = tuple(found)
    pairs = list(zip(found, found[1:], strict=False))
    require(len(set(pairs)) == len(pairs) > 0, "11.1", "`found` has two identical layers.",
            "every (in, out) pair of consecutive widths must differ.")
    require(len({sum(r) for r in _reference_partition(sizes_of(found), 2)}) == 1, "11.1",
            "the partition of `found` over 2 ranks is not exactly even.", "search with itertools.product.")
    correct("11.1")


def check_11_2(per_gpu, smallest_stage) -> None:
    __tracebackhide__ = True
    given("11.2", per_gpu=per_gpu, smallest_stage=smallest_stage)
    from ddp_helpers.sharding import zero_formula

    truth = [sum(zero_formula(7_500_000_000, 64, s, bytes_per_value=2, moments=6).values()) / 1e9 for s in range(4)]
    require(len(per_gpu) == 4 and all(math.isclose(float(a), b, rel_tol=1e-6) for a, b in zip(per_gpu, truth,
                                                                                            strict=False)),
            "11.2", "`per_gpu` is not the four stages' per-GPU memory in GB (rel. tol. 1e-6).",
            "sum the dict zero_formula returns (bytes_per_value=2, moments=6) and divide by 1e9 (GB, not GiB).")
    require(smallest_stage == next(s for s, gb in enumerate(truth) if gb <= 32), "11.2",
            "`smallest_stage` is not the smallest stage that fits in 32 GB.", "the first stage whose total is <= 32.")
    correct("11.2")


def check_11_3(predicted, model, recorded) -> None:
    __tracebackhide__ = True
    given("11.3", predicted=predicted)
    layer = [4 * sum(p.numel() for p in m.parameters()) for m in model if isinstance(m, torch.nn.Linear)]
    truth = {"forward_bytes": {"all_gather": sum(layer)},
             "backward_bytes": {"all_gather": sum(layer), "reduce_scatter": sum(layer)}}
    require(isinstance(predicted, dict) and set(predicted) == set(truth), "11.3",
            "`predicted` should have the keys \"forward_bytes\" and \"backward_bytes\".",
            "each maps a collective's name to its payload bytes.")
    require(predicted == truth and all(recorded[k] == v for k, v in predicted.items()), "11.3",
            "the predicted payloads differ from what the worker counted.",
            "with reshard_after_forward=True the backward gathers every layer again; gradients are reduce-scattered.")
    correct("11.3")


# --- 12 DTensor and tensor parallelism -----------------------------------------------------------

def check_12_1(partials, dense, x, tol) -> None:
    __tracebackhide__ = True
    given("12.1", partials=partials)
    require(isinstance(partials, list | tuple) and len(partials) == 2, "12.1", "`partials` is not two partial outputs.",
            "one partial output per simulated rank.")
    with torch.no_grad():
        expected = dense(x)
        parts = [torch.as_tensor(p).detach() for p in partials]
        require(parts[0].shape == expected.shape, "12.1", "a partial output does not have the dense output's shape.",
                "multiply the hidden slice by the matching columns of down.weight.")
        require((parts[0] + parts[1] + dense.down.bias - expected).abs().max().item() <= tol, "12.1",
                f"the partials plus down.bias do not equal the dense output (tol {tol}).",
                "rows of `up` (weight and bias) and the same indices as columns of `down`; add down.bias once.")
        require((parts[0] + dense.down.bias - expected).abs().max().item() > 0.1, "12.1",
                "one partial alone already matches the dense output.", "each half must use only its own rows.")
    correct("12.1")


def check_12_2(crossover) -> None:
    __tracebackhide__ = True
    given("12.2", crossover=crossover)
    layers, hidden, seq, nbytes = 24, 2048, 2048, 2
    dp = nbytes * layers * 12 * hidden**2

    def tp(b):
        return layers * 2 * 2 * nbytes * b * seq * hidden

    require(isinstance(crossover, int) and tp(crossover - 1) < dp <= tp(crossover), "12.2",
            "`crossover` is not the smallest micro-batch at which TP moves at least as many bytes as DP.",
            "per layer: 2 blocks x (forward + backward) all-reduces of batch x seq x hidden fp16 values, "
            "against one all-reduce of 12 x hidden^2 fp16 gradients.")
    correct("12.2")


def check_12_3(averaged, dense, x, y, tol) -> None:
    __tracebackhide__ = True
    given("12.3", averaged=averaged)
    mse = torch.nn.functional.mse_loss

    def grad(loss):
        return torch.autograd.grad(loss, [dense.up.weight])[0]

    halves = [grad(mse(dense(a), b, reduction="sum")) for a, b in zip(x.chunk(2), y.chunk(2), strict=True)]
    truth = (halves[0] + halves[1]) / 2
    require(torch.is_tensor(averaged) and averaged.shape == truth.shape, "12.3",
            "`averaged` is not a gradient of `dense.up.weight`.", "average the two halves' gradients of up.weight.")
    require(torch.allclose(averaged, truth, atol=tol), "12.3",
            f"`averaged` is not the average of the two halves' gradients of the sum loss (atol {tol}).",
            "reduction=\"sum\" on each half of 8 samples, then (g0 + g1) / 2.")
    correct("12.3")


CHECKS: dict[str, Callable] = {name[len("check_"):].replace("_", "."): fn for name, fn in sorted(globals().items())
                               if name.startswith("check_") and callable(fn)}


def exercise_ids() -> list[str]:
    """Every checked exercise, e.g. ``["00.1", "00.2", ...]``."""
    return list(CHECKS)


__all__ = ["CheckFailed", "correct", "exercise_ids", "fail", "given", "require", *sorted(
    n for n in globals() if n.startswith("check_"))]

