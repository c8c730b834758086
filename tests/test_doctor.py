"""The doctor (ddp_helpers.doctor) on scripts with planted mistakes and on clean scripts of several styles.

Each fixture script in tests/doctor_scripts/ marks the line of every mistake it plants with
``# planted: id[, id]``; the doctor must report exactly those error-level ids, at those lines, and every
other planted id. Each script is run once (a module-scoped cache) and several tests read its report.
The clean corpus (clean fixtures, the walkthrough's later steps, the template) must give no error.
"""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_helpers.doctor import catalog, check
from ddp_helpers.doctor.checks import Evidence
from ddp_helpers.doctor.collectives import how_it_ended
from ddp_helpers.doctor.conversion import Plain, refusal, step_samples, training_passes
from ddp_helpers.doctor.records import RankRecord
from ddp_helpers.doctor.report import Finding, Report, from_dict
from ddp_helpers.doctor.run import diagnose, examine
from ddp_helpers.doctor.static import Script
from ddp_helpers.launch import LaunchTimeout, WorkerFailed

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).resolve().parent / "doctor_scripts"
PLANTED = re.compile(r"#\s*planted:\s*([\w\-, ]+)$")
MISTAKES = sorted(p.name for p in SCRIPTS.glob("m_*.py"))
CLEAN = {  # script -> its arguments
    **{f"tests/doctor_scripts/{p.name}": [] for p in sorted(SCRIPTS.glob("c_*.py"))},
    **{f"notebooks/walkthrough/{p.name}": ["out"] for p in sorted((ROOT / "notebooks/walkthrough").glob("step[5-9]_*.py"))},
    "templates/train_ddp.py": ["--out", "run", "--epochs", "1", "--workers", "0"],
}
REQUIRED_IDS = {"data-not-sharded", "sampler-epoch-not-set", "model-not-wrapped", "replicas-diverge",
                "save-on-every-rank", "load-without-barrier", "unsafe-load", "rank-conditional-collective",
                "collective-mismatch", "eval-duplicates", "hardcoded-device", "unreduced-metric",
                "unused-parameters", "no-destroy"}


def planted(path: Path) -> dict[str, int]:
    """id -> the line that plants it."""
    found = {}
    for number, text in enumerate(path.read_text().splitlines(), 1):
        m = PLANTED.search(text)
        if m:
            found.update({i.strip(): number for i in m.group(1).split(",")})
    return found


@pytest.fixture(scope="module")
def reports():
    cache: dict[str, Report] = {}

    def run(script: str, args=()) -> Report:
        if script not in cache:
            cache[script] = diagnose(ROOT / script if not Path(script).is_absolute() else script, args=args,
                                     timeout=60)
        return cache[script]

    return run


def test_every_required_id_is_planted_in_two_scripts_of_different_styles():
    scripts_of = {i: [name for name in MISTAKES if i in planted(SCRIPTS / name)] for i in REQUIRED_IDS}
    assert {i: s for i, s in scripts_of.items() if len(s) < 2} == {}
    assert REQUIRED_IDS <= set(catalog.CATALOG)


@pytest.mark.parametrize("name", MISTAKES)
def test_planted_mistakes_are_found_at_their_lines(reports, name):
    report = reports(f"tests/doctor_scripts/{name}")
    expected = planted(SCRIPTS / name)
    found = {f.id: f for f in report.findings}
    assert set(expected) <= set(found), report.render()
    assert {f.id for f in report.findings if f.level == "error"} <= set(expected), report.render()
    for i, line in expected.items():
        assert found[i].line == line, f"{i}: reported at line {found[i].line}, planted at {line}"
        assert found[i].file == str(SCRIPTS / name)  # the script as it was named
    assert report.exit_code == (1 if any(catalog.CATALOG[i].level == "error" for i in expected) else 0)
    left = [p.name for folder in (ROOT, SCRIPTS) for p in folder.iterdir() if p.suffix == ".pt" or p.name.startswith("step0")]
    assert left == [], "the script ran in a temporary folder: its files must not land here"


@pytest.mark.parametrize("name, words", [
    ("m_plain_loop.py", {"data-not-sharded": "ranks 0 and 1 iterated the same 48 samples",
                         "model-not-wrapped": "ran 4 optimizer steps",
                         "save-on-every-rank": "ranks 0 and 1 each wrote model.pt",
                         "unreduced-metric": "printed `loss.item()`"}),
    ("m_iterable_unsharded.py", {"data-not-sharded": "the same 24 samples"}),
    ("m_eval_padded.py", {"eval-duplicates": "pads 9 samples to 10",
                          "sampler-epoch-not-set": "same order of 12 samples in passes 1 and 2"}),
    ("m_eval_everyone.py", {"eval-duplicates": "both evaluated 10 sample"}),
    ("m_rank_branch.py", {"rank-conditional-collective": "inside the `if` on the rank at line 8"}),
    ("m_rank_branch_helper.py", {"rank-conditional-collective": "line 12 is inside the `if` on the rank at line 21"}),
    ("m_mismatch_shape.py", {"collective-mismatch": "all_reduce(float32[3]) at line 7; rank 1 called "
                                                    "all_reduce(float32[4])"}),
    ("m_unused_layer.py", {"unused-parameters": "old_head.weight, old_head.bias received no gradient"}),
    ("m_unused_heads.py", {"unused-parameters": "regress.weight, regress.bias"}),
    ("m_ckpt_race.py", {"load-without-barrier": "rank 1 loaded ckpt.pt at line 14, written by rank 0 at line 11"}),
    ("m_trainer_class.py", {"hardcoded-device": "seen by reading the script"}),
])
def test_messages_say_what_was_measured(reports, name, words):
    found = {f.id: f.message for f in reports(f"tests/doctor_scripts/{name}").findings}
    for i, text in words.items():
        assert text in found[i], found[i]


# gloo's exit abort can end, now and then, a run whose DDP model is still alive at destroy_process_group()
# (the c_ scripts keep theirs, as many learners' scripts do): the doctor reports it as a warning with its fix.
# It says nothing about the training, so the checks of the c_ scripts leave it out; the walkthrough's steps
# and the template end their group so that it cannot happen, and are held to no finding at all.
EXIT_RACE = "gloo-exit-abort"


@pytest.mark.parametrize("script", sorted(CLEAN))
def test_clean_scripts_get_no_error(reports, script):
    report = reports(script, CLEAN[script])
    assert report.outcome == "completed" and report.exit_code == 0, report.render()
    findings = [f for f in report.findings if not ("c_" in script and f.id == EXIT_RACE)]
    assert [f.id for f in findings if f.id != "save-on-every-rank"] == [], report.render()
    if "step9" in script or "c_" in script or "train_ddp" in script:  # they save on rank 0 only
        assert findings == []


def test_removing_the_planted_mistake_removes_its_finding(tmp_path):
    source = (SCRIPTS / "m_eval_padded.py").read_text()
    fixed = re.sub(r"(for epoch in range\(2\):.*\n)", r"\1    sampler.set_epoch(epoch)\n", source)
    assert fixed != source
    script = tmp_path / "fixed.py"
    script.write_text(fixed)
    before = script.stat().st_mtime_ns
    report = diagnose(script, timeout=60)
    assert script.read_text() == fixed and script.stat().st_mtime_ns == before  # the learner's file is untouched
    assert "sampler-epoch-not-set" not in report.ids and "eval-duplicates" in report.ids, report.render()


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddp_helpers.doctor", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=180)


def test_cli_exit_codes_and_json(tmp_path):
    clean = run_cli("--json", str(tmp_path / "clean.json"), "tests/doctor_scripts/c_iterable.py")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    data = json.loads((tmp_path / "clean.json").read_text())
    assert data["exit_code"] == 0 and data["outcome"] == "completed"
    assert [f for f in data["findings"] if f["id"] != EXIT_RACE] == []  # c_iterable keeps its DDP model to the end
    broken = run_cli("--json", str(tmp_path / "broken.json"), "--timeout", "60", "tests/doctor_scripts/m_rank_branch.py")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    data = json.loads((tmp_path / "broken.json").read_text())
    assert set(data) >= {"schema", "script", "nproc", "outcome", "reason", "exit_code", "counts", "findings"}
    first = data["findings"][0]
    assert set(first) >= {"id", "level", "file", "line", "message", "why", "fix", "section", "detection"}
    assert (first["id"], first["level"], first["line"]) == ("rank-conditional-collective", "error", 9)
    assert data["counts"]["error"] == 1 and data["exit_code"] == 1 and "ERROR rank-conditional-collective" in broken.stdout
    assert from_dict(data).as_dict() == data


@pytest.mark.parametrize("text, reason", [
    (None, "is not a file"),
    ("def broken(:\n", "syntax error at line 1"),
    ("import sys\nraise SystemExit('no data folder given')\n", "before init_process_group"),
    ("import torch\nx = torch.ones(2)\nraise ValueError('bad config value')\n",
     "ValueError at line 3 before init_process_group: bad config value"),
])
def test_cli_exit_code_2_when_the_script_cannot_run(tmp_path, text, reason):
    script = tmp_path / "script.py"
    if text is not None:
        script.write_text(text)
    out = run_cli("--json", str(tmp_path / "r.json"), str(script))
    assert out.returncode == 2, out.stdout + out.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["outcome"] == "not-run" and reason in data["reason"] and data["findings"] == []


@pytest.mark.parametrize("args, words", [(["--nproc", "0", "x.py"], "must be > 0"),
                                         (["--timeout", "-1", "x.py"], "must be > 0"), ([], "required")])
def test_cli_refuses_bad_options_before_anything_starts(args, words):
    out = run_cli(*args)
    assert out.returncode == 2 and words in out.stderr


@pytest.mark.parametrize("kwargs, error", [({"nproc": 0}, ValueError), ({"timeout": 0}, ValueError),
                                           ({"args": "--epochs 1"}, TypeError), ({"nproc": True}, ValueError)])
def test_check_refuses_bad_arguments(kwargs, error):
    with pytest.raises(error):
        check(SCRIPTS / "c_iterable.py", **kwargs)


# --- the parts without a launch -----------------------------------------------------------------
def evidence(tmp_path, events: dict[int, list[dict]], text: str = "x = 1\n") -> Evidence:
    (tmp_path / "s.py").write_text(text)
    records = {rank: RankRecord(rank, evs) for rank, evs in events.items()}
    return Evidence(records, Script(tmp_path / "s.py"), "s.py", len(events), tmp_path)


INIT = {"ev": "init", "line": 1, "world": 2}
DESTROY = {"ev": "destroy", "line": 9, "ddp_alive": 1}


@pytest.mark.parametrize("finished, outcome, finding", [
    (True, "completed", "gloo-exit-abort"),  # the exit handler ran: the work was done
    (False, "crashed", "script-failed"),     # no exit handler: the rank died in its work
])
def test_an_abort_after_the_work_is_told_from_the_script_failing(tmp_path, finished, outcome, finding):
    end = [{"ev": "end", "pg_alive": False, "ddp_alive": 1, "crashed": False}] if finished else []
    ev = evidence(tmp_path, {0: [INIT, DESTROY, {"ev": "destroyed"}, *end], 1: [INIT, DESTROY, *end]})
    failure = WorkerFailed(1, -6, "terminate called without an active exception", "torchrun x.py", {0: -15})
    ending = how_it_ended(ev, failure, 60)
    assert ending.outcome == outcome and [f.id for f in ending.findings] == [finding]
    if finished:
        assert "1 DDP model(s) still existed" in ending.findings[0].message
        assert ending.findings[0].level == "warning"


def test_a_timeout_names_where_each_rank_was(tmp_path):
    enter = {"ev": "enter", "seq": 0, "op": "barrier", "line": 5, "lines": [5]}
    ev = evidence(tmp_path, {0: [INIT, enter], 1: [INIT, {"ev": "stopped", "line": 7, "lines": [7]}]})
    ending = how_it_ended(ev, LaunchTimeout("run exceeded timeout"), 30)
    assert ending.outcome == "timed-out" and ending.findings[0].id == "hang"
    assert ending.findings[0].message == ("the run did not end within the 30 s timeout: rank 0 waited in barrier() at "
                                          "line 5; rank 1 was at line 7 when the timeout stopped it")


@pytest.mark.parametrize("code, flagged", [
    ("rank = dist.get_rank()\nmodel.to(rank)\n", [2]),
    ("import os\ng = int(os.environ['RANK'])\nd = torch.device(f'cuda:{g}')\n", [3]),
    ("rank, local = int(os.environ['RANK']), int(os.environ['LOCAL_RANK'])\nm.cuda(local)\nx.to(rank)\n", [3]),
    ("DDP(m, device_ids=[dist.get_rank()])\n", [1]),
    ("d = 'cuda:%d' % int(os.getenv('RANK'))\n", [1]),
    # right answers in other forms: the local rank, however it is written
    ("local_rank = int(os.environ['LOCAL_RANK'])\nmodel.to(local_rank)\ntorch.cuda.set_device(local_rank)\n", []),
    ("self.gpu_id = int(os.environ['LOCAL_RANK'])\nDDP(m, device_ids=[self.gpu_id])\n", []),
    ("rank = dist.get_rank()\nprint(f'rank {rank}')\nx.to('cpu')\n", []),
])
def test_hardcoded_device_is_read_from_the_script(tmp_path, code, flagged):
    (tmp_path / "s.py").write_text(code)
    assert [line for line, _ in Script(tmp_path / "s.py").global_rank_devices()] == flagged


@pytest.mark.parametrize("code, metric", [
    ("def f():\n    loss = F.mse_loss(a, b)\n    print(f'loss {loss.item()}')\n", "loss.item()"),
    ("def f():\n    acc = correct / total\n    print('accuracy', acc)\n", "acc"),
    # reduced before printing, in other forms
    ("def f():\n    t = loss.detach()\n    dist.all_reduce(t)\n    print(f'loss {t.item()}')\n", None),
    ("def ev():\n    dist.all_reduce(s)\n    return s\ndef f():\n    r = ev()\n    print(f'loss {r[0]}')\n", None),
    ("from mylib import evaluate\ndef f():\n    acc = evaluate(m)\n    print(f'acc {acc}')\n", None),
    ("def f():\n    print(f'epoch {epoch} step {step}')\n", None),
])
def test_unreduced_metric_reading(tmp_path, code, metric):
    (tmp_path / "s.py").write_text(code)
    line = next(i for i, text in enumerate(code.splitlines(), 1) if "print" in text)
    assert Script(tmp_path / "s.py").unreduced_metric(line) == metric


def test_report_exit_code_and_order():
    f = [Finding("no-destroy", "s.py", 3, "m"), Finding("data-not-sharded", "s.py", 9, "m")]
    assert Report("s.py", 2, "completed", f).ids == ["data-not-sharded", "no-destroy"]
    assert Report("s.py", 2, "completed", f[:1]).exit_code == 0
    assert Report("s.py", 2, "completed", f).exit_code == 1
    assert Report("s.py", 2, "not-run", [], "missing").exit_code == 2
    with pytest.raises(ValueError, match="unknown finding id"):
        Finding("no-such-id", "s.py", 1, "m")


def table_rows(text: str) -> list[tuple[str, ...]]:
    rows = [tuple(c.strip() for c in line.strip().strip("|").split("|")) for line in text.splitlines()
            if line.strip().startswith("| ") and "---" not in line]
    return [r for r in rows if r[0] != "id"]


def test_the_documented_table_is_the_catalogue():
    expected = [(i, e.level, e.detection, e.section) for i, e in catalog.CATALOG.items()]
    package_doc = ast.get_docstring(ast.parse((ROOT / "ddp_helpers/doctor/__init__.py").read_text()))
    readme = (ROOT / "README.md").read_text().split("## Check your own script", 1)[1]
    assert table_rows(package_doc) == expected
    assert table_rows(readme.split("\n## ", 1)[0]) == expected


# --- gloo's exit abort: reported from what held the group, and never a reason to stop another rank's work ---
@pytest.mark.parametrize("destroy, finished, held", [
    ({"ddp_alive": 1}, True, "1 DDP model(s) still existed"),
    ({"ddp_alive": 0, "late_nn": True}, True, "torch.distributed.nn was first imported after init_process_group"),
    ({"ddp_alive": 0, "late_nn": False}, True, None),  # the clean exit: nothing held it
    ({"ddp_alive": 1, "late_nn": True, "by_series": True}, True, None),  # distributed()'s teardown waits it out
    ({"ddp_alive": 1}, False, None),  # the rank never finished: its failure is reported, not this
])
def test_a_group_held_at_exit_is_reported_whether_or_not_the_abort_came(tmp_path, destroy, finished, held):
    from ddp_helpers.doctor.checks import group_held_at_exit

    end = [{"ev": "end", "pg_alive": False, "ddp_alive": 0, "crashed": False}] if finished else []
    at = {"ev": "destroy", "line": 9, **destroy}
    ev = evidence(tmp_path, {0: [INIT, at, {"ev": "destroyed"}, *end], 1: [INIT, at, {"ev": "destroyed"}, *end]})
    found = group_held_at_exit(ev)
    assert [f.id for f in found] == (["gloo-exit-abort"] if held else [])
    if held:
        assert held in found[0].message and "ranks 0 and 1" in found[0].message and found[0].line == 9
        assert how_it_ended(ev, None, 60).outcome == "completed"


ABORT_ON_RANK_0 = '''import os
import time

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401

dist.init_process_group("gloo")
rank = dist.get_rank()
dist.barrier()


class ExitAbort:  # gloo's exit abort, played: SIGABRT once rank 0's interpreter clears the script's names
    def __del__(self, abort=os.abort):
        abort()


if rank == 0:
    at_exit = ExitAbort()
dist.destroy_process_group()
if rank == 1:  # still working when rank 0 ends: torchrun stops the others once one rank fails
    time.sleep(3)
    torch.save({"done": torch.ones(1)}, "late.pt")
    print("rank 1 finished its work")
'''


def test_an_abort_on_one_rank_does_not_stop_another_in_its_work(tmp_path):
    """Rank 0 dies with -6 after its work while rank 1 still works: the recorder's exit handler keeps rank 0
    until rank 1 has ended, so the run is judged on both ranks' whole work, as if no abort had come."""
    script = tmp_path / "aborts.py"
    script.write_text(ABORT_ON_RANK_0)
    report, ev = examine(script, timeout=60)
    assert report.outcome == "completed" and report.ids == ["gloo-exit-abort"], report.render()
    assert "rank 0 finished the script" in report.findings[0].message and report.exit_code == 0
    assert ev.records[1].finished and [e["path"].endswith("late.pt") for e in ev.records[1].of("save")] == [True]
    assert [e["text"] for e in ev.records[1].of("print")] == ["rank 1 finished its work"]


@pytest.mark.parametrize("workers", ["0", "2, persistent_workers=True"])
def test_the_script_own_writes_and_the_samples_of_each_step_are_recorded(tmp_path, workers):
    """A file opened for writing by the script (json.dump, Path.write_text) is a save; each optimizer step
    records the training samples handed over so far (an evaluation pass adds none), loader workers that draw
    ahead (and persist from one pass to the next) or not."""
    script = tmp_path / "writes.py"
    script.write_text('''import json
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.nn  # noqa: F401
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
data = TensorDataset(torch.randn(40, 3), torch.randn(40, 1))
sampler = DistributedSampler(data, seed=0)
model = DDP(torch.nn.Linear(3, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(data, batch_size=8, sampler=sampler, num_workers=WORKERS)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
with torch.no_grad():
    for x, y in DataLoader(data, batch_size=8):
        model(x)
if dist.get_rank() == 0:
    with open("result.json", "w") as f:
        json.dump({"ok": 1}, f)
    Path("note.txt").write_text("done")
dist.barrier()
del model
dist.destroy_process_group()
'''.replace("WORKERS", workers))
    report, ev = examine(script, timeout=60)
    assert report.outcome == "completed" and report.findings == [], report.render()
    for rank in (0, 1):  # 20 samples a rank and epoch in batches of 8: 8, 8, 4
        assert step_samples(ev.records[rank]) == [8, 8, 4] * 2
        assert len(training_passes(ev.records[rank])) == 2
    saved = sorted((rank, Path(e["path"]).name, e["line"]) for rank, r in ev.records.items() for e in r.of("save"))
    assert saved == [(0, "note.txt", 28), (0, "result.json", 26)]
    plain = Plain(samples=40, global_batch=16, epochs=2, saved="result.json")
    assert plain.steps() == [16, 16, 8] and refusal(report, ev, plain, rerun="doctor") is None
    wrong = refusal(report, ev, Plain(samples=40, global_batch=8, epochs=2, saved="result.json"), rerun="doctor")
    assert wrong is not None and "global batches of 8 or 16 samples" in wrong.what
    assert refusal(report, ev, Plain(40, 16, 2, "note.txt"), rerun="doctor") is None
    assert refusal(report, ev, Plain(40, 16, 2, "model.pt"), rerun="doctor").what == (
        "no rank wrote model.pt.")
    assert "trained in 2 passes" in refusal(report, ev, Plain(40, 16, 3, "result.json"), rerun="doctor").what
