"""Checks of notebook 05, checkpoints and fault tolerance."""

from __future__ import annotations

import argparse
import ast
import math
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from ddp_helpers.exercises.core import Answer, Exercise, calls, check, numbers, run_file
from ddp_helpers.exercises.provenance import current_launch, lesson_run, prints_no_literal
from ddp_helpers.launch import LaunchResult

SAVE_LOAD = Path("runs/05_checkpoints/save_load")
SAVE_LOAD_LAUNCH = "the launch of scripts/05_save_load.py (section 1)"


def _saved_state(ex: Exercise) -> dict[str, torch.Tensor]:
    """The inner model's weights the worker saved: ddp_state_dict.pt with its "module." prefix removed,
    which must equal module_state_dict.pt (both written by the same launch)."""
    lesson_run(ex, SAVE_LOAD, "05_save_load.py", SAVE_LOAD_LAUNCH, nproc=2)
    states = []
    for name in ("ddp_state_dict.pt", "module_state_dict.pt"):
        path = run_file(ex, SAVE_LOAD / name, SAVE_LOAD_LAUNCH)
        try:
            states.append(torch.load(path, weights_only=True, map_location="cpu"))
        except Exception:
            ex.fail(f"{SAVE_LOAD / name} cannot be loaded.", f"run {SAVE_LOAD_LAUNCH} again, then this check.")
    ddp, module = states
    stripped = {k.removeprefix("module."): v for k, v in ddp.items()}
    ex.require(set(stripped) == set(module) and all(torch.equal(stripped[k], module[k]) for k in module),
               "the two files of runs/05_checkpoints/save_load/ are not from the same run.",
               f"run {SAVE_LOAD_LAUNCH} again, then this check.")
    return module


@check
def check_05_1(*, ex1: Answer[torch.nn.Module]) -> None:
    """The reference weights are the ones the lesson's launch saved, read here (not passed by the cell)."""
    ex = Exercise("05.1")
    ex.given(ex1=ex1)
    ex.require(isinstance(ex1, torch.nn.Module), "`ex1` is not a model.", "`ex1 = ToyModel()`, then load.")
    reference = _saved_state(ex)
    state = ex1.state_dict()
    ex.require(set(state) == set(reference) and all(state[k].shape == reference[k].shape for k in reference),
               "`ex1`'s parameter names differ from the plain model's.",
               "strip the prefix \"module.\" (with the dot) before `load_state_dict`.")
    ex.require(all(torch.equal(state[k].detach().cpu(), reference[k]) for k in reference),
               "`ex1`'s weights differ from the ones the lesson's launch saved.",
               "load runs/05_checkpoints/save_load/ddp_state_dict.pt into it, not a fresh model's weights.")
    ex.correct()


def _colleague_args() -> dict[str, object]:
    return {"lr": 0.1, "epochs": 3}


def _refused(path: str | Path) -> bool:
    """torch.load(weights_only=True) refuses the file (an UnpicklingError), as it does a Namespace."""
    try:
        torch.load(path, weights_only=True)
    except pickle.UnpicklingError:
        return True
    except Exception:  # not a checkpoint at all
        return False
    return False


def _loaded(path: str | Path) -> object:
    try:
        return torch.load(path, weights_only=True)
    except Exception:
        return None


def _args_in(saved: object) -> object:
    """The saved arguments: the object itself (torch.save(args)) or its "args" entry (the lesson's pattern)."""
    if isinstance(saved, dict) and "args" in saved:
        return saved["args"]
    return saved


@check
def check_05_2(*, ns_file: Answer[str | Path], dict_file: Answer[str | Path]) -> None:
    ex = Exercise("05.2")
    ex.given(ns_file=ns_file, dict_file=dict_file)
    for name, path in (("ns_file", ns_file), ("dict_file", dict_file)):
        ex.require(Path(path).is_file(), f"`{name}` is not a saved file.", "save it with torch.save first.")
    ex.require(_refused(ns_file), "`ns_file` loads with weights_only=True, so it holds no Namespace.",
               "save `{\"model\": ..., \"args\": argparse.Namespace(lr=0.1, epochs=3)}`.")
    with torch.serialization.safe_globals([argparse.Namespace]):
        args = _args_in(_loaded(ns_file))
    ex.require(isinstance(args, argparse.Namespace) and vars(args) == _colleague_args(),
               "the Namespace in `ns_file` is not the colleague's arguments.",
               "save the colleague's `argparse.Namespace(lr=0.1, epochs=3)`.")
    plain = _args_in(_loaded(dict_file))
    ex.require(type(plain) is dict and plain == _colleague_args(),
               "`dict_file`'s \"args\" is not a plain dict with lr == 0.1.",
               "save `vars(args)` instead of the Namespace.")
    ex.correct()


@check
def check_05_3(*, save_rotating: Answer[Callable[..., object]],
               latest: Answer[Callable[[Path], Path | str | None]]) -> None:
    ex = Exercise("05.3")
    ex.given(save_rotating=save_rotating, latest=latest)
    ex.function("save_rotating", save_rotating)
    ex.function("latest", latest)
    for keep, epochs in ((2, range(5)), (3, range(12))):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "rotating"
            for epoch in epochs:
                save_rotating({"epoch_next": epoch + 1}, folder, epoch, keep=keep)
            names = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
            ex.require(names == [f"snapshot_{e:04d}.pt" for e in list(epochs)[-keep:]],
                       f"after saving epochs {epochs.start}..{epochs.stop - 1} with keep={keep} the folder does not "
                       f"hold exactly the newest {keep} snapshots.",
                       "name files snapshot_{epoch:04d}.pt, write with atomic_save (it makes no folder: mkdir "
                       "first), then delete the oldest by sorted name.")
            newest = latest(folder)
            ex.require(newest is not None and Path(newest).name == f"snapshot_{epochs.stop - 1:04d}.pt",
                       "`latest(folder)` does not return the newest snapshot.", "zero-padded names sort by epoch.")
            ex.require(torch.load(newest, weights_only=True) == {"epoch_next": epochs.stop},
                       "the newest snapshot does not hold the object saved last.", "save `obj` itself.")
    ex.correct()


def _mean_loss(world: int = 2) -> float:
    return sum(1.0 + r for r in range(world)) / world


def _every_rank_calls(tree: ast.Module, name: str) -> bool:
    """A call of ``name`` that no ``if`` encloses (every rank runs it)."""
    inside_if = {id(c) for node in ast.walk(tree) if isinstance(node, ast.If)
                 for c in calls(node, name)}
    return any(id(c) not in inside_if for c in calls(tree, name))


@check
def check_05_4(*, fixed_run: Answer[LaunchResult],
               script: str | Path = "scripts/05_rank0_collective_fixed.py") -> None:
    """``script`` is not read: the script is the exercise's, the one the launch ran (kept for older check cells)."""
    ex = Exercise("05.4")
    ex.given(fixed_run=fixed_run)
    tree = ex.tree_of(current_launch(ex, "fixed_run", fixed_run, "05_rank0_collective_fixed.py", nproc=2))
    prints_no_literal(ex, tree, [_mean_loss()], "05_rank0_collective_fixed.py")
    ex.require(_every_rank_calls(tree, "all_reduce"), "the script does not all-reduce the loss on every rank.",
               "call `dist.all_reduce(loss)` outside the `if ctx.rank == 0:` block.")
    ex.require(_every_rank_calls(tree, "barrier"), "the script does not call the barrier on every rank.",
               "call `dist.barrier()` outside the `if` block, then print.")
    ex.every_rank("fixed_run", fixed_run, 2)
    mean = _mean_loss()
    rank0 = [x for line in fixed_run.stdout[0] for x in numbers(line)]
    ex.require(any(math.isclose(x, mean, rel_tol=1e-6) for x in rank0),
               "rank 0 did not print the mean loss over the ranks.",
               "all-reduce the loss on every rank, divide by the world size, print only on rank 0.")
    ex.require(not any(numbers(line) for line in fixed_run.stdout[1]),
               "rank 1 printed a loss: only rank 0 should \"save\".", "keep the print inside `if ctx.rank == 0:`.")
    ex.require(all(any("barrier" in line for line in fixed_run.stdout[r]) for r in range(2)),
               "not every rank printed its line after the barrier.",
               "call `dist.barrier()` on every rank, then print.")
    ex.correct()
