"""A planner of memory and traffic per rank: DP, ZeRO-1/2/3, TP, PP, CP and EP, by arithmetic alone.

    from ddp_helpers.planner import Layout, ModelSpec, plan

    model = ModelSpec.linear_stack((32, 64, 64, 8))          # notebook 11's make_stack()
    p = plan(model, Layout(zero=3), world_size=2)            # FSDP2 on 2 ranks
    p.ranks[0].state          # {"params", "grads", "optimizer"}: the keys of sharding.state_bytes
    p.ranks[0].payload()      # {"all_gather": ..., "reduce_scatter": ...}: the keys of CommCounter.payload

Ranks sit on a mesh ``(pp, dp, cp, tp)``, tp innermost: rank = ((s·dp + d)·cp + c)·tp + t, as
``init_device_mesh(..., (pp, dp, cp, tp))`` numbers them. What each rank holds and sends:

* **parameters**: its pipeline stage's layers (``pp`` cuts the layers into equal runs); tensor
  parallelism splits each layer's parameters over ``tp`` except ``tp_replicated`` of them (a
  row-parallel bias, norms), which every TP rank keeps whole. The ranks that hold the same
  parameters (``dp × cp`` of them) average gradients and share ZeRO's shards: a shard is
  ``ceil(n / (dp·cp))`` values of the ``n`` this rank's stage and TP slice hold.
* **ZeRO** (``zero``): 0 is DDP; 1 shards the optimizer state; 2 the gradients too; 3 (FSDP) the
  parameters too. ZeRO-1 by reduce-scatter (``ShardedAdam``, notebook 11) holds the averaged
  gradient slice next to the full local gradients until the update: ``n + shard`` gradient
  values, as notebook 11 measured (the ZeRO paper's table counts ``n``).
  ``zero_style="broadcast"`` is ``ZeroRedundancyOptimizer``: DDP's all-reduce, then every owner
  broadcasts its parameters.
* **activations**: the tensors saved for backward, per token and layer: ``saved_shared``
  elements that TP does not split (a layer's input) and ``saved_split`` that it does (the
  hidden width), times ``act_bytes``; times the tokens of one microbatch on this rank (its
  ``batch / dp / microbatches`` samples, ``seq_len / cp`` tokens each), the stage's layers and
  the microbatches alive at once: 1 without a pipeline (accumulation runs them in turn), ``m``
  for GPipe, ``min(m, pp - stage)`` for 1F1B.
* **traffic** (:class:`Transfer`): payload bytes as ``sharding.CommCounter`` counts them (the
  full result of an all-reduce, all-gather or broadcast; the input of a reduce-scatter or an
  all-to-all; a point-to-point message as sent), per group and pass. ``sent`` turns a payload
  into the bytes one rank sends with notebook 01's ring. Per microbatch and layer, TP runs
  ``tp_allreduces_per_layer`` all-reduces of the boundary activation (tokens x ``dim``) in forward
  and as many in backward; a stage sends that activation to the next stage and its gradient back
  (every TP rank its own copy); ring attention sends this rank's K and V blocks ``cp - 1`` times
  in forward and their gradients back as often in backward; Ulysses runs four all-to-alls (q, k,
  v, output) each way.
* **experts** (``ModelSpec.experts`` > 0, :meth:`ModelSpec.moe`): every layer holds ``experts``
  experts of ``expert_params`` parameters besides its ``layer_params`` (the router and the rest).
  Expert parallelism (``ep``) borrows the data-parallel ranks: each group of ``ep`` consecutive dp
  ranks holds all the experts, ``experts / ep`` on each rank, and the ``dp·cp / ep`` ranks holding the
  same experts average their gradients (group ``"edp"``) while the other parameters are averaged over
  all ``dp·cp`` (group ``"dp"``). Per layer and microbatch the dispatch and the combine are one
  all-to-all each way, padded to capacity: ``experts × C`` rows of ``dim``, with
  ``C = ceil(capacity_factor · tokens · top_k / experts)`` for this rank's tokens (GShard's layout, the
  same bytes whatever the router does; an uneven dispatch sends at most that).

What the planner leaves out is listed in :data:`LEAVES_OUT`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace

SCHEDULES = ("gpipe", "1f1b")
CP_STYLES = ("ring", "ulysses")
ZERO_STYLES = ("reduce_scatter", "broadcast")

LEAVES_OUT: tuple[str, ...] = (
    "time: bytes only, no bandwidth, latency, overlap of communication with compute, or pipeline bubble",
    "allocator overheads: the CUDA context, NCCL buffers, fragmentation, temporary tensors, the loss "
    "and the logits",
    "DDP's gradient buckets (one more gradient-sized buffer unless gradient_as_bucket_view=True), "
    "how many buckets it all-reduces, and its broadcasts of buffers and of the bucket order in the "
    "first steps",
    "FSDP's gathered parameters while a layer computes (one or two layers at a time, more with "
    "prefetching), and the padding when a tensor's first dimension does not divide by the ranks",
    "ZeroRedundancyOptimizer's split by whole tensors (uneven: the planner splits evenly, so only the "
    "sum over ranks is exact) and Adam's step counters (one scalar per tensor)",
    "mixed precision's extra copies: FSDP2's MixedPrecisionPolicy keeps fp32 shards and gathers bf16 "
    "copies, and reduces in param_dtype unless reduce_dtype is set; give bytes per element instead",
    "activation recomputation, sequence parallelism, interleaved and zero-bubble schedules, the "
    "embedding and the loss on the first and last stages, and FSDP with more than one microbatch "
    "(gathers counted once per step)",
    "ring attention's backward in torch: the planner sends dK/dV back along the ring (a hand "
    "ring with a differentiable hop); torch's context_parallel rotates K/V again and dK/dV once more "
    "(torch/distributed/tensor/experimental/_context_parallel/_attention.py, "
    "_templated_ring_attention_backward), and by default all-gathers K/V once instead of passing "
    "blocks (_AllGatherRotater), so every rank then holds all of K/V",
    "causal load balance (contiguous blocks against zigzag)",
    "experts: the uneven (dropless) dispatch and its count exchange (the planner pads every expert to "
    "capacity), an MoE layer's activations (dispatched copies, the experts' hidden units), expert "
    "parallelism with tensor parallelism or ZeRO, and shared experts",
)


@dataclass(frozen=True)
class ModelSpec:
    """A model as the planner sees it: parameters per layer, widths, and bytes per element.

    ``dim`` is the width a token has between layers (what TP all-reduces and a pipeline stage
    sends); ``hidden`` the width TP splits (an MLP's hidden units, the attention heads' total);
    ``kv_width`` the width of K (and of V) per token and layer, 0 for a model without attention.
    ``saved_shared`` and ``saved_split`` define the activation model: elements saved for
    backward per token and layer, not split and split by TP.
    """

    layer_params: tuple[int, ...]
    dim: int
    hidden: int
    tp_replicated: int = 0
    saved_shared: int = 0
    saved_split: int = 0
    seq_len: int = 1
    kv_width: int = 0
    heads: int = 1
    tp_allreduces_per_layer: int = 1
    param_bytes: int = 4
    grad_bytes: int = 4
    optimizer_bytes: int = 8  # Adam in fp32: two moments of 4 bytes
    act_bytes: int = 4
    name: str = "model"
    experts: int = 0  # experts per layer (0: a dense model)
    expert_params: int = 0  # parameters of one expert
    top_k: int = 1  # experts each token goes to

    @property
    def params(self) -> int:
        return sum(self.layer_params) + self.layers * self.experts * self.expert_params

    @property
    def layers(self) -> int:
        return len(self.layer_params)

    @classmethod
    def linear_stack(cls, widths: tuple[int, ...], **kwargs: int | str) -> ModelSpec:
        """``sharding.make_stack(widths)``: one layer per Linear(a, b), a·b + b parameters each.
        Its activations are not measured in the series; the estimate spreads what the stack saves
        (each Linear's input, each ReLU's output) evenly over the layers, and ``dim`` is the widest."""
        pairs = list(zip(widths, widths[1:], strict=False))
        saved = sum(widths[:-1]) + sum(widths[1:-1])  # each Linear's input, each ReLU's output
        defaults = {"saved_shared": -(-saved // len(pairs)), "name": f"make_stack{tuple(widths)}"}
        return cls(layer_params=tuple(a * b + b for a, b in pairs), dim=max(widths), hidden=max(widths),
                   **{**defaults, **kwargs})

    @classmethod
    def mlp(cls, dim: int, hidden: int, **kwargs: int | str) -> ModelSpec:
        """``tensor_parallel.MLP(dim, hidden)`` as one layer: ``up`` and ``down`` split by TP,
        ``down.bias`` whole; it saves its input (``dim``) and the hidden activation (``hidden``)."""
        return cls(layer_params=(2 * dim * hidden + hidden + dim,), dim=dim, hidden=hidden, tp_replicated=dim,
                   saved_shared=dim, saved_split=hidden, **{"name": f"MLP({dim}, {hidden})", **kwargs})

    @classmethod
    def moe(cls, dim: int, hidden: int, experts: int, top_k: int = 1, tokens: int = 1,
            **kwargs: int | str) -> ModelSpec:
        """``experts.MoE(dim, hidden, experts, top_k)`` as one layer: the router (dim x experts) and
        ``experts`` experts of two weight matrices (dim x hidden, hidden x dim); ``tokens`` per sample."""
        return cls(layer_params=(dim * experts,), dim=dim, hidden=hidden, seq_len=tokens, experts=experts,
                   expert_params=2 * dim * hidden, top_k=top_k,
                   **{"name": f"MoE({dim}, {hidden}, {experts} experts, top-{top_k})", **kwargs})

    @classmethod
    def transformer(cls, layers: int, hidden: int, heads: int, seq_len: int, name: str = "") -> ModelSpec:
        """A GPT-style model in mixed precision (2-byte parameters, gradients and activations, 12
        bytes of fp32 master weights and moments): 12·hidden² parameters per layer, two TP blocks,
        and the activations of Korthikanti et al. (2022), 34·s·b·h + 5·a·s²·b bytes per layer
        without recomputation: 10 bytes per token not split by TP, 24 + 5·a·s/h split."""
        return cls(layer_params=(12 * hidden * hidden,) * layers, dim=hidden, hidden=hidden, seq_len=seq_len,
                   kv_width=hidden, heads=heads, tp_allreduces_per_layer=2, param_bytes=2, grad_bytes=2,
                   optimizer_bytes=12, act_bytes=2, saved_shared=5 * hidden,
                   saved_split=12 * hidden + 5 * heads * seq_len // 2,
                   name=name or f"GPT {layers}x{hidden}, seq {seq_len}")


@dataclass(frozen=True)
class Layout:
    """How the ranks divide the work. ``dp=None`` takes what the world size leaves.

    ``batch`` is the global batch in samples per step (None: one sample per microbatch and dp
    rank); ``microbatches`` splits each data-parallel rank's share (for a pipeline, or for
    accumulation without one).
    """

    dp: int | None = None
    tp: int = 1
    pp: int = 1
    cp: int = 1
    zero: int = 0
    zero_style: str = "reduce_scatter"
    reshard_after_forward: bool = True
    microbatches: int = 1
    schedule: str = "1f1b"
    cp_style: str = "ring"
    batch: int | None = None  # None: one sample per microbatch and dp rank
    ep: int = 1  # expert parallelism: ranks (within dp) that share out the experts
    capacity_factor: float = 1.0


@dataclass(frozen=True)
class Transfer:
    """One kind of communication of a step: ``count`` operations of ``payload`` bytes in all."""

    group: str  # "dp" (the dp x cp ranks that share parameters), "tp", "pp", "cp", "ep" or "edp" (same experts)
    collective: str  # CommCounter's names, plus "send" for point-to-point
    phase: str  # "forward", "backward" or "step" (the optimizer's update)
    payload: int
    count: int | None  # None: the implementation decides (DDP's buckets)
    group_size: int

    @property
    def sent(self) -> float:
        """Bytes this rank sends for it: a ring all-reduce 2(N-1)/N of the payload, an all-gather,
        reduce-scatter or all-to-all (N-1)/N, a broadcast (N-1)/N on average over the ranks, a send all."""
        n = self.group_size
        factor = {"all_reduce": 2 * (n - 1) / n, "send": 1.0}.get(self.collective, (n - 1) / n)
        return factor * self.payload


@dataclass(frozen=True)
class RankPlan:
    """One rank's bytes and traffic. ``params_between_passes``: parameter bytes held from forward
    to backward (FSDP without ``reshard_after_forward`` keeps its layers gathered)."""

    rank: int
    coords: dict[str, int]
    params: int
    grads: int
    optimizer: int
    activations: int
    params_between_passes: int
    live_microbatches: int
    transfers: tuple[Transfer, ...] = field(default=())

    @property
    def state(self) -> dict[str, int]:
        return {"params": self.params, "grads": self.grads, "optimizer": self.optimizer}

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer + self.activations

    def _select(self, phase: str | None, group: str | None) -> list[Transfer]:
        return [t for t in self.transfers if phase in (None, t.phase) and group in (None, t.group)]

    def payload(self, phase: str | None = None, group: str | None = None) -> dict[str, int]:
        """Payload bytes by collective, as ``CommCounter.payload`` (optionally one pass or group)."""
        total: Counter[str] = Counter()
        for t in self._select(phase, group):
            total[t.collective] += t.payload
        return dict(total)

    def counts(self, phase: str | None = None, group: str | None = None) -> dict[str, int]:
        """How many operations, by collective, as ``CommCounter.counts``; DDP's buckets are left out."""
        total: Counter[str] = Counter()
        for t in self._select(phase, group):
            if t.count is not None:
                total[t.collective] += t.count
        return dict(total)

    def sent(self, group: str | None = None, phase: str | None = None) -> float:
        """Bytes this rank sends in one step (optionally one group or pass), by :attr:`Transfer.sent`."""
        return sum(t.sent for t in self._select(phase, group))


@dataclass(frozen=True)
class Plan:
    model: ModelSpec
    layout: Layout  # with dp filled in
    ranks: tuple[RankPlan, ...]

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    def rows(self) -> list[dict[str, int | str]]:
        """One row per rank for a table: coordinates, bytes, bytes sent (rounded)."""
        return [{"rank": r.rank, "pp, dp, cp, tp": ", ".join(str(v) for v in r.coords.values()),
                 "params": r.params, "grads": r.grads, "optimizer": r.optimizer,
                 "activations": r.activations, "total": r.total, "sent": round(r.sent())} for r in self.ranks]


def _divisors(n: int) -> str:
    """The first few divisors of ``n``, for a message: "1, 2, 4, 8, ..." or all of them."""
    found = [d for d in range(1, min(n, 64) + 1) if n % d == 0]
    return ", ".join(map(str, found[:6])) + (", ..." if len(found) > 6 or n > 64 else "")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def resolve(layout: Layout, world_size: int) -> Layout:
    """``layout`` with ``dp`` filled in from ``world_size``; ValueError saying what to change."""
    for name in ("tp", "pp", "cp", "ep", "microbatches"):
        _require(getattr(layout, name) >= 1, f"{name} must be at least 1, got {getattr(layout, name)}")
    _require(layout.zero in (0, 1, 2, 3), f"zero must be 0 (DDP), 1, 2 or 3 (FSDP), got {layout.zero!r}")
    _require(layout.schedule in SCHEDULES, f"schedule must be one of {SCHEDULES}, got {layout.schedule!r}")
    _require(layout.cp_style in CP_STYLES, f"cp_style must be one of {CP_STYLES}, got {layout.cp_style!r}")
    _require(layout.zero_style in ZERO_STYLES, f"zero_style must be one of {ZERO_STYLES}, got {layout.zero_style!r}")
    _require(layout.zero_style == "reduce_scatter" or layout.zero == 1,
             "zero_style='broadcast' (ZeroRedundancyOptimizer) is ZeRO-1: set zero=1")
    _require(layout.batch is None or layout.batch >= 1, f"batch must be at least 1, got {layout.batch}")
    inner = layout.tp * layout.pp * layout.cp
    if layout.dp is None:
        _require(world_size % inner == 0,
                 f"world size {world_size} does not divide by tp x pp x cp = {layout.tp} x {layout.pp} x "
                 f"{layout.cp} = {inner}: use a world size that is a multiple of {inner}, or tp, pp, cp "
                 f"whose product divides {world_size}")
        layout = replace(layout, dp=world_size // inner)
    _require(layout.dp >= 1, f"dp must be at least 1, got {layout.dp}")
    _require(layout.dp * inner == world_size,
             f"dp x tp x pp x cp = {layout.dp} x {layout.tp} x {layout.pp} x {layout.cp} = {layout.dp * inner} "
             f"is not the world size {world_size}: set dp=None to take what the world size leaves, or "
             f"change the world size to {layout.dp * inner}")
    _require((layout.dp * layout.cp) % layout.ep == 0,
             f"ep={layout.ep} does not divide the dp x cp = {layout.dp * layout.cp} ranks that share parameters: "
             f"expert parallelism borrows them; choose ep among {_divisors(layout.dp * layout.cp)}")
    _require(layout.capacity_factor > 0, f"capacity_factor must be positive, got {layout.capacity_factor}")
    return layout if layout.batch else replace(layout, batch=layout.dp * layout.microbatches)


def _check(model: ModelSpec, lay: Layout) -> None:
    """Every division the plan makes must be exact; say which knob to change when one is not."""
    _require(model.layers % lay.pp == 0,
             f"{model.layers} layers do not split into pp={lay.pp} equal stages: choose pp among "
             f"{_divisors(model.layers)}")
    _require(model.hidden % lay.tp == 0,
             f"hidden size {model.hidden} does not split over tp={lay.tp} ranks: choose tp among "
             f"{_divisors(model.hidden)}")
    for i, n in enumerate(model.layer_params):
        _require((n - model.tp_replicated) % lay.tp == 0,
                 f"layer {i}'s {n - model.tp_replicated} split parameters do not divide by tp={lay.tp}: "
                 f"choose tp among {_divisors(math.gcd(*[m - model.tp_replicated for m in model.layer_params]))}")
    per_dp, rest = divmod(lay.batch, lay.dp)
    _require(rest == 0, f"global batch {lay.batch} does not split over dp={lay.dp} ranks: use a batch that "
                        f"is a multiple of {lay.dp}")
    _require(per_dp % lay.microbatches == 0,
             f"each dp rank's {per_dp} samples do not split into {lay.microbatches} microbatches: choose "
             f"microbatches among {_divisors(per_dp)}")
    if lay.cp > 1:
        _require(model.kv_width > 0, "cp > 1 needs attention (kv_width > 0): this model has none; set cp=1")
    _require(model.seq_len % lay.cp == 0,
             f"sequence length {model.seq_len} does not split over cp={lay.cp} ranks: choose cp among "
             f"{_divisors(model.seq_len)}")
    if lay.cp > 1 and lay.cp_style == "ulysses":
        _require(model.heads % (lay.cp * lay.tp) == 0,
                 f"Ulysses gives each cp rank whole heads: {model.heads} heads do not divide by cp x tp = "
                 f"{lay.cp * lay.tp}; choose cp among {_divisors(model.heads // math.gcd(model.heads, lay.tp))} "
                 f"or use cp_style='ring'")


def _check_experts(model: ModelSpec, lay: Layout) -> None:
    if lay.ep > 1:
        _require(model.experts > 0, "ep > 1 needs experts (ModelSpec.experts > 0): this model has none; set ep=1")
        _require(model.experts % lay.ep == 0,
                 f"{model.experts} experts do not split over ep={lay.ep} ranks: choose ep among "
                 f"{_divisors(model.experts)}")
    if model.experts:
        _require(lay.tp == 1 and lay.zero == 0,
                 "the planner models experts with tp=1 and zero=0 only (see LEAVES_OUT)")
        _require(1 <= model.top_k <= model.experts, f"top_k must be 1..{model.experts}, got {model.top_k}")


def capacity(tokens: int, experts: int, top_k: int, factor: float) -> int:
    """Slots per expert: ceil(factor · tokens · top_k / experts), as ``experts.capacity``."""
    return math.ceil(factor * tokens * top_k / experts)


def _expert_traffic(model: ModelSpec, lay: Layout, layers: int, tokens: int, n_experts: int) -> list[Transfer]:
    """The dispatch and combine all-to-alls (padded to capacity) and the expert replicas' all-reduce."""
    out = []
    if lay.ep > 1:
        rows = model.experts * capacity(tokens, model.experts, model.top_k, lay.capacity_factor)
        k = 2 * layers * lay.microbatches  # dispatch and combine
        out += [Transfer("ep", "all_to_all", phase, k * rows * model.dim * model.act_bytes, k, lay.ep)
                for phase in ("forward", "backward")]
    replicas = lay.dp * lay.cp // lay.ep
    if lay.ep > 1 and replicas > 1:
        out.append(Transfer("edp", "all_reduce", "backward", n_experts * model.grad_bytes, None, replicas))
    return out


def _coords(rank: int, lay: Layout) -> dict[str, int]:
    rest, t = divmod(rank, lay.tp)
    rest, c = divmod(rest, lay.cp)
    s, d = divmod(rest, lay.dp)
    return {"pp": s, "dp": d, "cp": c, "tp": t}


def _data_parallel(n: int, shard: int, model: ModelSpec, lay: Layout, layers: int) -> list[Transfer]:
    """The gradient averaging and ZeRO's collectives over the dp x cp ranks that share parameters."""
    g = lay.dp * lay.cp
    if g == 1:
        return []
    grads, params, padded = n * model.grad_bytes, n * model.param_bytes, shard * g
    if lay.zero == 0:
        return [Transfer("dp", "all_reduce", "backward", grads, None, g)]
    if lay.zero_style == "broadcast":  # ZeroRedundancyOptimizer: DDP's all-reduce, owners broadcast
        return [Transfer("dp", "all_reduce", "backward", grads, None, g),
                Transfer("dp", "broadcast", "step", params, None, g)]
    if lay.zero in (1, 2):  # the all-reduce split in two, the update in between
        return [Transfer("dp", "reduce_scatter", "backward", padded * model.grad_bytes, 1, g),
                Transfer("dp", "all_gather", "step", padded * model.param_bytes, 1, g)]
    gathers = [Transfer("dp", "all_gather", "forward", params, layers, g)]  # FSDP: one unit per layer
    if lay.reshard_after_forward:
        gathers.append(Transfer("dp", "all_gather", "backward", params, layers, g))
    return gathers + [Transfer("dp", "reduce_scatter", "backward", grads, layers, g)]


def _activation_traffic(model: ModelSpec, lay: Layout, stage: int, layers: int, tokens: int) -> list[Transfer]:
    """TP's all-reduces, the pipeline's sends and CP's K/V exchange, for one step of m microbatches."""
    m, out = lay.microbatches, []
    boundary = tokens * model.dim * model.act_bytes  # one microbatch's activation at a layer boundary
    if lay.tp > 1:
        k = layers * model.tp_allreduces_per_layer * m
        out += [Transfer("tp", "all_reduce", phase, k * boundary, k, lay.tp) for phase in ("forward", "backward")]
    if lay.pp > 1 and stage < lay.pp - 1:
        out.append(Transfer("pp", "send", "forward", m * boundary, m, 2))  # activations to the next stage
    if lay.pp > 1 and stage > 0:
        out.append(Transfer("pp", "send", "backward", m * boundary, m, 2))  # their gradients back
    if lay.cp > 1:
        kv_block = 2 * tokens * (model.kv_width // lay.tp) * model.act_bytes  # this rank's K and V
        if lay.cp_style == "ring":
            k = layers * m * (lay.cp - 1)
            out += [Transfer("cp", "send", phase, k * kv_block, k, lay.cp) for phase in ("forward", "backward")]
        else:  # Ulysses: q, k, v to head sharding and the output back, each an all-to-all
            k = 4 * layers * m
            one = tokens * (model.dim // lay.tp) * model.act_bytes
            out += [Transfer("cp", "all_to_all", phase, k * one, k, lay.cp) for phase in ("forward", "backward")]
    return out


def plan(model: ModelSpec, layout: Layout, world_size: int) -> Plan:
    """Each rank's bytes of parameters, gradients, optimizer state and activations, and the
    traffic of one training step, for ``model`` laid out as ``layout`` on ``world_size`` ranks."""
    lay = resolve(layout, world_size)
    _check(model, lay)
    _check_experts(model, lay)
    per_stage = model.layers // lay.pp
    tokens = lay.batch // lay.dp // lay.microbatches * (model.seq_len // lay.cp)  # one microbatch, this rank
    ranks = []
    for rank in range(world_size):
        coords = _coords(rank, lay)
        stage = coords["pp"]
        mine = model.layer_params[stage * per_stage:(stage + 1) * per_stage]
        n = sum((p - model.tp_replicated) // lay.tp + model.tp_replicated for p in mine)
        n_experts = per_stage * model.experts // lay.ep * model.expert_params  # 0 for a dense model
        if lay.ep == 1:  # every rank holds every expert: averaged with the rest
            n, n_experts = n + n_experts, 0
        shard = -(-n // (lay.dp * lay.cp))
        z = lay.zero
        grads = {0: n, 1: n if lay.zero_style == "broadcast" else n + shard, 2: shard, 3: shard}[z]
        if lay.pp == 1:
            live = 1
        else:
            live = lay.microbatches if lay.schedule == "gpipe" else min(lay.microbatches, lay.pp - stage)
        per_token = model.saved_shared + model.saved_split // lay.tp
        params = ((shard if z == 3 else n) + n_experts) * model.param_bytes
        ranks.append(RankPlan(
            rank=rank, coords=coords, params=params, grads=(grads + n_experts) * model.grad_bytes,
            optimizer=((shard if z else n) + n_experts) * model.optimizer_bytes,
            activations=live * tokens * per_stage * per_token * model.act_bytes,
            params_between_passes=params if z < 3 or lay.reshard_after_forward else (n + n_experts) * model.param_bytes,
            live_microbatches=live,
            transfers=tuple(_data_parallel(n, shard, model, lay, per_stage)
                            + _activation_traffic(model, lay, stage, per_stage, tokens)
                            + _expert_traffic(model, lay, per_stage, tokens, n_experts))))
    return Plan(model=model, layout=lay, ranks=tuple(ranks))


PRESETS: dict[str, ModelSpec] = {
    "notebook 11: make_stack (6,792 parameters)": ModelSpec.linear_stack((32, 64, 64, 8)),
    "notebook 12: MLP(64, 256) (33,088 parameters)": ModelSpec.mlp(64, 256),
    "GPT 24 layers x 2048, seq 2048 (1.2 billion)": ModelSpec.transformer(24, 2048, heads=16, seq_len=2048),
}
