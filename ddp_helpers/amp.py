"""Pick the mixed-precision recipe for a device, so one training loop runs everywhere.

    from ddp_helpers.amp import amp_recipe, autocast, make_grad_scaler

    recipe = amp_recipe(ctx.device)          # CUDA: float16 + loss scaling; CPU: bfloat16
    scaler = make_grad_scaler(recipe)        # a disabled scaler is a pass-through
    with autocast(recipe):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)               # only needed before clipping
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()

The rule: CUDA defaults to float16, every other device to bfloat16. Loss scaling
(``GradScaler``) is enabled exactly when the low-precision dtype is float16: float16
has a narrow exponent range, so small gradients underflow to zero unless the loss is
scaled up first; bfloat16 has float32's range and does not need it. ``float32``
switches autocast off (the full-precision baseline).

``AMP_DTYPE`` (``float16``, ``bfloat16`` or ``float32``) overrides the device default,
so a learner can try another recipe without editing a script. Only the non-deprecated
``torch.amp`` APIs are used (``torch.amp.autocast(device_type, dtype)``,
``torch.amp.GradScaler(device_type)``), not the ``torch.cuda.amp`` aliases.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

AMP_DTYPE_ENV = "AMP_DTYPE"
DTYPES: dict[str, torch.dtype] = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


@dataclass(frozen=True)
class AmpRecipe:
    """Everything a training loop needs to know about mixed precision on one device.

    ``device_type`` is ``"cuda"``, ``"cpu"``, ...; ``dtype`` is the dtype autocast
    computes eligible ops in (``torch.float32`` means autocast is off);
    ``use_grad_scaler`` says whether the loss must be scaled (float16 only).
    """

    device_type: str
    dtype: torch.dtype
    use_grad_scaler: bool

    @property
    def enabled(self) -> bool:
        """True when autocast actually lowers precision (dtype is not float32)."""
        return self.dtype != torch.float32

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    def __str__(self) -> str:
        scaler = "GradScaler on" if self.use_grad_scaler else "GradScaler off"
        mode = f"autocast {self.dtype_name}" if self.enabled else "autocast off (float32)"
        return f"{self.device_type}: {mode}, {scaler}"


def parse_dtype(value: str | torch.dtype) -> torch.dtype:
    """``"float16"``/``"bfloat16"``/``"float32"`` (or the torch dtype) -> torch dtype."""
    if isinstance(value, torch.dtype):
        if value not in DTYPES.values():
            raise ValueError(f"AMP dtype must be one of {', '.join(DTYPES)}, got {value}")
        return value
    name = str(value).strip().lower()
    if name not in DTYPES:
        raise ValueError(
            f"{AMP_DTYPE_ENV} must be one of {', '.join(DTYPES)} (float32 = mixed precision off), "
            f"got {value!r}"
        )
    return DTYPES[name]


def default_dtype(device_type: str) -> torch.dtype:
    """float16 on CUDA (fast tensor cores on every CUDA GPU), bfloat16 elsewhere."""
    return torch.float16 if device_type == "cuda" else torch.bfloat16


def amp_recipe(device: torch.device | str, dtype: str | torch.dtype | None = None) -> AmpRecipe:
    """The mixed-precision recipe for ``device``.

    Precedence: the ``dtype`` argument, then the ``AMP_DTYPE`` environment variable,
    then the device default (CUDA float16, otherwise bfloat16). The scaler is enabled
    exactly when the dtype is float16.
    """
    device_type = torch.device(device).type
    if dtype is None:
        env = os.environ.get(AMP_DTYPE_ENV, "").strip()
        dtype = env if env else default_dtype(device_type)
    chosen = parse_dtype(dtype)
    return AmpRecipe(device_type, chosen, use_grad_scaler=chosen == torch.float16)


def autocast(recipe: AmpRecipe) -> torch.amp.autocast:
    """``torch.amp.autocast`` for the recipe; a no-op context when ``dtype`` is float32."""
    if not recipe.enabled:
        # CPU autocast warns on a float32 target dtype; disabled, the dtype is unused.
        return torch.amp.autocast(recipe.device_type, enabled=False)
    return torch.amp.autocast(recipe.device_type, dtype=recipe.dtype)


def make_grad_scaler(recipe: AmpRecipe, **kwargs: Any) -> torch.amp.GradScaler:
    """``torch.amp.GradScaler(device_type, enabled=recipe.use_grad_scaler, **kwargs)``.

    Disabled, its ``scale`` returns the loss unchanged, ``unscale_`` and ``update`` do
    nothing and ``step`` just calls ``optimizer.step()``: the same loop serves both.
    Note that a disabled scaler's ``state_dict()`` is ``{}``, and an enabled scaler
    refuses to load an empty state dict, so save and resume with the same recipe.
    """
    return torch.amp.GradScaler(recipe.device_type, enabled=recipe.use_grad_scaler, **kwargs)


@dataclass(frozen=True)
class StepResult:
    """What one :func:`train_step` did: the loss, the scale it was multiplied by, a skip."""

    loss: float
    scale: float  # the scale this step's loss was multiplied by (1.0 when disabled)
    skipped: bool  # the scaler found inf/NaN and did not call optimizer.step()


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
               recipe: AmpRecipe, inputs: torch.Tensor, targets: torch.Tensor,
               loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
               max_norm: float | None = None) -> StepResult:
    """One mixed-precision step in the order that is right with or without DDP.

    forward and loss under autocast -> ``scale(loss).backward()`` (DDP all-reduces the
    float32 gradients here) -> ``unscale_`` and ``clip_grad_norm_`` when ``max_norm`` is
    given -> ``step`` (skipped on inf/NaN) -> ``update``. A step counts as skipped when
    ``update()`` lowered the scale, which an enabled scaler does exactly when it skipped.
    ``get_scale()`` and ``loss.item()`` copy to the host: on a GPU each is a sync, which
    is fine for a demo and worth avoiding on every step of a real run.
    """
    optimizer.zero_grad(set_to_none=True)
    with autocast(recipe):
        loss = loss_fn(model(inputs), targets)
    scale = scaler.get_scale()
    scaler.scale(loss).backward()
    if max_norm is not None:
        scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return StepResult(loss.item(), scale, scaler.get_scale() < scale)


@contextmanager
def overflow_in_backward(param: torch.Tensor) -> Iterator[None]:
    """Inside the block, every backward pass writes ``inf`` into ``param``'s gradient.

    It simulates a float16 overflow on one rank. The hook runs when ``param``'s gradient
    is computed, before DDP's all-reduce, so under DDP every rank receives the ``inf``.
    """
    handle = param.register_hook(lambda grad: torch.full_like(grad, float("inf")))
    try:
        yield
    finally:
        handle.remove()


__all__ = ["AMP_DTYPE_ENV", "DTYPES", "AmpRecipe", "StepResult", "amp_recipe", "autocast", "default_dtype",
           "make_grad_scaler", "overflow_in_backward", "parse_dtype", "train_step"]
