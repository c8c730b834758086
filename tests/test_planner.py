"""ddp_helpers.planner and its widget: predictions against what notebooks 11 and 12 measured
(read from their stored outputs), hand-worked pipeline and context-parallel cases, wrong layouts."""

import ast
import base64
import json
import math
import re
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from ddp_helpers.planner import LEAVES_OUT, PRESETS, Layout, ModelSpec, Transfer, plan, resolve
from ddp_helpers.sharding import make_stack, ring_bytes_sent, zero_formula
from ddp_helpers.tensor_parallel import MLP

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def stored_lines(name: str) -> list[str]:
    """Every line of text the notebook's stored outputs hold, '[rank 0] ' prefixes removed."""
    lines = []
    for cell in json.loads((NOTEBOOKS / name).read_text())["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("text") or out.get("data", {}).get("text/plain", "")
            lines += [line.removeprefix("[rank 0] ") for line in "".join(text).splitlines()]
    return lines


def cell_source(name: str, first_line: str) -> str:
    """The source of the notebook's code cell that starts with ``first_line`` (a worker script)."""
    cells = json.loads((NOTEBOOKS / name).read_text())["cells"]
    found = ["".join(c["source"]) for c in cells if "".join(c["source"]).startswith(first_line)]
    assert len(found) == 1, first_line
    return found[0]


def matching(lines: list[str], pattern: str) -> list[re.Match]:
    found = [m for line in lines if (m := re.fullmatch(pattern, line.strip()))]
    assert found, f"no stored output line matches {pattern!r}"
    return found


NB11, NB12 = "11_sharding_zero_fsdp.ipynb", "12_dtensor_tensor_parallel.ipynb"
STACK = ModelSpec.linear_stack((32, 64, 64, 8))  # make_stack()'s default widths, as 11's workers build it


# --------------------------------------------------------------------------- the runs' models


def test_models_rebuilt_from_the_workers_have_their_sizes():
    assert STACK.layer_params == tuple(m.weight.numel() + m.bias.numel() for m in make_stack()[::2])
    assert STACK.params == sum(p.numel() for p in make_stack().parameters()) == 6792
    assert matching(stored_lines(NB11), r"(\d+) parameters")[0][1] == str(STACK.params)
    dim, hidden = map(int, re.search(r"DIM, HIDDEN = (\d+), (\d+)", cell_source(NB12, "%%writefile scripts/12_comm")).groups())
    assert ModelSpec.mlp(dim, hidden).params == sum(p.numel() for p in MLP(dim, hidden).parameters())
    assert re.search(r"MLP\(dim=16, hidden=64\)", cell_source(NB12, "%%writefile scripts/12_megatron"))


# --------------------------------------------------------------------------- notebook 11


def test_state_per_rank_equals_notebook_11s_memory_table():
    """Section 5's table: DDP, ZeRO-1 and -2 by hand, FSDP2, measured on rank 0 of 2."""
    rows = matching(stored_lines(NB11), r"(DDP|ZeRO-1|ZeRO-2|ZeRO-3 \(FSDP2\))\s+\d+\s+(\d+)\s+(\d+) / (\d+) / (\d+)")
    measured = {m[1]: {"params": int(m[3]), "grads": int(m[4]), "optimizer": int(m[5])} for m in rows}
    assert len(measured) == 4
    for stage, name in enumerate(measured):
        predicted = plan(STACK, Layout(zero=stage), world_size=2)
        assert all(r.state == measured[name] for r in predicted.ranks), name
        assert sum(measured[name].values()) == int(next(m[2] for m in rows if m[1] == name))


def test_state_per_rank_equals_what_each_rank_of_notebook_11_held():
    """The worker's 'bytes held' line of each rank; ZeroRedundancyOptimizer's split is uneven by
    whole tensors, the planner's even: equal per rank in parameters and gradients, equal in sum."""
    held = matching(stored_lines(NB11), r"rank (\d): bytes held: ddp (\d+), zero1 (\d+), zero2 (\d+), zero_redundancy (\d+)")
    assert [int(m[1]) for m in held] == [0, 1]
    for m in held:
        rank = int(m[1])
        for value, layout in zip(m.groups()[1:4], (Layout(), Layout(zero=1), Layout(zero=2)), strict=True):
            assert sum(plan(STACK, layout, 2).ranks[rank].state.values()) == int(value)
    zro = plan(STACK, Layout(zero=1, zero_style="broadcast"), 2)
    moments = [int(m[1]) for m in matching(stored_lines(NB11), r"rank \d owns tensors of .* Adam moments (\d+) bytes")]
    assert sum(moments) == sum(r.optimizer for r in zro.ranks) and moments[0] != zro.ranks[0].optimizer
    assert sum(int(m[5]) for m in held) == sum(sum(r.state.values()) for r in zro.ranks)


def test_traffic_equals_notebook_11s_counted_collectives():
    lines = stored_lines(NB11)
    last = matching(lines, r"last step: DDP (\{.*\}) \| ZeRO-1 (\{.*\}) \| ZeRO-2 (\{.*\})")[0]
    for value, layout in zip(last.groups(), (Layout(), Layout(zero=1), Layout(zero=2)), strict=True):
        assert plan(STACK, layout, 2).ranks[0].payload() == ast.literal_eval(value)
    zro = ast.literal_eval(matching(lines, r"last step: (\{.*broadcast.*\})")[0][1])
    assert plan(STACK, Layout(zero=1, zero_style="broadcast"), 2).ranks[1].payload() == zro
    fsdp = {m[1] == "True": m for m in matching(
        lines, r"reshard_after_forward=(True|False): forward (\{.*\}), backward (\{.*\}), parameter bytes held in between (\d+)")}
    for reshard, m in fsdp.items():
        rank = plan(STACK, Layout(zero=3, reshard_after_forward=reshard), 2).ranks[0]
        assert rank.counts("forward") == ast.literal_eval(m[2]) and rank.counts("backward") == ast.literal_eval(m[3])
        assert rank.params_between_passes == int(m[4])
    recorded = ast.literal_eval(matching(lines, r"\{'forward_bytes'.*\} (\{'forward_bytes'.*\})")[0][1])  # exercise 3
    rank = plan(STACK, Layout(zero=3), 2).ranks[0]
    assert recorded == {"forward_bytes": rank.payload("forward"), "backward_bytes": rank.payload("backward")}


def test_times_s_of_notebook_11_from_the_planner():
    """Section 5: DDP and ZeRO-1 move the parameters' bytes twice, ZeroRedundancyOptimizer and ZeRO-3 three times."""
    moved = ast.literal_eval(matching(stored_lines(NB11), r"(\{'DDP': \d+.*\})")[0][1])
    halves = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1, "broadcast": 1}
    layouts = {"DDP": Layout(), "ZeRO-1 by hand": Layout(zero=1),
               "ZeroRedundancyOptimizer": Layout(zero=1, zero_style="broadcast"), "ZeRO-3 (FSDP2)": Layout(zero=3)}
    for name, layout in layouts.items():
        payload = plan(STACK, layout, 2).ranks[0].payload()
        assert sum(halves[op] * b for op, b in payload.items()) == moved[name] * 4 * STACK.params


def test_zero_stages_agree_with_zero_formula():
    """Without ZeRO-1's reduced slice, the planner is sharding.zero_formula (the ZeRO paper)."""
    for numel in (6792, 7, 1000, 33088):
        for world in range(1, 9):
            for stage in range(4):
                rank = plan(ModelSpec((numel,), dim=1, hidden=1), Layout(zero=stage), world).ranks[-1]
                slice_ = -(-numel // world) * 4 if stage == 1 else 0
                assert {**rank.state, "grads": rank.grads - slice_} == zero_formula(numel, world, stage)


def test_zero_paper_figure_with_mixed_precision_bytes():
    """Notebook 11, exercise 2: 7.5 billion parameters on 64 GPUs, 2 + 2 + 12 bytes."""
    model = ModelSpec((7_500_000_000,), dim=1, hidden=1, param_bytes=2, grad_bytes=2, optimizer_bytes=12)
    per_gpu = [sum(plan(model, Layout(zero=s, zero_style="broadcast" if s == 1 else "reduce_scatter"), 64)
                   .ranks[0].state.values()) / 1e9 for s in range(4)]
    assert [round(gb, 1) for gb in per_gpu] == [120.0, 31.4, 16.6, 1.9]
    assert matching(stored_lines(NB11), r"stage 1: ([\d.]+) GB per GPU")[0][1] == "31.4"


# --------------------------------------------------------------------------- notebook 12


def test_dp_and_tp_bytes_equal_notebook_12s_tables():
    lines = stored_lines(NB12)
    model = ModelSpec.mlp(64, 256)
    header = lines.index(next(line for line in lines if line.split() == ["batch", "DP", "bytes", "TP", "bytes"]))
    saved = lines.index(next(line for line in lines if line.split()[:5] == ["batch", "DP", "saved", "TP", "saved"]))
    for table in (lines[header + 1:header + 4], lines[saved + 1:saved + 4]):
        assert all(re.fullmatch(r"\s*\d+\s+\d+\s+\d+", line) for line in table)
    for bytes_line, saved_line in zip(lines[header + 1:header + 4], lines[saved + 1:saved + 4], strict=True):
        batch, dp_bytes, tp_bytes = map(int, bytes_line.split())
        assert int(saved_line.split()[0]) == batch
        dp, tp = (plan(model, Layout(tp=t, batch=batch), 2).ranks[0] for t in (1, 2))
        assert dp.payload() == {"all_reduce": dp_bytes} and tp.payload() == {"all_reduce": tp_bytes}
        assert [dp.activations, tp.activations] == list(map(int, saved_line.split()[1:]))
        assert tp.counts() == {"all_reduce": 2}
    state = ast.literal_eval(matching(lines, r"state per rank (\{.*\}); activations.*")[0][1])
    assert state == {name: sum(plan(model, Layout(tp=t), 2).ranks[1].state.values())
                     for name, t in (("DP", 1), ("TP", 2))}


def test_tensor_parallel_split_equals_notebook_12s_megatron_run():
    lines = stored_lines(NB12)
    hand, dense = map(int, matching(lines, r"parameters per rank: hand (\d+), dense (\d+)")[0].groups())
    model = ModelSpec.mlp(16, 64)
    assert model.params == dense
    assert all(r.params == 4 * hand for r in plan(model, Layout(tp=2), 2).ranks)
    comm = ast.literal_eval(matching(lines, r"collectives: (\{'hand'.*\})")[0][1])
    rank = plan(model, Layout(tp=2, batch=8), 2).ranks[0]
    assert comm["hand"] == comm["library"] == {"forward": rank.counts("forward"), "backward": rank.counts("backward")}


def test_two_d_mesh_rank_coordinates_and_shard():
    """Section 5: rank r at (dp, tp) = (r // 2, r % 2); up.weight's shard is a quarter of it."""
    lines = stored_lines(NB12)
    coords = [tuple(map(int, m.groups())) for m in matching(lines, r"rank \d: \(dp, tp\) = \((\d), (\d)\).*")]
    p = plan(ModelSpec.mlp(16, 64), Layout(tp=2, zero=3), 4)
    assert coords == [(r.coords["dp"], r.coords["tp"]) for r in p.ranks]
    up_weight_local = math.prod(map(int, matching(lines, r".*up\.weight local \[(\d+), (\d+)\]")[0].groups()))
    assert up_weight_local == 64 * 16 // 4
    assert p.ranks[0].params == 4 * ((2128 - 16) // 2 + 16) // 2  # FSDP's half of the TP half


def test_exercise_12_2_crossover_from_the_planner():
    """TP over 2 GPUs moves fewer bytes than DP's gradient all-reduce below micro-batch 3."""
    gpt = ModelSpec.transformer(24, 2048, heads=16, seq_len=2048)
    dp_bytes = plan(gpt, Layout(), 2).ranks[0].payload()["all_reduce"]
    tp_bytes = {b: plan(gpt, Layout(tp=2, batch=b), 2).ranks[0].payload()["all_reduce"] for b in range(1, 8)}
    crossover = next(b for b, t in tp_bytes.items() if t >= dp_bytes)
    assert matching(stored_lines(NB12), r".*TP moves fewer bytes for micro-batches below (\d+)")[0][1] == str(crossover)


def test_transformer_activations_are_korthikantis():
    s, h, a, layers = 2048, 2048, 16, 24
    gpt = ModelSpec.transformer(layers, h, heads=a, seq_len=s)
    assert plan(gpt, Layout(), 1).ranks[0].activations == layers * (34 * s * h + 5 * a * s * s)
    assert plan(gpt, Layout(tp=2), 2).ranks[0].activations == layers * s * h * (10 + 24 // 2) + layers * 5 * a * s * s // 2


# --------------------------------------------------------------------------- pipelines, by hand

PIPE = ModelSpec(layer_params=(100,) * 8, dim=10, hidden=10, saved_shared=10)


@pytest.mark.parametrize("schedule, live", [("gpipe", [8, 8, 8, 8]), ("1f1b", [4, 3, 2, 1])])
def test_pipeline_live_microbatches_activations_and_sends(schedule, live):
    p = plan(PIPE, Layout(pp=4, microbatches=8, batch=16, schedule=schedule), 4)
    assert [r.live_microbatches for r in p.ranks] == live
    # 2 samples a microbatch, 2 layers a stage, 10 values of 4 bytes saved per sample and layer
    assert [r.activations for r in p.ranks] == [n * 2 * 2 * 10 * 4 for n in live]
    assert all(r.params == 200 * 4 and r.optimizer == 200 * 8 for r in p.ranks)
    message = 2 * 10 * 4  # one microbatch at a boundary
    assert [r.payload("forward") for r in p.ranks] == [{"send": 8 * message}] * 3 + [{}]
    assert [r.payload("backward") for r in p.ranks] == [{}] + [{"send": 8 * message}] * 3
    assert [r.counts() for r in p.ranks] == [{"send": 8}, {"send": 16}, {"send": 16}, {"send": 8}]
    assert [r.sent() for r in p.ranks] == [640, 1280, 1280, 640]


def test_pipeline_of_notebook_13s_memory_run_by_hand():
    """8 blocks of Linear(32, 32) + Tanh on 4 stages, 8 microbatches of 4 rows: a stage of 2 blocks
    saves 3 tensors of 4 x 32 floats per microbatch (the second Linear's input is the first Tanh's output)."""
    blocks = ModelSpec(layer_params=(32 * 32 + 32,) * 8, dim=32, hidden=32, saved_shared=3 * 32 // 2)
    one_microbatch = 3 * 4 * 32 * 4
    for schedule, live in (("gpipe", [8] * 4), ("1f1b", [4, 3, 2, 1])):
        p = plan(blocks, Layout(pp=4, microbatches=8, batch=32, schedule=schedule), 4)
        assert [r.activations for r in p.ranks] == [n * one_microbatch for n in live]
        assert [r.payload("forward") for r in p.ranks][0] == {"send": 8 * 4 * 32 * 4}


def test_pipeline_with_data_parallel_groups():
    p = plan(PIPE, Layout(dp=2, pp=2, microbatches=2, batch=8), 4)
    assert [(r.coords["pp"], r.coords["dp"]) for r in p.ranks] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(r.payload(group="dp") == {"all_reduce": 400 * 4} for r in p.ranks)  # its stage's gradients
    assert p.ranks[0].payload(group="pp") == {"send": 2 * (2 * 10 * 4)}  # 2 microbatches of 2 samples


# --------------------------------------------------------------------------- context parallelism, by hand

ATTN = ModelSpec(layer_params=(64,), dim=8, hidden=8, kv_width=6, heads=4, seq_len=8, saved_shared=8)


def test_ring_attention_sends_k_and_v_blocks_n_minus_1_times():
    p = plan(ATTN, Layout(cp=4), 4)
    block = 2 * (8 // 4) * 6 * 4  # K and V: 2 tokens x 6 values x 4 bytes each
    for r in p.ranks:
        assert r.payload("forward", "cp") == {"send": 3 * block} and r.counts("forward", "cp") == {"send": 3}
        assert r.payload("backward", "cp") == {"send": 3 * block}  # dK, dV back along the ring
        assert r.activations == 2 * 8 * 4  # a quarter of the sequence
        assert r.payload(group="dp") == {"all_reduce": 64 * 4}  # cp ranks share the parameters


def test_ring_and_ulysses_sent_of_notebook_14s_sizes_by_hand():
    """16 tokens, 4 heads of 6 on 2 ranks: a ring rank sends its 8 tokens' K and V once (2 x 8 x 24 floats)
    each way; Ulysses sends half of each of its 4 all-to-alls of 8 x 24 floats each way."""
    heads = ModelSpec(layer_params=(0,), dim=24, hidden=24, kv_width=24, heads=4, seq_len=16)
    for style in ("ring", "ulysses"):
        rank = plan(heads, Layout(cp=2, cp_style=style), 2).ranks[0]
        assert [rank.sent("cp", "forward"), rank.sent("cp", "backward")] == [2 * 8 * 24 * 4] * 2 == [1536, 1536]


def test_ulysses_all_to_all_of_q_k_v_and_output():
    p = plan(ATTN, Layout(cp=2, cp_style="ulysses"), 2)
    one = (8 // 2) * 8 * 4  # 4 tokens x 8 values x 4 bytes
    assert p.ranks[0].payload("forward", "cp") == {"all_to_all": 4 * one}
    assert p.ranks[0].counts("backward", "cp") == {"all_to_all": 4}
    assert p.ranks[0].sent("cp") == 2 * 4 * one / 2  # an all-to-all sends (N-1)/N of its input
    with pytest.raises(ValueError, match="heads do not divide.*cp_style='ring'"):
        plan(ModelSpec(**{**ATTN.__dict__, "heads": 3}), Layout(cp=2, cp_style="ulysses"), 2)


def test_sent_matches_the_ring_of_notebook_01():
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        for n in (2, 3, 4, 8):
            assert Transfer("dp", op, "backward", 1200, 1, n).sent == ring_bytes_sent(op, 1200, n)


# --------------------------------------------------------------------------- wrong input


@pytest.mark.parametrize("layout, world, message", [
    (Layout(tp=4), 6, r"world size 6 does not divide by tp x pp x cp = 4 x 1 x 1 = 4: use a world size that is a multiple of 4"),
    (Layout(dp=2, tp=2), 6, r"= 4 is not the world size 6: set dp=None"),
    (Layout(tp=0), 2, r"tp must be at least 1"),
    (Layout(zero=4), 2, r"zero must be 0 \(DDP\), 1, 2 or 3"),
    (Layout(schedule="zb"), 2, r"schedule must be one of"),
    (Layout(zero=2, zero_style="broadcast"), 2, r"ZeroRedundancyOptimizer\) is ZeRO-1: set zero=1"),
])
def test_layouts_that_do_not_fit_the_world_say_what_to_change(layout, world, message):
    with pytest.raises(ValueError, match=message):
        plan(STACK, layout, world)


@pytest.mark.parametrize("model, layout, world, message", [
    (ModelSpec.mlp(64, 100), Layout(tp=3), 3, r"hidden size 100 does not split over tp=3 ranks: choose tp among 1, 2, 4, 5"),
    (PIPE, Layout(pp=3), 3, r"8 layers do not split into pp=3 equal stages: choose pp among 1, 2, 4, 8"),
    (PIPE, Layout(batch=5), 2, r"global batch 5 does not split over dp=2 ranks"),
    (PIPE, Layout(pp=2, microbatches=3, batch=4), 2, r"4 samples do not split into 3 microbatches"),
    (ATTN, Layout(cp=3), 3, r"sequence length 8 does not split over cp=3 ranks"),
    (STACK, Layout(cp=2), 2, r"cp > 1 needs attention"),
    (ModelSpec((101,), dim=4, hidden=4), Layout(tp=2), 2, r"101 split parameters do not divide by tp=2"),
])
def test_models_that_do_not_split_say_what_to_change(model, layout, world, message):
    with pytest.raises(ValueError, match=message):
        plan(model, layout, world)


def test_resolve_fills_dp_and_batch():
    assert resolve(Layout(tp=2, microbatches=3), 8) == Layout(dp=4, tp=2, microbatches=3, batch=12)


def test_leaves_out_says_what_is_not_counted():
    text = " ".join(LEAVES_OUT)
    for gap in ("bucket", "bubble", "recomputation", "ZeroRedundancyOptimizer", "_templated_ring_attention_backward"):
        assert gap in text


# --------------------------------------------------------------------------- the picture and the widget


def test_draw_plan_and_table():
    from ddp_helpers.viz.figures import png_bytes
    from ddp_helpers.viz.planner_widget import draw_plan, plan_table

    p = plan(PIPE, Layout(dp=2, pp=2, microbatches=2, batch=8, schedule="1f1b"), 4)
    fig = draw_plan(p)
    assert len(fig.axes) == 2 and len(fig.axes[0].patches) == 4 * 4  # 4 parts x 4 ranks
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["params", "grads", "optimizer", "activations", "dp", "pp"]
    assert png_bytes(fig).startswith(b"\x89PNG") and not plt.fignum_exists(fig.number)
    table = plan_table(p).splitlines()
    assert table[0].split() == ["ranks", "params", "grads", "optimizer", "activations", "total", "sent"]
    assert [line.split()[:2] for line in table[1:]] == [["0,", "1"], ["2,", "3"]]  # the two stages: 2 and 1 live microbatches


def test_widget_recomputes_reports_errors_and_carries_a_png():
    pytest.importorskip("ipywidgets")
    from ddp_helpers.viz.planner_widget import planner_widget

    box = planner_widget()
    c = box.controls
    assert box.error is None and box.plan.world_size == 8 and box.plan.layout.pp == 2
    before = box.png
    c["zero"].value = "ZeRO-3 (FSDP)"
    assert box.plan.layout.zero == 3 and box.png != before
    assert box.plan.ranks[0].params == plan(PRESETS[c["model"].value], box.plan.layout, 8).ranks[0].params
    c["tp"].value = 3
    assert box.plan is None and "does not split over tp=3" in box.error and box.summary.value.startswith("<b>")
    c["tp"].value = 2
    c["model"].value = "notebook 11: make_stack (6,792 parameters)"
    assert box.plan is None and "layers do not split into pp=2" in box.error
    c["pp"].value = 1
    assert box.plan.world_size == 4 and "<table>" in box.table.value
    bundle = box._repr_mimebundle_()
    assert base64.b64decode(bundle["image/png"]) == box.png and box.png.startswith(b"\x89PNG")
    assert "application/vnd.jupyter.widget-view+json" in bundle and "run the cell" in bundle["text/plain"]
    plt.close("all")


# --------------------------------------------------------------------------- experts (notebook 15)

NB15 = "15_expert_parallelism.ipynb"


def test_expert_parallel_bytes_equal_notebook_15s_counted_padded_all_to_alls():
    """Section 3's launch printed each rank's bytes sent (forward, backward) for the padded dispatch; the
    planner, given the worker's sizes (read from its source), predicts them exactly, and bounds the uneven ones."""
    source = cell_source(NB15, "%%writefile scripts/15_traffic.py")
    sizes = dict(re.findall(r'\("(DIM|HIDDEN|EXPERTS|TOKENS)", "(\d+)"\)', source))
    top_k, factor = re.search(r"TOP_K, FACTOR = (\d+), ([\d.]+)", source).groups()
    nproc = int(re.search(r'torchrun\("scripts/15_traffic.py", nproc=(\d+)', "\n".join(
        "".join(c["source"]) for c in json.loads((NOTEBOOKS / NB15).read_text())["cells"])).group(1))
    layer = ModelSpec.moe(int(sizes["DIM"]), int(sizes["HIDDEN"]), int(sizes["EXPERTS"]), top_k=int(top_k),
                          tokens=int(sizes["TOKENS"]))
    p = plan(layer, Layout(ep=nproc, capacity_factor=float(factor)), nproc)
    counted = {style: [[int(m[3]), int(m[4])] for m in matching(stored_lines(NB15), r"rank (\d): (" + style
                       + r") all-to-alls \d+, bytes sent \(forward, backward\) \[(\d+), (\d+)\]")]
               for style in ("padded", "uneven")}
    assert len(counted["padded"]) == len(counted["uneven"]) == nproc
    assert counted["padded"] == [[r.sent("ep", "forward"), r.sent("ep", "backward")] for r in p.ranks]
    assert all(u <= pad for rank_u, rank_p in zip(counted["uneven"], counted["padded"], strict=True)
               for u, pad in zip(rank_u, rank_p, strict=True))
    assert all(r.counts("forward", "ep") == {"all_to_all": 2} for r in p.ranks)   # dispatch and combine


def test_moe_spec_counts_the_layers_parameters():
    from ddp_helpers.experts import MoE

    moe = MoE(8, 16, 4, top_k=2)
    spec = ModelSpec.moe(8, 16, 4, top_k=2)
    assert spec.params == sum(p.numel() for p in moe.parameters()) == 8 * 4 + 4 * 2 * 8 * 16
    assert spec.layer_params == (moe.router.numel(),) and spec.expert_params == moe.w1[0].numel() + moe.w2[0].numel()


def test_expert_and_data_parallel_groups_by_hand():
    """4 ranks, ep 2: experts 2 per rank, their gradients over the 2 replicas; the router over all 4;
    the all-to-alls within the pair: 4 experts x C rows, half of it leaves."""
    spec = ModelSpec.moe(8, 16, 4, top_k=1, tokens=32)
    p = plan(spec, Layout(ep=2), 4)
    cap = math.ceil(1.0 * 32 * 1 / 4)
    for r in p.ranks:
        assert r.params == 4 * (32 + 2 * 256) and r.optimizer == 8 * (32 + 2 * 256)
        assert r.payload(group="dp") == {"all_reduce": 32 * 4}
        assert r.payload(group="edp") == {"all_reduce": 2 * 256 * 4}
        assert r.payload("forward", "ep") == {"all_to_all": 2 * 4 * cap * 8 * 4}
        assert r.sent("ep", "forward") == 2 * 4 * cap * 8 * 4 / 2
    whole = plan(spec, Layout(), 4).ranks[0]       # no ep: every rank holds every expert, one all-reduce
    assert whole.payload() == {"all_reduce": spec.params * 4} and whole.params == spec.params * 4
    assert plan(spec, Layout(ep=4), 4).ranks[0].payload(group="edp") == {}   # one holder per expert


@pytest.mark.parametrize("model, layout, world, message", [
    (ModelSpec.moe(8, 16, 4), Layout(ep=3), 3, r"4 experts do not split over ep=3 ranks: choose ep among 1, 2, 4"),
    (ModelSpec.moe(8, 16, 4), Layout(ep=4), 2, r"ep=4 does not divide the dp x cp = 2 ranks"),
    (STACK, Layout(ep=2), 2, r"ep > 1 needs experts"),
    (ModelSpec.moe(8, 16, 4), Layout(tp=2), 2, r"experts with tp=1 and zero=0 only"),
    (ModelSpec.moe(8, 16, 4), Layout(ep=2, capacity_factor=0), 2, r"capacity_factor must be positive"),
])
def test_expert_layouts_that_do_not_fit_say_what_to_change(model, layout, world, message):
    with pytest.raises(ValueError, match=message):
        plan(model, layout, world)
