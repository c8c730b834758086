"""ddp_helpers.exercises: every check rejects the starters' ``...`` first, accepts correct answers, and
rejects wrong ones with a hint that does not give the answer away.

Checks whose answers come from a launch (a torchrun result, a run's JSON) are proven to accept the
solutions by strict nbval: their check cells run right after the solutions in the notebooks.

A correct answer here never comes from the checks themselves: the bucket and partition rules are
torch's own (DDP's Reducer, ZeroRedundancyOptimizer), the rest closed forms or values worked out by hand.
"""

import ast
import importlib
import inspect
import json
import math
import pkgutil
import re
import sys
import textwrap
import traceback
import typing
from pathlib import Path

import numpy as np
import pytest
import torch
from _pytest._code import ExceptionInfo
from exercise_calls import put  # tests/ is on sys.path
from exercise_references import reducer_buckets, reducer_count, zero_partition
from IPython.core.ultratb import VerboseTB
from torch import nn
from torch.utils.data import DistributedSampler

from ddp_helpers import exercises, series
from ddp_helpers.launch import _launch_for_tests
from ddp_helpers.perf import timing
from ddp_helpers.ring import simulate_ring
from ddp_helpers.sharding import zero_formula
from ddp_helpers.tensor_parallel import MLP


class Untouchable:
    """Context a check must not read before it has looked at the learner's names."""

    def __getattr__(self, name):
        raise RuntimeError("context read before the learner's names were checked")

    def __getitem__(self, key):
        raise RuntimeError("context read before the learner's names were checked")

    def __iter__(self):
        raise RuntimeError("context read before the learner's names were checked")


def learner_names(fn) -> list[str]:
    """The names a check passes to ``ex.given(...)``: the learner's, in order."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn.check_body)))
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "given")
    return [k.arg for k in call.keywords]


def exercise_modules() -> list:
    """ddp_helpers.exercises and every module in it."""
    return [exercises, *(importlib.import_module(f"{exercises.__name__}.{m.name}")
                         for m in pkgutil.iter_modules(exercises.__path__))]


def failure(fn, **kwargs) -> exercises.CheckFailed:
    with pytest.raises(exercises.CheckFailed) as info:
        fn(**kwargs)
    return info.value


@pytest.mark.parametrize("exid", exercises.exercise_ids())
def test_starter_ellipsis_fails_first_with_a_hint(exid):
    fn = exercises.CHECKS[exid]
    params = [p for p in inspect.signature(fn).parameters.values() if p.default is inspect.Parameter.empty]
    mine = learner_names(fn)
    assert mine, f"{exid}: the check must call given(...) with the learner's names"
    kwargs = {p.name: ... if p.name in mine else Untouchable() for p in params}
    err = failure(fn, **kwargs)
    assert str(err).startswith(f"Exercise {exid}: `{mine[0]}` is still `...`.")
    assert "\nHint: " in str(err) and isinstance(err, AssertionError)


def test_ids_cover_every_notebook_exercise():
    assert len(exercises.exercise_ids()) == 53
    assert {i.split(".")[0] for i in exercises.exercise_ids()} == {f"{n:02d}" for n in range(16)}


def lesson_folder(tmp_path, monkeypatch, files: dict) -> dict:
    """A fake notebook folder (the running notebook's, JPY_SESSION_NAME) holding the runs ``files``."""
    for relative, value in files.items():
        put(tmp_path, relative, value)
        if relative in LESSON_SCRIPTS:  # the record the lesson's launch writes beside its output
            _launch_for_tests(Path("scripts") / LESSON_SCRIPTS[relative], 2, args=[str(tmp_path / relative)],
                              outputs=True)
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "notebook.ipynb"))
    return files


LESSON_SCRIPTS = {"runs/10_performance/sweep.json": "10_allreduce_sizes.py",
                  "runs/10_performance/controls.json": "10_step_controls.py"}
LESSON_WIDTH = 8
SWEEP = {"bytes": [4096, 16384, 65536], "seconds": [2e-5 + 1e-10 * n for n in (4096, 16384, 65536)], "correct": True}


@pytest.fixture
def lesson10(tmp_path, monkeypatch):
    """Notebook 10's runs: sections 2 (sweep.json) and 4 (controls.json, width 8); returns the lesson's fit."""
    lesson_folder(tmp_path, monkeypatch, {"runs/10_performance/sweep.json": SWEEP,
                                          "runs/10_performance/controls.json": {"width": LESSON_WIDTH, "depth": 4}})
    fit = timing.alpha_beta(SWEEP)
    return fit["alpha_s"], fit["beta_s_per_byte"]


def test_success_prints_one_line(capsys, lesson10):
    alpha, beta = lesson10
    exercises.check_10_3(crossover=alpha / beta)
    assert capsys.readouterr().out == "✓ Exercise 10.3: correct\n"


def test_ipython_shows_only_the_message():
    err = exercises.CheckFailed("01.2", "wrong.", "think.")
    assert err._render_traceback_() == ["CheckFailed: Exercise 01.2: wrong.\nHint: think."]


def frames_of(err: BaseException) -> list[str]:
    """The modules of the frames in an exception's traceback, outermost first."""
    return [frame.f_globals["__name__"] for frame, _ in traceback.walk_tb(err.__traceback__)]


def test_a_failed_check_ends_its_traceback_at_the_call(lesson10):
    """No frame of the package is left: pytest and IPython show the caller's line (the check cell), and
    IPython a CheckFailed as its message alone."""
    err = failure(exercises.check_10_3, crossover=1.0)
    assert frames_of(err) == [__name__]
    assert err._render_traceback_() == [f"CheckFailed: {err}"]
    assert str(err).startswith("Exercise 10.3: at `crossover` bytes")
    shown = str(ExceptionInfo.from_exception(err).getrepr(style="long"))
    assert "fn(**kwargs)" in shown and "ddp_helpers/exercises" not in shown


def test_an_error_in_the_learners_function_shows_that_function_not_the_check():
    def predict_buckets(nbytes, cap):
        raise ZeroDivisionError("the learner's own bug")

    with pytest.raises(ZeroDivisionError) as info:
        exercises.check_10_2(predict_buckets=predict_buckets, predicted_buckets={})
    assert frames_of(info.value) == [__name__, __name__]  # the call, then the learner's function
    shown = "".join(VerboseTB(theme_name="nocolor").structured_traceback(info.type, info.value, info.tb))
    assert "the learner's own bug" in shown and not re.search(r"File \S*ddp_helpers/exercises/", shown)


def test_a_check_that_breaks_on_a_value_fails_with_a_hint_and_hides_its_source(tmp_path, monkeypatch):
    """A value that breaks the check itself (here: a lesson file that is not a snapshot) becomes a CheckFailed
    with a hint; no frame of the package is left, and no chained exception shows the check's source."""
    lesson_folder(tmp_path, monkeypatch, {"runs/08_capstone/preempted_snapshot.pt": {"model": {}}})  # no "state"
    err = failure(exercises.check_08_3, next_epoch=1, next_step=0, next_lr=0.1)
    assert frames_of(err) == [__name__]
    assert str(err).startswith("Exercise 08.3: your answer could not be checked") and "\nHint: " in str(err)
    assert err.__context__ is None and err.__cause__ is None
    shown = str(ExceptionInfo.from_exception(err).getrepr(style="long", chain=True))
    assert "ddp_helpers/exercises" not in shown and "weights_only" not in shown


def test_question_marks_show_no_check_body():
    """``check_02_4??`` shows the shared wrapper, not the check's body with its expected values."""
    for fn in exercises.CHECKS.values():
        assert not hasattr(fn, "__wrapped__")
        assert "ex.correct()" not in inspect.getsource(fn)
        assert list(inspect.signature(fn).parameters) == list(inspect.signature(fn.check_body).parameters)


def test_checks_take_keywords_with_type_hints():
    for exid, fn in exercises.CHECKS.items():
        params = inspect.signature(fn).parameters.values()
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params), exid
        assert all(p.annotation is not inspect.Parameter.empty for p in params), exid
        assert typing.get_type_hints(fn)["return"] is type(None), exid


def check_calls():
    """(notebook, exercise id, function name, keyword names) of every check cell's call."""
    calls = []
    for path in series.notebooks():
        for cell in json.loads(path.read_text())["cells"]:
            if "check" not in cell.get("metadata", {}).get("tags", []):
                continue
            tree = ast.parse("".join(cell["source"]))
            for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
                if isinstance(call.func, ast.Attribute) and call.func.attr.startswith("check_"):
                    assert not call.args and all(k.arg for k in call.keywords), ast.unparse(call)
                    calls.append((path.name, cell["metadata"]["exercise"]["id"], call.func.attr,
                                  [k.arg for k in call.keywords]))
    return calls


def test_every_check_cell_calls_its_check_with_names_it_takes():
    calls = check_calls()
    assert sorted(exid for _, exid, _, _ in calls) == exercises.exercise_ids()
    for notebook, exid, name, keywords in calls:
        assert name == f"check_{exid.replace('.', '_')}" and name in exercises.__all__, (notebook, name)
        inspect.signature(getattr(exercises, name)).bind(**dict.fromkeys(keywords))


def no_answer_in(err, *answers):
    text = str(err)
    for answer in answers:
        assert not re.search(rf"(?<![\w.]){re.escape(str(answer))}(?![\w.])", text), \
            f"the message gives away {answer!r}: {text}"
    assert "\nHint: " in text


# --- pure answers: correct accepted, wrong rejected without the answer ---------------------------

def test_01_2():
    def ring(n, s, a, b):
        return 2 * (n - 1) * a + 2 * (n - 1) / n * s * b

    def tree(n, s, a, b):
        return 2 * math.ceil(math.log2(n)) * (a + s * b)

    n, a, b, length = 64, 20e-6, 0.1e-9, 12
    crossover = (2 * (n - 1) - length) * a / ((length - 2 * (n - 1) / n) * b)
    exercises.check_01_2(t_ring=ring, t_tree=tree, crossover=crossover)
    no_answer_in(failure(exercises.check_01_2, t_ring=ring, t_tree=tree, crossover=crossover * 1.01),
                 f"{crossover:.0f}")
    no_answer_in(failure(exercises.check_01_2, t_ring=lambda n, s, a, b: None, t_tree=tree, crossover=crossover))


def test_01_3():
    values = [np.float32(v) for v in (1e8, 1.0, -1e8, 1.0)]
    ring = simulate_ring([[v] * 4 for v in values])[-1][0][0]
    exercises.check_01_3(ring_result=ring, rank_order=((values[0] + values[1]) + values[2]) + values[3])
    no_answer_in(failure(exercises.check_01_3, ring_result=2.0, rank_order=2.0))


def test_02_1():
    right = dict(padded_len=3, dropped_len=2, rank3_padded=[3, 7, 1], rank3_dropped=[3, 7],
                 repeated=(1, 0), unseen={8, 9})
    exercises.check_02_1(**right)
    no_answer_in(failure(exercises.check_02_1, **{**right, "rank3_padded": [3, 7, 0]}), "[3, 7, 1]")
    no_answer_in(failure(exercises.check_02_1, **{**right, "padded_len": 2}))


def test_02_2():
    r0 = DistributedSampler(range(12), num_replicas=2, rank=0, seed=0)
    r1 = DistributedSampler(range(12), num_replicas=2, rank=1, seed=0)
    r0.set_epoch(1)
    a, b = set(r0), set(r1)
    exercises.check_02_2(twice=list(a & b), never=set(range(12)) - a - b)
    no_answer_in(failure(exercises.check_02_2, twice=[], never=[]), sorted(a & b))


def test_02_3():
    exercises.check_02_3(global_batch=2048, steps=25, scaled_lr=0.1 * 8)
    no_answer_in(failure(exercises.check_02_3, global_batch=2048, steps=196, scaled_lr=0.8), "25")
    no_answer_in(failure(exercises.check_02_3, global_batch=2048, steps=25, scaled_lr=0.1), "0.8")


def test_04_2():
    from ddp_helpers.models import ToyModel

    torch.manual_seed(0)  # the exercise cell's seed, model and batch
    model, x, y = ToyModel(), torch.randn(8, 10), torch.randn(8, 5)
    mse = nn.functional.mse_loss

    def g(loss):
        return list(torch.autograd.grad(loss, list(model.parameters())))

    g0, g1 = g(mse(model(x[:6]), y[:6])), g(mse(model(x[6:]), y[6:]))
    plain = [(a + b) / 2 for a, b in zip(g0, g1, strict=True)]
    weighted = [(1.5 * a + 0.5 * b) / 2 for a, b in zip(g0, g1, strict=True)]
    exercises.check_04_2(ddp_like=plain, weighted=weighted, model=model, x=x, y=y)
    no_answer_in(failure(exercises.check_04_2, ddp_like=plain, weighted=plain, model=model, x=x, y=y), "1.5")


def test_reducer_buckets_by_hand():
    # first cap 4: a (3) stays open, a+b (8) reaches it: [a, b]; then cap 6: c (2) stays open, c+d (11): [c, d]
    assert reducer_buckets([("a", 3), ("b", 5), ("c", 2), ("d", 9)], 6, 4) == [["a", "b"], ["c", "d"]]
    # a bucket closes when it reaches the cap exactly (>=); a last partly filled one is a bucket too
    assert reducer_buckets([("a", 4), ("b", 4), ("c", 4)], 8, 4) == [["a"], ["b", "c"]]
    assert reducer_buckets([("a", 1), ("b", 1)], 8, 8) == [["a", "b"]]


def test_04_3():
    """The truth is DDP's own buckets for the worker's model: the check cell passes neither record nor arrival."""
    exercises.check_04_3(predict_buckets=reducer_buckets)

    def strict(items, cap, first):  # closes only above the cap: a wrong rule
        return reducer_buckets(items, cap + 1, first + 1)

    no_answer_in(failure(exercises.check_04_3, predict_buckets=strict))


def test_06_1():
    truth = [64, 32, 32, 64, 64, 32, 32, 64]
    exercises.check_06_1(by_hand=truth, measured=[float(s) for s in truth])
    no_answer_in(failure(exercises.check_06_1, by_hand=[64, 32, 64, 64, 128, 64, 128, 128], measured=truth), truth)


def test_06_2():
    exercises.check_06_2(k_small=16, k_large=12)
    no_answer_in(failure(exercises.check_06_2, k_small=15, k_large=12), "16")  # 2**15 gives a subnormal
    no_answer_in(failure(exercises.check_06_2, k_small=16, k_large=13), "12")


def test_07_1():
    values = torch.tensor([1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0, 14.0]).view(8, 1)
    shards = [values[:3], values[3:]]
    exercises.check_07_1(shards=shards, mean_of_means=torch.tensor(7.0), pooled=torch.tensor(8.25))
    no_answer_in(failure(exercises.check_07_1, shards=shards, mean_of_means=7.0, pooled=7.0), "8.25")


def test_09_1():
    exercises.check_09_1(group_rank=2, local_rank=1, world_size=24)
    no_answer_in(failure(exercises.check_09_1, group_rank=1, local_rank=9, world_size=24), "(2, 1)")


def test_10_1_and_10_3(lesson10):
    """alpha and beta come from the lesson's sweep, the model from its controls: square_mlp(8, 4) by hand is
    4 Linear(8, 8) (256 + 32 bytes each) and a Linear(8, 10) head (320 + 40 bytes)."""
    alpha, beta = lesson10
    assert math.isclose(alpha, 2e-5, rel_tol=1e-9) and math.isclose(beta, 1e-10, rel_tol=1e-6)  # an exact line
    sizes = [256, 32] * 4 + [320, 40]
    exercises.check_10_1(one_message=alpha + beta * sum(sizes), per_tensor=sum(alpha + beta * s for s in sizes))
    no_answer_in(failure(exercises.check_10_1, one_message=alpha + beta * sum(sizes),
                         per_tensor=alpha + beta * sum(sizes)))
    no_answer_in(failure(exercises.check_10_3, crossover=2 * alpha / beta), f"{alpha / beta:g}")


def test_10_2_reducer_count_by_hand():
    assert [reducer_count([3, 5, 2, 9], 6), reducer_count([4, 4, 4], 8)] == [2, 2]  # [3+5] [2+9]; [4+4] [4]


def test_zero_partition_by_hand():
    # largest first, each to the first rank with the smallest total: 9 -> r0 (9, 0), 7 -> r1 (9, 7),
    # 5 -> r1 (9, 12), 3 -> r0 (12, 12), 1 -> r0, the first of the two smallest (13, 12)
    assert zero_partition([5, 9, 1, 7, 3], 2) == [[9, 3, 1], [7, 5]]
    assert zero_partition([2, 8, 6], 4) == [[8], [6], [2], []]


def test_11_2():
    per_gpu = [sum(zero_formula(7_500_000_000, 64, s, bytes_per_value=2, moments=6).values()) / 1e9 for s in range(4)]
    exercises.check_11_2(per_gpu=per_gpu, smallest_stage=1)
    no_answer_in(failure(exercises.check_11_2, per_gpu=[g * 2**30 / 1e9 for g in per_gpu], smallest_stage=1), "31.4")
    no_answer_in(failure(exercises.check_11_2, per_gpu=per_gpu, smallest_stage=2))


def test_12_1_and_12_3():
    torch.manual_seed(0)
    dense, x, y = MLP(16, 64), torch.randn(8, 16), torch.randn(8, 16)
    parts = []
    for rows in (slice(0, 32), slice(32, 64)):
        hidden = torch.relu(x @ dense.up.weight[rows].T + dense.up.bias[rows])
        parts.append(hidden @ dense.down.weight[:, rows].T)
    exercises.check_12_1(partials=parts, dense=dense, x=x)
    no_answer_in(failure(exercises.check_12_1, partials=[parts[0], parts[0]], dense=dense, x=x))
    mse = nn.functional.mse_loss
    torch.manual_seed(0)  # 12.3's exercise cell: the same seed, 16 samples and their targets
    dense, x, y = MLP(16, 64), torch.randn(16, 16), torch.randn(16, 16)
    halves = [torch.autograd.grad(mse(dense(a), b, reduction="sum"), [dense.up.weight])[0]
              for a, b in zip(x.chunk(2), y.chunk(2), strict=True)]
    exercises.check_12_3(averaged=(halves[0] + halves[1]) / 2, dense=dense, x=x, y=y)
    no_answer_in(failure(exercises.check_12_3, averaged=halves[0] + halves[1], dense=dense, x=x, y=y))


def test_12_2():
    exercises.check_12_2(crossover=3)
    no_answer_in(failure(exercises.check_12_2, crossover=2), "3")
    exercises.check_12_2(crossover=3.0)  # a whole number in float form is the same answer


def test_messages_never_hold_the_launch_answers():
    """The hints of the launch checks name what to look at, not the numbers a run should print."""
    source = "\n".join(inspect.getsource(m) for m in exercise_modules())
    for answer in ("359", "360", "\"max=10\"", "head_b.bias, head_b.weight", "cpu: autocast bfloat16, GradScaler off"):
        assert not re.search(rf'(?:what|hint)[^\n]*{re.escape(answer)}', source)


def test_03_scripts_are_read_as_code_not_text(tmp_path, monkeypatch):
    """A docstring that mentions the guard or @record does not count as using them. The scripts are the
    learner's, in the scripts/ folder beside the notebook (here the working directory)."""
    import subprocess

    monkeypatch.chdir(tmp_path)
    (tmp_path / "scripts").mkdir()
    no_guard = tmp_path / "scripts" / "03_ex_no_guard.py"
    no_guard.write_text('"""mp.spawn without the __main__ guard."""\nimport torch.multiprocessing as mp\n\n\n'
                        'def worker(index):\n    print(index)\n\n\nmp.spawn(worker, nprocs=1)\n')
    ran = subprocess.CompletedProcess(["python", str(no_guard)], 1, stdout="",
                                      stderr="... has finished its bootstrapping phase ...")
    exercises.check_03_1(no_guard=ran, script=no_guard)
    no_guard.write_text(no_guard.read_text().replace("mp.spawn(", 'if __name__ == "__main__":\n    mp.spawn('))
    no_answer_in(failure(exercises.check_03_1, no_guard=ran, script=no_guard))

    bare = tmp_path / "scripts" / "03_ex_no_record.py"
    bare.write_text('"""The same worker without @record."""\n\n\ndef main():\n    raise ValueError("x")\n')
    failed = subprocess.CompletedProcess(["python", "-m", "torch.distributed.run", "--nproc-per-node=1", str(bare)], 1,
                                         stdout="", stderr="Root Cause\n error_file: <N/A>\n")
    exercises.check_03_2(bare=failed, script=bare)
    bare.write_text("from torch.distributed.elastic.multiprocessing.errors import record\n\n\n@record\n"
                    "def main():\n    raise ValueError('x')\n")
    no_answer_in(failure(exercises.check_03_2, bare=failed, script=bare))


def test_the_running_notebook_is_found_in_vscode_without_jpy_session_name(tmp_path, monkeypatch):
    import types

    from ddp_helpers.exercises import core

    shell = types.SimpleNamespace(user_ns={})  # a kernel's shell, without starting one
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lesson").mkdir()  # the notebooks' folders exist, as a front end's do
    (tmp_path / "lab").mkdir()
    assert core.lesson_folders() == [tmp_path, series.NOTEBOOK_DIR]  # no front end: the kernel's folder, then the series'
    monkeypatch.setitem(shell.user_ns, "__vsc_ipynb_file__", str(tmp_path / "lesson" / "00_orientation.ipynb"))
    assert core.lesson_folders() == [tmp_path / "lesson", tmp_path]  # VS Code's global
    assert core.notebook_folders()[0] == tmp_path / "lesson"
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "lab" / "x.ipynb"))
    assert core.lesson_folders() == [tmp_path / "lab", tmp_path]  # Jupyter's server, where both are set
    monkeypatch.setitem(shell.user_ns, "__vsc_ipynb_file__", "not a notebook path")
    monkeypatch.delenv("JPY_SESSION_NAME")
    assert core.lesson_folders() == [tmp_path, series.NOTEBOOK_DIR]
