"""Facts about torch's context parallelism that notebook 14 states but cannot run on a CPU (torch's ring
needs the CUDA attention kernels): each test reads the installed torch and names the notebook cell (by
its id) that states the fact. The series' rule sends such checks of torch's source here, out of the
notebooks (notebooks/README.md, "Proof cells" and "Every stack")."""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest
import torch

from ddp_helpers.context_parallel import positions

cp_attention = pytest.importorskip("torch.distributed.tensor.experimental._context_parallel._attention")


def _function(fn) -> ast.FunctionDef:
    return ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]


def _calls(node: ast.AST, attribute: str) -> list[ast.Call]:
    """The calls of ``something.attribute(...)`` under ``node``, in source order."""
    found = [n for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == attribute]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def test_custom_ops_lists_only_cuda_attention_kernels():
    """nb14-29: the table of handlers lists only CUDA kernels (flash, efficient, cuDNN; forward and
    backward), so the CPU kernel of F.scaled_dot_product_attention has no ring (nb14-31, nb14-34)."""
    kernels = sorted(op.name() for op in cp_attention.custom_ops)
    assert len(kernels) == 6 and sum(name.endswith("_backward") for name in kernels) == 3
    assert all(any(kind in name for kind in ("flash", "efficient", "cudnn")) for name in kernels)
    assert torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default not in cp_attention.custom_ops


def test_default_options_gather_all_blocks_balance_and_merge_in_float32():
    """nb14-35: `_cp_options.rotate_method` is `_RotateMethod.ALL_GATHER` by default, load balance is
    on, and the merge runs in float32 (`convert_to_f32`)."""
    options = cp_attention._cp_options
    assert options.rotate_method == cp_attention._RotateMethod.ALL_GATHER
    assert options.enable_load_balance is True and options.convert_to_f32 is True


def exchange_comes_before_the_op(ring: ast.FunctionDef) -> bool:
    """In the loop over the steps, the first ``rotater.exchange_buffers`` call precedes every ``op(...)``."""
    loop = next(n for n in ast.walk(ring) if isinstance(n, ast.For))
    exchange = _calls(loop, "exchange_buffers")
    ops = [n for n in ast.walk(loop) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "op"]
    return bool(exchange and ops) and exchange[0].lineno < min(n.lineno for n in ops)


def passes_kv_gradients_every_step(backward: ast.FunctionDef) -> bool:
    """``dkv_rotater.exchange_buffers`` is a statement of the step loop's own body, under no ``if``."""
    loop = next(n for n in ast.walk(backward) if isinstance(n, ast.For))
    passes_on = [n for n in loop.body
                 if any(getattr(c.func.value, "id", "") == "dkv_rotater" for c in _calls(n, "exchange_buffers"))]
    return bool(passes_on) and not any(isinstance(n, ast.If) for n in passes_on)


def test_the_ring_starts_the_next_exchange_before_it_computes():
    """nb14-35: `_templated_ring_attention` calls `rotater.exchange_buffers` before the attention op of
    the same step, so the transfer overlaps the kernel."""
    assert exchange_comes_before_the_op(_function(cp_attention._templated_ring_attention))


def test_the_backward_passes_the_kv_gradients_on_at_every_step():
    """nb14-17 and nb14-35: `_templated_ring_attention_backward` rotates the key/value gradients in the
    body of its loop over the steps, not under the test that skips a hidden step, so every rank takes
    part in every hop of the backward."""
    assert passes_kv_gradients_every_step(_function(cp_attention._templated_ring_attention_backward))


_COMPUTE_FIRST = """
def ring(size):
    for i in range(size):
        out = op(i)
        rotater.exchange_buffers(i)
"""
_EXCHANGE_FIRST = _COMPUTE_FIRST.replace("        out = op(i)\n", "") + "        out = op(i)\n"
_SKIPPED_PASS = """
def backward(size, skip):
    for i in range(size):
        if not skip:
            dkv_rotater.exchange_buffers(i)
"""
_EVERY_PASS = _SKIPPED_PASS.replace("        if not skip:\n    ", "")


@pytest.mark.parametrize(("check", "source", "holds"), [
    (exchange_comes_before_the_op, _COMPUTE_FIRST, False), (exchange_comes_before_the_op, _EXCHANGE_FIRST, True),
    (passes_kv_gradients_every_step, _SKIPPED_PASS, False), (passes_kv_gradients_every_step, _EVERY_PASS, True)])
def test_the_source_checks_refuse_the_wrong_order_and_a_skipped_pass(check, source, holds):
    assert check(ast.parse(source).body[0]) is holds


def test_torchs_head_tail_load_balancer_is_the_zigzag_layout():
    """nb14-18: torch's default load balancer for context_parallel (`_HeadTailLoadBalancer`) gives rank r
    chunks r and 2N - 1 - r, the zigzag layout of `ddp_helpers.context_parallel.positions`."""
    from torch.distributed.tensor.experimental._context_parallel._load_balancer import _HeadTailLoadBalancer

    for seq_len, world in ((16, 2), (16, 4), (24, 3)):
        order = _HeadTailLoadBalancer(seq_len, world, "cpu")._generate_indices().flatten()
        mine = torch.cat([positions("zigzag", seq_len, world, rank) for rank in range(world)])
        assert torch.equal(order.long(), mine.long()), (seq_len, world)
    assert not torch.equal(order.long(), torch.cat([positions("contiguous", 24, 3, r) for r in range(3)]).long())
