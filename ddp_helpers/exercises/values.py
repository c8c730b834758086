"""Values in any valid form and the comparison rules every check shares (re-exported by :mod:`.core`)."""

from __future__ import annotations

import inspect
import math
import numbers as _numbers
import os
import re
from collections.abc import Callable, KeysView, Mapping, ValuesView
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

REL_TOL = 1e-9   # closed-form arithmetic (alpha-beta models, byte counts in floats)
ATOL = 1e-6      # float32 tensors computed two ways in the same process
F32_REL_TOL = 1e-6  # a float32 answer: a few roundings of float32's epsilon (1.2e-7)
F32_ATOL = 1e-5  # float32 tensors of size ~1 summed in another order (tens of roundings of 1.2e-7)

T = TypeVar("T")


# --- comparison rules ----------------------------------------------------------------------------

def same_numbers(a: object, b: object, rel_tol: float = REL_TOL) -> bool:
    """Two numbers agree to ``rel_tol`` (False when one is not a number)."""
    try:
        return math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=0.0)
    except (TypeError, ValueError):
        return False


def numbers(line: str) -> list[float]:
    """Every number printed in a line."""
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", line)]


# --- values in any valid form ---------------------------------------------------------------------
#
# One rule for every check: a value counts in any form a learner may reasonably hold it in.
# - a number: int, float, Fraction, Decimal, a numpy scalar, a one-element array or tensor, or a string that
#   parses as one ("3", "0.25", "15/8"); never a bool;
# - a whole number: any number form with no fractional part ("3", 3.0, torch.tensor(3));
# - a sequence: a list, tuple, torch.Size, range, array or tensor (1-d or more), a set (sorted), or a dict
#   keyed by rank 0..n-1 (its values in rank order);
# - a flat list of numbers (number_list, integer_list): any sequence, nested lists flattened;
# - per-rank lists (per_rank): compared structurally, each rank's entry converted on its own;
# - a float32 (or half) value gets float32's tolerance (rel_tol_for, close).

def is_ours(value: object) -> bool:
    """``value`` is a function or class of this package (a reference helper given as an answer)."""
    module = getattr(value, "__module__", None)
    return (callable(value) and isinstance(module, str) and module.startswith(__package__ + ".")
            and not isinstance(value, type))


def _parse_number(text: str) -> float | int | None:
    """A string that reads as a number ("3", " 0.25 ", "1e-3", "15/8"), as int when it is a whole number."""
    text = text.strip().replace("_", "")
    if not text or len(text) > 64:
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(Fraction(text))
    except (ValueError, ZeroDivisionError):
        pass
    try:
        return float(text)  # "inf", "nan"
    except ValueError:
        return None


def number(value: object) -> float | None:
    """A real number as float in any :ref:`valid form <values in any valid form>` (None otherwise; bools too)."""
    if isinstance(value, bool | np.bool_):
        return None
    if isinstance(value, str):
        parsed = _parse_number(value)
        return None if parsed is None else float(parsed)
    if isinstance(value, torch.Tensor | np.ndarray):
        size = value.numel() if isinstance(value, torch.Tensor) else value.size
        if size != 1 or value.dtype in (torch.bool, np.bool_) or getattr(value, "is_complex", lambda: False)() \
                or (isinstance(value, np.ndarray) and not np.issubdtype(value.dtype, np.number)):
            return None
        value = value.reshape(()).item()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, _numbers.Real) and not isinstance(value, bool):
        return float(value)
    return None


def integer(value: object) -> int | None:
    """A whole number as int: any :func:`number` form with no fractional part (3.0 and "3" count as 3)."""
    if isinstance(value, _numbers.Integral) and not isinstance(value, bool | np.bool_):
        return int(value)
    if isinstance(value, str):
        parsed = _parse_number(value)
        if isinstance(parsed, int):
            return parsed
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point() \
            and value.dtype != torch.bool and not value.is_complex():
        return int(value.reshape(()).item())
    x = number(value)
    return int(x) if x is not None and math.isfinite(x) and x == int(x) else None


def _rank_keys(value: Mapping) -> list[int] | None:
    """The keys of a dict keyed by rank (ints or digit strings: 0, "0", "rank0") if they are 0..n-1."""
    keys = []
    for k in value:
        k = re.sub(r"^rank[ _]?", "", k.strip(), flags=re.I) if isinstance(k, str) else k
        keys.append(integer(k) if not isinstance(k, float) else None)
    return keys if None not in keys and sorted(keys) == list(range(len(value))) else None  # type: ignore[type-var]


def sequence(value: object) -> list | None:
    """The items of a list, tuple, ``torch.Size``, range, array or tensor (1-d or more), a set (sorted when its
    items sort) or a dict keyed by rank 0..n-1 (its values in rank order); None otherwise (a string too)."""
    if isinstance(value, torch.Tensor | np.ndarray):
        return list(value) if value.ndim >= 1 else None
    if isinstance(value, list | tuple | range | KeysView | ValuesView):
        return list(value)
    if isinstance(value, set | frozenset):
        try:
            return sorted(value)
        except TypeError:
            return list(value)
    if isinstance(value, Mapping):
        keys = _rank_keys(value)
        return None if keys is None else [v for _, v in sorted(zip(keys, value.values(), strict=True),
                                                               key=lambda kv: kv[0])]
    return None


def flat(value: object) -> list | None:
    """The leaves of a sequence whose items may be sequences themselves (``[[1, 2], (3,)]`` -> ``[1, 2, 3]``);
    a tensor or array of any shape gives its values; None for no sequence."""
    if isinstance(value, torch.Tensor | np.ndarray):
        return list(value.reshape(-1)) if value.ndim >= 1 else None
    items = sequence(value)
    if items is None:
        return None
    out: list = []
    for item in items:
        inner = flat(item) if not isinstance(item, str) else None
        if inner is None:
            out.append(item)
        else:
            out.extend(inner)
    return out


def _each(items: list | None, convert: Callable[[object], T | None]) -> list[T] | None:
    """Every item converted, or None if there are no items or one does not convert."""
    out = None if items is None else [convert(v) for v in items]
    return None if out is None or any(v is None for v in out) else out  # type: ignore[return-value]


def number_list(value: object) -> list[float] | None:
    """A flat list of numbers in any valid form (nested lists flattened), None when an item is no number."""
    return _each(flat(value), number)


def integer_list(value: object) -> list[int] | None:
    """A flat list of whole numbers in any valid form (nested lists flattened)."""
    return _each(flat(value), integer)


def per_rank(value: object, convert: Callable[[object], T | None]) -> list[T] | None:
    """Per-rank entries compared structurally: a sequence or a dict keyed by rank, each entry converted by
    ``convert`` (e.g. :func:`integer_list`); None when one does not convert."""
    return _each(by_rank(value), convert)


def as_int_list(values: Any) -> list[int] | None:
    """A set of whole numbers given as a list, tuple, set, array or tensor (nested lists flattened), or as
    counts (a dict {item: how many}: the items counted at least once), sorted; None if not whole numbers."""
    if isinstance(values, Mapping) and not isinstance(values, str):
        counts = [(integer(k), number(v)) for k, v in values.items()]
        if any(k is None or c is None for k, c in counts):
            return None
        return sorted(k for k, c in counts if c > 0)  # type: ignore[operator, type-var]
    got = integer_list(values)
    return None if got is None else sorted(got)


def is_float32(value: object) -> bool:
    """The value was computed in float32 or less (a numpy or torch float32/half scalar or array, or a
    sequence of them)."""
    dtype = getattr(value, "dtype", None)
    if dtype in (np.float32, np.float16, torch.float32, torch.bfloat16, torch.float16) \
            or isinstance(value, np.float32 | np.float16):
        return True
    items = sequence(value) if isinstance(value, list | tuple) else None
    return bool(items) and any(is_float32(v) for v in items)  # type: ignore[union-attr]


def _float32_valued(value: object) -> bool:
    """A Python float that a float32 computation gave (``tensor.item()`` of a float32 tensor): a non-zero value
    that float32 holds exactly. A float64 result with a fractional part almost never is one."""
    x = number(value) if isinstance(value, float) else None
    return x is not None and math.isfinite(x) and x != int(x) and float(np.float32(x)) == x


def rel_tol_for(value: object, rel_tol: float = REL_TOL) -> float:
    """The relative tolerance for an answer: float32 answers (float32 arrays and tensors, and Python floats that
    a float32 computation gave) get float32's."""
    return max(rel_tol, F32_REL_TOL) if is_float32(value) or _float32_valued(value) else rel_tol


def abs_tol_for(value: object, abs_tol: float = 0.0) -> float:
    """The absolute tolerance for an answer: float32 answers get at least ATOL (a float32 sum of values of
    size ~1 rounds at ~1e-7 each)."""
    return max(abs_tol, ATOL) if (is_float32(value) or _float32_valued(value)) and abs_tol > 0 else abs_tol


def close(value: object, truth: float, rel_tol: float = REL_TOL, abs_tol: float = 0.0) -> bool:
    """``value`` in any number form is ``truth`` to the tolerance of its dtype."""
    x = number(value)
    return x is not None and math.isclose(x, truth, rel_tol=rel_tol_for(value, rel_tol),
                                          abs_tol=abs_tol_for(value, abs_tol))


def by_rank(value: object) -> list | None:
    """Per-rank results as a list in rank order: a list or tuple (rank order) or a dict keyed by rank."""
    return sequence(value)


def key_number(key: object) -> float | None:
    """A dict key that names a number in any form: 0.5, "0.5", or a label around one number ("0.5 MiB",
    "DDP cap 0.5"); None otherwise."""
    x = number(key)
    if x is None and isinstance(key, str):
        found = numbers(key)
        x = found[0] if len(found) == 1 else None
    return x


# sizes named with a unit; MB and GB are read as MiB and GiB, as DDP's bucket_cap_mb does
_SIZE_UNITS = {"b": 1, "byte": 1, "bytes": 1, "k": 2**10, "kb": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20,
               "mib": 2**20, "g": 2**30, "gb": 2**30, "gib": 2**30}
_SIZED = re.compile(r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*([A-Za-z]*)")


def key_size(key: object, unit: int) -> float | None:
    """A dict key that names a size, in units of ``unit`` bytes (2**20: MiB): a number in that unit (0.5, "0.5",
    "DDP cap 0.5"), a number with its own unit ("512 KiB", "0.5MB", "524288 bytes"), or a whole number of 1024
    units or more, read as bytes (524288 for 0.5 MiB: the size in bytes, as a function that takes bytes
    gives it); None otherwise (no number, or two)."""
    x = number(key)
    if x is not None:
        return x / unit if x >= 1024 and x == int(x) else x
    if not isinstance(key, str):
        return None
    found = _SIZED.findall(key)
    if len(found) != 1:
        return None
    value, word = float(found[0][0]), found[0][1].lower()
    if word in _SIZE_UNITS:
        return value * _SIZE_UNITS[word] / unit
    return value / unit if value >= 1024 and value == int(value) else value


def key_name(key: object) -> str:
    """A dict key as a name, spelled one way: "All-Gather", "all gather" and "all_gather" alike."""
    return re.sub(r"[^0-9a-z]+", "_", str(key).strip().lower()).strip("_")


def key_among(key: object, names: Mapping[str, tuple[str, ...]]) -> str:
    """The name among a check's ``names`` ({the text's name: other names for the same thing}) that a dict key
    means: the name or one of its other names in any case, with any separators or none ("All-Gather",
    "allgather", "AllGather" and "all_gather" alike; "forward" for "forward_bytes", torch's
    "all_gather_into_tensor" for "all_gather"); a key that means none, as :func:`key_name` spells it (so a check
    refuses it as a key it does not know)."""
    squashed = key_name(key).replace("_", "")
    for name, others in names.items():
        if squashed in {key_name(n).replace("_", "") for n in (name, *others)}:
            return name
    return key_name(key)


def keys_among(value: Mapping, names: Mapping[str, tuple[str, ...]]) -> dict | None:
    """``value`` with each key renamed by :func:`key_among`; None when two keys mean the same name (the
    check cannot tell which the learner meant)."""
    out = {key_among(k, names): v for k, v in value.items()}
    return out if len(out) == len(value) else None


def without_zeros(counts: Mapping) -> dict:
    """A dict of counts without its explicit zero entries ({"a": 3, "b": 0} is {"a": 3})."""
    return {k: v for k, v in counts.items() if number(v) != 0}


def path(value: object) -> Path | None:
    """A path given as a string or a pathlib.Path (os.PathLike); None for anything else (an open file, a number)."""
    if isinstance(value, str) and value.strip():
        return Path(value.strip())
    if isinstance(value, os.PathLike):
        return Path(value)
    return None


def tensor(value: object) -> torch.Tensor | None:
    """A tensor from a tensor, an array or a (nested) list of numbers; None otherwise."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, str | bytes | Mapping) or value is None:
        return None
    try:
        out = torch.as_tensor(np.asarray(value, dtype=np.float64) if not isinstance(value, np.ndarray) else value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return out if out.dtype not in (torch.bool,) and not out.is_complex() else None


def call(fn: Callable[..., T], *args: object) -> T:
    """A learner's function called with the exercise's arguments: positionally, or by its own parameter names
    when it takes them as keywords only (``def f(*, items, cap)``)."""
    try:
        sig = inspect.signature(fn)
        sig.bind(*args)
    except TypeError:
        named = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        keywords = {p.name: a for p, a in zip(named, args, strict=False)}
        try:
            if len(keywords) != len(args):
                raise TypeError
            sig.bind(**keywords)
        except TypeError:
            return fn(*args)  # the learner's own TypeError, raised by their function's call
        return fn(**keywords)
    except ValueError:  # a builtin without a signature
        pass
    return fn(*args)
