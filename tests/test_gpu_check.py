"""tools/gpu_check.py: the CPU-vs-GPU comparison rules, the recorded launches, and main() over
fake runs (run() replaced): recorded world sizes, gloo by design, every rank, result files,
recorded outcomes and the exit code."""

import json
import re
import sys
from pathlib import Path

import pytest

from ddp_helpers.series import notebooks

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import gpu_check  # noqa: E402

LAUNCH = {"script": "scripts/x.py", "nproc": 2, "nnodes": 1, "args": [], "env": {}, "torchrun_args": [],
          "timeout": 60, "outcome": "ok"}


def test_device_words_and_floats_within_tolerance_agree():
    cpu = ["backend=gloo device=cpu loss 0.5000", "autocast bfloat16, grad scaler False", "epoch 3",
           "ddp_helpers.syncbn.SyncBatchNorm"]
    gpu = ["backend=nccl device=cuda:1 loss 0.5100", "autocast float16, grad scaler True", "epoch 3",
           "torch.nn.modules.batchnorm.SyncBatchNorm"]
    assert gpu_check.compare_lines(cpu, gpu) is None
    assert gpu_check.compare_lines(["ddp_helpers.syncbn.SyncBatchNorm"], ["torch.nn.BatchNorm2d"])


def test_integers_words_and_far_floats_differ():
    assert "line 0" in gpu_check.compare_lines(["correct 352"], ["correct 351"])
    assert "line 0" in gpu_check.compare_lines(["loss 0.50"], ["loss 0.60"])
    assert "lines" in gpu_check.compare_lines(["a"], ["a", "b"])


def test_json_values_compare_like_lines_and_measurements_are_skipped():
    cpu = {"loss": 0.50, "correct": 352, "equal": True, "recipe": "cpu: autocast bfloat16",
           "seconds": [0.1], "library_s": 0.2, "pid": 10, "grads": [1.0, 2.0]}
    gpu = {"loss": 0.51, "correct": 352, "equal": True, "recipe": "cuda:0: autocast float16",
           "seconds": [9.0], "library_s": 7.0, "pid": 99, "grads": [1.0, 2.01]}
    assert gpu_check.compare_json(cpu, gpu, "f.json") is None
    assert "f.json.correct" in gpu_check.compare_json({"correct": 352}, {"correct": 351}, "f.json")
    assert "f.json.equal" in gpu_check.compare_json({"equal": True}, {"equal": 1}, "f.json")
    assert "f.json.loss" in gpu_check.compare_json({"loss": 0.5}, {"loss": 0.6}, "f.json")
    assert "items" in gpu_check.compare_json({"g": [1]}, {"g": [1, 2]}, "f.json")
    assert "keys" in gpu_check.compare_json({"a": 1}, {"b": 1}, "f.json")


def test_the_file_clock_orders_files_written_before_and_after(tmp_path, monkeypatch):
    # time.time_ns() runs ahead of the coarse clock that stamps mtimes: a file written just after it
    # can look older (CI saw a fresh result file dropped as stale). file_clock_now is on the mtime clock.
    monkeypatch.setattr(gpu_check, "NOTEBOOKS", tmp_path)
    for i in range(200):
        before = tmp_path / f"before{i}.json"
        before.write_text("{}")
        since = gpu_check.file_clock_now()
        after = tmp_path / f"after{i}.json"
        after.write_text("{}")
        assert before.stat().st_mtime_ns < since <= after.stat().st_mtime_ns
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no stamp left


def test_every_worker_script_has_a_recorded_launch():
    launched = {Path(la["script"]).name for la in json.loads(gpu_check.LAUNCHES.read_text())}
    written = set()
    for notebook in notebooks():
        for cell in json.loads(notebook.read_text())["cells"]:
            m = re.match(r"%%writefile scripts/(\S+)", "".join(cell["source"]))
            if m:
                written.add(m.group(1))
    assert written - set(gpu_check.NOT_LAUNCHED) - launched == set()
    assert set(gpu_check.NOT_LAUNCHED) <= written  # the exceptions are real scripts


@pytest.fixture
def check(tmp_path, monkeypatch, capsys):
    """check(launches, gpus, behave) -> (exit code, printed text, calls): gpu_check.main over these
    launches (LAUNCH plus each dict) with `gpus` GPUs and run() faked. behave(launch, side) gives
    (outcome, {rank: lines}, {file under notebooks/: JSON to write}) for side "cpu" or "gpu"; calls
    lists (script, nproc, side, env) per run."""

    monkeypatch.setattr(gpu_check, "NOTEBOOKS", tmp_path / "notebooks")
    monkeypatch.setattr(gpu_check, "LAUNCHES", tmp_path / "launches.json")
    monkeypatch.setattr(gpu_check, "write_scripts", lambda: 0)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notebooks").mkdir()

    def check_(launches, gpus, behave):
        monkeypatch.setattr(gpu_check, "usable_gpus", lambda: (gpus, ""))
        gpu_check.LAUNCHES.write_text(json.dumps([{**LAUNCH, **la} for la in launches]))
        calls = []

        def fake_run(launch, nproc, env):
            # The tool before the "GPU truth" change passed a backend name ("gloo" for the CPU side,
            # None for the GPU side) and kept rank 0's lines: read it so these tests show what it missed.
            old = not isinstance(env, dict)
            env = {"DDP_BACKEND": env, "CUDA_VISIBLE_DEVICES": "" if env else None} if old else env
            side = "cpu" if env.get("CUDA_VISIBLE_DEVICES") == "" else "gpu"
            calls.append((launch["script"], nproc, side, env))
            outcome, stdout, files = behave(launch, side)
            for name, value in files.items():
                (gpu_check.NOTEBOOKS / name).parent.mkdir(parents=True, exist_ok=True)
                (gpu_check.NOTEBOOKS / name).write_text(json.dumps(value))
            return outcome, stdout.get(0, []) if old else stdout

        monkeypatch.setattr(gpu_check, "run", fake_run)
        code = gpu_check.main([])
        return code, capsys.readouterr().out, calls

    return check_


def same(outcome="ok", stdout=None, files=None):
    """behave: the same result on both sides."""
    return lambda launch, side: (outcome, stdout or {0: ["loss 0.5"], 1: ["loss 0.5"]}, files or {})


def row(out: str, script: str) -> str:
    """The table row of the launch of this script."""
    return next((line for line in out.splitlines() if f"{script} " in line), "")


def test_each_launch_runs_at_its_recorded_world_size(check):
    code, out, calls = check([{"script": "scripts/mesh.py", "nproc": 4}, {"script": "scripts/pair.py"}],
                             gpus=4, behave=same())
    assert [c[:3] for c in calls] == [("scripts/mesh.py", 4, "cpu"), ("scripts/mesh.py", 4, "gpu"),
                                      ("scripts/pair.py", 2, "cpu"), ("scripts/pair.py", 2, "gpu")]
    assert calls[1][3]["DDP_BACKEND"] == "nccl" and calls[0][3] == {"CUDA_VISIBLE_DEVICES": "", "DDP_BACKEND": "gloo"}
    assert code == 0


def test_a_launch_needing_more_gpus_is_skipped_and_listed_not_failed(check):
    launches = [{"script": "scripts/mesh.py", "nproc": 4}, {"script": "scripts/pair.py"},
                {"script": "scripts/nodes.py", "nproc": 1, "nnodes": 2}]
    code, out, calls = check(launches, gpus=2, behave=same())
    assert {c[0] for c in calls} == {"scripts/pair.py"}
    assert "skipped" in row(out, "mesh.py") and "needs 4 GPUs, 2 visible" in row(out, "mesh.py")
    assert gpu_check.SIMULATED_NODES in row(out, "nodes.py")
    assert "1 of 1 launches that ran agree" in out and "2 skipped" in out
    assert code == 0


def test_a_launch_recorded_with_gloo_keeps_gloo_on_both_sides(check):
    env = {"DDP_BACKEND": "gloo", "HANG_TIMEOUT_S": "3"}
    code, out, calls = check([{"script": "scripts/barrier.py", "nproc": 2, "env": env}], gpus=2, behave=same())
    assert [(c[2], c[3].get("DDP_BACKEND")) for c in calls] == [("cpu", "gloo"), ("gpu", "gloo")]
    assert all(c[3]["HANG_TIMEOUT_S"] == "3" for c in calls)
    assert "gloo by design" in row(out, "barrier.py") and code == 0


def test_a_difference_on_rank_1_only_is_detected(check):
    def behave(launch, side):
        return "ok", {0: ["loss 0.5"], 1: [f"rank 1 counted {3 if side == 'cpu' else 4}"]}, {}

    code, out, _ = check([{"script": "scripts/pair.py"}], gpus=2, behave=behave)
    assert "rank 1 stdout" in row(out, "pair.py") and code == 1


def test_a_difference_in_a_result_file_is_detected(check):
    script = gpu_check.NOTEBOOKS / "scripts" / "default.py"
    script.parent.mkdir(parents=True)
    script.write_text('parser.add_argument("--out", default="runs/default")\n')

    def behave(launch, side):
        name = launch["script"]
        files = {"scripts/near.py": {"runs/near/results.json": {"loss": 0.5 if side == "cpu" else 0.51, "seconds": side}},
                 "scripts/far.py": {"runs/far/results.json": {"equal": side == "cpu", "count": 3}},
                 "scripts/default.py": {"runs/default/rank1.json": {"count": 3 if side == "cpu" else 4}},
                 "scripts/one.py": {"runs/one/results.json": {}} if side == "cpu" else {}}[name]
        return "ok", {0: ["done"]}, files

    launches = [{"script": "scripts/near.py", "args": ["--out", "runs/near"]},
                {"script": "scripts/far.py", "args": ["runs/far"]},
                {"script": "scripts/default.py"},
                {"script": "scripts/one.py", "args": ["runs/one"]}]
    code, out, _ = check(launches, gpus=2, behave=behave)
    assert row(out, "near.py").endswith(" ok")
    assert "runs/far/results.json.equal: True vs False" in row(out, "far.py")
    assert "runs/default/rank1.json.count: 3 vs 4" in row(out, "default.py")
    assert "only on the CPU" in row(out, "one.py")
    assert code == 1


def test_the_launchers_hidden_records_are_not_compared(check):
    # .launch.json (which script ran, when) differs between any two launches; a visible file still counts
    def behave(launch, side):
        return "ok", {0: ["done"]}, {"runs/rec/.launch.json": {"started": 1.0 if side == "cpu" else 2.0},
                                     "runs/rec/results.json": {"count": 3 if launch["script"] == "scripts/same.py" or side == "cpu" else 4}}

    launches = [{"script": "scripts/same.py", "args": ["runs/rec"]}, {"script": "scripts/differs.py", "args": ["runs/rec"]}]
    code, out, _ = check(launches, gpus=2, behave=behave)
    assert row(out, "same.py").endswith(" ok") and ".launch.json" not in out
    assert "runs/rec/results.json.count: 3 vs 4" in row(out, "differs.py") and code == 1


def test_each_side_has_its_own_files_and_the_notebooks_files_come_back(check):
    original = gpu_check.NOTEBOOKS / "runs" / "chain" / "count.json"
    original.parent.mkdir(parents=True)
    original.write_text('{"count": 41}')
    seen = []

    def behave(launch, side):  # each launch adds one to what this side's earlier launch wrote
        before = gpu_check.NOTEBOOKS / "runs" / "chain" / "count.json"
        count = json.loads(before.read_text())["count"] + 1 if before.exists() else 1
        seen.append((side, count))
        return "ok", {0: [f"count {count}"]}, {"runs/chain/count.json": {"count": count}}

    launches = [{"script": "scripts/start.py", "args": ["runs/chain"]}, {"script": "scripts/resume.py", "args": ["runs/chain"]}]
    code, out, _ = check(launches, gpus=2, behave=behave)
    assert seen == [("cpu", 1), ("gpu", 1), ("cpu", 2), ("gpu", 2)]
    assert json.loads(original.read_text()) == {"count": 41} and code == 0


def test_both_failed_is_a_failure_for_a_launch_recorded_ok(check):
    code, out, _ = check([{"script": "scripts/mesh.py"}], gpus=2, behave=same("failed: RuntimeError"))
    assert "both failed (recorded ok)" in row(out, "mesh.py") and code == 1


def test_a_failure_demo_passes_only_when_both_sides_fail_alike(check):
    def behave(launch, side):
        return {"scripts/demo.py": "failed: RuntimeError", "scripts/fixed.py": "ok",
                "scripts/other.py": "failed: " + ("RuntimeError" if side == "cpu" else "DistBackendError")
                }[launch["script"]], {}, {}

    launches = [{"script": f"scripts/{s}.py", "outcome": "failed"} for s in ("demo", "fixed", "other")]
    code, out, _ = check(launches, gpus=2, behave=behave)
    assert "ok (both failed, as recorded)" in row(out, "demo.py")
    assert "recorded failed" in row(out, "fixed.py")
    assert "DIFFERS: outcome" in row(out, "other.py")
    assert "1 of 3 launches that ran agree" in out and code == 1


@pytest.mark.parametrize("second, expected", [
    ({"nproc": 4}, 0),                                              # skipped: not a failure
    ({"stdout": {0: ["loss 0.5"], 1: ["loss 0.9"]}}, 1),            # rank 1 differs
    ({"outcome": "failed: RuntimeError"}, 1),                       # both failed, recorded ok
])
def test_exit_code_is_zero_only_when_every_launch_that_ran_matched(check, second, expected):
    def behave(launch, side):
        if launch["script"] != "scripts/second.py":
            return same()(launch, side)
        stdout = second.get("stdout", {}) if side == "gpu" else {}
        return second.get("outcome", "ok"), stdout or {0: ["loss 0.5"], 1: ["loss 0.5"]}, {}

    launches = [{"script": "scripts/first.py"}, {"script": "scripts/second.py", "nproc": second.get("nproc", 2)}]
    code, out, _ = check(launches, gpus=2, behave=behave)
    assert code == expected


def test_no_gpu_means_nothing_runs_and_exit_zero(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(gpu_check, "run", lambda *a: pytest.fail("a launch ran without a GPU"))
    assert gpu_check.main([]) == 0
    assert capsys.readouterr().out.startswith("gpu-check: no CUDA GPU is visible here, so nothing was run (exit 0)")


def test_cuda_present_but_unusable_exits_two(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(gpu_check, "nvidia_driver", lambda: True)
    monkeypatch.setattr(gpu_check, "run", lambda *a: pytest.fail("a launch ran on an unusable CUDA"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gpu_check.main([]) == 2
    assert "CUDA is here but unusable" in capsys.readouterr().out
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # hidden on purpose: no GPU, not a broken one
    assert gpu_check.main([]) == 0
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setattr(gpu_check, "nvidia_driver", lambda: False)  # a CUDA build on a machine without a GPU
    assert gpu_check.main([]) == 0


def test_a_gpu_that_cannot_run_a_kernel_exits_two(capsys, monkeypatch):
    import torch

    def no_kernel(*args, **kwargs):
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device\nmore")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch, "ones", no_kernel)
    monkeypatch.setattr(gpu_check, "run", lambda *a: pytest.fail("a launch ran on an unusable GPU"))
    assert gpu_check.main([]) == 2
    assert "cuda:0 cannot run a kernel: RuntimeError: CUDA error: no kernel image" in capsys.readouterr().out


def write(folder: Path, name: str, text: str) -> dict:
    (folder / "scripts").mkdir(parents=True, exist_ok=True)
    (folder / "scripts" / name).write_text(text)
    return {**LAUNCH, "script": f"scripts/{name}"}


ON_RUNTIME = "from ddp_helpers.runtime import distributed\n"
OWN_GPU = "device = torch.device('cuda', local_rank) if torch.cuda.device_count() >= n else 'cpu'\n"
OWN_CPU = "dist.init_process_group('gloo')\n"


@pytest.mark.parametrize("gpus, text, nproc, expected", [
    (1, ON_RUNTIME, 2, ("gloo vs gloo, 2 ranks on 1 shared GPU(s)", {"DDP_SHARE_GPUS": "1"}, True, None)),
    (2, ON_RUNTIME, 2, ("gloo vs nccl", {"DDP_BACKEND": "nccl"}, True, None)),
    (1, ON_RUNTIME, 1, ("gloo vs nccl", {"DDP_BACKEND": "nccl"}, True, None)),
    (1, OWN_GPU, 2, ("gloo vs its own GPU, both at world size 1", {"DDP_BACKEND": "nccl"}, True, 1)),
    (2, OWN_GPU, 2, ("gloo vs its own GPU per rank", {"DDP_BACKEND": "nccl"}, True, None)),
    (1, OWN_CPU, 2, ("gloo vs its own (CPU only)", {"DDP_BACKEND": "nccl"}, False, None)),
    (0, ON_RUNTIME, 2, ("skipped: needs 2 GPUs, 0 visible", None, False, None)),
])
def test_the_plan_puts_every_script_it_can_on_the_gpus(tmp_path, monkeypatch, gpus, text, nproc, expected):
    monkeypatch.setattr(gpu_check, "NOTEBOOKS", tmp_path)
    how = gpu_check.plan({**write(tmp_path, "s.py", text), "nproc": nproc}, gpus)
    assert (how.how, how.gpu, how.gpu_path, how.nproc) == expected
    assert how.cpu in (None, {"CUDA_VISIBLE_DEVICES": "", "DDP_BACKEND": "gloo"})


def test_on_one_gpu_ranks_share_it_or_run_alone(check):
    folder = gpu_check.NOTEBOOKS
    launches = [write(folder, "shared.py", ON_RUNTIME), write(folder, "alone.py", OWN_GPU),
                write(folder, "pair_only.py", OWN_GPU)]

    def behave(launch, side):
        return ("failed: ValueError" if launch["script"] == "scripts/pair_only.py" else "ok"), {0: ["loss 0.5"]}, {}

    code, out, calls = check(launches, gpus=1, behave=behave)
    assert [(c[0], c[1], c[2]) for c in calls] == [("scripts/shared.py", 2, "cpu"), ("scripts/shared.py", 2, "gpu"),
                                                   ("scripts/alone.py", 1, "cpu"), ("scripts/alone.py", 1, "gpu"),
                                                   ("scripts/pair_only.py", 1, "cpu")]  # its GPU side never ran
    assert calls[1][3] == {"DDP_SHARE_GPUS": "1"}  # gloo: NCCL cannot put two ranks on one GPU
    assert "does not run as recorded at world size 1 (CPU: failed: ValueError)" in row(out, "pair_only.py")
    assert "2 of 2 launches that ran agree" in out and "1 skipped" in out and code == 0


def test_every_recorded_launch_has_its_script_in_a_fresh_clone():
    for target in gpu_check.COPIED:  # as in a fresh clone, where notebook 08 never ran
        (gpu_check.NOTEBOOKS / target).unlink(missing_ok=True)
    gpu_check.write_scripts()  # what make gpu-check does first
    missing = [la["script"] for la in json.loads(gpu_check.LAUNCHES.read_text())
               if not (gpu_check.NOTEBOOKS / la["script"]).is_file()]
    assert missing == []
    assert all((gpu_check.NOTEBOOKS / t).read_text() == s.read_text() for t, s in gpu_check.COPIED.items())


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_the_plan_runs_most_recorded_launches_on_the_gpus(capsys, gpus):
    assert gpu_check.main(["--plan", "--gpus", str(gpus)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    m = re.fullmatch(rf"GPU path: (\d+) of (\d+) launches on {gpus} GPU\(s\)", last)
    assert m and int(m[1]) >= 0.8 * int(m[2]), last


def test_gpus_without_plan_is_refused(capsys):
    with pytest.raises(SystemExit):
        gpu_check.main(["--gpus", "1"])
    assert "goes with --plan" in capsys.readouterr().err
