"""The stress tools count what they say: tools/stress_tests.py a test that fails in some rounds only,
tools/kill_stress.py a killed caller whose launch outlives it."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import kill_stress  # noqa: E402


def test_a_test_failing_in_one_round_of_three_is_counted(tmp_path):
    counter = tmp_path / "rounds"
    test_file = tmp_path / "test_flaky.py"
    test_file.write_text(textwrap.dedent(f"""
        from pathlib import Path
        COUNTER = Path({str(counter)!r})

        def test_steady():
            assert True

        def test_fails_in_the_second_round():
            n = int(COUNTER.read_text()) + 1 if COUNTER.exists() else 1
            COUNTER.write_text(str(n))
            assert n != 2
    """))
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "stress_tests.py"), "--rounds", "3", str(test_file)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "round 2: 2 tests, 1 failed" in run.stdout and "round 3: 2 tests, 0 failed" in run.stdout
    assert "stress tests: 1 of 3 rounds had a failure" in run.stdout
    # JUnit's class name of a file outside the repository carries its folders: match the end
    assert re.search(r"^  +1 of 3  \S*test_flaky::test_fails_in_the_second_round$", run.stdout, re.M), run.stdout
    assert "test_steady" not in run.stdout.split("stress tests:")[1]


def test_steady_tests_exit_zero(tmp_path):
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "stress_tests.py"), "--rounds", "2",
                          str(tmp_path / "test_ok.py")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "stress tests: 0 of 2 rounds had a failure" in run.stdout


def test_pytest_options_pass_through(tmp_path):
    # the docstring's own example: a file, then -k NAME (argparse alone refused the -k)
    (tmp_path / "test_two.py").write_text("def test_chosen():\n    assert True\n\ndef test_other():\n    assert False\n")
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "stress_tests.py"), "--rounds", "2",
                          str(tmp_path / "test_two.py"), "-k", "chosen"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "round 2: 1 tests, 0 failed" in run.stdout, run.stdout + run.stderr


def test_kill_stress_counts_a_launch_that_outlives_its_caller(monkeypatch, capsys):
    # the launcher's clean-up turned off (no watchdog, no parent-death signal): the killed caller's agent
    # and worker stay, and the tool says so (then kills them)
    monkeypatch.setattr(kill_stress, "CALLER_SETUP", "from ddp_helpers import launch\n"
                        "launch.start_watchdog = lambda agents, remove=None: None\n"
                        "launch._with_parent_death_signal = lambda argv: list(argv)")
    monkeypatch.setattr(kill_stress, "DEADLINE_S", 3.0)
    assert kill_stress.main(["--kills", "1"]) == 1
    out = capsys.readouterr().out
    assert "trial 1: 2 process(es) still alive 3 s after the kill" in out
    assert "kill stress: 1 of 1 killed callers left processes behind" in out
