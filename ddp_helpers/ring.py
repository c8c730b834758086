"""The bandwidth-optimal ring all-reduce, written once.

One schedule drives everything: :func:`ring_schedule` says, for ``n`` ranks, which
chunk every rank sends to its right-hand neighbour at each of the ``2(n-1)`` steps.

* :func:`simulate_ring` applies the schedule to plain Python values (numbers, or
  names such as ``"A0"`` with string concatenation), with no processes: it produces
  the step-by-step states that notebook 01 prints, draws and asserts.
* :func:`ring_all_reduce` applies the same schedule to a real tensor: each step's send
  and receive go out together through ``dist.batch_isend_irecv`` (the form NCCL needs),
  pipelined in segments, and it returns the bytes it sent (:class:`RingStats`).

Conventions. The tensor is flattened and cut into ``n`` chunks the way
``torch.tensor_split`` does (the first ``numel % n`` chunks are one element longer).
Rank ``r`` sends to ``(r + 1) % n`` and receives from ``(r - 1) % n``.

* reduce-scatter, step ``s`` in ``0 .. n-2``: rank ``r`` sends chunk ``(r - s - 1) % n``;
  the receiver combines it with its own copy. Afterwards rank ``r`` holds the fully
  reduced chunk ``r`` (exactly what ``dist.reduce_scatter`` gives rank ``r``).
* all-gather, step ``s`` in ``0 .. n-2``: rank ``r`` sends chunk ``(r - s) % n`` (first
  its own reduced chunk); the receiver overwrites its copy.

In both phases the chunk a rank sends at one step is the chunk it received at the
step before; that is what lets segments flow through the ring without waiting for
whole steps to finish.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

REDUCE_SCATTER = "reduce-scatter"
ALL_GATHER = "all-gather"
DEFAULT_SEGMENT_BYTES = 4 << 20  # pipelining grain: small enough to overlap, big enough to be cheap
DEFAULT_WINDOW = 4  # transfers in flight at once


@dataclass(frozen=True)
class Transfer:
    """One message of the ring: ``src`` sends chunk ``chunk`` to ``dst`` at ``step``."""

    step: int  # global step, 0 .. 2(n-1)-1
    phase: str  # REDUCE_SCATTER or ALL_GATHER
    src: int
    dst: int
    chunk: int

    @property
    def reduces(self) -> bool:
        """True when the receiver combines the chunk with its own (reduce-scatter)."""
        return self.phase == REDUCE_SCATTER


def num_steps(n: int) -> int:
    """Steps of the ring all-reduce for ``n`` ranks: ``n-1`` per phase."""
    _check_n(n)
    return 2 * (n - 1)


def _check_n(n: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"the number of ranks must be an int >= 1, got {n!r}")


def phase_of(step: int, n: int) -> tuple[str, int]:
    """(phase, step within the phase) of global ``step``."""
    if not 0 <= step < num_steps(n):
        raise ValueError(f"step must be in 0..{num_steps(n) - 1} for n={n}, got {step}")
    return (REDUCE_SCATTER, step) if step < n - 1 else (ALL_GATHER, step - (n - 1))


def send_chunk(rank: int, step: int, n: int) -> int:
    """The chunk ``rank`` sends to its right neighbour at global ``step``."""
    phase, s = phase_of(step, n)
    return (rank - s - 1) % n if phase == REDUCE_SCATTER else (rank - s) % n


def recv_chunk(rank: int, step: int, n: int) -> int:
    """The chunk ``rank`` receives from its left neighbour at global ``step``."""
    return send_chunk((rank - 1) % n, step, n)


def ring_schedule(n: int) -> list[list[Transfer]]:
    """``schedule[step]`` = the ``n`` transfers of that step, one per sending rank."""
    return [[Transfer(step, phase_of(step, n)[0], r, (r + 1) % n, send_chunk(r, step, n))
             for r in range(n)] for step in range(num_steps(n))]


def chunk_bounds(numel: int, n: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of each of the ``n`` chunks of a flat tensor of ``numel`` elements.

    Same split as ``torch.tensor_split(x, n)``: sizes differ by at most one element.
    """
    _check_n(n)
    if numel < 0:
        raise ValueError(f"numel must be >= 0, got {numel}")
    base, extra = divmod(numel, n)
    bounds, start = [], 0
    for c in range(n):
        stop = start + base + (1 if c < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def expected_elements_sent(numel: int, n: int, rank: int) -> int:
    """Elements ``rank`` sends: every chunk but its own in reduce-scatter, every chunk
    but its right neighbour's in all-gather. Equals 2(n-1)/n * numel up to rounding."""
    sizes = [b - a for a, b in chunk_bounds(numel, n)]
    return 2 * numel - sizes[rank % n] - sizes[(rank + 1) % n] if n > 1 else 0


# --------------------------------------------------------------------------- simulation

def simulate_ring(chunks: Sequence[Sequence[Any]],
                  combine: Callable[[Any, Any], Any] = operator.add) -> list[list[list[Any]]]:
    """Run the schedule on values, no processes involved.

    ``chunks[r][c]`` is chunk ``c`` of rank ``r`` (``n`` ranks, ``n`` chunks each).
    Returns ``states`` with ``states[k][r][c]`` = chunk ``c`` on rank ``r`` after ``k``
    steps (``states[0]`` is the input, ``states[-1]`` the result). At each step every
    rank sends what it held *before* the step (all sends happen at once); a receiver
    computes ``combine(received, own)`` in reduce-scatter and keeps ``received`` in
    all-gather.
    """
    n = len(chunks)
    _check_n(n)
    if any(len(row) != n for row in chunks):
        raise ValueError(f"every rank needs exactly n={n} chunks")
    states = [[list(row) for row in chunks]]
    for transfers in ring_schedule(n):
        before = states[-1]
        after = [list(row) for row in before]
        for t in transfers:
            value = before[t.src][t.chunk]
            after[t.dst][t.chunk] = combine(value, before[t.dst][t.chunk]) if t.reduces else value
        states.append(after)
    return states


def symbolic_chunks(n: int) -> list[list[str]]:
    """Names ``A0 .. A{n-1}`` for rank 0, ``B0 ..`` for rank 1, and so on."""
    _check_n(n)
    if n > 26:
        raise ValueError("at most 26 ranks have letter names")
    return [[f"{chr(ord('A') + r)}{c}" for c in range(n)] for r in range(n)]


def symbolic_states(n: int) -> list[list[list[str]]]:
    """:func:`simulate_ring` on :func:`symbolic_chunks`, combining names with ``+``."""
    return simulate_ring(symbolic_chunks(n), combine=lambda a, b: f"{a}+{b}")


def terms(label: str) -> list[str]:
    """The sorted names inside a symbolic label: ``"C1+A1"`` -> ``["A1", "C1"]``."""
    return sorted(label.split("+"))


def narrate(n: int) -> list[str]:
    """One line per transfer, every step, generated from the schedule and simulation."""
    states = symbolic_states(n)
    lines = []
    for step, transfers in enumerate(ring_schedule(n)):
        phase, s = phase_of(step, n)
        lines.append(f"{phase} step {s + 1}:")
        for t in transfers:
            sent, now = states[step][t.src][t.chunk], states[step + 1][t.dst][t.chunk]
            verb = "adds it" if t.reduces else "stores it"
            lines.append(f"  rank {t.src} sends chunk {t.chunk} ({sent}) to rank {t.dst}, "
                         f"which {verb}: {now}")
    return lines


# --------------------------------------------------------------------------- torch.distributed

@dataclass(frozen=True)
class RingStats:
    """What one call of :func:`ring_all_reduce` did on this rank."""

    bytes_sent: int
    bytes_received: int
    messages_sent: int
    steps: int


_COMBINE: dict[dist.ReduceOp.RedOpType, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    dist.ReduceOp.SUM: lambda own, got: own.add_(got),
    dist.ReduceOp.AVG: lambda own, got: own.add_(got),  # divided once, after reduce-scatter
    dist.ReduceOp.PRODUCT: lambda own, got: own.mul_(got),
    dist.ReduceOp.MAX: lambda own, got: torch.maximum(own, got, out=own),
    dist.ReduceOp.MIN: lambda own, got: torch.minimum(own, got, out=own),
}


def _segments(lo: int, hi: int, count: int) -> list[tuple[int, int]]:
    return [(lo + a, lo + b) for a, b in chunk_bounds(hi - lo, count)]


def _scratch(numel: int, like: torch.Tensor) -> torch.Tensor:
    """A reusable receive buffer: fresh pages cost a page fault each, so keep them."""
    key = (like.dtype, like.device)
    buf = _SCRATCH.get(key)
    if buf is None or buf.numel() < numel:
        buf = _SCRATCH[key] = torch.empty(numel, dtype=like.dtype, device=like.device)
    return buf[:numel]


_SCRATCH: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


def ring_all_reduce(tensor: torch.Tensor, op: dist.ReduceOp.RedOpType = dist.ReduceOp.SUM,
                    group: dist.ProcessGroup | None = None, *,
                    segment_bytes: int = DEFAULT_SEGMENT_BYTES, window: int = DEFAULT_WINDOW) -> RingStats:
    """All-reduce ``tensor`` in place with the ring schedule; returns :class:`RingStats`.

    Drop-in for ``dist.all_reduce(tensor, op, group)`` with SUM, AVG, PRODUCT, MAX, MIN.
    Each chunk is cut into segments of at most ``segment_bytes``. One transfer is a segment's
    send to the right *and* the matching receive from the left, issued together by
    ``dist.batch_isend_irecv``: NCCL runs one batch as one group (``ncclGroupStart/End``, the
    coalescing branch of ``batch_isend_irecv`` in ``torch/distributed/distributed_c10d.py``),
    so the two halves cannot block each other. Lone ``irecv``/``isend`` calls on one NCCL group
    are serialized (see ``TORCH_NCCL_SHOW_EAGER_INIT_P2P_SERIALIZATION_WARNING`` in
    ``torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp``): every rank's first call, a receive,
    would wait for a send its neighbour has not issued yet. Gloo runs the same batches as
    plain isend/irecv. Up to ``window`` transfers are in flight; a segment is forwarded as
    soon as it has arrived (and been reduced): sending, receiving and adding overlap.
    """
    if op not in _COMBINE:
        raise ValueError(f"unsupported op {op!r}; use SUM, AVG, PRODUCT, MAX or MIN")
    if op == dist.ReduceOp.AVG and not tensor.is_floating_point():
        raise TypeError("ReduceOp.AVG needs a floating-point tensor")
    if window < 1 or segment_bytes < 1:
        raise ValueError("window and segment_bytes must be >= 1")
    group = group if group is not None else dist.group.WORLD
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    if n == 1 or tensor.numel() == 0:
        return RingStats(0, 0, 0, 0)
    work_tensor = tensor if tensor.is_contiguous() else tensor.contiguous()
    flat, size = work_tensor.view(-1), work_tensor.element_size()
    right = dist.get_global_rank(group, (rank + 1) % n)
    left = dist.get_global_rank(group, (rank - 1) % n)
    chunks = chunk_bounds(flat.numel(), n)
    n_seg = max(1, -(-(chunks[0][1] * size) // segment_bytes))  # chunk 0 is the longest
    seg = [_segments(a, b, n_seg) for a, b in chunks]  # seg[chunk][j] = (lo, hi)
    steps, combine = num_steps(n), _COMBINE[op]
    # Transfers in the order they complete; transfer i receives into scratch slot i % window.
    events = [(step, j) for step in range(steps) for j in range(n_seg)]
    slot_len = seg[0][0][1] - seg[0][0][0]  # the longest segment
    scratch = _scratch(window * slot_len, flat)
    in_flight: dict[int, tuple[list[Any], torch.Tensor | None, int, int]] = {}
    sent = received = messages = 0

    def start(i: int) -> None:
        """Transfer i: send segment j of this step's chunk, receive segment j of the next one."""
        nonlocal sent, received, messages
        step, j = events[i]
        ops = []
        lo, hi = seg[send_chunk(rank, step, n)][j]
        if hi > lo:  # an empty segment (tiny tensor) is skipped on both sides; the tag is i on both
            ops.append(dist.P2POp(dist.isend, flat[lo:hi], right, group, tag=i))
            sent += (hi - lo) * size
            messages += 1
        lo, hi = seg[recv_chunk(rank, step, n)][j]
        reducing = step < n - 1
        buf = scratch[(i % window) * slot_len:][:hi - lo] if reducing else flat[lo:hi]
        if hi > lo:
            ops.append(dist.P2POp(dist.irecv, buf, left, group, tag=i))
            received += (hi - lo) * size
        in_flight[i] = (dist.batch_isend_irecv(ops) if ops else [], buf if reducing else None, lo, hi)

    started = 0
    for i, (step, j) in enumerate(events):
        # Start every transfer whose send is ready: transfer k sends what transfer k - n_seg
        # received (the same segment, one step earlier), and at most `window` run at once.
        while started < len(events) and started < i + window and started - n_seg < i:
            start(started)
            started += 1
        works, buf, lo, hi = in_flight.pop(i)
        for work in works:
            work.wait()
        if buf is not None and hi > lo:
            combine(flat[lo:hi], buf)
        if step == n - 2 and op == dist.ReduceOp.AVG:
            lo, hi = seg[rank][j]  # this rank now owns chunk `rank`, fully summed
            flat[lo:hi].div_(n)
    if work_tensor is not tensor:
        tensor.copy_(work_tensor)
    return RingStats(sent, received, messages, steps)
