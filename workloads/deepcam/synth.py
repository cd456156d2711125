"""Synthetic DeepCAM data in the real layout: one HDF5 file per sample with `climate/data`
(H x W x 16 float32) and `climate/labels_0` (H x W, classes 0/1/2), plus `stats.h5` with
per-channel `climate/minval` / `climate/maxval` (and mean/std), computed over train.

Backgrounds are smooth random fields (steep power spectrum), one per channel with its own
offset and scale, plus weak noise. Two kinds of learnable events are planted:
  class 1, compact vortices: discs of radius ~2 px (at 96 px height), Poisson(0.5) per image,
           a bump of +3 sigma in channels 0-3;
  class 2, long narrow bands: segments ~half the image wide and ~3 px thick, Poisson(1) per
           image, a ridge of +2.5 sigma in channels 4-8.
That gives pixel frequencies near the real dataset's 98.6% / 0.05% / 1.3%.
NVIDIA's DALI path reads numpy copies (their convert_hdf52npy.py), written alongside in npy/.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from workloads.deepcam.spec import DeepCAMSize
from workloads.manifest import write_manifest

VORTEX_RATE, BAND_RATE = 0.5, 1.0
VORTEX_CHANNELS, BAND_CHANNELS = slice(0, 4), slice(4, 9)


def smooth_field(rng: np.random.Generator, h: int, w: int, slope: float = -3.0) -> np.ndarray:
    ky, kx = np.fft.fftfreq(h)[:, None], np.fft.rfftfreq(w)[None, :]
    k = np.sqrt(ky ** 2 + kx ** 2)
    k[0, 0] = np.inf
    f = np.fft.irfftn(np.fft.rfftn(rng.standard_normal((h, w))) * k ** (slope / 2), s=(h, w))
    return f / f.std()


def make_sample(rng: np.random.Generator, s: DeepCAMSize) -> tuple[np.ndarray, np.ndarray]:
    h, w, c = s.height, s.width, s.in_channels
    scale = h / 96.0
    offsets = 100.0 * np.arange(c)          # physical-looking channel offsets and spreads
    spreads = 5.0 + np.arange(c)
    x = np.empty((h, w, c), np.float32)
    for ch in range(c):
        x[..., ch] = offsets[ch] + spreads[ch] * (smooth_field(rng, h, w) + 0.2 * rng.standard_normal((h, w)))
    label = np.zeros((h, w), np.int32)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    for _ in range(rng.poisson(BAND_RATE)):
        length, thick = rng.uniform(0.35, 0.65) * w, 3.0 * scale
        cy, cx, ang = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(0, np.pi)
        dy, dx = np.sin(ang), np.cos(ang)
        along = (yy - cy) * dy + (xx - cx) * dx
        across = np.abs(-(yy - cy) * dx + (xx - cx) * dy)
        mask = (np.abs(along) < length / 2) & (across < thick / 2)
        ridge = np.exp(-(across / thick) ** 2) * (np.abs(along) < length / 2)
        x[..., BAND_CHANNELS] += 2.5 * ridge[..., None] * spreads[BAND_CHANNELS]
        label[mask] = 2
    for _ in range(rng.poisson(VORTEX_RATE)):
        r = rng.uniform(2.5, 3.5) * scale
        cy, cx = rng.uniform(r, h - r), rng.uniform(r, w - r)
        d2 = (yy - cy) ** 2 + (xx - cx) ** 2
        x[..., VORTEX_CHANNELS] += 3.0 * np.exp(-d2 / (2 * r * r))[..., None] * spreads[VORTEX_CHANNELS]
        label[d2 < r * r] = 1
    return x, label


def write_dataset(root: Path, size: DeepCAMSize, seed: int) -> None:
    import h5py

    lo = np.full(size.in_channels, np.inf)
    hi = np.full(size.in_channels, -np.inf)
    moments = np.zeros((2, size.in_channels))
    for split, n, offset in (("train", size.n_train, 0), ("val", size.n_val, 1)):
        (root / split).mkdir(parents=True, exist_ok=True)
        (root / "npy" / split).mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng([seed, offset])
        for i in range(n):
            x, y = make_sample(rng, size)
            with h5py.File(root / split / f"data-{i:06d}.h5", "w") as f:
                f.create_dataset("climate/data", data=x)
                f.create_dataset("climate/labels_0", data=y)
            np.save(root / "npy" / split / f"data-{i:06d}.npy", x)
            np.save(root / "npy" / split / f"label-{i:06d}.npy", y)
            if split == "train":
                lo, hi = np.minimum(lo, x.min(axis=(0, 1))), np.maximum(hi, x.max(axis=(0, 1)))
                moments += [x.mean(axis=(0, 1)), (x.astype(np.float64) ** 2).mean(axis=(0, 1))]
    mean = moments[0] / size.n_train
    with h5py.File(root / "stats.h5", "w") as f:
        f.create_dataset("climate/minval", data=lo.astype(np.float32))
        f.create_dataset("climate/maxval", data=hi.astype(np.float32))
        f.create_dataset("climate/mean", data=mean.astype(np.float32))
        f.create_dataset("climate/std", data=np.sqrt(moments[1] / size.n_train - mean ** 2).astype(np.float32))
    write_manifest(root)
