"""tests/slurm/test_slurm.py's resubmission rule, with a stand-in cluster: a completed two-node job whose
output file lacks one node's worker lines is submitted once more, with a warning that carries the first
output; a job that did not complete, or a complete output, is taken as it is."""

import importlib.util
from pathlib import Path

import pytest

SLURM_TESTS = Path(__file__).resolve().parent / "slurm" / "test_slurm.py"
spec = importlib.util.spec_from_file_location("slurm_tests", SLURM_TESTS)
slurm_tests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(slurm_tests)

BANNER = "slurm_ddp: job {j}, nodes node1 node2, 2 worker(s) per node, OMP_NUM_THREADS=1, rendezvous node1:2000{j}"
LINES = {"0": ["0: RANK=0 LOCAL_RANK=0 GROUP_RANK=0 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2",
               "0: RANK=1 LOCAL_RANK=1 GROUP_RANK=0 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2"],
         "1": ["1: RANK=2 LOCAL_RANK=0 GROUP_RANK=1 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2",
               "1: RANK=3 LOCAL_RANK=1 GROUP_RANK=1 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2"]}


class StandInCluster:
    """Jobs 1, 2, ...: each with a given final state and the node tasks whose lines its output has."""

    def __init__(self, jobs: list[tuple[str, set[str]]]):
        self.jobs, self.submitted = jobs, 0

    def sbatch(self, args, **env) -> int:
        self.submitted += 1
        return self.submitted

    def wait(self, job_ids):
        return {j: {"JobState": self.jobs[j - 1][0]} for j in job_ids}, []


@pytest.fixture
def stand_in(monkeypatch, tmp_path):
    monkeypatch.setattr(slurm_tests, "notebook_worker", lambda name: slurm_tests.REPO / name)

    def make(jobs):
        cluster = StandInCluster(jobs)
        texts = {j: "\n".join([BANNER.format(j=j), *(line for node in sorted(nodes) for line in LINES[node])])
                 for j, (_, nodes) in enumerate(jobs, start=1)}
        monkeypatch.setattr(slurm_tests, "output", lambda job_id: texts[job_id])
        return cluster
    return make


def test_a_complete_output_is_taken_as_it_is(stand_in, recwarn):
    cluster = stand_in([("COMPLETED", {"0", "1"})])
    job_id, _, info, text = slurm_tests.run_two_nodes(cluster)
    assert (job_id, cluster.submitted, len(recwarn)) == (1, 1, 0)


def test_missing_node_lines_resubmit_once_with_a_warning(stand_in):
    cluster = stand_in([("COMPLETED", {"1"}), ("COMPLETED", {"0", "1"})])
    with pytest.warns(UserWarning, match=r"job 1: worker lines of node task\(s\) \['0'\] missing") as seen:
        job_id, _, info, text = slurm_tests.run_two_nodes(cluster)
    assert (job_id, cluster.submitted) == (2, 2)
    assert LINES["1"][0] in str(seen[0].message)   # the first job's output is in the warning
    assert LINES["0"][0] in text


def test_a_second_incomplete_output_is_returned_for_the_test_to_fail(stand_in):
    cluster = stand_in([("COMPLETED", {"1"}), ("COMPLETED", {"1"})])
    with pytest.warns(UserWarning):
        job_id, _, info, text = slurm_tests.run_two_nodes(cluster)
    assert (job_id, cluster.submitted) == (2, 2) and LINES["0"][0] not in text


def test_a_failed_job_is_not_resubmitted(stand_in, recwarn):
    cluster = stand_in([("FAILED", {"1"})])
    job_id, _, info, text = slurm_tests.run_two_nodes(cluster)
    assert (job_id, cluster.submitted, info["JobState"], len(recwarn)) == (1, 1, "FAILED", 0)
