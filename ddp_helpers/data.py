"""Data sets of the series; nothing here ever touches the network.

* ``load_digits_28``: scikit-learn's bundled 8x8 digits (1797 images, shipped inside the
  sklearn wheel) upsampled to MNIST's 1x28x28, so every notebook runs offline.
* ``load_mnist``: the real MNIST, read from IDX files the learner downloaded into
  ``data/`` (the error message says how).
* ``load_digits_dataset``: MNIST when its files are there, the sklearn digits otherwise;
  ``DIGITS_SOURCE=digits|mnist`` forces one.
* ``toy_regression``: a seeded regression problem for ``ToyModel``.

Image splits come back as ``TensorDataset(images float32 N x 1 x 28 x 28, labels int64)``,
normalised with the mean and std of the training split only (statistics of the
validation or test images would leak into training otherwise).
"""

from __future__ import annotations

import gzip
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

DIGITS_SOURCES = ("digits", "mnist")

MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
# The mirror torchvision itself downloads from (yann.lecun.com no longer serves the files).
MNIST_MIRROR = "https://ossci-datasets.s3.amazonaws.com/mnist"


@dataclass(frozen=True)
class DigitsSplits:
    """Train/validation/test data sets plus what produced them.

    Iterating yields only the three data sets, so ``train, val, test = splits`` works.
    ``mean`` and ``std`` are the training-split statistics that were subtracted and
    divided, kept so a plot can undo the normalisation.
    """

    train: TensorDataset
    val: TensorDataset
    test: TensorDataset
    source: str = "digits"
    mean: float = 0.0
    std: float = 1.0

    def __iter__(self) -> Iterator[TensorDataset]:
        return iter((self.train, self.val, self.test))


def stratified_split(
    labels: torch.Tensor, val_fraction: float, test_fraction: float, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Disjoint (train, val, test) index tensors covering ``range(len(labels))``.

    Every sample gets the key (rank within its class + 0.5) / class size after a seeded
    shuffle; sorting by that key interleaves the classes in proportion, so the first
    ``round(N * test_fraction)`` samples form a stratified test set and the next ones
    the validation set, with exactly the requested totals.
    """
    if val_fraction < 0 or test_fraction < 0 or val_fraction + test_fraction >= 1:
        raise ValueError(
            f"need val_fraction >= 0, test_fraction >= 0 and a sum below 1, got "
            f"{val_fraction} and {test_fraction}"
        )
    labels = torch.as_tensor(labels)
    n = len(labels)
    generator = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=generator)
    shuffled = labels[perm]
    key = torch.empty(n, dtype=torch.float64)
    for c in torch.unique(shuffled):
        where = (shuffled == c).nonzero().flatten()
        key[where] = (torch.arange(len(where), dtype=torch.float64) + 0.5) / len(where)
    # stable: equal keys (classes of the same size) keep the shuffled order.
    order = perm[torch.argsort(key, stable=True)]
    n_test = round(n * test_fraction)
    n_val = round(n * val_fraction)
    test, val, train = order[:n_test], order[n_test : n_test + n_val], order[n_test + n_val :]
    return train.sort().values, val.sort().values, test.sort().values


def _normalise(images: torch.Tensor, train_idx: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    train = images[train_idx]
    mean, std = train.mean().item(), train.std().item()
    return (images - mean) / std, mean, std


def _make_splits(
    images: torch.Tensor,
    labels: torch.Tensor,
    parts: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    source: str,
) -> DigitsSplits:
    images, mean, std = _normalise(images, parts[0])
    train, val, test = (TensorDataset(images[idx], labels[idx]) for idx in parts)
    return DigitsSplits(train, val, test, source=source, mean=mean, std=std)


def digits_28_raw() -> tuple[torch.Tensor, torch.Tensor]:
    """All 1797 sklearn digits as (N x 1 x 28 x 28 float32 in [0, 1], int64 labels)."""
    from sklearn.datasets import load_digits  # bundled with sklearn: no download

    bunch = load_digits()
    small = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
    # Bilinear interpolation is a convex combination of neighbours: it stays in [0, 1].
    images = F.interpolate(small, size=(28, 28), mode="bilinear", align_corners=False)
    return images, torch.tensor(bunch.target, dtype=torch.int64)


def load_digits_28(seed: int = 0, val_fraction: float = 0.1, test_fraction: float = 0.2) -> DigitsSplits:
    """sklearn digits at 28x28, split stratified and reproducibly by ``seed``."""
    images, labels = digits_28_raw()
    parts = stratified_split(labels, val_fraction, test_fraction, seed)
    return _make_splits(images, labels, parts, source="digits")


_IDX_DTYPES = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path: str | os.PathLike) -> torch.Tensor:
    """Parse an IDX file (the MNIST format), plain or gzip-compressed, into a tensor.

    Layout: two zero bytes, a dtype code, the number of dimensions, one big-endian
    uint32 per dimension, then the values in big-endian C order.
    """
    path = Path(path)
    raw = path.read_bytes()
    # Decide by content, not by name: some mirrors serve gzip data without ".gz".
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError) as exc:
            raise ValueError(f"{path}: truncated or corrupt gzip data ({exc})") from exc
    if len(raw) < 4:
        raise ValueError(f"{path}: truncated IDX file ({len(raw)} bytes, the header needs 4)")
    zero, code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or code not in _IDX_DTYPES:
        raise ValueError(
            f"{path}: bad IDX magic number 0x{raw[:4].hex()} (expected 0x0000 followed by a "
            f"dtype code in {sorted(hex(c) for c in _IDX_DTYPES)} and the number of dimensions)"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header ({len(raw)} bytes, {ndim} dims need {header})")
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = _IDX_DTYPES[code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header != expected:
        kind = "truncated" if len(raw) - header < expected else "has trailing bytes"
        raise ValueError(
            f"{path}: IDX data {kind}: shape {tuple(shape)} needs {expected} bytes, found {len(raw) - header}"
        )
    values = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    # astype to native byte order (torch has no big-endian tensors) also copies out
    # of the read-only bytes buffer.
    return torch.from_numpy(values.astype(dtype.newbyteorder("="), copy=True))


def _find_mnist_files(data_dir: Path) -> dict[str, Path] | None:
    # data_dir itself, or torchvision's layout if the learner used torchvision.
    for folder in (data_dir, data_dir / "MNIST" / "raw"):
        found: dict[str, Path] = {}
        for key, name in MNIST_FILES.items():
            for candidate in (folder / name, folder / f"{name}.gz"):
                if candidate.is_file():
                    found[key] = candidate
                    break
        if len(found) == len(MNIST_FILES):
            return found
    return None


def mnist_available(data_dir: str | os.PathLike = "data") -> bool:
    return _find_mnist_files(Path(data_dir)) is not None


def mnist_download_command(data_dir: str | os.PathLike = "data") -> str:
    """A shell command that fetches the four MNIST files into ``data_dir``."""
    names = " ".join(MNIST_FILES.values())
    return (
        f'mkdir -p "{data_dir}" && for f in {names}; do '
        f'curl -fL -o "{data_dir}/$f.gz" {MNIST_MIRROR}/$f.gz; done'
    )


def load_mnist(
    data_dir: str | os.PathLike = "data", seed: int = 0, val_fraction: float = 0.1
) -> DigitsSplits:
    """MNIST from IDX files in ``data_dir``; validation carved from train by ``seed``."""
    data_dir = Path(data_dir)
    files = _find_mnist_files(data_dir)
    if files is None:
        raise FileNotFoundError(
            f"MNIST not found in {data_dir}/ (need {', '.join(MNIST_FILES.values())}, plain or .gz). "
            f"With internet access, download it with:\n  {mnist_download_command(data_dir)}\n"
            "or use the bundled sklearn digits instead: DIGITS_SOURCE=digits."
        )
    tensors = {key: read_idx(path) for key, path in files.items()}
    for split in ("train", "test"):
        images, labels = tensors[f"{split}_images"], tensors[f"{split}_labels"]
        if images.dim() != 3 or labels.dim() != 1 or len(images) != len(labels):
            raise ValueError(
                f"MNIST {split} files disagree: images {tuple(images.shape)}, labels {tuple(labels.shape)}"
            )
    train_images, test_images = tensors["train_images"], tensors["test_images"]
    n_train = len(train_images)
    images = torch.cat([train_images, test_images]).unsqueeze(1).float() / 255.0
    labels = torch.cat([tensors["train_labels"], tensors["test_labels"]]).long()
    train_idx, val_idx, _ = stratified_split(labels[:n_train], val_fraction, 0.0, seed)
    test_idx = torch.arange(n_train, len(labels))  # MNIST's own test set, untouched
    return _make_splits(images, labels, (train_idx, val_idx, test_idx), source="mnist")


def load_digits_dataset(
    source: Literal["digits", "mnist", "auto"] | None = None,
    data_dir: str | os.PathLike = "data",
    seed: int = 0,
    val_fraction: float = 0.1,
) -> DigitsSplits:
    """The digits data set of the capstone: MNIST if available, sklearn digits otherwise.

    ``DIGITS_SOURCE`` (``digits`` or ``mnist``) overrides ``source`` so a learner can
    switch a notebook's data without editing it; ``None`` or ``"auto"`` means "MNIST
    when its files are in ``data_dir``".
    """
    source = os.environ.get("DIGITS_SOURCE") or source
    if source in (None, "auto"):
        source = "mnist" if mnist_available(data_dir) else "digits"
    if source not in DIGITS_SOURCES:
        raise ValueError(f"unknown digits source {source!r}; valid: {', '.join(DIGITS_SOURCES)} or 'auto'")
    if source == "mnist":
        return load_mnist(data_dir, seed=seed, val_fraction=val_fraction)
    return load_digits_28(seed=seed, val_fraction=val_fraction)


def toy_regression(
    n: int = 256, in_features: int = 10, out_features: int = 5, seed: int = 0
) -> TensorDataset:
    """x ~ N(0, 1), y = x @ W + 0.1 * noise, all drawn from one seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(in_features, out_features, generator=generator)
    x = torch.randn(n, in_features, generator=generator)
    y = x @ weight + 0.1 * torch.randn(n, out_features, generator=generator)
    return TensorDataset(x, y)
