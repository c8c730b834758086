"""Issue 38, items 3, 4 and 6: the checks in any front end, with the truth from the lesson's own data, and one
coercion rule for every value.

- Front ends: the lesson's runs are found from the running notebook's folder (JPY_SESSION_NAME, VS Code's
  __vsc_ipynb_file__), else from the kernel's working directory (nbclient, a front end that names nothing, a
  UUID session name); a missing run's message lists the folders searched.
- Truth: 04.2, 12.1, 12.3 and 14.1 make the exercise's data again from its seed, so a learner's loop that
  rebinds `x`, `y`, `k` or `v` neither breaks a right answer nor passes a wrong one.
- Forms: numbers as strings, torch.Size, nested lists, dicts keyed by rank, counts, keyword-only functions,
  float32 values; and values that used to crash a check (None in a list, an int or an open file for a path,
  a truncated checkpoint) are refused with a hint naming the argument and the form expected.

The expected values here are worked out independently of the checks (by hand, or with torch in the way the
notebook's solution cells do), never with a check's private reference.
"""

from __future__ import annotations

import ast
import io
import json
import math
import types
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from exercise_calls import refused_text  # tests/ is on sys.path

from ddp_helpers import exercises, series
from ddp_helpers.exercises import core, nb10, nb11
from ddp_helpers.models import ToyModel
from ddp_helpers.tensor_parallel import MLP


def grads_of(model, loss):
    return [g.detach() for g in torch.autograd.grad(loss, list(model.parameters()))]


# --- the lessons' data, as the exercise cells make it ---------------------------------------------------------

torch.manual_seed(0)
M4, X4, Y4 = ToyModel(), torch.randn(8, 10), torch.randn(8, 5)  # 04.2's cell
_G0 = grads_of(M4, F.mse_loss(M4(X4[:6]), Y4[:6]))
_G1 = grads_of(M4, F.mse_loss(M4(X4[6:]), Y4[6:]))
PLAIN = [(a + b) / 2 for a, b in zip(_G0, _G1, strict=True)]
WEIGHTED = [(1.5 * a + 0.5 * b) / 2 for a, b in zip(_G0, _G1, strict=True)]
NAMES4 = [n for n, _ in M4.named_parameters()]

torch.manual_seed(0)
D121, X121 = MLP(16, 64), torch.randn(8, 16)  # 12.1's cell
PARTIALS = [(torch.relu(X121 @ D121.up.weight[r].T + D121.up.bias[r]) @ D121.down.weight[:, r].T).detach()
            for r in (slice(0, 32), slice(32, 64))]

torch.manual_seed(0)
D123, X123, Y123 = MLP(16, 64), torch.randn(16, 16), torch.randn(16, 16)  # 12.3's cell
_H = [torch.autograd.grad(F.mse_loss(D123(a), b, reduction="sum"), [D123.up.weight])[0]
      for a, b in zip(X123.chunk(2), Y123.chunk(2), strict=True)]
AVERAGED = ((_H[0] + _H[1]) / 2).detach()

torch.manual_seed(1)
Q, K, V = (torch.randn(1, 2, 16, 6) for _ in range(3))  # 14.1's cell, HEAD_DIM 6
MERGED = F.scaled_dot_product_attention(Q, K, V)
KB, VB = K[:, :, 8:], V[:, :, 8:]  # the last block of 8 keys, as a learner's loop leaves `k` and `v`
LAST_BLOCK_ONLY = F.scaled_dot_product_attention(Q, KB, VB)

ZIGZAG_3 = [12, 13, 14, 15, 48, 49, 50, 51]
SCALES = [64.0, 32.0, 32.0, 64.0, 64.0, 32.0, 32.0, 64.0]  # worked out by hand in 06's solution


def accepted(exid, **kwargs):
    exercises.CHECKS[exid](**kwargs)


def refused(exid, **kwargs):
    return refused_text(exid, lambda: exercises.CHECKS[exid](**kwargs))


@pytest.fixture(autouse=True)
def _no_front_end(monkeypatch, tmp_path):
    """Each test starts outside any notebook: no session name, no VS Code global, an empty working directory."""
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.chdir(tmp_path)


# --- one coercion rule ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "expected"), [
    ("3", 3.0), (" 0.25 ", 0.25), ("1e-3", 1e-3), ("15/8", 1.875), (Fraction(15, 8), 1.875), (np.float32(0.5), 0.5),
    (torch.tensor([2.5]), 2.5), (np.array(4), 4.0), (7, 7.0)])
def test_a_number_in_any_form(value, expected):
    assert core.number(value) == pytest.approx(expected, rel=1e-7)


@pytest.mark.parametrize("value", [True, np.bool_(False), "three", "", "1/0", None, [1.0], torch.ones(2), {"a": 1},
                                   np.array(["1"]), 1 + 2j])
def test_not_a_number(value):
    assert core.number(value) is None


@pytest.mark.parametrize(("value", "expected"), [("3", 3), ("3.0", 3), (3.0, 3), (torch.tensor(3), 3),
                                                 (np.int64(3), 3), (" -2 ", -2)])
def test_a_whole_number_in_any_form(value, expected):
    assert core.integer(value) == expected and isinstance(core.integer(value), int)


@pytest.mark.parametrize("value", ["3.5", 3.5, True, "x", float("inf"), torch.tensor(3.5)])
def test_not_a_whole_number(value):
    assert core.integer(value) is None


def test_sequences_in_any_form():
    assert core.sequence(torch.Size([2, 3])) == [2, 3]
    assert core.sequence(range(3)) == [0, 1, 2]
    assert core.sequence({3, 1, 2}) == [1, 2, 3]
    assert core.sequence({1: "b", 0: "a"}) == ["a", "b"]  # keyed by rank
    assert core.sequence({"rank1": "b", "rank0": "a"}) == ["a", "b"]
    assert core.sequence({1: "b", 2: "c"}) is None  # no rank 0: not per-rank
    assert core.sequence("ab") is None and core.sequence(3) is None


def test_flat_lists_and_per_rank_lists():
    assert core.integer_list([[12, 13], (14, "15")]) == [12, 13, 14, 15]  # nested, a number as a string
    assert core.number_list(torch.tensor([[1.0], [2.0]])) == [1.0, 2.0]
    assert core.integer_list([1, None, 3]) is None and core.integer_list([1, [2, "x"]]) is None
    assert core.per_rank({1: [3, 4], 0: (1, 2)}, core.integer_list) == [[1, 2], [3, 4]]  # structural
    assert core.per_rank([[1, 2], [3, None]], core.integer_list) is None
    assert core.as_int_list({4: 2, 7: 0, 1: 1}) == [1, 4]  # counts: an explicit zero counts no item
    assert core.as_int_list((3, "1")) == [1, 3] and core.as_int_list([1.5]) is None


def test_float32_gets_float32_tolerance_and_float64_does_not():
    truth = 0.1
    assert core.close(np.float32(truth), truth, rel_tol=1e-12, abs_tol=1e-12)
    assert core.close(torch.tensor(truth, dtype=torch.float32), truth, abs_tol=1e-12)
    assert not core.close(truth * (1 + 1e-7), truth, rel_tol=1e-12, abs_tol=1e-12)
    assert not core.close(np.float32(truth * 1.001), truth, abs_tol=1e-12)  # float32 is not a licence to be wrong
    pooled = torch.tensor([0.3, 0.4, 0.2], dtype=torch.float32).mean().item()  # a float32 mean, as a Python float
    assert not math.isclose(pooled, 0.3, rel_tol=1e-12) and core.close(pooled, 0.3, abs_tol=1e-12)
    assert not core.close(0.30000001, 0.3, abs_tol=1e-12)  # a float64 value off by 3e-8 is no rounding


def test_keys_named_in_another_form():
    assert [core.key_number(k) for k in (0.5, "0.5", "DDP cap 0.5", "0.5 MiB", "cap", "1 or 2")] == [
        0.5, 0.5, 0.5, 0.5, None, None]
    assert {core.key_name(k) for k in ("All-Gather", "all gather", "all_gather ")} == {"all_gather"}
    mib = 2**20  # a size: in the text's unit, with a unit of its own, or a whole number of bytes
    assert [core.key_size(k, mib) for k in (0.5, "0.5", "DDP cap 0.5", "512 KiB", "0.5MB", 524288, "524288 bytes",
                                            "bucket_cap_mb=8", 32, "cap", "1 or 2")] == [
        0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 8.0, 32.0, None, None]
    names = {"forward_bytes": ("forward", "fwd"), "all_gather": ("all_gather_into_tensor",)}
    assert {core.key_among(k, names) for k in ("AllGather", "allgather", "All-Gather", "all_gather_into_tensor")} \
        == {"all_gather"}
    assert [core.key_among(k, names) for k in ("Forward", "FWD", "forward bytes", "Backward")] == [
        "forward_bytes", "forward_bytes", "forward_bytes", "backward"]  # an unknown key keeps its own name
    assert core.keys_among({"fwd": 1, "forward_bytes": 1}, names) is None  # two keys for one name
    assert core.without_zeros({"a": 3, "b": 0, "c": "0"}) == {"a": 3}


def test_nb10_and_nb11_read_keys_and_zero_entries_in_any_form():
    assert nb10._by_cap({"DDP cap 0.5": 3, 8: "2", "32 MiB": np.int64(1)}) == {0.5: 3, 8.0: 2, 32.0: 1}
    assert nb10._by_cap({"default": 3}) is None  # no cap named: refused, not a crash
    assert nb10._by_cap({"512 KiB": 3, 8 * 2**20: 2}) == {0.5: 3, 8.0: 2}  # a unit of its own, bytes
    assert nb10._by_cap({"0.5": 3, "512 KiB": 3}) is None  # two keys for one cap
    truth = {"forward_bytes": {"all_gather": 10}, "backward_bytes": {"all_gather": 10, "reduce_scatter": 10}}
    given = {"forward_bytes": {"All-Gather": "10", "reduce_scatter": 0},
             "backward_bytes": {"all gather": 10, "reduce-scatter": torch.tensor(10)}}
    assert nb11._payloads(given) == truth
    assert nb11._payloads({"forward_bytes": {"all_gather": None}, "backward_bytes": {}}) is None


def test_a_keyword_only_function_is_called_by_its_names():
    def keyword_only(*, names_and_bytes, cap_bytes, first_cap_bytes):
        return (names_and_bytes, cap_bytes, first_cap_bytes)

    def plain(a, b, c):
        return (a, b, c)

    assert core.call(keyword_only, [1], 2, 3) == ([1], 2, 3)
    assert core.call(plain, [1], 2, 3) == ([1], 2, 3)
    with pytest.raises(TypeError):  # the learner's own wrong signature still shows as theirs
        core.call(lambda a: a, 1, 2, 3)


def test_the_form_each_argument_asks_for_comes_from_the_annotations():
    forms = {exid: {n: core.form_of(a) for n, a in exercises.CHECKS[exid].__annotations__.items() if n != "return"}
             for exid in ("02.1", "05.2", "00.1", "04.3", "06.3", "14.2")}
    assert forms["02.1"]["padded_len"] == "a whole number" and forms["02.1"]["rank3_padded"] == "a list of whole numbers"
    assert forms["05.2"]["ns_file"].startswith("a path")
    assert forms["00.1"]["three"] == "what `torchrun(...)` returns"
    assert forms["04.3"]["predict_buckets"] == "a function"
    assert forms["06.3"]["full"] == "a list of tensors" and "torch.nn.Module" in forms["06.3"]["net"]
    assert forms["14.2"]["contiguous_ratio"] == "a number"


# --- values that used to crash a check: a hint naming the argument and the form -------------------------------

def test_none_inside_a_list_names_the_argument_and_the_form():
    text = refused("02.1", padded_len=3, dropped_len=2, rank3_padded=[3, None, 1], rank3_dropped=[3, 7],
                   repeated=[0, 1], unseen=[])
    assert "rank3_padded" in text
    text = refused("06.3", net=ToyModel(), full=[None, None, None, None], acc_scaler=torch.amp.GradScaler("cpu"))
    assert "`full`" in text and "Traceback" not in text


def test_an_int_for_a_path_names_the_argument_and_says_a_path():
    text = refused("05.2", ns_file=3, dict_file="x.pt")
    assert "`ns_file`" in text and "a path" in text and "int" in text


def test_an_open_file_for_a_path_names_the_argument(tmp_path):
    (tmp_path / "x.pt").write_bytes(b"")
    with open(tmp_path / "x.pt", "rb") as handle:
        text = refused("05.2", ns_file=handle, dict_file=handle)
    assert "`ns_file`" in text and "open file" in text and "a path" in text


def test_a_truncated_checkpoint_gives_a_hint_not_an_exception(tmp_path):
    whole = io.BytesIO()
    torch.save({"w": torch.ones(100)}, whole)
    (tmp_path / "cut.pt").write_bytes(whole.getvalue()[: len(whole.getvalue()) // 2])
    ex = core.Exercise("05.2")
    with pytest.raises(exercises.CheckFailed) as info:
        core.load_checkpoint(ex, tmp_path / "cut.pt", "cut.pt")
    assert "truncated" in str(info.value) and "torch.save" in info.value.hint
    with pytest.raises(exercises.CheckFailed) as info:
        core.load_checkpoint(ex, tmp_path / "absent.pt", "absent.pt")
    assert "does not exist" in str(info.value)
    assert core.load_checkpoint(ex, _saved(tmp_path), "ok.pt") == {"w": 1}


def _saved(folder):
    torch.save({"w": 1}, folder / "ok.pt")
    return folder / "ok.pt"


def test_a_check_that_breaks_on_a_truncated_checkpoint_says_so(tmp_path):
    """A check that calls torch.load itself (not through load_checkpoint): the decorator gives the hint."""
    whole = io.BytesIO()
    torch.save({"w": torch.ones(100)}, whole)
    (tmp_path / "cut.pt").write_bytes(whole.getvalue()[:40])

    @core.check
    def check_99_1(*, saved: core.Answer[str | Path]) -> None:
        ex = core.Exercise("99.1")
        ex.given(saved=saved)
        torch.load(saved, weights_only=True)
        ex.correct()

    with pytest.raises(exercises.CheckFailed) as info:
        check_99_1(saved=tmp_path / "cut.pt")
    assert "truncated" in str(info.value) and "def check_" not in str(info.value)


def test_a_name_the_check_does_not_take_is_refused_with_the_names_it_takes():
    text = refused("14.2", zigzag_rank_3=ZIGZAG_3, contiguous_ratio=1.875, tol=1.0)
    assert "`zigzag_rank_3`" in text and "tol" in text


def test_the_learners_own_function_still_raises_its_own_error():
    def broken(names_and_bytes, cap_bytes, first_cap_bytes):
        raise ZeroDivisionError("the learner's own bug")

    with pytest.raises(ZeroDivisionError, match="the learner's own bug"):
        exercises.check_04_3(predict_buckets=broken)


# --- 04: names as text, gradients from the lesson's seed, buckets from any function ---------------------------

def test_04_1_forms():
    accepted("04.1", unused="head_b.weight, head_b.bias")  # the error's own text
    accepted("04.1", unused=np.array(["head_b.bias", "head_b.weight"]))
    accepted("04.1", unused={"head_b.bias", "head_b.weight"})
    assert "`unused`" in refused("04.1", unused=["head_b.weight"])
    assert "`unused`" in refused("04.1", unused=[None, "head_b.bias"])
    assert "`unused`" in refused("04.1", unused=7)


def test_04_2_truth_from_the_lessons_seed_not_the_rebound_names():
    accepted("04.2", ddp_like=PLAIN, weighted=WEIGHTED, model=M4, x=X4, y=Y4)
    # the learner's loop left x and y as the last shard: still right
    accepted("04.2", ddp_like=PLAIN, weighted=WEIGHTED, model=M4, x=X4[6:], y=Y4[6:])
    # gradients of the rebound shard only: wrong, although they are "right" for the names passed
    shard = grads_of(M4, F.mse_loss(M4(X4[6:]), Y4[6:]))
    refused("04.2", ddp_like=shard, weighted=shard, model=M4, x=X4[6:], y=Y4[6:])


def test_04_2_forms():
    accepted("04.2", ddp_like=tuple(g.numpy() for g in PLAIN), weighted=[g.tolist() for g in WEIGHTED],
             model=M4, x=X4, y=Y4)
    accepted("04.2", ddp_like=dict(zip(NAMES4, PLAIN, strict=True)),
             weighted={f"module.{n}": g for n, g in zip(NAMES4, WEIGHTED, strict=True)}, model=M4, x=X4, y=Y4)
    accepted("04.2", ddp_like=dict(enumerate(PLAIN)), weighted=WEIGHTED)  # keyed by position; names not passed
    assert "`weighted`" in refused("04.2", ddp_like=PLAIN, weighted=PLAIN, model=M4, x=X4, y=Y4)
    assert "`ddp_like`" in refused("04.2", ddp_like=[PLAIN[0], None, *PLAIN[2:]], weighted=WEIGHTED,
                                   model=M4, x=X4, y=Y4)
    assert "`ddp_like`" in refused("04.2", ddp_like=PLAIN[0], weighted=WEIGHTED, model=M4, x=X4, y=Y4)


def _notebook_solution(notebook: str, function: str):
    """The function as notebook ``notebook``'s solution cell defines it (a learner's right answer, not the check's
    own reference)."""
    cells = json.loads((series.NOTEBOOK_DIR / notebook).read_text())["cells"]
    source = next("".join(c["source"]) for c in cells if "solution" in c.get("metadata", {}).get("tags", [])
                  and f"def {function}(" in "".join(c["source"]))
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == function)
    namespace: dict = {}
    exec(ast.unparse(node), namespace)
    return namespace[function]


_buckets = _notebook_solution("04_ddp_fundamentals.ipynb", "predict_buckets")


def test_04_3_forms():
    def keyword_only(*, names_and_bytes, cap_bytes, first_cap_bytes):
        return _buckets(names_and_bytes, cap_bytes, first_cap_bytes)

    accepted("04.3", predict_buckets=keyword_only)
    accepted("04.3", predict_buckets=lambda i, c, f: tuple(tuple(b) for b in _buckets(i, c, f)))
    accepted("04.3", predict_buckets=lambda i, c, f: dict(enumerate(_buckets(i, c, f))))  # keyed by bucket index
    refused("04.3", predict_buckets=lambda i, c, f: [[n for n, _ in i]])  # one bucket
    refused("04.3", predict_buckets=lambda i, c, f: [[None]])
    assert "`predict_buckets`" in refused("04.3", predict_buckets="not a function")


# --- 06 -----------------------------------------------------------------------------------------------------------

def test_06_1_forms():
    accepted("06.1", by_hand=[str(int(s)) for s in SCALES], measured=torch.tensor(SCALES))
    accepted("06.1", by_hand=[[s] for s in SCALES], measured=np.array(SCALES, dtype=np.float32))
    refused("06.1", by_hand=SCALES[:-1], measured=SCALES)
    refused("06.1", by_hand=[64.0, 32.0, 64.0, 64.0, 64.0, 32.0, 64.0, 64.0], measured=SCALES)
    assert "`by_hand`" in refused("06.1", by_hand=[64, None, 32, 64, 64, 32, 32, 64], measured=SCALES)


def test_06_2_forms():
    accepted("06.2", k_small="16", k_large=torch.tensor(12))
    accepted("06.2", k_small=16.0, k_large=np.int32(12))
    refused("06.2", k_small=15, k_large=12)
    refused("06.2", k_small="sixteen", k_large=12)
    refused("06.2", k_small=[16], k_large=12)


def _accumulated():
    torch.manual_seed(0)
    xs, ys = torch.randn(32, 10), torch.randn(32, 5)
    net = ToyModel()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=100)
    full = torch.autograd.grad(F.mse_loss(net(xs), ys), list(net.parameters()))
    for micro in range(4):
        rows = slice(8 * micro, 8 * micro + 8)
        scaler.scale(F.mse_loss(net(xs[rows]), ys[rows]) / 4).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return net, full, scaler


def test_06_3_forms():
    net, full, scaler = _accumulated()
    accepted("06.3", net=net, full=[g.numpy() for g in full], acc_scaler=scaler)
    accepted("06.3", net=net, full=dict(enumerate(full)), acc_scaler=scaler)
    refused("06.3", net=net, full=[2 * g for g in full], acc_scaler=scaler)
    assert "`acc_scaler`" in refused("06.3", net=net, full=full, acc_scaler=None)
    assert "`net`" in refused("06.3", net="ToyModel", full=full, acc_scaler=scaler)


def test_06_4_forms(tmp_path):
    from ddp_helpers.amp import AmpRecipe, default_dtype

    dtype = default_dtype("cpu")
    record = {"recipe": str(AmpRecipe("cpu", dtype, use_grad_scaler=dtype == torch.float16)),
              "saved_scaler": {} if dtype != torch.float16 else {"scale": 1.0}, "resumed_equal": True}
    (tmp_path / "rank0.json").write_text(json.dumps(record))
    accepted("06.4", bf16=record)
    accepted("06.4", bf16=json.dumps(record))  # the file's text
    accepted("06.4", bf16="rank0.json")  # its path, from the notebook's folder
    accepted("06.4", bf16={**record, "resumed_equal": np.bool_(True)})
    refused("06.4", bf16={**record, "resumed_equal": False})
    refused("06.4", bf16={**record, "recipe": "cpu: autocast float16, GradScaler on"})
    refused("06.4", bf16="absent.json")
    refused("06.4", bf16=[1, 2])


# --- 12 and 14: the truth from the lesson's seed ------------------------------------------------------------------

def test_12_1_forms_and_rebound_names():
    accepted("12.1", partials=PARTIALS, dense=D121, x=X121)
    accepted("12.1", partials=(PARTIALS[0].numpy(), PARTIALS[1].tolist()), dense=MLP(16, 64), x=X121[:1])
    accepted("12.1", partials={1: PARTIALS[1], 0: PARTIALS[0]})
    refused("12.1", partials=PARTIALS[::-1], dense=D121, x=X121)
    refused("12.1", partials=[PARTIALS[0], None], dense=D121, x=X121)
    other = MLP(16, 64)  # a rebound `dense`: partials right for it are wrong for the lesson's
    with torch.no_grad():
        wrong = [torch.relu(X121 @ other.up.weight[r].T + other.up.bias[r]) @ other.down.weight[:, r].T
                 for r in (slice(0, 32), slice(32, 64))]
    refused("12.1", partials=wrong, dense=other, x=X121)


def test_12_2_forms():
    # 4 * B * seq * h >= 12 * h**2 per layer with seq = hidden = 2048: B >= 3
    accepted("12.2", crossover="3")
    accepted("12.2", crossover=np.float64(3.0))
    refused("12.2", crossover=2)
    refused("12.2", crossover="3.5")
    refused("12.2", crossover=[3])


def test_12_3_rebound_names_and_forms():
    accepted("12.3", averaged=AVERAGED, dense=D123, x=X123, y=Y123)
    # a learner's loop `for x, y in zip(x.chunk(2), y.chunk(2))` leaves the last halves bound to x and y
    accepted("12.3", averaged=AVERAGED, dense=D123, x=X123.chunk(2)[1], y=Y123.chunk(2)[1])
    accepted("12.3", averaged=AVERAGED.numpy().tolist(), dense=D123, x=X123, y=Y123)
    accepted("12.3", averaged=AVERAGED.double().numpy())
    refused("12.3", averaged=_H[1], dense=D123, x=X123.chunk(2)[1], y=Y123.chunk(2)[1])
    refused("12.3", averaged=AVERAGED + 5e-5, dense=D123, x=X123, y=Y123)
    assert "`averaged`" in refused("12.3", averaged="grad", dense=D123, x=X123, y=Y123)


def test_14_1_rebound_names():
    # the loop over blocks left k and v as the last block: the right answer still passes ...
    accepted("14.1", merged=MERGED, q=Q, k=KB, v=VB)
    # ... and the attention over that block alone, which the rebound names would have agreed with, fails
    refused("14.1", merged=LAST_BLOCK_ONLY, q=Q, k=KB, v=VB)


def test_14_1_forms():
    accepted("14.1", merged=MERGED.tolist(), q=Q, k=K, v=V)  # nested lists
    accepted("14.1", merged=MERGED[0], q=Q, k=K, v=V)  # without the batch dimension of 1
    accepted("14.1", merged=MERGED.double().numpy())
    refused("14.1", merged=MERGED + 5e-5, q=Q, k=K, v=V)
    refused("14.1", merged=MERGED.transpose(-2, -1), q=Q, k=K, v=V)
    assert "`merged`" in refused("14.1", merged=[None], q=Q, k=K, v=V)


def test_14_2_forms():
    accepted("14.2", zigzag_rank_3=[ZIGZAG_3[:4], ZIGZAG_3[4:]], contiguous_ratio="15/8")  # the two chunks, nested
    accepted("14.2", zigzag_rank_3=set(ZIGZAG_3), contiguous_ratio="1.875")
    accepted("14.2", zigzag_rank_3=[str(t) for t in ZIGZAG_3], contiguous_ratio=torch.tensor(1.875))
    refused("14.2", zigzag_rank_3=ZIGZAG_3, contiguous_ratio="2")
    refused("14.2", zigzag_rank_3=[*ZIGZAG_3[:7], None], contiguous_ratio=1.875)
    refused("14.2", zigzag_rank_3=list(range(24, 32)), contiguous_ratio=1.875)


# --- front ends ------------------------------------------------------------------------------------------------

SWEEP = Path("runs/10_performance/sweep.json")


def _lesson(folder: Path) -> Path:
    (folder / SWEEP).parent.mkdir(parents=True, exist_ok=True)
    (folder / SWEEP).write_text(json.dumps({"sizes": [1], "times": [1.0]}))
    return folder


def _shell(monkeypatch, **user_ns):
    shell = types.SimpleNamespace(user_ns=dict(user_ns))
    monkeypatch.setitem(__import__("sys").modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))


def test_nbclient_without_a_session_name_finds_the_runs_in_the_working_directory(tmp_path, monkeypatch):
    lesson = _lesson(tmp_path / "lesson")
    monkeypatch.chdir(lesson)  # the kernel's working directory: the notebook's folder
    assert core.run_file(core.Exercise("10.1"), SWEEP, "the sweep") == lesson / SWEEP
    assert core.lesson_folders()[0] == lesson and series.NOTEBOOK_DIR in core.lesson_folders()


def test_a_uuid_session_name_finds_the_runs_in_the_working_directory(tmp_path, monkeypatch):
    lesson = _lesson(tmp_path / "course" / "notebooks")
    monkeypatch.chdir(lesson)
    monkeypatch.setenv("JPY_SESSION_NAME", "notebooks/34361149-e3d8-4dbc-9302-0e86431b3e8c")
    assert core.run_file(core.Exercise("10.1"), SWEEP, "the sweep") == lesson / SWEEP
    assert core.lesson_folders() == [lesson]  # the session names a folder: the one the kernel runs in


def test_vscode_names_the_notebook_in_its_global(tmp_path, monkeypatch):
    lesson = _lesson(tmp_path / "lesson")
    _shell(monkeypatch, __vsc_ipynb_file__=str(lesson / "10_performance.ipynb"))
    monkeypatch.chdir(tmp_path)  # elsewhere: VS Code may start the kernel in the workspace's root
    assert core.run_file(core.Exercise("10.1"), SWEEP, "the sweep") == lesson / SWEEP
    assert core.lesson_folders() == [lesson, tmp_path]  # named, then the working directory; not notebooks/


def test_jupyterlab_and_a_hub_name_the_notebook_by_its_absolute_path(tmp_path, monkeypatch):
    lesson, elsewhere = _lesson(tmp_path / "home" / "lesson"), _lesson(tmp_path / "other")
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("JPY_SESSION_NAME", str(lesson / "10_performance.ipynb"))
    assert core.run_file(core.Exercise("10.1"), SWEEP, "the sweep") == lesson / SWEEP  # the named folder first


def test_a_missing_run_lists_where_the_check_looked(tmp_path, monkeypatch):
    lesson = tmp_path / "lesson"
    lesson.mkdir()
    monkeypatch.setenv("JPY_SESSION_NAME", str(lesson / "15_experts.ipynb"))
    text = refused("15.3", off_rank=[1, 2, 3, 4], busiest=0)
    assert "does not exist in lesson (the notebook's folder), . (the working directory)" in text
    assert str(tmp_path) not in text  # folders relative to the working directory, not long absolute paths
    monkeypatch.delenv("JPY_SESSION_NAME")
    monkeypatch.chdir(lesson)
    with pytest.raises(exercises.CheckFailed) as info:
        core.run_file(core.Exercise("99.1"), "runs/99_absent/x.json", "the launch of section 1")
    assert "in . (the working directory), " in str(info.value) and "(the series' notebooks/)" in str(info.value)
    assert "run the launch of section 1 first" in info.value.hint


def test_a_found_run_is_read_by_the_check(tmp_path, monkeypatch):
    """End to end: 15.3 reads the run from the working directory (what it says next depends on the run's
    provenance, but never that the file is missing)."""
    run = tmp_path / "runs/15_experts/traffic/results.json"
    run.parent.mkdir(parents=True)
    run.write_text(json.dumps([{"uneven": {"flow": [1, 2, 3, 4]}}] * 4))
    text = refused("15.3", off_rank=[0, 0, 0, 0], busiest="x")
    assert "does not exist" not in text


def test_readable_folders():
    cwd = Path.cwd()
    assert core.readable(cwd) == "." and core.readable(cwd / "a" / "b") == str(Path("a/b"))
    assert core.readable(Path.home() / "zz_course") == "~/zz_course"  # the working directory is a tmp folder


# --- learners' functions with keyword-only parameters (core.call), in the checks that call them -----------------

def test_01_2_keyword_only_functions_and_a_crossover_as_text():
    def t_ring(*, n, size, alpha, beta):  # 2(N-1) messages, 2(N-1)/N of the bytes each way
        return 2 * (n - 1) * alpha + 2 * (n - 1) / n * size * beta

    def t_tree(*, n, size, alpha, beta):  # 2 log2(N) steps of the whole message
        return 2 * math.ceil(math.log2(n)) * (alpha + size * beta)

    # 126 a + 126/64 s b = 12 (a + s b) at N = 64, a = 20 us, b = 0.1 ns/byte: s = 114 a / (12 - 126/64) / b
    crossover = 114 * 20e-6 / (12 - 126 / 64) / 0.1e-9
    accepted("01.2", t_ring=t_ring, t_tree=t_tree, crossover=crossover)
    accepted("01.2", t_ring=t_ring, t_tree=t_tree, crossover=f"{crossover!r}")
    refused("01.2", t_ring=t_ring, t_tree=t_tree, crossover=crossover * 1.01)
    refused("01.2", t_ring=lambda *, n, size, alpha, beta: t_ring(n=n, size=size, alpha=alpha, beta=0.0),
            t_tree=t_tree, crossover=crossover)
    assert "`t_ring`" in refused("01.2", t_ring=None, t_tree=t_tree, crossover=crossover)


def test_a_real_kernel_started_by_nbclient_finds_the_runs_beside_its_notebook(tmp_path, monkeypatch):
    """nbclient sets no JPY_SESSION_NAME and starts the kernel in the notebook's folder: a check there reads the
    runs of that folder, and a missing one names the folders it searched."""
    import nbformat
    from nbclient import NotebookClient

    lesson = _lesson(tmp_path / "my copy")
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.chdir(tmp_path)  # the test's own directory is not the notebook's
    cells = [nbformat.v4.new_code_cell(code) for code in (
        "import os\nfrom ddp_helpers.exercises import core\nex = core.Exercise('10.1')\n"
        "print('session' in {k.lower()[4:11] for k in os.environ if k.startswith('JPY_')})",
        f"print(core.run_file(ex, {str(SWEEP)!r}, 'the sweep').resolve())",
        "core.run_file(ex, 'runs/99_absent/x.json', 'the launch of section 9')")]
    notebook = nbformat.v4.new_notebook(cells=cells)
    NotebookClient(notebook, timeout=120, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(lesson)}}).execute()
    assert notebook.cells[0].outputs[0]["text"] == "False\n"
    assert notebook.cells[1].outputs[0]["text"].strip() == str((lesson / SWEEP).resolve())
    error = next(o for o in notebook.cells[2].outputs if o["output_type"] == "error")
    assert error["ename"] == "CheckFailed" and "in . (the working directory), " in error["evalue"]
