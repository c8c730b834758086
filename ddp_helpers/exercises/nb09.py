"""Checks of notebook 09, multi-node launches and debugging."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ddp_helpers.exercises.core import Answer, Exercise, as_int_list, check


@check
def check_09_1(*, group_rank: Answer[int], local_rank: Answer[int], world_size: Answer[int]) -> None:
    ex = Exercise("09.1")
    ex.given(group_rank=group_rank, local_rank=local_rank, world_size=world_size)
    nodes, per_node, rank = 3, 8, 17
    ex.require(world_size == nodes * per_node, "`world_size` is wrong.", "every process of every node counts.")
    ex.require((group_rank, local_rank) == divmod(rank, per_node),
               "(`group_rank`, `local_rank`) do not satisfy RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK "
               "with 0 <= LOCAL_RANK < 8.", "read row 17 of `torchrun_env(3, 8)`.")
    ex.correct()


@check
def check_09_2(*, three_env: Answer[list[dict[str, str]]], expected: list[dict[str, str]]) -> None:
    ex = Exercise("09.2")
    ex.given(three_env=three_env)
    ex.require(isinstance(three_env, list) and len(three_env) == 3,
               "`three_env` is not one parsed environment per process (3).",
               "launch with nproc=1, nnodes=3 and `parse_env` each rank's first line.")
    ex.require(three_env == expected, "the launched run's environment differs from torchrun_env(3, 1).",
               "compare every key; did you pass nnodes=3 and nproc=1?")
    ex.correct()


@check
def check_09_3(*, shapes: Answer[Sequence[int]], shape_message: Answer[str]) -> None:
    ex = Exercise("09.3")
    ex.given(shapes=shapes, shape_message=shape_message)
    ex.require("Detected mismatch between collectives" in shape_message,
               "`shape_message` is not the DETAIL mismatch error.",
               "launch with env TORCH_DISTRIBUTED_DEBUG=DETAIL and read the saved error of a rank.")
    named = sorted(set(re.findall(r"TensorShape=\[(\d+)\]", shape_message)))
    ex.require(len(named) == 2 and as_int_list(shapes) == as_int_list(named),
               "`shapes` are not the two tensor shapes the error names.",
               "look for `TensorShape=[...]` in the message.")
    ex.correct()


@check
def check_09_4(*, out: str | Path, seconds: Answer[float], hang_timeout_s: float) -> None:
    ex = Exercise("09.4")
    ex.given(seconds=seconds)
    marker = Path(out) / "barrier_passed.txt"
    ex.require(marker.exists(), f"{marker} does not exist: rank 0 did not get past monitored_barrier.",
               "call `dist.monitored_barrier(...)` on every rank before the mismatched collectives, then write "
               "the file.")
    ex.require(float(seconds) >= float(hang_timeout_s),
               "the run ended before the hang's timeout, so the mismatch after the barrier did not hang.",
               "keep the mismatched collectives (rank 0 all_reduce, rank 1 broadcast) after the barrier, in a group "
               "with the HANG_TIMEOUT_S timeout.")
    ex.correct()
