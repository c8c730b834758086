"""Checks of notebook 11, sharding: ZeRO's partition, ZeRO's memory, FSDP's payloads."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch

from ddp_helpers.exercises.core import (
    Answer,
    Exercise,
    call,
    check,
    integer,
    integer_list,
    keys_among,
    number_list,
    run_json,
    sequence,
    without_zeros,
)
from ddp_helpers.exercises.provenance import lesson_run


def _reference_partition(sizes: Sequence[int], world_size: int) -> list[list[int]]:
    ranks, totals = [[] for _ in range(world_size)], [0] * world_size
    for size in sorted(sizes, reverse=True):
        r = totals.index(min(totals))
        ranks[r].append(size)
        totals[r] += size
    return ranks


def _sizes_of(widths: tuple[int, ...]) -> list[int]:
    from ddp_helpers.sharding import make_stack

    return [p.numel() for p in make_stack(widths).parameters()]


def _ranks(value: object) -> list[list[int]] | None:
    """A partition as each rank's list of sizes (tuples and tensors accepted)."""
    outer = sequence(value)
    if outer is None:
        return None
    inner = [integer_list(r) for r in outer]
    return None if None in inner else inner  # type: ignore[return-value]


RUNS = Path("runs/11_sharding")
ZERO_LAUNCH = "the launch of scripts/11_zero.py (section 1)"
FSDP2_LAUNCH = "the launch of scripts/11_fsdp2.py (section 4)"


def _recorded_partitions(ex: Exercise) -> dict[str, list[list[int]]]:
    """ZeroRedundancyOptimizer's own partitions, as the lesson's launch recorded them."""
    record = run_json(ex, RUNS / "zero/results.json", ZERO_LAUNCH)
    lesson_run(ex, RUNS / "zero", "11_zero.py", ZERO_LAUNCH, nproc=2)
    parts = {key: _ranks(record.get(key)) if isinstance(record, dict) else None
             for key in ("partition", "partition_even")}
    ex.require(None not in parts.values(), f"{RUNS / 'zero/results.json'} holds no partitions.",
               f"run {ZERO_LAUNCH} again, then this check.")
    return parts  # type: ignore[return-value]


@check
def check_11_1(*, predict_partition: Answer[Callable[[Sequence[int], int], list[list[int]]]],
               found: Answer[Sequence[int]]) -> None:
    """The partitions are ZeRO's, read from the lesson's run (not passed by the cell)."""
    ex = Exercise("11.1")
    ex.given(predict_partition=predict_partition, found=found)
    ex.function("predict_partition", predict_partition)
    for sizes, n in (([5, 9, 1, 7, 3], 2), ([4, 4, 4, 4], 3), ([100, 1, 1, 1], 2), ([2, 8, 6], 4)):
        ex.require(_ranks(call(predict_partition, sizes, n)) == _reference_partition(sizes, n),
                   f"predict_partition({sizes}, {n}) is wrong.",
                   "largest first; each goes to the first rank with the smallest total so far.")
    recorded = _recorded_partitions(ex)
    for key, widths in (("partition", (32, 64, 64, 8)), ("partition_even", (32, 32, 32))):
        ex.require(_ranks(call(predict_partition, _sizes_of(widths), 2)) == recorded[key],
                   f"your partition of make_stack{widths} differs from the recorded `{key}`.",
                   "see the small cases above.")
    found = integer_list(found)
    ex.require(found is not None and len(found) >= 2 and all(0 < w <= 4096 for w in found),
               "`found` is not a list of layer widths.", "a tuple of widths, as `make_stack` takes.")
    found = tuple(found)
    pairs = list(zip(found, found[1:], strict=False))
    ex.require(len(set(pairs)) == len(pairs) > 0, "`found` has two identical layers.",
               "every (in, out) pair of consecutive widths must differ.")
    ex.require(len({sum(r) for r in _reference_partition(_sizes_of(found), 2)}) == 1,
               "the partition of `found` over 2 ranks is not exactly even.", "search with itertools.product.")
    ex.correct()


def _per_gpu() -> list[float]:
    from ddp_helpers.sharding import zero_formula

    return [sum(zero_formula(7_500_000_000, 64, s, bytes_per_value=2, moments=6).values()) / 1e9 for s in range(4)]


@check
def check_11_2(*, per_gpu: Answer[Sequence[float]], smallest_stage: Answer[int]) -> None:
    ex = Exercise("11.2")
    ex.given(per_gpu=per_gpu, smallest_stage=smallest_stage)
    truth, got = _per_gpu(), number_list(per_gpu)
    ex.require(got is not None and len(got) == 4 and all(math.isclose(a, b, rel_tol=1e-6)
                                                         for a, b in zip(got, truth, strict=True)),
               "`per_gpu` is not the four stages' per-GPU memory in GB (rel. tol. 1e-6).",
               "sum the dict zero_formula returns (bytes_per_value=2, moments=6) and divide by 1e9 (GB, not GiB).")
    ex.require(integer(smallest_stage) == next(s for s, gb in enumerate(truth) if gb <= 32),
               "`smallest_stage` is not the smallest stage that fits in 32 GB.",
               "the first stage whose total is <= 32.")
    ex.correct()


# the text's names, and other names a learner may give the same thing (core.key_among reads any spelling of each)
PHASES = {"forward_bytes": ("forward", "fwd", "fwd_bytes", "forward_pass", "forward_payload", "forward_pass_bytes"),
          "backward_bytes": ("backward", "bwd", "bwd_bytes", "backward_pass", "backward_payload",
                             "backward_pass_bytes")}
COLLECTIVES = {"all_gather": ("all_gather_into_tensor", "all_gather_base"),  # torch's names of the collectives
               "reduce_scatter": ("reduce_scatter_tensor", "reduce_scatter_base")}


def _payloads(value: object) -> dict[str, dict[str, int]] | None:
    """{phase: {collective: bytes}} with the bytes as ints (numpy and tensor counts accepted), each key in any
    spelling or other name of PHASES and COLLECTIVES (explicit zero entries left out); None when a count is no
    whole number or two keys name the same phase or collective."""
    if not isinstance(value, Mapping) or not all(isinstance(v, Mapping) for v in value.values()):
        return None
    phases = keys_among(value, PHASES)
    inner = {k: keys_among(without_zeros(v), COLLECTIVES) for k, v in (phases or {}).items()}
    if phases is None or None in inner.values():
        return None
    out = {k: {c: integer(b) for c, b in v.items()} for k, v in inner.items()}
    return None if any(None in v.values() for v in out.values()) else out  # type: ignore[return-value]


@check
def check_11_3(*, predicted: Answer[dict[str, dict[str, int]]]) -> None:
    """The model is the worker's (``make_stack()``, section 1's model) and the counted payloads are the ones
    the lesson's launch recorded, read here: the check cell passes neither."""
    ex = Exercise("11.3")
    ex.given(predicted=predicted)
    record = run_json(ex, RUNS / "fsdp2/results.json", FSDP2_LAUNCH)
    lesson_run(ex, RUNS / "fsdp2", "11_fsdp2.py", FSDP2_LAUNCH, nproc=2)
    recorded = record.get("reshard_True") if isinstance(record, dict) else None
    ex.require(isinstance(recorded, Mapping), f"{RUNS / 'fsdp2/results.json'} holds no \"reshard_True\" record.",
               f"run {FSDP2_LAUNCH} again, then this check.")
    from ddp_helpers.sharding import make_stack

    layer = [4 * sum(p.numel() for p in m.parameters()) for m in make_stack() if isinstance(m, torch.nn.Linear)]
    truth = {"forward_bytes": {"all_gather": sum(layer)},
             "backward_bytes": {"all_gather": sum(layer), "reduce_scatter": sum(layer)}}
    got = _payloads(predicted)
    ex.require(got is not None and set(got) == set(truth),
               "`predicted` should have the keys \"forward_bytes\" and \"backward_bytes\".",
               "each maps a collective's name to its payload bytes.")
    ex.require(got == truth and _payloads({k: recorded.get(k) for k in truth}) == truth,
               "the predicted payloads differ from what the worker counted.",
               "with reshard_after_forward=True the backward gathers every layer again; gradients are "
               "reduce-scattered.")
    ex.correct()
