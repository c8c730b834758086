import pytest
import torch
from torch import nn
from torch.nn import functional as F

from ddp_helpers.amp import (
    AMP_DTYPE_ENV,
    AmpRecipe,
    amp_recipe,
    autocast,
    make_grad_scaler,
    overflow_in_backward,
    parse_dtype,
    train_step,
)


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch):
    monkeypatch.delenv(AMP_DTYPE_ENV, raising=False)


def test_device_defaults():
    assert amp_recipe("cuda") == AmpRecipe("cuda", torch.float16, True)
    assert amp_recipe(torch.device("cuda", 1)) == AmpRecipe("cuda", torch.float16, True)
    assert amp_recipe("cpu") == AmpRecipe("cpu", torch.bfloat16, False)
    assert amp_recipe(torch.device("cpu")).enabled


@pytest.mark.parametrize(
    "value, dtype, scaler",
    [("float16", torch.float16, True), ("bfloat16", torch.bfloat16, False),
     ("float32", torch.float32, False), (" BFloat16 ", torch.bfloat16, False)],
)
def test_env_override(monkeypatch, value, dtype, scaler):
    monkeypatch.setenv(AMP_DTYPE_ENV, value)
    for device in ("cpu", "cuda"):
        recipe = amp_recipe(device)
        assert (recipe.device_type, recipe.dtype, recipe.use_grad_scaler) == (device, dtype, scaler)
        assert recipe.enabled == (dtype != torch.float32)


def test_argument_beats_env_and_empty_env_means_default(monkeypatch):
    monkeypatch.setenv(AMP_DTYPE_ENV, "float32")
    assert amp_recipe("cpu", dtype=torch.float16).dtype == torch.float16
    assert amp_recipe("cpu", dtype="bfloat16").dtype == torch.bfloat16
    monkeypatch.setenv(AMP_DTYPE_ENV, "")
    assert amp_recipe("cpu").dtype == torch.bfloat16


@pytest.mark.parametrize("bad", ["fp16", "half", "int8", "float64"])
def test_bad_env_value_is_a_clear_error(monkeypatch, bad):
    monkeypatch.setenv(AMP_DTYPE_ENV, bad)
    with pytest.raises(ValueError, match=r"AMP_DTYPE must be one of float16, bfloat16, float32"):
        amp_recipe("cpu")


def test_bad_torch_dtype():
    with pytest.raises(ValueError, match="AMP dtype must be one of"):
        parse_dtype(torch.float64)


def test_str():
    assert str(amp_recipe("cpu")) == "cpu: autocast bfloat16, GradScaler off"
    assert str(amp_recipe("cuda")) == "cuda: autocast float16, GradScaler on"
    assert str(amp_recipe("cpu", "float32")) == "cpu: autocast off (float32), GradScaler off"


@pytest.mark.parametrize("name, out_dtype", [("bfloat16", torch.bfloat16), ("float16", torch.float16),
                                             ("float32", torch.float32)])
def test_autocast_on_cpu(name, out_dtype):
    recipe = amp_recipe("cpu", name)
    layer = nn.Linear(4, 3)
    with autocast(recipe):
        out = layer(torch.randn(2, 4))
        loss = nn.functional.cross_entropy(out, torch.tensor([0, 2]))  # on the float32 list
    assert out.dtype == out_dtype
    assert loss.dtype == torch.float32
    assert layer.weight.dtype == torch.float32  # autocast never changes the parameters


def test_float32_recipe_autocast_does_not_warn(recwarn):
    with autocast(amp_recipe("cpu", "float32")):
        pass
    assert not [w for w in recwarn if "autocast" in str(w.message).lower()]


def test_disabled_scaler_is_a_pass_through():
    scaler = make_grad_scaler(amp_recipe("cpu"))
    assert not scaler.is_enabled()
    p = nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([p], lr=0.5)
    loss = (2 * p).sum()
    assert scaler.scale(loss) is loss
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.testing.assert_close(p.grad, torch.full((3,), 2.0))
    scaler.step(opt)
    scaler.update()
    torch.testing.assert_close(p.detach(), torch.zeros(3))
    assert scaler.state_dict() == {}


def test_enabled_scaler_on_cpu_skips_inf_and_backs_off():
    scaler = make_grad_scaler(amp_recipe("cpu", "float16"), init_scale=8.0, growth_interval=2)
    assert scaler.is_enabled() and scaler.get_scale() == 8.0
    p = nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.5)
    scaler.scale(p.sum()).backward()
    torch.testing.assert_close(p.grad, torch.full((2,), 8.0))
    p.grad[0] = float("inf")
    scaler.step(opt)  # unscale_ runs inside step and finds the inf: the step is skipped
    scaler.update()
    torch.testing.assert_close(p.detach(), torch.ones(2))
    assert scaler.get_scale() == 4.0
    for _ in range(2):
        opt.zero_grad()
        scaler.scale(p.sum()).backward()
        scaler.step(opt)
        scaler.update()
    assert scaler.get_scale() == 8.0  # grown after growth_interval clean steps
    torch.testing.assert_close(p.detach(), torch.zeros(2))


def test_scaler_state_round_trip(tmp_path):
    recipe = amp_recipe("cpu", "float16")
    scaler = make_grad_scaler(recipe, init_scale=256.0, growth_interval=7)
    path = tmp_path / "scaler.pt"
    torch.save(scaler.state_dict(), path)
    restored = make_grad_scaler(recipe)
    restored.load_state_dict(torch.load(path, weights_only=True))
    assert restored.state_dict() == scaler.state_dict()
    assert restored.get_scale() == 256.0


def _tiny_problem():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.1), x, y


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_train_step_equals_the_hand_written_recipe(dtype):
    recipe = amp_recipe("cpu", dtype)
    model, opt, x, y = _tiny_problem()
    result = train_step(model, opt, make_grad_scaler(recipe, init_scale=2.0**10), recipe, x, y,
                        F.mse_loss, max_norm=0.1)
    ref, ref_opt, _, _ = _tiny_problem()
    # torch's own autocast, not the package's wrapper: float32 means autocast off
    with torch.autocast("cpu", dtype=getattr(torch, dtype), enabled=dtype != "float32"):
        loss = F.mse_loss(ref(x), y)
    loss.backward()  # a power-of-two scale and its exact inverse change no bit of the gradient
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.1)
    ref_opt.step()
    assert not result.skipped and result.loss == loss.item()
    assert result.scale == (2.0**10 if dtype == "float16" else 1.0)  # only float16 needs a GradScaler
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-7)


def test_overflow_in_backward_skips_one_step_and_removes_its_hook():
    recipe = amp_recipe("cpu", "float16")
    model, opt, x, y = _tiny_problem()
    scaler = make_grad_scaler(recipe, init_scale=2.0**10)
    before = [p.detach().clone() for p in model.parameters()]
    with overflow_in_backward(model.bias):
        poisoned = train_step(model, opt, scaler, recipe, x, y, F.mse_loss)
    assert torch.isinf(model.bias.grad).all()
    assert poisoned.skipped and scaler.get_scale() == 2.0**9
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))
    clean = train_step(model, opt, scaler, recipe, x, y, F.mse_loss)  # the hook is gone
    assert not clean.skipped and torch.isfinite(model.bias.grad).all()
    assert not all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))


def test_disabled_scaler_never_reports_a_skip():
    recipe = amp_recipe("cpu", "bfloat16")
    model, opt, x, y = _tiny_problem()
    with overflow_in_backward(model.bias):
        result = train_step(model, opt, make_grad_scaler(recipe), recipe, x, y, F.mse_loss)
    assert not result.skipped and result.scale == 1.0
    assert torch.isinf(model.bias).all()  # nobody checked: the inf went into the weights
