"""tools/gpu_check.py: the CPU-vs-GPU comparison rules, and the recorded launches."""

import json
import re
import sys
from pathlib import Path

from ddp_helpers.series import notebooks

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import gpu_check  # noqa: E402


def test_device_words_and_floats_within_tolerance_agree():
    cpu = ["backend=gloo device=cpu loss 0.5000", "autocast bfloat16, grad scaler False", "epoch 3"]
    gpu = ["backend=nccl device=cuda:1 loss 0.5100", "autocast float16, grad scaler True", "epoch 3"]
    assert gpu_check.compare_lines(cpu, gpu) is None


def test_integers_words_and_far_floats_differ():
    assert "line 0" in gpu_check.compare_lines(["correct 352"], ["correct 351"])
    assert "line 0" in gpu_check.compare_lines(["loss 0.50"], ["loss 0.60"])
    assert "lines" in gpu_check.compare_lines(["a"], ["a", "b"])


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


def test_no_gpu_means_nothing_runs_and_exit_zero(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main([]) == 0
    assert "no CUDA GPU" in capsys.readouterr().out
