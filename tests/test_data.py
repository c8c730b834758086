import gzip
import hashlib
import struct
import time
from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from ddp_helpers import data
from ddp_helpers.data import (
    DigitsSplits,
    load_digits_28,
    load_digits_dataset,
    load_mnist,
    read_idx,
    stratified_split,
    toy_regression,
)
from ddp_helpers.models import ConvNet

N_DIGITS = 1797


@pytest.fixture(scope="module")
def digits():
    return load_digits_28(seed=0)


def row_hashes(dataset):
    images, labels = dataset.tensors
    return Counter(
        hashlib.sha1(x.numpy().tobytes() + bytes([int(y)])).hexdigest()
        for x, y in zip(images, labels, strict=True)
    )


def idx_bytes(array: np.ndarray, code: int) -> bytes:
    """IDX encoding written independently of read_idx: header, big-endian dims, values."""
    big_endian = array.astype(array.dtype.newbyteorder(">"))
    header = struct.pack(">HBB", 0, code, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + big_endian.tobytes()


def write_mnist(folder, n_train=100, n_test=20, gz=True, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": (np.arange(n_train) % 10).astype(np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": (np.arange(n_test) % 10).astype(np.uint8),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name, array in arrays.items():
        payload = idx_bytes(array, 0x08)
        if gz:
            (folder / f"{name}.gz").write_bytes(gzip.compress(payload))
        else:
            (folder / name).write_bytes(payload)
    return arrays


# ---------------------------------------------------------------- sklearn digits


def test_digits_shapes_dtypes_and_labels(digits):
    assert isinstance(digits, DigitsSplits) and digits.source == "digits"
    train, val, test = digits  # unpacks to the three data sets only
    assert (len(train), len(val), len(test)) == (N_DIGITS - 180 - 359, 180, 359)
    for ds in (train, val, test):
        images, labels = ds.tensors
        assert images.shape[1:] == (1, 28, 28) and images.dtype == torch.float32
        assert labels.dtype == torch.int64
        assert set(labels.tolist()) == set(range(10))


def test_digits_normalised_with_train_statistics(digits):
    images = digits.train.tensors[0]
    assert abs(images.mean().item()) < 1e-4
    assert abs(images.std().item() - 1) < 1e-4
    # Undoing the normalisation gives back pixels in [0, 1].
    raw = digits.test.tensors[0] * digits.std + digits.mean
    assert raw.min() >= -1e-5 and raw.max() <= 1 + 1e-5


def test_digits_splits_cover_everything_once(digits):
    images, labels = data.digits_28_raw()
    whole = (images - digits.mean) / digits.std
    expected = row_hashes(torch.utils.data.TensorDataset(whole, labels))
    got = row_hashes(digits.train) + row_hashes(digits.val) + row_hashes(digits.test)
    assert got == expected


def test_digits_split_reproducible_and_seed_dependent(digits):
    again = load_digits_28(seed=0)
    for a, b in zip(digits, again, strict=True):
        torch.testing.assert_close(a.tensors[0], b.tensors[0], rtol=0, atol=0)
        assert torch.equal(a.tensors[1], b.tensors[1])
    other = load_digits_28(seed=1)
    assert row_hashes(other.test) != row_hashes(digits.test)


def test_stratified_split_indices():
    labels = data.digits_28_raw()[1]
    train, val, test = stratified_split(labels, 0.1, 0.2, seed=0)
    combined = torch.cat([train, val, test])
    assert len(combined) == N_DIGITS
    assert torch.equal(combined.sort().values, torch.arange(N_DIGITS))  # disjoint and covering
    assert (len(val), len(test)) == (round(0.1 * N_DIGITS), round(0.2 * N_DIGITS))
    # Stratified: every class keeps its share of the test set to within one sample.
    counts, test_counts = torch.bincount(labels), torch.bincount(labels[test])
    assert ((test_counts - 0.2 * counts).abs() <= 1).all()
    assert not torch.equal(test, stratified_split(labels, 0.1, 0.2, seed=1)[2])
    with pytest.raises(ValueError, match="sum below 1"):
        stratified_split(labels, 0.5, 0.5)


@pytest.fixture
def one_thread():
    # Tiny convolutions gain nothing from intra-op threads, and on a busy 2-core machine
    # two spinning OpenMP threads per process made this test 5x slower than one.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_convnet_learns_digits_in_two_epochs(digits, one_thread):
    start = time.perf_counter()
    torch.manual_seed(0)
    model = ConvNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(digits.train, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(0))
    for _ in range(2):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    model.eval()
    x, y = digits.val.tensors
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == y).float().mean().item()
    assert accuracy >= 0.9
    assert time.perf_counter() - start < 20


# ---------------------------------------------------------------- IDX files


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize(
    ("dtype", "code"),
    [
        (np.uint8, 0x08),
        (np.int8, 0x09),
        (np.int16, 0x0B),
        (np.int32, 0x0C),
        (np.float32, 0x0D),
        (np.float64, 0x0E),
    ],
)
def test_read_idx_roundtrip(tmp_path, gz, dtype, code):
    values = np.arange(24).reshape(2, 3, 4)
    # Negative values for the signed types, values above 127 for ubyte.
    array = (values * 10 if dtype == np.uint8 else values - 7).astype(dtype)
    payload = idx_bytes(array, code)
    path = tmp_path / ("x.idx.gz" if gz else "x.idx")
    path.write_bytes(gzip.compress(payload) if gz else payload)
    tensor = read_idx(path)
    assert tensor.shape == (2, 3, 4)
    assert tensor.dtype == torch.from_numpy(array).dtype
    assert np.array_equal(tensor.numpy(), array)


def test_read_idx_large_values_are_big_endian(tmp_path):
    array = np.array([1, 256, 70000, -2], dtype=np.int32)
    path = tmp_path / "v.idx"
    path.write_bytes(idx_bytes(array, 0x0C))
    assert read_idx(path).tolist() == [1, 256, 70000, -2]


def test_read_idx_bad_magic(tmp_path):
    good = idx_bytes(np.zeros((2, 2), dtype=np.uint8), 0x08)
    for bad in (b"\x01" + good[1:], good[:2] + b"\x07" + good[3:]):
        path = tmp_path / "bad.idx"
        path.write_bytes(bad)
        with pytest.raises(ValueError, match="magic"):
            read_idx(path)


@pytest.mark.parametrize("cut", [2, 7, 10])
def test_read_idx_truncated(tmp_path, cut):
    payload = idx_bytes(np.zeros((2, 3), dtype=np.uint8), 0x08)  # 4 + 8 header bytes + 6 values
    path = tmp_path / "short.idx"
    path.write_bytes(payload[: len(payload) - cut])
    with pytest.raises(ValueError, match="truncated"):
        read_idx(path)


def test_read_idx_truncated_gzip(tmp_path):
    compressed = gzip.compress(idx_bytes(np.arange(100, dtype=np.uint8), 0x08))
    path = tmp_path / "short.idx.gz"
    path.write_bytes(compressed[:-10])
    with pytest.raises(ValueError, match="truncated"):
        read_idx(path)


def test_read_idx_trailing_bytes(tmp_path):
    path = tmp_path / "long.idx"
    path.write_bytes(idx_bytes(np.zeros(3, dtype=np.uint8), 0x08) + b"\x00")
    with pytest.raises(ValueError, match="trailing"):
        read_idx(path)


# ---------------------------------------------------------------- MNIST


@pytest.mark.parametrize("gz", [False, True])
def test_load_mnist_from_fake_files(tmp_path, gz):
    arrays = write_mnist(tmp_path, gz=gz)
    splits = load_mnist(tmp_path, seed=0, val_fraction=0.1)
    assert splits.source == "mnist"
    assert (len(splits.train), len(splits.val), len(splits.test)) == (90, 10, 20)
    assert sorted(splits.val.tensors[1].tolist()) == list(range(10))  # stratified
    for ds in splits:
        images, labels = ds.tensors
        assert images.shape[1:] == (1, 28, 28) and images.dtype == torch.float32
        assert labels.dtype == torch.int64
    assert abs(splits.train.tensors[0].mean().item()) < 1e-4
    assert abs(splits.train.tensors[0].std().item() - 1) < 1e-4
    # The test split is MNIST's t10k set, in order, with the train statistics applied.
    test_images = splits.test.tensors[0] * splits.std + splits.mean
    expected = torch.from_numpy(arrays["t10k-images-idx3-ubyte"]).float().unsqueeze(1) / 255
    torch.testing.assert_close(test_images, expected, atol=1e-5, rtol=0)
    assert splits.test.tensors[1].tolist() == arrays["t10k-labels-idx1-ubyte"].tolist()


def test_load_mnist_accepts_torchvision_layout(tmp_path):
    write_mnist(tmp_path / "MNIST" / "raw")
    assert len(load_mnist(tmp_path).test) == 20


def test_load_mnist_mismatched_files(tmp_path):
    write_mnist(tmp_path, gz=False)
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(idx_bytes(np.zeros(5, dtype=np.uint8), 0x08))
    with pytest.raises(ValueError, match="disagree"):
        load_mnist(tmp_path)


def test_missing_mnist_explains_download(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load_mnist(tmp_path / "nowhere")
    message = str(info.value)
    assert "curl" in message and "t10k-images-idx3-ubyte" in message and "DIGITS_SOURCE=digits" in message


# ---------------------------------------------------------------- source choice


def test_source_auto_detection(tmp_path, monkeypatch):
    monkeypatch.delenv("DIGITS_SOURCE", raising=False)
    assert load_digits_dataset(data_dir=tmp_path).source == "digits"
    write_mnist(tmp_path)
    assert load_digits_dataset(data_dir=tmp_path).source == "mnist"
    assert load_digits_dataset("digits", data_dir=tmp_path).source == "digits"


def test_source_env_override(tmp_path, monkeypatch):
    write_mnist(tmp_path)
    monkeypatch.setenv("DIGITS_SOURCE", "digits")
    assert load_digits_dataset("mnist", data_dir=tmp_path).source == "digits"
    monkeypatch.setenv("DIGITS_SOURCE", "mnist")
    assert load_digits_dataset(data_dir=tmp_path).source == "mnist"
    with pytest.raises(FileNotFoundError, match="curl"):
        load_digits_dataset(data_dir=tmp_path / "empty")


def test_unknown_source(monkeypatch):
    monkeypatch.delenv("DIGITS_SOURCE", raising=False)
    with pytest.raises(ValueError, match="digits, mnist"):
        load_digits_dataset("cifar")
    monkeypatch.setenv("DIGITS_SOURCE", "fashion")
    with pytest.raises(ValueError, match="'fashion'"):
        load_digits_dataset()


# ---------------------------------------------------------------- toy regression


def test_toy_regression_deterministic():
    a, b, c = toy_regression(seed=0), toy_regression(seed=0), toy_regression(seed=1)
    assert a.tensors[0].shape == (256, 10) and a.tensors[1].shape == (256, 5)
    assert all(torch.equal(x, y) for x, y in zip(a.tensors, b.tensors, strict=True))
    assert not torch.equal(a.tensors[0], c.tensors[0])
    x, y = toy_regression(n=64, in_features=3, out_features=2, seed=4).tensors
    assert x.shape == (64, 3) and y.shape == (64, 2) and x.dtype == torch.float32
    # Linear up to the 0.1 noise: least squares leaves a residual of about that size.
    weight = torch.linalg.lstsq(x, y).solution
    assert (y - x @ weight).std() < 0.15
