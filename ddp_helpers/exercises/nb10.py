"""Checks of notebook 10, performance: the alpha-beta model and DDP's buckets."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ddp_helpers.exercises.core import (
    REL_TOL,
    Answer,
    Exercise,
    call,
    check,
    close,
    integer,
    key_size,
    number,
    rel_tol_for,
    run_json,
)
from ddp_helpers.exercises.provenance import lesson_run

SWEEP = Path("runs/10_performance/sweep.json")
SWEEP_LAUNCH = "the launch of scripts/10_allreduce_sizes.py (section 2)"


def _fit(ex: Exercise) -> tuple[float, float]:
    """(alpha, beta) fitted to the sweep the lesson's launch wrote, with the lesson's own function
    (timing.alpha_beta), so the numbers are those of section 2."""
    from ddp_helpers.perf import timing

    sweep = run_json(ex, SWEEP, SWEEP_LAUNCH)
    lesson_run(ex, SWEEP, "10_allreduce_sizes.py", SWEEP_LAUNCH, nproc=2)
    try:
        fit = timing.alpha_beta(sweep)
        alpha, beta = float(fit["alpha_s"]), float(fit["beta_s_per_byte"])
    except (KeyError, TypeError, ValueError):
        ex.fail(f"{SWEEP} does not hold a sweep of sizes and times to fit.", f"run {SWEEP_LAUNCH} again, then this check.")
    ex.require(math.isfinite(alpha) and math.isfinite(beta), f"the fit of {SWEEP} gives no finite alpha and beta.",
               f"run {SWEEP_LAUNCH} again, then this check.")
    return alpha, beta


@check
def check_10_1(*, one_message: Answer[float], per_tensor: Answer[float]) -> None:
    """alpha and beta are fitted here to the lesson's sweep.json, the model's width read from its controls.json."""
    ex = Exercise("10.1")
    ex.given(one_message=one_message, per_tensor=per_tensor)
    alpha, beta = _fit(ex)
    sizes = _model_bytes(ex)
    ex.require(close(one_message, alpha + beta * sum(sizes)),
               f"`one_message` is not the alpha-beta time of one message of all gradients (rel. tol. {REL_TOL}).",
               "alpha + beta * (total bytes); float32 gradients have 4 bytes per value.")
    ex.require(close(per_tensor, sum(alpha + beta * b for b in sizes)),
               f"`per_tensor` is not the time of one message per parameter tensor (rel. tol. {REL_TOL}).",
               "each tensor pays its own alpha.")
    ex.correct()


def _reference_count(nbytes: Sequence[int], cap: float) -> int:
    buckets, size = 0, 0
    for b in nbytes:
        size += b
        if size >= cap:
            buckets, size = buckets + 1, 0
    return buckets + (size > 0)


def _by_cap(counts: object) -> dict[float, int] | None:
    """Bucket counts keyed by the cap in MiB as a number, the key in any form core's rule reads as a size
    (core.key_size): 0.5, "0.5", "DDP cap 0.5", "0.5 MiB", "512 KiB", or 524288 (bytes); None when a count is no
    whole number, a key names no size, or two keys name the same cap."""
    if not isinstance(counts, Mapping):
        return None
    try:
        out = {key_size(k, 2**20): integer(v) for k, v in counts.items()}
    except (TypeError, ValueError):
        return None
    if len(out) != len(counts):
        return None
    return None if None in out.values() or None in out else out  # type: ignore[return-value]


def _arrival(width: object, depth: object = 4) -> list[int] | None:
    """The gradients' bytes in arrival order of the worker's model (None without a valid width)."""
    if integer(width) is None or isinstance(width, bool) or not 0 < integer(width) <= 4096 \
            or integer(depth) is None or not 0 < integer(depth) <= 64:
        return None
    from ddp_helpers.models import square_mlp

    return [4 * p.numel() for p in reversed(list(square_mlp(integer(width), integer(depth), seed=0).parameters()))]


CONTROLS = Path("runs/10_performance/controls.json")
CONTROLS_LAUNCH = "the launch of scripts/10_step_controls.py (section 4)"
CAPS = ("0.5", "8", "32")


def _controls(ex: Exercise) -> object:
    """The controls.json of the lesson's launch (refused, blaming the lesson's data, when another launch wrote it)."""
    controls = run_json(ex, CONTROLS, CONTROLS_LAUNCH)
    lesson_run(ex, CONTROLS, "10_step_controls.py", CONTROLS_LAUNCH, nproc=2)
    return controls


def _recorded(ex: Exercise) -> tuple[dict[float, int], list[int]]:
    """({cap in MiB: all-reduces per step} and the gradients' bytes in arrival order) of the lesson's launch,
    read from the controls.json it wrote."""
    controls = _controls(ex)
    variants = controls.get("variants") if isinstance(controls, dict) else None
    counts = _by_cap({c: (variants or {}).get(f"DDP cap {c}", {}).get("allreduces") for c in CAPS})
    arrival = _arrival(controls.get("width"), controls.get("depth", 4)) if isinstance(controls, dict) else None
    ex.require(counts is not None and arrival is not None, f"{CONTROLS} does not hold the DDP variants' counts.",
               f"run {CONTROLS_LAUNCH} again, then this check.")
    return counts, arrival  # type: ignore[return-value]


def _model_bytes(ex: Exercise) -> list[int]:
    """The gradients' bytes of square_mlp(WIDTH, 4, seed=0), WIDTH as the lesson's controls launch recorded it."""
    controls = _controls(ex)
    arrival = _arrival(controls.get("width"), controls.get("depth", 4)) if isinstance(controls, dict) else None
    ex.require(arrival is not None, f"{CONTROLS} does not record the model's width.",
               f"run {CONTROLS_LAUNCH} again, then this check.")
    return arrival  # type: ignore[return-value]


@check
def check_10_2(*, predict_buckets: Answer[Callable[[Sequence[int], float], int]],
               predicted_buckets: Answer[Mapping[str, int]]) -> None:
    """The counts are the ones the lesson's launch recorded, read from its controls.json (not passed by the cell)."""
    ex = Exercise("10.2")
    ex.given(predict_buckets=predict_buckets, predicted_buckets=predicted_buckets)
    ex.function("predict_buckets", predict_buckets)
    for nbytes, cap in (([3, 5, 2, 9], 6), ([10], 4), ([1, 1], 8), ([4, 4, 4], 8)):
        ex.require(integer(call(predict_buckets, nbytes, cap)) == _reference_count(nbytes, cap),
                   f"predict_buckets({nbytes}, {cap}) is wrong.",
                   "close a bucket when its size reaches the cap (>=) and count a last partly filled one.")
    recorded, arrival = _recorded(ex)
    got = _by_cap(predicted_buckets)
    ex.require(got is not None and got == recorded,
               "`predicted_buckets` differs from the counts the worker recorded.",
               "walk the parameters in reversed(list(model.parameters())) order, caps in MiB (ddp_helpers.perf.timing.MiB).")
    ex.require(got == {cap: integer(predict_buckets(arrival, cap * 2**20)) for cap in got},
               "`predicted_buckets` is not what your `predict_buckets` gives for the model's gradients.",
               "call your function on the arrival order of square_mlp(WIDTH, 4, seed=0), once per cap.")
    ex.correct()


@check
def check_10_3(*, crossover: Answer[float]) -> None:
    """alpha and beta are fitted here to the lesson's sweep.json (not passed by the cell)."""
    ex = Exercise("10.3")
    ex.given(crossover=crossover)
    alpha, beta = _fit(ex)
    x = number(crossover)
    ex.require(x is not None and close(alpha + beta * x, 2 * alpha, rel_tol=rel_tol_for(crossover)),
               f"at `crossover` bytes the bandwidth term is not equal to the latency (rel. tol. {REL_TOL}).",
               "solve beta * S = alpha for S, with the alpha and beta fitted in section 2.")
    ex.correct()
