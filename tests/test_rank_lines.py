"""The launcher reads each rank's whole lines even when torch's log tail cuts one in two.

torch elastic's tail_logfile (torch/distributed/elastic/multiprocessing/tail_log.py) copies a worker's log
file by readline(), which returns a line without its end when it gets there first, and writes each piece
behind the rank's prefix: a line whose text and newline a worker writes apart (print under
PYTHONUNBUFFERED=1 makes two writes) can arrive as "[rank0]:text" + "[rank0]:" + newline. A strict nbval run
on a busy machine stored such a line ("... samples/s 745.4[rank0]:"). The real launch below makes the cut
every time: the worker writes half a line, waits longer than the tail's interval, then writes the rest.
"""

import textwrap

from ddp_helpers.launch import torchrun
from ddp_helpers.live_view import RankLines


def fed(*lines, stream="out"):
    joiner = RankLines()
    return [joiner.feed(stream, line) for line in lines], joiner


def test_a_whole_line_and_an_agent_line():
    assert fed("[rank1]:hello\n")[0] == [[(1, "hello")]]
    assert fed("W1206 12:00:00.000 123 torch/distributed/run.py:800]\n")[0] == [None]
    assert fed("[rank0]:\n")[0] == [[(0, "")]]  # an empty print is a line too


def test_a_line_cut_by_the_tail_is_joined():
    assert fed("[rank0]:step 30: samples/s 745.4[rank0]:\n")[0] == [[(0, "step 30: samples/s 745.4")]]
    assert fed("[rank0]:step 3[rank0]:0: loss 0.7\n")[0] == [[(0, "step 30: loss 0.7")]]


def test_another_ranks_line_between_the_pieces():
    results, joiner = fed("[rank0]:first half[rank1]:a whole line of rank 1\n", "[rank0]:, second half\n")
    assert results == [[(1, "a whole line of rank 1")], [(0, "first half, second half")]]
    assert joiner.rest() == []


def test_torchs_own_rank_prefix_at_the_start_is_kept():
    traceback = "[rank0]:[rank0]: Traceback (most recent call last):\n"
    assert fed(traceback)[0] == [[(0, "[rank0]: Traceback (most recent call last):")]]
    assert fed("[rank0]:[rank0]: Trace[rank0]:back\n")[0] == [[(0, "[rank0]: Traceback")]]
    assert fed("[rank0]:[rank0]:[rank0]: Traceback\n")[0] == [[(0, "[rank0]: Traceback")]]


def test_pieces_of_stdout_and_stderr_stay_apart():
    joiner = RankLines()
    assert joiner.feed("out", "[rank0]:out start[rank1]:x\n") == [(1, "x")]
    assert joiner.feed("err", "[rank0]:an error\n") == [(0, "an error")]
    assert joiner.feed("out", "[rank0]: out end\n") == [(0, "out start out end")]


def test_a_start_whose_end_never_came_is_kept():
    results, joiner = fed("[rank1]:killed in mid-[rank0]:line\n")
    assert results == [[(0, "line")]]
    assert joiner.rest() == [("out", 1, "killed in mid-")] and joiner.rest() == []


def test_a_real_launch_whose_worker_writes_half_a_line_first(tmp_path):
    script = tmp_path / "half_lines.py"
    script.write_text(textwrap.dedent("""
        import os, sys, time
        rank = os.environ["RANK"]
        sys.stdout.write(f"rank {rank} says: half"); sys.stdout.flush()
        time.sleep(0.6)  # longer than the tail's interval (0.1 s): it reads the half line alone
        print(" and the rest")
        print("next line")
    """))
    result = torchrun(script, nproc=2, live="quiet", summary=False, timeout=60)
    assert result.stdout == {0: ["rank 0 says: half and the rest", "next line"],
                             1: ["rank 1 says: half and the rest", "next line"]}
