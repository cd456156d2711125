"""Synthetic CosmoFlow data whose 4 targets are genuinely recoverable from the volume.

Each sample draws theta ~ U(-1, 1)^4 and builds a log-normal density field from a Gaussian
random field g with power spectrum P(k) ~ k^n:
  theta0 -> mean counts per voxel     nbar  = 3 * exp(0.5 * theta0)
  theta1 -> fluctuation amplitude     sigma = 0.6 * exp(0.35 * theta1)
  theta2 -> spectral slope            n     = -2.5 + theta2   (correlation length)
  theta3 -> growth across the 4 redshift bins: channel c has amplitude sigma * (1 + 0.3*theta3)^(c-1.5)
Counts ~ Poisson(nbar * exp(s*g - s^2/2)) stored as int16, as the real data after conversion
(128^3 x 4 int16 per sample; one .npy per sample, label float32[4] beside it).
Predicting the mean scores MAE = E|theta| = 0.5 (the baseline a model must beat).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from workloads.cosmoflow.spec import CosmoFlowSize
from workloads.manifest import write_manifest

PREDICT_MEAN_MAE = 0.5


def gaussian_field(rng: np.random.Generator, side: int, slope: float) -> np.ndarray:
    k = np.fft.fftfreq(side)
    kz = np.fft.rfftfreq(side)
    kk = np.sqrt(k[:, None, None] ** 2 + k[None, :, None] ** 2 + kz[None, None, :] ** 2)
    kk[0, 0, 0] = np.inf                      # no DC power: zero-mean field
    amp = kk ** (slope / 2.0)
    white = rng.standard_normal((side, side, side))
    g = np.fft.irfftn(np.fft.rfftn(white) * amp, s=white.shape)
    return g / g.std()


def make_sample(rng: np.random.Generator, side: int, channels: int = 4) -> tuple[np.ndarray, np.ndarray]:
    theta = rng.uniform(-1.0, 1.0, 4)
    nbar = 3.0 * np.exp(0.5 * theta[0])
    sigma = 0.6 * np.exp(0.35 * theta[1])
    g = gaussian_field(rng, side, slope=-2.5 + theta[2])
    out = np.empty((side, side, side, channels), np.int16)       # D, H, W, C as stored
    for c in range(channels):
        s = sigma * (1.0 + 0.3 * theta[3]) ** (c - (channels - 1) / 2)
        lam = nbar * np.exp(s * g - s * s / 2.0)
        out[..., c] = np.minimum(rng.poisson(lam), np.iinfo(np.int16).max)
    return out, theta.astype(np.float32)


def write_dataset(root: Path, size: CosmoFlowSize, seed: int) -> None:
    for split, n, offset in (("train", size.n_train, 0), ("val", size.n_val, 1)):
        d = root / split
        d.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng([seed, offset])
        for i in range(n):
            x, y = make_sample(rng, size.side, size.in_channels)
            np.save(d / f"data-{i:06d}.npy", x)
            np.save(d / f"label-{i:06d}.npy", y)
    write_manifest(root)
