"""The launcher's view of a run's output: the ranks' whole lines out of torchrun's stream (:class:`RankLines`),
which mode shows them live (a widget in a notebook, stdout, or nothing), and which of torchrun's own lines it
leaves out (:func:`is_omp_notice`)."""

from __future__ import annotations

import os
import re
from typing import Literal, get_args

# torchrun prefixes every line a worker writes with this (global rank; the launcher sets the template).
PREFIX_TEMPLATE = "[rank${rank}]:"
PREFIX_RE = re.compile(r"^\[rank(\d+)\]:(.*)$")
_PIECE_RE = re.compile(r"\[rank(\d+)\]:")


class RankLines:
    """Whole lines of each rank out of torchrun's output stream, which can cut one line of a worker in two.

    torch elastic's ``tail_logfile`` (torch/distributed/elastic/multiprocessing/tail_log.py) copies a worker's
    log file to the agent's output by ``readline()``, which returns a line without its end when the tail reaches
    it first, and writes every piece it reads behind the rank's prefix. A worker that writes a line's text and its
    newline apart (``print`` under ``PYTHONUNBUFFERED=1``, which the launcher sets so that lines show as they come,
    makes two writes) can then reach the agent's stdout as ``[rank0]:text`` and ``[rank0]:`` + newline, with
    another rank's line between them at times. Seen in a strict nbval run on a busy machine: a line ending in
    ``samples/s 745.4[rank0]:``. A prefix after the start of a prefixed line is such a cut (one at its start is
    torch's own ``[rankN]:`` on traceback lines, kept); the pieces before it wait for the rest of their line.
    """

    def __init__(self) -> None:
        self._pending: dict[tuple[str, int], str] = {}

    def feed(self, stream: str, line: str) -> list[tuple[int, str]] | None:
        """The whole lines (rank, text) that ``line`` of ``stream`` ("out" or "err") completes; None for a line
        of the agent's own (no rank prefix)."""
        m = PREFIX_RE.match(line.rstrip("\n"))
        if m is None:
            return None
        rank, text, start, pieces = int(m.group(1)), m.group(2), 0, []
        for cut in _PIECE_RE.finditer(text):
            if cut.start() > 0:
                pieces.append((rank, text[start:cut.start()]))
                rank, start = int(cut.group(1)), cut.end()
        pieces.append((rank, text[start:]))
        for r, piece in pieces[:-1]:  # the start of a line whose rest comes later
            self._pending[stream, r] = self._pending.get((stream, r), "") + piece
        r, piece = pieces[-1]
        return [(r, self._pending.pop((stream, r), "") + piece)]

    def rest(self) -> list[tuple[str, int, str]]:
        """(stream, rank, text) of line starts whose end never came (a worker killed in mid-line)."""
        rest = [(stream, rank, text) for (stream, rank), text in self._pending.items()]
        self._pending.clear()
        return rest


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
