"""Pipeline parallelism helpers shared by notebook 13 and its worker scripts.

- :func:`make_mlp` and :func:`stage_module`: a small MLP of identical blocks, and the contiguous
  blocks one pipeline stage owns.
- :class:`Spin`: an identity layer that burns a fixed amount of compute in forward and twice that
  in backward, so that stage compute can be made to dominate communication and Python overhead.
- :class:`CostedBlock` and :func:`make_costed_mlp`: blocks whose forward, input gradient and weight
  gradient each cost a fixed wait, a cost model in which only the schedule decides the idle time.
- :class:`StageTimer`: timestamps around a ``torch.distributed.pipelining`` stage's
  ``forward_one_chunk``, ``backward_one_chunk`` and ``backward_weight_one_chunk``: the real timeline.
- :func:`stage_ids` and :func:`build_schedule`: which stages a rank owns under a schedule, and the
  schedule built over them (stages by hand, timed), ready to ``step``; ``stage_to_rank`` asks torch's
  schedule which rank runs each stage.
- :func:`bubble_fraction` (the formula) and :func:`measured_bubble` (from timelines).
- :func:`peak_live` (microbatches whose activations a stage holds) and :class:`SavedBytes` (the
  bytes autograd saves for backward, counted with ``saved_tensors_hooks``).
"""

from __future__ import annotations

import copy
import inspect
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from ddp_helpers.models import seeded

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from torch.distributed.pipelining.stage import _PipelineStageBase

# What a recorded stage call was: F forward, B full backward, I input-gradient backward only
# (zero-bubble schedules), W weight-gradient backward.
KINDS = ("F", "B", "I", "W")


class _SpinFn(torch.autograd.Function):
    """Identity whose forward runs ``rounds`` matmuls of ``work`` and backward twice as many."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, work: torch.Tensor, rounds: int) -> torch.Tensor:
        ctx.work, ctx.rounds = work, rounds
        _burn(work, rounds)
        return x.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        _burn(ctx.work, 2 * ctx.rounds)  # a backward costs about two forwards
        return grad, None, None


def _burn(work: torch.Tensor, rounds: int) -> None:
    with torch.no_grad():
        for _ in range(rounds):
            torch.mm(work, work)


class Spin(nn.Module):
    """An identity layer that costs compute: ``rounds`` matmuls of a size x size matrix forward,
    ``2 * rounds`` backward. ``rounds=0`` makes it free. Gradients pass through unchanged."""

    def __init__(self, rounds: int = 0, size: int = 64) -> None:
        super().__init__()
        self.rounds = rounds
        self.register_buffer("work", torch.full((size, size), 1.0 / size), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _SpinFn.apply(x, self.work, self.rounds) if self.rounds else x


def make_mlp(dim: int = 16, blocks: int = 8, seed: int = 0, spin_rounds: int = 0) -> nn.Sequential:
    """``blocks`` blocks of Linear(dim, dim) + Tanh (+ a :class:`Spin` when ``spin_rounds``), seeded:
    every rank that calls it with the same arguments builds the same model. The caller's random
    state is left as it was (:func:`~ddp_helpers.models.seeded`)."""
    with seeded(seed):
        return nn.Sequential(*(nn.Sequential(nn.Linear(dim, dim), nn.Tanh(),
                                             *([Spin(spin_rounds)] if spin_rounds else []))
                               for _ in range(blocks)))


class _Wait(torch.autograd.Function):
    """Identity (a copy) whose backward first calls ``sleep(seconds)``: a fixed cost on one gradient path."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, seconds: float, sleep: Callable[[float], None]) -> torch.Tensor:
        ctx.seconds, ctx.sleep = seconds, sleep
        return x.clone()  # a copy, not a view: the zero-bubble schedules detach stage outputs in place

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        ctx.sleep(ctx.seconds)
        return grad, None, None


class CostedBlock(nn.Module):
    """Linear(dim, dim) + Tanh with three fixed costs: ``forward_s`` seconds in forward,
    ``input_grad_s`` on the path to its input's gradient and ``weight_grad_s`` on the path to its
    weight's gradient. A full backward pays both; a zero-bubble schedule pays the first in its
    input-gradient step (I) and the second in its weight step (W), except on the first stage, where
    torch skips I and pays both in W (``backward_weight_one_chunk``, ``torch/distributed/pipelining/
    stage.py``). ``sleep`` waits (``time.sleep``;
    a test passes a recorder). Waiting, not computing, keeps ranks that share CPU cores from slowing
    each other down, so only the schedule and the real sends decide when a rank is idle."""

    def __init__(self, dim: int, forward_s: float, input_grad_s: float, weight_grad_s: float,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__()
        if min(forward_s, input_grad_s, weight_grad_s) < 0:
            raise ValueError("costs are seconds, at least 0")
        self.linear = nn.Linear(dim, dim)
        self.forward_s, self.input_grad_s, self.weight_grad_s, self.sleep = forward_s, input_grad_s, weight_grad_s, sleep

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.sleep(self.forward_s)
        weight = _Wait.apply(self.linear.weight, self.weight_grad_s, self.sleep)
        x = _Wait.apply(x, self.input_grad_s, self.sleep)  # no cost where x needs no gradient (stage 0's input)
        return torch.tanh(F.linear(x, weight, self.linear.bias))


def make_costed_mlp(dim: int, blocks: int, forward_s: float, input_grad_s: float, weight_grad_s: float,
                    seed: int = 0, sleep: Callable[[float], None] = time.sleep) -> nn.Sequential:
    """``blocks`` :class:`CostedBlock` s, initialised from ``seed`` without touching the caller's
    random state (:func:`~ddp_helpers.models.seeded`)."""
    with seeded(seed):
        return nn.Sequential(*(CostedBlock(dim, forward_s, input_grad_s, weight_grad_s, sleep)
                               for _ in range(blocks)))


def stage_range(blocks: int, stage: int, stages: int) -> range:
    """The block indices of ``stage`` when ``blocks`` blocks are cut into ``stages`` equal stages."""
    if blocks % stages:
        raise ValueError(f"{blocks} blocks do not split evenly into {stages} stages")
    per = blocks // stages
    if not 0 <= stage < stages:
        raise ValueError(f"stage {stage} is not one of 0..{stages - 1}")
    return range(stage * per, (stage + 1) * per)


def stage_module(model: nn.Sequential, stage: int, stages: int) -> nn.Sequential:
    """A copy of the blocks ``stage`` owns (its own parameters, so the stage's gradients are its own)."""
    return copy.deepcopy(nn.Sequential(*(model[i] for i in stage_range(len(model), stage, stages))))


@dataclass(frozen=True)
class Event:
    kind: str     # one of KINDS
    stage: int    # the stage's index in the pipeline
    chunk: int    # the microbatch
    start: float  # seconds, time.perf_counter (one clock for every process of a machine on Linux)
    end: float


class StageTimer:
    """Records an :class:`Event` around every compute call of the stages it wraps.

    It replaces the three methods on the stage *instance* (not module hooks: backward hooks on the
    stage's module break the zero-bubble schedules, which detach views in place)."""

    _METHODS = ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk")

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.events: list[Event] = []

    def wrap(self, stage: _PipelineStageBase) -> None:
        for name in self._METHODS:
            setattr(stage, name, self._timed(getattr(stage, name), name, stage.stage_index))

    def _timed(self, method: Callable, name: str, stage_index: int) -> Callable:
        signature = inspect.signature(method)

        def timed(*args: object, **kwargs: object) -> object:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            if name == "forward_one_chunk":
                kind, chunk = "F", bound.arguments["fwd_chunk_id"]
            elif name == "backward_one_chunk":
                kind, chunk = ("B" if bound.arguments["full_backward"] else "I"), bound.arguments["bwd_chunk_id"]
            else:
                kind, chunk = "W", bound.arguments["bwd_chunk_id"]
            start = self.clock()
            try:
                return method(*args, **kwargs)
            finally:
                self.events.append(Event(kind, stage_index, int(chunk), start, self.clock()))

        return timed

    def as_dicts(self) -> list[dict]:
        return [asdict(e) for e in self.events]


# The schedules of torch.distributed.pipelining by their class name less "Schedule". One stage per
# rank, or two: looped (rank r owns r and r + p) or in a V (rank r owns r and 2p - 1 - r).
SINGLE = ("GPipe", "1F1B")
V_SHAPED = ("ZBVZeroBubble", "DualPipeV")
LOOPED = ("Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble")


def stage_ids(schedule: str, rank: int, ranks: int) -> tuple[list[int], int]:
    """(the stage indices ``rank`` owns under ``schedule``, the number of stages in all)."""
    if schedule in SINGLE:
        return [rank], ranks
    if schedule in V_SHAPED:
        return [rank, 2 * ranks - 1 - rank], 2 * ranks
    if schedule in LOOPED:
        return [rank, rank + ranks], 2 * ranks
    raise ValueError(f"unknown schedule {schedule!r}: one of {SINGLE + LOOPED + V_SHAPED}")


@dataclass
class BuiltSchedule:
    schedule: object               # a torch.distributed.pipelining schedule
    modules: list[nn.Module]       # this rank's stage modules, in the order of ``ids``
    ids: list[int]
    stages: int
    timer: StageTimer
    pipeline_stages: list = field(default_factory=list)  # torch's PipelineStage objects, as ``ids``

    def stage_to_rank(self) -> dict[int, int]:
        """torch's map from every stage index to the rank that runs it: a multi-stage schedule's
        ``stage_index_to_group_rank`` (``PipelineScheduleMulti.__init__`` builds it and hands it to its
        stages); a single-stage schedule keeps none, and its stage's own map, the one its sends use
        (``PipelineStage.stage_index_to_group_rank``, ``torch/distributed/pipelining/stage.py``)."""
        mapping = getattr(self.schedule, "stage_index_to_group_rank", None)
        if mapping is None:
            if not self.pipeline_stages:
                raise ValueError("no torch stage to ask: build the schedule with build_schedule")
            mapping = self.pipeline_stages[0].stage_index_to_group_rank
        return {int(stage): int(rank) for stage, rank in sorted(mapping.items())}

    def step(self, x: torch.Tensor, y: torch.Tensor, **kwargs: object) -> object:
        """One step: the first stage feeds the whole batch ``x``, the last stage gets the target ``y``."""
        first, last = 0 in self.ids, self.stages - 1 in self.ids
        return self.schedule.step(*([x] if first else []), **({"target": y} if last else {}), **kwargs)


def build_schedule(name: str, model: nn.Sequential, rank: int, ranks: int, device: torch.device,
                   microbatches: int, loss_fn: Callable, **schedule_kwargs: object) -> BuiltSchedule:
    """``torch.distributed.pipelining``'s ``Schedule<name>`` over this rank's stages of ``model``
    (copies of its blocks, :func:`stage_module`), made by hand with ``PipelineStage`` and timed."""
    import torch.distributed.pipelining as pp

    ids, n = stage_ids(name, rank, ranks)
    modules = [stage_module(model, i, n) for i in ids]
    stages = [pp.PipelineStage(m, i, n, device) for m, i in zip(modules, ids, strict=True)]
    timer = StageTimer()
    for stage in stages:
        timer.wrap(stage)
    schedule_cls = getattr(pp, f"Schedule{name}")
    schedule = schedule_cls(stages[0] if name in SINGLE else stages, n_microbatches=microbatches,
                            loss_fn=loss_fn, **schedule_kwargs)
    return BuiltSchedule(schedule, modules, ids, n, timer, stages)


def _events(items: Iterable[Event | dict]) -> list[Event]:
    return [e if isinstance(e, Event) else Event(**e) for e in items]


def bubble_fraction(stages: int, microbatches: int) -> float:
    """GPipe's idle fraction of every device, (p - 1) / (m + p - 1), for equal forward and backward
    times per stage and free communication."""
    if stages < 1 or microbatches < 1:
        raise ValueError("stages and microbatches must be at least 1")
    return (stages - 1) / (microbatches + stages - 1)


def measured_bubble(events_by_rank: Sequence[Iterable[Event | dict]]) -> float:
    """The mean over ranks of the fraction of the step a rank spent outside its stage calls; the
    step runs from the first call's start on any rank to the last call's end on any rank."""
    ranks = [_events(evs) for evs in events_by_rank]
    every = [e for evs in ranks for e in evs]
    if not every:
        raise ValueError("no events")
    span = max(e.end for e in every) - min(e.start for e in every)
    busy = [sum(e.end - e.start for e in evs) for evs in ranks]
    return sum(1 - b / span for b in busy) / len(ranks)


def order(events: Iterable[Event | dict]) -> list[str]:
    """A rank's calls in time order as short labels: 'F0' forward of microbatch 0, 'B3', 'I1', 'W1'."""
    return [f"{e.kind}{e.chunk}" for e in sorted(_events(events), key=lambda e: e.start)]


def peak_live(labels: Sequence[str]) -> int:
    """The most microbatches a stage held activations for at once: +1 at each forward, -1 when a
    microbatch's backward is done (its full backward B, or its weight backward W after an I)."""
    live = peak = 0
    for label in labels:
        if label[0] == "F":
            live += 1
            peak = max(peak, live)
        elif label[0] in "BW":
            live -= 1
    return peak


class _Held:
    """One saved tensor, detached (a saved non-leaf that kept its graph would keep itself alive)."""

    __slots__ = ("counter", "key", "tensor")

    def __init__(self, tensor: torch.Tensor, counter: SavedBytes) -> None:
        self.tensor, self.counter = tensor.detach(), counter
        self.key = (tensor.data_ptr(), tensor.nbytes)
        counter._add(self.key, tensor.nbytes)

    def __del__(self) -> None:
        self.counter._drop(self.key)


class SavedBytes:
    """Counts the bytes autograd holds for backward while active (``with SavedBytes(...) as saved:``):
    ``now`` and ``peak``. A tensor saved twice (a layer's output that the next layer saves as its
    input) counts once; ``exclude`` tensors (the parameters, which exist anyway) do not count."""

    def __init__(self, exclude: Iterable[torch.Tensor] = ()) -> None:
        self._skip = {t.data_ptr() for t in exclude}
        self._refs: dict[tuple[int, int], int] = {}
        self.now = self.peak = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def _pack(self, tensor: torch.Tensor):
        if tensor.data_ptr() in self._skip:
            return tensor.detach()
        return _Held(tensor, self)

    @staticmethod
    def _unpack(packed: torch.Tensor | _Held) -> torch.Tensor:
        return packed.tensor if isinstance(packed, _Held) else packed

    def _add(self, key: tuple[int, int], nbytes: int) -> None:
        if self._refs.get(key, 0) == 0:
            self.now += nbytes
            self.peak = max(self.peak, self.now)
        self._refs[key] = self._refs.get(key, 0) + 1

    def _drop(self, key: tuple[int, int]) -> None:
        self._refs[key] -= 1
        if self._refs[key] == 0:
            del self._refs[key]
            self.now -= key[1]

    def __enter__(self) -> SavedBytes:
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)


_COLORS = {"F": "#4c72b0", "B": "#dd8452", "I": "#c44e52", "W": "#55a868"}


def draw_timeline(ax: Axes, events_by_rank: Sequence[Iterable[Event | dict]], title: str = "") -> None:
    """One row per rank, one box per stage call (F blue, B orange, I red, W green), labelled with
    the microbatch and, where a rank owns several stages, the stage (``2:F1``). Times from the
    step's first call, in milliseconds."""
    ranks = [_events(evs) for evs in events_by_rank]
    t0 = min(e.start for evs in ranks for e in evs)
    several = any(len({e.stage for e in evs}) > 1 for evs in ranks)
    for row, evs in enumerate(ranks):
        for e in evs:
            left, width = 1e3 * (e.start - t0), 1e3 * (e.end - e.start)
            ax.broken_barh([(left, width)], (row - 0.4, 0.8), facecolors=_COLORS[e.kind], edgecolors="white")
            label = f"{e.stage}:{e.kind}{e.chunk}" if several else f"{e.kind}{e.chunk}"
            ax.text(left + width / 2, row, label, ha="center", va="center", fontsize=6, color="white")
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in range(len(ranks))])
    ax.invert_yaxis()
    ax.set_xlabel("ms since the step's first stage call")
    ax.set_title(title, fontsize=9)
