"""Notebook 14's checks against wrong answers (refused with a hint, never a crash) and right answers in
other valid forms (accepted), as tests/test_exercises_cases.py does for the earlier notebooks."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from exercise_calls import refused_text  # tests/ is on sys.path

from ddp_helpers import exercises
from ddp_helpers.context_parallel import block_attention, chunk_owners, merge, positions
from ddp_helpers.exercises import nb14

torch.manual_seed(1)
Q, K, V = (torch.randn(1, 2, 16, 6) for _ in range(3))
KW = dict(q=Q, k=K, v=V)
OFF = 5e-5  # float32 rounds values of size ~1 to ~1e-7: an error of 5e-5 is a wrong answer
PARTS = [block_attention(Q, kb, vb) for kb, vb in zip(K.split([3, 5, 8], dim=2), V.split([3, 5, 8], dim=2),
                                                      strict=True)]
MERGED = merge(*merge(*PARTS[0], *PARTS[1]), *PARTS[2])[0]
ZIGZAG_3 = [12, 13, 14, 15, 48, 49, 50, 51]          # chunks 3 and 12 of 16 chunks of 4 tokens

RIGHT = {
    "14.1": [dict(merged=MERGED, **KW), dict(merged=MERGED.double().numpy(), **KW),
             dict(merged=F.scaled_dot_product_attention(Q, K, V), **KW),
             dict(merged=MERGED + 1e-6, **KW),  # within float32's rounding of another summation order
             dict(merged=MERGED.tolist(), **KW),  # nested lists (issue 38: one coercion rule)
             dict(merged=MERGED, q=Q, k=K[:, :, 8:], v=V[:, :, 8:])],  # a loop left k and v as the last block
    "14.2": [dict(zigzag_rank_3=ZIGZAG_3, contiguous_ratio=Fraction(15, 8)),
             dict(zigzag_rank_3=tuple(ZIGZAG_3), contiguous_ratio=1.875),
             dict(zigzag_rank_3=torch.tensor(ZIGZAG_3), contiguous_ratio=np.float32(1.875)),
             dict(zigzag_rank_3=[ZIGZAG_3[:4], ZIGZAG_3[4:]], contiguous_ratio="15/8")],  # strings that read as numbers
}
WRONG = {
    "14.1": [("copy-through: a loose tolerance", dict(merged=sum(p[0] for p in PARTS) / 3, tol=1.0, **KW)),
             ("off by more than float32's rounding", dict(merged=MERGED + OFF, **KW)),
             ("plain mean", dict(merged=sum(p[0] for p in PARTS) / 3, **KW)),
             ("one block", dict(merged=PARTS[2][0], **KW)),
             ("sum unweighted", dict(merged=sum(p[0] for p in PARTS), **KW)),
             ("causal", dict(merged=F.scaled_dot_product_attention(Q, K, V, is_causal=True), **KW)),
             ("transposed", dict(merged=MERGED.transpose(-2, -1), **KW)),
             ("right for the rebound names only", dict(merged=PARTS[2][0], q=Q, k=K[:, :, 8:], v=V[:, :, 8:])),
             ("a list holding None", dict(merged=[None], **KW))],
    "14.2": [("contiguous rank 3", dict(zigzag_rank_3=list(range(24, 32)), contiguous_ratio=1.875)),
             ("reversed", dict(zigzag_rank_3=ZIGZAG_3[::-1], contiguous_ratio=1.875)),
             ("chunk 2N - r", dict(zigzag_rank_3=[12, 13, 14, 15, 52, 53, 54, 55], contiguous_ratio=1.875)),
             ("4 ranks' ratio", dict(zigzag_rank_3=ZIGZAG_3, contiguous_ratio=1.75)),
             ("whole diagonal tiles", dict(zigzag_rank_3=ZIGZAG_3, contiguous_ratio=Fraction(31, 17))),
             ("a string that is no number", dict(zigzag_rank_3=ZIGZAG_3, contiguous_ratio="fifteen eighths")),
             ("too few", dict(zigzag_rank_3=ZIGZAG_3[:4], contiguous_ratio=1.875))],
}


def refused(exid, kwargs):
    return refused_text(exid, lambda: exercises.CHECKS[exid](**kwargs))


def test_both_checks_are_registered_with_their_cases():
    assert {"14.1", "14.2"} <= set(exercises.exercise_ids())
    for exid in ("14.1", "14.2"):
        assert len(RIGHT[exid]) >= 2 and len(WRONG[exid]) >= 3


@pytest.mark.parametrize(("exid", "i"), [(e, i) for e, cases in RIGHT.items() for i in range(len(cases))])
def test_right_answers_in_other_forms_pass(exid, i, capsys):
    exercises.CHECKS[exid](**RIGHT[exid][i])
    out = capsys.readouterr().out
    assert out.endswith(f"Exercise {exid}: correct\n") and out.count("\n") == 1


@pytest.mark.parametrize(("exid", "label"), [(e, label) for e, cases in WRONG.items() for label, _ in cases])
def test_wrong_answers_fail_with_a_hint(exid, label):
    refused(exid, dict(WRONG[exid])[label])


@pytest.mark.parametrize("exid", ["14.1", "14.2"])
def test_the_starter_ellipsis_fails_first(exid):
    kwargs = {**RIGHT[exid][0], **{name: ... for name in ("merged", "zigzag_rank_3", "contiguous_ratio")
                                   if name in RIGHT[exid][0]}}
    assert "is still `...`" in refused(exid, kwargs)


def test_messages_never_hold_the_answers():
    for label, kwargs in WRONG["14.2"]:
        text = refused("14.2", kwargs)
        assert "1.875" not in text and "15/8" not in text and "48" not in text, label


def test_the_reference_ratio_is_the_tile_count_of_chunk_owners():
    owners = chunk_owners("contiguous", 8)          # the library's map of who computes which tile
    work = [Fraction(int((owners == r).sum())) - Fraction(int((owners.diagonal() == r).sum()), 2)
            for r in range(8)]
    assert nb14._contiguous_ratio() == max(work) / (sum(work) / 8)
    assert nb14._zigzag(3) == ZIGZAG_3 == positions("zigzag", 64, 8, 3).tolist()


def test_the_float32_tolerance_is_the_checks_own_and_stated():
    text = refused("14.1", dict(merged=MERGED + OFF, **KW))
    assert f"atol {exercises.core.F32_ATOL}" in text and "float32" in text
