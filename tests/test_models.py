import pytest
import torch
from torch import nn

from ddp_helpers.models import ConvNet, ToyModel, ToyMpModel, count_parameters, square_mlp
from ddp_helpers.sharding import make_stack


def test_toy_model_shape_and_parameters():
    model = ToyModel()
    assert model(torch.randn(20, 10)).shape == (20, 5)
    assert count_parameters(model) == (10 * 10 + 10) + (10 * 5 + 5)
    assert isinstance(model.net1, nn.Linear) and isinstance(model.relu, nn.ReLU)


def test_toy_mp_model_on_cpu_equals_toy_model():
    torch.manual_seed(0)
    reference = ToyModel()
    split = ToyMpModel("cpu", "cpu")
    # Same attribute names, so the state dict loads without renaming.
    split.load_state_dict(reference.state_dict())
    x = torch.randn(8, 10)
    out_ref, out_split = reference(x), split(x)
    assert out_split.device == torch.device("cpu")
    torch.testing.assert_close(out_split, out_ref, rtol=0, atol=0)

    out_ref.sum().backward()
    out_split.sum().backward()
    for (name, p_ref), p_split in zip(reference.named_parameters(), split.parameters(), strict=True):
        torch.testing.assert_close(p_split.grad, p_ref.grad, rtol=0, atol=0, msg=name)


def test_toy_mp_model_places_layers():
    model = ToyMpModel(torch.device("cpu"), "cpu")
    assert model.net1.weight.device == model.dev0 == torch.device("cpu")
    assert model.net2.weight.device == model.dev1


def test_convnet_shape_batchnorm_and_size():
    model = ConvNet()
    assert model(torch.randn(4, 1, 28, 28)).shape == (4, 10)
    assert ConvNet(num_classes=3)(torch.randn(2, 1, 28, 28)).shape == (2, 3)
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(bns) == 2
    assert count_parameters(model) == 20538
    assert count_parameters(model) < 100_000


def test_convnet_converts_to_sync_batchnorm():
    # Notebook 07 relies on this: every BatchNorm2d becomes a SyncBatchNorm.
    converted = nn.SyncBatchNorm.convert_sync_batchnorm(ConvNet())
    kinds = {type(m) for m in converted.modules()}
    assert nn.SyncBatchNorm in kinds and nn.BatchNorm2d not in kinds


def test_count_parameters_trainable_only():
    model = ToyModel()
    model.net1.requires_grad_(False)
    assert count_parameters(model) == 55
    assert count_parameters(model, trainable_only=False) == 165


@pytest.mark.parametrize("bad", [(1, 10), (1, 1, 28, 28)])
def test_models_reject_wrong_input(bad):
    model = ToyModel() if len(bad) == 4 else ConvNet()
    with pytest.raises(RuntimeError):
        model(torch.randn(*bad))


def test_square_mlp_names_and_sizes():
    model = square_mlp(8, 2)
    names = [name for name, _ in model.named_parameters()]
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    assert model[0].weight.shape == (8, 8) and model[4].weight.shape == (10, 8)
    assert model(torch.randn(3, 8)).shape == (3, 10)


def _by_hand(seed, *shapes):
    """The reference: seed the global generator, then build the layers one by one."""
    torch.manual_seed(seed)
    layers = []
    for fan_in, fan_out in shapes:
        layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _assert_same_parameters(model, reference):
    got, want = dict(model.named_parameters()), dict(reference.named_parameters())
    assert list(got) == list(want)
    for name, p in want.items():
        torch.testing.assert_close(got[name], p, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("seed", [0, 7])
def test_square_mlp_with_a_seed_is_reproducible_and_leaves_the_caller_rng(seed):
    reference = _by_hand(seed, (8, 8), (8, 8), (8, 3))
    torch.manual_seed(1234)
    state = torch.get_rng_state()
    model = square_mlp(8, 2, 3, seed=seed)
    assert torch.equal(torch.get_rng_state(), state)
    _assert_same_parameters(model, reference)


def test_square_mlp_without_a_seed_draws_from_the_caller_rng():
    reference = _by_hand(5, (6, 6), (6, 10))
    after = torch.get_rng_state()
    torch.manual_seed(5)
    model = square_mlp(6, 1)
    assert torch.equal(torch.get_rng_state(), after)   # it drew exactly what the hand-built layers drew
    _assert_same_parameters(model, reference)


@pytest.mark.parametrize("seed", [0, 1])
def test_make_stack_is_seeded_and_leaves_the_caller_rng(seed):
    reference = _by_hand(seed, (32, 64), (64, 64), (64, 8))
    torch.manual_seed(4321)
    state = torch.get_rng_state()
    model = make_stack(seed=seed)
    assert torch.equal(torch.get_rng_state(), state)
    _assert_same_parameters(model, reference)
