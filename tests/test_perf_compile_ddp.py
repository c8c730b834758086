"""ddp_helpers.perf.compile_ddp: what torch.compile captures around DDP (eager backend, one rank)."""

from ddp_helpers.perf import compile_ddp


def test_compile_variants_count_graphs(single_rank_group):
    r = compile_ddp.compile_variants(width=64, depth=2, batch=4, steps=2)
    v = {(x["way"], x["model"]): x for x in r["variants"].values()}
    wrap, inner = compile_ddp.WRAP_THEN_COMPILE, compile_ddp.COMPILE_THEN_WRAP
    assert v[wrap, "nn.Sequential"]["graphs"] == 0          # DDP.forward breaks; nn code is not traced
    assert v[wrap, "nn.Sequential"]["graph_breaks"] > 0
    assert v[inner, "nn.Sequential"]["graphs"] == 1 and v[inner, "nn.Sequential"]["graph_breaks"] == 0
    assert v[wrap, "UserMLP"]["graphs"] == 1
    assert all(x["equal"] for x in v.values())
