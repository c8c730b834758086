"""Checks of notebook 01, collectives and the ring all-reduce."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ddp_helpers.exercises.core import Answer, Exercise, call, calls, check, close, number
from ddp_helpers.exercises.provenance import current_launch, prints_no_literal
from ddp_helpers.launch import LaunchResult


@check
def check_01_1(*, gathered: Answer[LaunchResult]) -> None:
    ex = Exercise("01.1")
    ex.given(gathered=gathered)
    tree = ex.tree_of(current_launch(ex, "gathered", gathered, "01_ex_all_gather.py", nproc=3))
    p2p = any(calls(tree, a) and calls(tree, b) for a, b in (("isend", "irecv"), ("send", "recv"))) or \
        bool(calls(tree, "batch_isend_irecv"))
    ex.require(p2p, "the script does not send and receive the pieces itself.",
               "send and receive at each step of the ring's all-gather half, together in one `dist.batch_isend_irecv`.")
    ex.require(calls(tree, "all_gather"), "the script does not compare with `dist.all_gather`.",
               "keep the starter's `dist.all_gather(reference, mine)` and the comparison.")
    prints_no_literal(ex, tree, ["True"], "01_ex_all_gather.py")
    ex.every_rank("gathered", gathered, 3)
    for rank in range(3):
        lines = gathered.stdout[rank]
        ex.require(lines[-1].rstrip().endswith("True"),
                   f"rank {rank}'s last line does not end with `True` (the comparison with dist.all_gather).",
                   "end the script with `print(f\"...: {same}\")` where `same` compares every piece with "
                   "`dist.all_gather`'s; check which chunk you send and which you receive at each step.")
    ex.correct()


def _ring(n: int, s: float, a: float, b: float) -> float:
    return 2 * (n - 1) * a + 2 * (n - 1) / n * s * b


def _tree(n: int, s: float, a: float, b: float) -> float:
    return 2 * math.ceil(math.log2(n)) * (a + s * b)


def _balances(size: float | None, n: int = 64, a: float = 20e-6, b: float = 0.1e-9) -> bool:
    """Both costs are equal at ``size`` bytes (relative tolerance 1e-6: float32 answers too)."""
    return size is not None and size > 0 and math.isclose(_ring(n, size, a, b), _tree(n, size, a, b), rel_tol=1e-6)


@check
def check_01_2(*, t_ring: Answer[Callable[[int, float, float, float], float]],
               t_tree: Answer[Callable[[int, float, float, float], float]], crossover: Answer[float]) -> None:
    ex = Exercise("01.2")
    ex.given(t_ring=t_ring, t_tree=t_tree, crossover=crossover)
    ex.function("t_ring", t_ring)
    ex.function("t_tree", t_tree)
    for n, s, a, b in [(64, 1024, 20e-6, 0.1e-9), (64, 100 * 2**20, 20e-6, 0.1e-9), (8, 4096, 5e-6, 1e-9)]:
        ex.require(close(call(t_ring, n, s, a, b), _ring(n, s, a, b)),
                   f"t_ring({n}, {s}, {a}, {b}) does not follow the ring formula.",
                   "2(N-1) latencies plus 2(N-1)/N of the message's bytes times beta.")
        ex.require(close(call(t_tree, n, s, a, b), _tree(n, s, a, b)),
                   f"t_tree({n}, {s}, {a}, {b}) does not follow the tree formula.",
                   "2*ceil(log2 N) messages, each costing alpha + S*beta (math.ceil, math.log2).")
    ex.require(_balances(number(crossover)),
               "at `crossover` bytes the two costs are not equal (relative tolerance 1e-6).",
               "set the two formulas equal and solve the linear equation for S, in bytes.")
    ex.correct()


def _float32_sums() -> tuple[np.float32, np.float32]:
    from ddp_helpers.ring import simulate_ring

    values = [np.float32(v) for v in (1e8, 1.0, -1e8, 1.0)]
    return simulate_ring([[v] * 4 for v in values])[-1][0][0], ((values[0] + values[1]) + values[2]) + values[3]


def _same_float32(value: object, truth: np.float32) -> bool:
    x = number(value)
    return x is not None and np.float32(x) == truth


@check
def check_01_3(*, ring_result: Answer[float], rank_order: Answer[float]) -> None:
    ex = Exercise("01.3")
    ex.given(ring_result=ring_result, rank_order=rank_order)

    truth_ring, truth_order = _float32_sums()
    ex.require(_same_float32(ring_result, truth_ring),
               "`ring_result` is not what simulate_ring gives for chunk 0 (on rank 0, after the last step).",
               "every chunk of rank r holds that rank's float32 value; read states[-1][0][0].")
    ex.require(_same_float32(rank_order, truth_order),
               "`rank_order` is not the float32 sum taken in rank order 0, 1, 2, 3.",
               "add np.float32 values left to right; the exact sum of the real numbers is not the answer.")
    ex.correct()
