"""The launcher's live view of a run: which mode shows the ranks' lines (a widget in a notebook, stdout, or
nothing), and which of torchrun's own lines it leaves out (:func:`is_omp_notice`)."""

from __future__ import annotations

import os
import re
from typing import Literal, get_args

LiveMode = Literal["auto", "widget", "stdout", "quiet"]
_LIVE_MODES: tuple[str, ...] = get_args(LiveMode)


def _live_mode(live: str) -> str:
    """The live mode that ``live`` (and DDP_HELPERS_LIVE for "auto") selects."""
    if live not in _LIVE_MODES:
        raise ValueError(f"live must be 'auto', 'widget', 'stdout' or 'quiet', got {live!r}")
    if live != "auto":
        return live
    mode = os.environ.get("DDP_HELPERS_LIVE", "auto")
    if mode not in _LIVE_MODES:
        raise ValueError(f"DDP_HELPERS_LIVE must be 'auto', 'widget', 'stdout' or 'quiet', got {mode!r}")
    if mode == "auto":
        mode = "widget" if _in_kernel() else "stdout"
    return mode


def _live_sink(mode: str):
    """Return write(line) for the live stream of a mode from _live_mode."""
    if mode == "widget":
        try:
            import ipywidgets
            from IPython.display import display
        except ImportError:
            mode = "stdout"
        else:
            out = ipywidgets.Output(layout={"max_height": "18em", "overflow": "auto",
                                            "border": "1px solid #ccc"})
            display(out)
            return out.append_stdout
    if mode == "stdout":
        return lambda line: print(line, end="", flush=True)
    return lambda line: None  # quiet


# torchrun's notice when it sets OMP_NUM_THREADS=1 for its workers (torch/distributed/run.py,
# config_from_args: nproc_per_node > 1 and OMP_NUM_THREADS unset), framed by lines of stars.
_OMP_NOTICE = "Setting OMP_NUM_THREADS environment variable for each process"
_LOG_HEADER_RE = re.compile(r"^[DIWEF]\d{4} [\d:.]+ \d+ \S*torch/distributed/run\.py:\d+\]\s*$")


def is_omp_notice(line: str) -> bool:
    """True for the lines of torchrun's OMP_NUM_THREADS notice, which the live view leaves out.

    The notice stays in ``LaunchResult.agent_log``; notebook 00 explains it once.
    """
    text = line.strip()
    return (_OMP_NOTICE in text or (len(text) >= 5 and set(text) == {"*"}) or not text
            or bool(_LOG_HEADER_RE.match(text)))


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and "IPKernelApp" in getattr(ip, "config", {})
