"""ddp_helpers.results: rank 0's results file, alone and under a real two-rank launch."""

import json
import textwrap

import pytest

from ddp_helpers import results


def test_without_a_process_group_the_caller_is_rank_0(tmp_path):
    res = {"loss": 0.5, "ranks": [0, 1], "name": "ok"}
    path = results.save_results(res, tmp_path / "run")
    assert path == tmp_path / "run" / "results.json"
    assert results.load_results(tmp_path / "run") == res == json.loads(path.read_text())
    assert results.save_results(res, tmp_path, name="other.json", gather=True) == tmp_path / "other.json"
    assert results.load_results(tmp_path, "other.json") == [res]  # a list of one rank
    assert not list(tmp_path.rglob("*.partial"))


def test_a_result_that_is_not_json_leaves_no_file(tmp_path):
    with pytest.raises(TypeError):
        results.save_results({"tensor": object()}, tmp_path)
    assert not (tmp_path / "results.json").exists()


def test_output_dir_is_the_first_argument(tmp_path):
    folder = results.output_dir([str(tmp_path / "a" / "b"), "--flag"])
    assert folder == tmp_path / "a" / "b" and folder.is_dir()
    with pytest.raises(SystemExit, match="output folder"):
        results.output_dir([])


WORKER = textwrap.dedent('''
    from ddp_helpers.results import output_dir, save_results
    from ddp_helpers.runtime import distributed

    out_dir = output_dir()
    with distributed() as ctx:
        mine = {"rank": ctx.rank, "square": ctx.rank ** 2}
        wrote = save_results(mine, out_dir, name="rank0.json")
        gathered = save_results(mine, out_dir, gather=True)
        print(f"wrote {wrote is not None} {gathered is not None}")
''')


def test_rank_0_writes_and_gather_keeps_rank_order(tmp_path):
    from ddp_helpers import torchrun

    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    run = torchrun(script, nproc=2, args=[tmp_path / "out"], live="quiet", summary=False, timeout=120)
    assert run.stdout == {0: ["wrote True True"], 1: ["wrote False False"]}
    assert results.load_results(tmp_path / "out", "rank0.json") == {"rank": 0, "square": 0}
    assert results.load_results(tmp_path / "out") == [{"rank": 0, "square": 0}, {"rank": 1, "square": 1}]
