"""Checks of notebook 08, the capstone: early stopping, per-class recall, float32 against bf16."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ddp_helpers.exercises.core import ATOL, Answer, Exercise, check, close, integer


@check
def check_08_1(*, log_p: Answer[list[dict]], test_p: Answer[dict], epochs: int) -> None:
    ex = Exercise("08.1")
    ex.given(log_p=log_p, test_p=test_p)
    log, test = log_p, test_p
    ex.require(isinstance(log, list | tuple) and log and all(isinstance(r, dict) and "improved" in r and "epoch" in r
                                                             for r in log),
               "`log_p` is not the run's epoch log.",
               "`log_p, test_p = load_run(\"patience1\")` after launching with --out runs/08_capstone/patience1.")
    ex.require(isinstance(test, dict) and "best_epoch" in test, "`test_p` is not the run's test record.",
               "the second value `load_run(\"patience1\")` returns.")
    ex.require([r["epoch"] for r in log] == list(range(len(log))), "`log_p` does not hold one row per epoch from 0.",
               "load the run's metrics.json unchanged.")
    first_flat = next((row["epoch"] for row in log if not row["improved"]), None)
    ex.require(len(log) == (first_flat + 1 if first_flat is not None else epochs),
               "the run did not end at its first epoch without improvement.",
               "launch with env {..., \"PATIENCE\": \"1\"}.")
    ex.require(test["best_epoch"] == max(r["epoch"] for r in log if r["improved"]),
               "the test evaluation did not use the best epoch's weights.", "read `best_epoch` of the test record.")
    ex.correct()


@check
def check_08_2(*, recall: Answer[Sequence[float] | torch.Tensor], true_c: Answer[int], pred_c: Answer[int],
               confusion: torch.Tensor) -> None:
    ex = Exercise("08.2")
    ex.given(recall=recall, true_c=true_c, pred_c=pred_c)
    truth = confusion.diag().double() / confusion.sum(1).double()
    got = torch.as_tensor(recall, dtype=torch.float64).flatten()
    ex.require(got.shape == truth.shape and torch.allclose(got, truth, atol=ATOL),
               f"`recall` is not correct / true count per class (atol {ATOL}).",
               "rows of the confusion matrix are the true classes: diag / row sums.")
    off = confusion.clone()
    off.fill_diagonal_(0)
    t, p = integer(true_c), integer(pred_c)
    ex.require(t is not None and p is not None and t != p and 0 <= t < len(off) and 0 <= p < len(off)
               and off[t, p] == off.max(),
               "(true_c, pred_c) is not a largest off-diagonal entry.",
               "zero the diagonal, take argmax and turn the flat index into (row, column) with divmod.")
    ex.correct()


@check
def check_08_3(*, predictions_fp32: Answer[torch.Tensor], changed: Answer[int], acc_fp32: Answer[float],
               model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor,
               predictions: torch.Tensor) -> None:
    ex = Exercise("08.3")
    ex.given(predictions_fp32=predictions_fp32, changed=changed, acc_fp32=acc_fp32)
    with torch.no_grad():
        truth = model(images).argmax(1)
    got = torch.as_tensor(predictions_fp32)
    ex.require(got.shape == truth.shape and torch.equal(got.to(truth.dtype), truth),
               "`predictions_fp32` are not the float32 predictions of the best weights.",
               "run the model outside autocast, under torch.no_grad(), and take argmax(1).")
    ex.require(integer(changed) == int((truth != predictions).sum()),
               "`changed` does not count the predictions that differ from the bf16 ones.",
               "compare with `predictions`.")
    ex.require(close(acc_fp32, (truth == labels).double().mean().item(), abs_tol=ATOL),
               f"`acc_fp32` is not the float32 accuracy (atol {ATOL}).", "the mean of (predictions_fp32 == labels).")
    ex.correct()
