"""Checks of notebook 09, multi-node launches and debugging."""

from __future__ import annotations

import ast
import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ddp_helpers.exercises.core import (
    Answer,
    Exercise,
    as_int_list,
    by_rank,
    caller_values,
    calls,
    check,
    flag,
    integer,
    launches_in,
    lesson_folders,
    number,
)
from ddp_helpers.exercises.provenance import launch_of, learner_script, same_file
from ddp_helpers.launch import file_sha256


def _row(rank: int, nodes: int, per_node: int) -> dict[str, int]:
    """What torchrun gives global rank ``rank`` of ``nodes`` nodes of ``per_node`` processes."""
    return {"RANK": rank, "LOCAL_RANK": rank % per_node, "GROUP_RANK": rank // per_node,
            "WORLD_SIZE": nodes * per_node, "LOCAL_WORLD_SIZE": per_node}


def _asked() -> dict[str, int]:
    return _row(17, 3, 8)


@check
def check_09_1(*, group_rank: Answer[int], local_rank: Answer[int], world_size: Answer[int]) -> None:
    ex = Exercise("09.1")
    ex.given(group_rank=group_rank, local_rank=local_rank, world_size=world_size)
    truth = _asked()
    ex.require(integer(world_size) == truth["WORLD_SIZE"], "`world_size` is wrong.",
               "every process of every node counts.")
    ex.require((integer(group_rank), integer(local_rank)) == (truth["GROUP_RANK"], truth["LOCAL_RANK"]),
               "(`group_rank`, `local_rank`) do not satisfy RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK "
               "with 0 <= LOCAL_RANK < 8.", "read row 17 of `torchrun_env(3, 8)`.")
    ex.correct()


def _as_env(entry: object) -> dict[str, int] | None:
    if not isinstance(entry, dict) or any(not isinstance(k, str) for k in entry):
        return None
    out = {k: integer(v) for k, v in entry.items()}  # core.integer reads "3" too
    return None if None in out.values() else out  # type: ignore[return-value]


def _in_rank_order(envs: object) -> list[dict[str, int]] | None:
    """Parsed environments in rank order, whatever order they came in (a list or a dict by rank)."""
    items = list(envs.values()) if isinstance(envs, dict) else by_rank(envs)
    parsed = [_as_env(e) for e in items or []]
    if not parsed or None in parsed or any("RANK" not in e for e in parsed):
        return None
    return sorted(parsed, key=lambda e: e["RANK"])  # type: ignore[arg-type, return-value]


def _current_launches(values: list[object], script: str) -> list[Any]:
    """The launches of the learner's scripts/<script> among ``values`` that ``torchrun`` made in this kernel,
    of the script's content as it is now (a hand-made or copied result, another folder's copy of the
    script, or a run of an older version is left out); a launch failure stands for its launch."""
    mine = learner_script(script)
    found = []
    for value in launches_in(values, script):
        launch = launch_of(value)
        if launch is not None and mine is not None and same_file(launch.script, mine) \
                and launch.sha256 == file_sha256(mine):
            found.append(value)
    return found


def _launched_envs(values: list[object]) -> list[list[dict[str, int]]]:
    """The environments printed by this kernel's launches of the current scripts/09_two_nodes.py among
    ``values``, in rank order."""
    found = []
    for launch in _current_launches(values, "09_two_nodes.py"):
        stdout = getattr(launch, "stdout", None)
        if not isinstance(stdout, dict):
            continue
        try:
            envs = {r: dict(kv.split("=") for kv in lines[0].split()) for r, lines in stdout.items() if lines}
        except ValueError:
            continue
        ordered = _in_rank_order(envs)
        if ordered is not None:
            found.append(ordered)
    return found


@check
def check_09_2(*, three_env: Answer[list[dict[str, str]]]) -> None:
    """The check derives torchrun's environment itself (nothing expected comes from the check cell), and finds
    the launch of scripts/09_two_nodes.py in the notebook's namespace."""
    ex = Exercise("09.2")
    ex.given(three_env=three_env)
    got = _in_rank_order(three_env)
    ex.require(got is not None and len(got) == 3, "`three_env` is not one parsed environment per process (3).",
               "launch with nproc=1, nnodes=3 and `parse_env` each rank's first line.")
    ex.require(got == [_row(r, 3, 1) for r in range(3)],
               "the environments differ from what torchrun gives 3 nodes of 1 process.",
               "compare every key; did you pass nnodes=3 and nproc=1?")
    ex.require(got in _launched_envs(caller_values()),
               "no launch of scripts/09_two_nodes.py in this kernel printed these environments (a result typed "
               "or copied by hand, or a launch of another copy of the script, does not count).",
               "launch it: `three = torchrun(\"scripts/09_two_nodes.py\", nproc=1, nnodes=3, ...)`, then parse "
               "its ranks' first lines.")
    ex.correct()


@check
def check_09_3(*, shapes: Answer[Sequence[int]], shape_message: Answer[str]) -> None:
    ex = Exercise("09.3")
    ex.given(shapes=shapes, shape_message=shape_message)
    ex.require(isinstance(shape_message, str) and "Detected mismatch between collectives" in shape_message,
               "`shape_message` is not the DETAIL mismatch error.",
               "launch with env TORCH_DISTRIBUTED_DEBUG=DETAIL and read the saved error of a rank.")
    named = sorted(set(re.findall(r"TensorShape=\[(\d+)\]", shape_message)))
    ex.require(len(named) == 2 and not isinstance(shapes, str) and as_int_list(shapes) == as_int_list(named),
               "`shapes` are not the two tensor shapes the error names.",
               "look for `TensorShape=[...]` in the message.")
    ex.correct()


SCRIPT_09_4 = "09_barrier_then_mismatch.py"


def _barrier_first(tree: ast.Module) -> bool:
    """A monitored_barrier that every rank runs (no ``if`` around it), before the collectives."""
    inside_if = {id(c) for node in ast.walk(tree) if isinstance(node, ast.If) for c in calls(node, "monitored_barrier")}
    barriers = [c.lineno for c in calls(tree, "monitored_barrier") if id(c) not in inside_if]
    later = [c.lineno for name in ("all_reduce", "broadcast") for c in calls(tree, name)]
    return bool(barriers) and bool(later) and min(barriers) < min(later)


def _launches_09_4(values: list[object]) -> list[Any]:
    """The launches of the barrier script in the notebook (their failures carry the command and the launch)."""
    return launches_in(values, SCRIPT_09_4)


def _hang_s(launch: Any, marker: Path) -> float:
    """How long the launch ran after rank 0 wrote the marker, right after the barrier: the time the workers
    spent in the mismatched collectives and in ending, without the launch's start-up (torchrun, Python's and
    torch's imports, the rendezvous), which on a loaded machine can by itself last longer than the timeout."""
    return launch.ended - marker.stat().st_mtime


def _ran(launch: Any) -> int | None:
    """How many processes a launch ran, from its command: --nproc-per-node times --nnodes."""
    per, nodes = flag(launch.command, "--nproc-per-node"), flag(launch.command, "--nnodes") or "1"
    return int(per) * int(nodes) if per and per.isdigit() and nodes.isdigit() else None


def _out_of(command: str) -> Path | None:
    """The run folder a launch of the barrier script wrote to: the script's first argument."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    at = next((i for i, w in enumerate(words) if w.endswith(".py") and Path(w).name == SCRIPT_09_4), None)
    if at is None or at + 1 >= len(words):
        return None
    out = Path(words[at + 1])
    return out if out.is_absolute() else next((f / out for f in lesson_folders() if (f / out).is_dir()), None)


def _hang_timeout_s(tree: ast.Module) -> float:
    """The timeout of the script's group: a number written in ``timedelta(seconds=...)`` inside its
    ``new_group`` call, else what the lesson passes as HANG_TIMEOUT_S (NB09_HANG_TIMEOUT_S, default 3 s)."""
    for group in calls(tree, "new_group"):
        for delta in calls(group, "timedelta"):
            for keyword in delta.keywords:
                if keyword.arg == "seconds" and isinstance(keyword.value, ast.Constant) \
                        and isinstance(keyword.value.value, int | float) and not isinstance(keyword.value.value, bool):
                    return float(keyword.value.value)
    try:
        return float(os.environ.get("NB09_HANG_TIMEOUT_S", "3"))
    except ValueError:
        return 3.0


@check
def check_09_4(*, seconds: Answer[float]) -> None:
    """The launch, its run folder and the hang's timeout come from the notebook's launch of the script and
    from the script itself, never from the check cell."""
    ex = Exercise("09.4")
    ex.given(seconds=seconds)
    how = f"launch it: `late, seconds = launch_failure(\"scripts/{SCRIPT_09_4}\", 2, args=[str(OUT)], ...)`."
    launches = _launches_09_4(caller_values())
    ex.require(launches, f"no launch of scripts/{SCRIPT_09_4} in this notebook.", how)
    made = [launch for launch in launches if launch_of(launch) is not None]
    ex.require(made, f"no launch of scripts/{SCRIPT_09_4} in this kernel: the failure found was typed or copied, "
               "not raised by `torchrun`.", how)
    two = [launch for launch in made if _ran(launch) == 2]
    ex.require(two, "the launch did not run 2 processes.", "launch it with `launch_failure(..., 2, ...)`.")
    launch = launch_of(two[-1])
    script = learner_script(SCRIPT_09_4)
    ex.require(script is not None, f"scripts/{SCRIPT_09_4} cannot be found.", "run the cell that writes it.")
    ex.require(same_file(launch.script, script),
               f"the launch ran {launch.script}, not your scripts/{SCRIPT_09_4} beside this notebook.", how)
    ex.require(launch.sha256 == file_sha256(script),
               f"you changed scripts/{SCRIPT_09_4} after launching it: the launch is of an older version.",
               "launch it again, then run this check.")
    tree = ex.tree_of(script)
    ex.require(_barrier_first(tree),
               f"{SCRIPT_09_4} does not call `dist.monitored_barrier` on every rank before the collectives.",
               "call `dist.monitored_barrier(...)` on every rank before the mismatched collectives, then write "
               "the file.")
    out = _out_of(two[-1].command)
    ex.require(out is not None, "the launch names no run folder that exists.",
               "pass the run folder as the script's argument: `args=[str(OUT)]`.")
    marker = out / "barrier_passed.txt"
    ex.require(marker.is_file(), "barrier_passed.txt does not exist: rank 0 did not get past monitored_barrier.",
               "call `dist.monitored_barrier(...)` on every rank before the mismatched collectives, then write "
               "the file.")
    ex.require(launch.started <= marker.stat().st_mtime <= launch.ended,
               "barrier_passed.txt was not written during the launch: it was left by an earlier run.",
               "launch the script again (launch_failure empties the folder first).")
    ex.require(number(seconds) is not None, "`seconds` is not a number.", "the second value launch_failure returns.")
    timeout = _hang_timeout_s(tree)
    ex.require(number(seconds) >= timeout,
               "`seconds` is shorter than the hang's timeout, so it does not say the mismatch hung.",
               "`seconds` is the second value launch_failure returns: the whole launch's duration.")
    # judged against the launch's own start-up: from the moment the workers were past the barrier
    ex.require(_hang_s(launch, marker) >= timeout,
               "the workers ended sooner after the barrier than the hang's timeout: the time to the timeout was "
               "spent starting up, and the mismatch after the barrier did not hang.",
               "keep the mismatched collectives (rank 0 all_reduce, rank 1 broadcast) after the barrier, in a group "
               "with the HANG_TIMEOUT_S timeout.")
    ex.correct()
