"""Checks of notebook 15, expert parallelism."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from ddp_helpers.exercises.core import Answer, Exercise, check, integer, integer_list, run_json
from ddp_helpers.exercises.provenance import lesson_run

# Exercise 1's batch and router, as the exercise states them (the check rebuilds them, never takes them)
DIM, HIDDEN, EXPERTS, TOKENS_1 = 8, 16, 4, 64


def _dropped_1() -> tuple[int, list[int]]:
    """Capacity and dropped tokens of exercise 1, from the definition: top-1 by the router's scores, each
    expert keeps its first ``cap`` tokens in token order."""
    g = torch.Generator().manual_seed(7)
    x = torch.randint(-4, 5, (TOKENS_1, DIM), generator=g) / 4           # experts.tokens(64, DIM, seed=7)
    g = torch.Generator().manual_seed(3)
    router = torch.randint(-4, 5, (DIM, EXPERTS), generator=g) / 8       # MoE(DIM, HIDDEN, EXPERTS, seed=3).router
    choice = (x @ router).argmax(dim=1).tolist()
    cap = math.ceil(1.0 * TOKENS_1 * 1 / EXPERTS)
    seen = [0] * EXPERTS
    dropped = []
    for t, e in enumerate(choice):
        seen[e] += 1
        if seen[e] > cap:
            dropped.append(t)
    return cap, dropped


@check
def check_15_1(*, cap: Answer[int], dropped: Answer[list[int]]) -> None:
    ex = Exercise("15.1")
    ex.given(cap=cap, dropped=dropped)
    true_cap, true_dropped = _dropped_1()
    ex.require(integer(cap) == true_cap, "`cap` is not the number of slots per expert.",
               "C = ceil(capacity factor x tokens x k / experts), rounded up, with k = 1 here.")
    got = integer_list(dropped)
    ex.require(got is not None, "`dropped` is not a list of token indices.",
               "give the indices (whole numbers) of the dropped tokens, as a list.")
    ex.require(sorted(got) == got, "`dropped` is not in increasing order.", "sort the indices from small to large.")
    ex.require(len(got) == len(true_dropped), "`dropped` does not hold as many tokens as the capacity drops.",
               "each expert keeps at most `cap` tokens; count, per expert, the tokens routed to it beyond that.")
    ex.require(got == true_dropped, "`dropped` holds the wrong tokens.",
               "an expert keeps the *first* `cap` of its tokens in token order (its queue), and drops the later "
               "ones; choose each token's expert by the argmax of its router scores.")
    ex.correct()


# Exercise 2: 64 experts, dim 4096, hidden 14336, bf16, ep = 16, top-2, capacity factor 1.25, 4096 tokens
E2, DIM2, HIDDEN2, EP2, TOP_K2, FACTOR2, TOKENS2, BYTES2 = 64, 4096, 14336, 16, 2, 1.25, 4096, 2


def _expert_bytes_2() -> int:
    return E2 // EP2 * 2 * DIM2 * HIDDEN2 * BYTES2


def _dispatch_sent_2() -> int:
    slots = math.ceil(FACTOR2 * TOKENS2 * TOP_K2 / E2)
    return (EP2 - 1) * (E2 // EP2) * slots * DIM2 * BYTES2


@check
def check_15_2(*, expert_bytes: Answer[int], dispatch_sent: Answer[int]) -> None:
    ex = Exercise("15.2")
    ex.given(expert_bytes=expert_bytes, dispatch_sent=dispatch_sent)
    got_params, got_sent = integer(expert_bytes), integer(dispatch_sent)
    ex.require(got_params is not None and got_sent is not None, "an answer is not a whole number of bytes.",
               "bytes are whole numbers; compute them with integers (// and math.ceil).")
    ex.require(got_params == _expert_bytes_2(), "`expert_bytes` is not the expert parameters one rank holds.",
               "each rank holds experts / ep experts, each of two matrices (dim x hidden and hidden x dim), "
               "2 bytes a value in bf16.")
    ex.require(got_sent != 2 * _dispatch_sent_2(),
               "`dispatch_sent` counts two all-to-alls.", "one dispatch only: the combine is a second all-to-all.")
    ex.require(got_sent == _dispatch_sent_2(), "`dispatch_sent` is not what one rank sends in one padded dispatch.",
               "C = ceil(factor x tokens x k / experts) slots per expert; the rank sends C rows of dim values to "
               "every expert on the *other* ranks (its own stay), 2 bytes a value.")
    ex.correct()


TRAFFIC_RUN = Path("runs/15_experts/traffic/results.json")
TRAFFIC_LAUNCH = "the launch of scripts/15_traffic.py (section 3)"


def _flow(ex: Exercise) -> list[list[int]]:
    """The uneven dispatch's token flow per rank, as the lesson's launch recorded it (read here)."""
    runs = run_json(ex, TRAFFIC_RUN, TRAFFIC_LAUNCH)
    lesson_run(ex, TRAFFIC_RUN.parent, "15_traffic.py", TRAFFIC_LAUNCH, nproc=4)
    try:
        flow = [[int(n) for n in r["uneven"]["flow"]] for r in runs]
    except (KeyError, TypeError, ValueError):
        flow = []
    if not flow or any(len(row) != len(flow) for row in flow):
        ex.fail(f"{TRAFFIC_RUN} holds no token flow.", f"run {TRAFFIC_LAUNCH} again, then this check.")
    return flow


@check
def check_15_3(*, off_rank: Answer[list[int]], busiest: Answer[int]) -> None:
    ex = Exercise("15.3")
    ex.given(off_rank=off_rank, busiest=busiest)
    flow = _flow(ex)
    got = integer_list(off_rank)
    ex.require(got is not None and len(got) == len(flow), "`off_rank` is not one whole number per rank.",
               "a list with one count per rank, rank 0 first.")
    ex.require(got == [sum(row) - row[i] for i, row in enumerate(flow)],
               "`off_rank` is not what each rank's dispatch sent to other ranks in the run.",
               "rank i's row of the flow matrix is what it sent to each rank; leave out the diagonal (its own).")
    received = [sum(row[j] for row in flow) for j in range(len(flow))]
    ex.require(integer(busiest) in [j for j, n in enumerate(received) if n == max(received)],
               "`busiest` is not the rank that received the most rows.",
               "a rank receives a column of the flow matrix, its own rows included.")
    ex.correct()
