"""Checks of notebook 06, mixed precision: GradScaler, float16's range, accumulation, the bf16 run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from ddp_helpers.exercises.core import (
    ATOL,
    Answer,
    Exercise,
    check,
    find_file,
    integer,
    number_list,
    path,
    sequence,
    tensor,
)


def _scales(pattern: Sequence[float | None], init_scale: float = 64.0, growth_interval: int = 2) -> list[float]:
    """A fresh GradScaler's scale after each update(); an entry that is not None is written into the gradient."""
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


@check
def check_06_1(*, by_hand: Answer[Sequence[float]], measured: Answer[Sequence[float]]) -> None:
    ex = Exercise("06.1")
    ex.given(by_hand=by_hand, measured=measured)
    truth = _scales([None, float("inf"), None, None, None, float("nan"), None, None])
    hand = number_list(by_hand)
    ex.require(hand is not None and len(hand) == len(truth),
               f"`by_hand` should be a list of {len(truth)} scales, one per update().",
               "one entry per step of the pattern, each a number.")
    ex.require(hand == truth, "your hand-worked scales are not what GradScaler does.",
               "an inf/nan step halves the scale and resets the clean-step count; growth_interval clean steps in a "
               "row double it.")
    ex.require(number_list(measured) == truth,
               "`measured` does not hold a fresh GradScaler's scale after each update().",
               "create the scaler with init_scale=64, growth_interval=2, and record `scaler.get_scale()` per step.")
    ex.correct()


def _cast(value: float, k: int) -> torch.Tensor:
    return torch.tensor(value * 2.0**k).half()


def _exponents() -> tuple[int, int]:
    tiny = torch.finfo(torch.float16).tiny
    return (next(k for k in range(64) if _cast(1e-9, k).item() >= tiny),
            max(k for k in range(64) if not torch.isinf(_cast(10.0, k))))


@check
def check_06_2(*, k_small: Answer[int], k_large: Answer[int]) -> None:
    ex = Exercise("06.2")
    ex.given(k_small=k_small, k_large=k_large)
    truth_small, truth_large = _exponents()
    ex.require(integer(k_small) == truth_small, "`k_small` is not the smallest exponent that makes 1e-9 a normal float16.",
               "compare the cast value with `torch.finfo(torch.float16).tiny` (normal), not with 0 (subnormal).")
    ex.require(integer(k_large) == truth_large, "`k_large` is not the largest exponent for which 10 * 2**k stays finite.",
               "cast `10.0 * 2.0**k` to float16 and test `torch.isinf`.")
    ex.correct()


@check
def check_06_3(*, net: Answer[torch.nn.Module], full: Answer[Sequence[torch.Tensor]],
               acc_scaler: Answer[torch.amp.GradScaler]) -> None:
    ex = Exercise("06.3")
    ex.given(net=net, full=full, acc_scaler=acc_scaler)
    ex.require(isinstance(net, torch.nn.Module), "`net` is not a model.", "keep the starter's `net = ToyModel()`.")
    ex.require(isinstance(acc_scaler, torch.amp.GradScaler), "`acc_scaler` is not a GradScaler.",
               "keep the starter's `acc_scaler = torch.amp.GradScaler(...)`.")
    params = list(net.parameters())
    items = sequence(full)
    grads = None if items is None else [tensor(g) for g in items]
    ex.require(grads is not None and len(grads) == len(params) and all(g is not None for g in grads),
               "`full` is not one gradient per parameter of `net`.", "keep the starter's `full = torch.autograd.grad(...)`.")
    ex.require(all(p.grad is not None for p in params), "`net` has no gradients.",
               "call `acc_scaler.scale(loss / 4).backward()` for each micro-batch.")
    ex.require(all(p.grad.shape == g.shape and torch.allclose(p.grad.double(), g.double(), atol=ATOL)
                   for p, g in zip(params, grads, strict=True)),
               f"the unscaled accumulated gradients differ from the full-batch gradient (atol {ATOL}).",
               "divide each micro-batch loss by the number of micro-batches and call `unscale_` before comparing.")
    ex.require(acc_scaler.state_dict().get("_growth_tracker") == 1,
               "the scaler's clean-step count is not one per optimizer step.",
               "call unscale_/step/update once, after the last micro-batch, not per micro-batch.")
    ex.correct()


def _default_recipe(recipe: str) -> object:
    """The default recipe (AMP_DTYPE unset) of the device a record's recipe names: the CPU's on CPU
    workers, the GPU's when the workers ran on GPUs (None for an unknown device)."""
    from ddp_helpers.amp import AmpRecipe, default_dtype

    device = recipe.split(":")[0]
    if device not in ("cpu", "cuda"):
        return None
    dtype = default_dtype(device)
    return AmpRecipe(device, dtype, use_grad_scaler=dtype == torch.float16)


def _record(value: object) -> dict | None:
    """The rank-0 record as a dict: the dict itself, its JSON text, or the path of rank0.json (a string or a
    Path, relative to the notebook's folder)."""
    import json

    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    elif path(value) is not None:
        found = find_file(path(value))
        try:
            value = json.loads(found.read_text()) if found is not None else None
        except (OSError, ValueError):
            return None
    return dict(value) if isinstance(value, Mapping) and isinstance(value.get("recipe"), str) else None


@check
def check_06_4(*, bf16: Answer[dict]) -> None:
    ex = Exercise("06.4")
    ex.given(bf16=bf16)
    record = _record(bf16)
    ex.require(record is not None, "`bf16` is not the worker's rank-0 JSON record.",
               "`json.load(open(\"<your --out folder>/rank0.json\"))`.")
    default = _default_recipe(record["recipe"])
    ex.require(default is not None and record["recipe"] == str(default),
               "the run did not use its device's default recipe.", "pass `env={\"AMP_DTYPE\": \"\"}` to the launch.")
    resumed = record.get("resumed_equal")
    ex.require((record.get("saved_scaler") == {}) != default.use_grad_scaler
               and isinstance(resumed, bool | np.bool_) and bool(resumed),
               "the saved scaler state or the resume comparison is not what the default recipe gives.",
               "run with `--overflow-step -1` and read `saved_scaler` and `resumed_equal`.")
    ex.correct()
