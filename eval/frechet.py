"""The Fréchet distance between two feature sets (FVD on I3D features).

    d² = |μ₁ − μ₂|² + tr(Σ₁ + Σ₂ − 2 (Σ₁ Σ₂)^½)

Two conventions for Σ exist and both are published: cd-fvd (`FeatureStats.get_mean_cov`) divides by n
(`"biased"`), StyleGAN-V's `compute_fvd` uses `np.cov` and divides by n − 1 (`"unbiased"`, vidax's
default, as most video papers' FVD code). Statistics are accumulated in float64 from float32 features, as
both do; the matrix square root is scipy's `sqrtm` (their choice) and its real part is kept.
"""

from __future__ import annotations

import dataclasses

import numpy as np

COVARIANCES = ("unbiased", "biased")


@dataclasses.dataclass
class FeatureStats:
    """Running sums of features `[N, D]`: count, Σx and ΣxxT in float64."""

    count: int = 0
    total: np.ndarray | None = None
    outer: np.ndarray | None = None

    def add(self, features: np.ndarray) -> "FeatureStats":
        x = np.asarray(features, np.float32).astype(np.float64)
        if x.ndim != 2:
            raise ValueError(f"features must be [N, D], got shape {x.shape}")
        if self.total is None:
            self.total, self.outer = np.zeros(x.shape[1]), np.zeros((x.shape[1], x.shape[1]))
        self.count += x.shape[0]
        self.total += x.sum(axis=0)
        self.outer += x.T @ x
        return self

    def mean_cov(self, covariance: str = "unbiased") -> tuple[np.ndarray, np.ndarray]:
        if covariance not in COVARIANCES:
            raise ValueError(f"covariance {covariance!r}: one of {', '.join(COVARIANCES)}")
        need = 2 if covariance == "unbiased" else 1
        if self.count < need:
            raise ValueError(f"a {covariance} covariance needs at least {need} clips, got {self.count}")
        mean = self.total / self.count
        scatter = self.outer - self.count * np.outer(mean, mean)
        return mean, scatter / (self.count - 1 if covariance == "unbiased" else self.count)


def frechet_distance(mean_a, cov_a, mean_b, cov_b) -> float:
    """d² between two Gaussians, with scipy's matrix square root of Σa Σb (its real part)."""
    from scipy import linalg

    root, _ = linalg.sqrtm(np.dot(cov_a, cov_b), disp=False)
    return float(np.real(np.square(mean_a - mean_b).sum() + np.trace(cov_a + cov_b - 2 * root)))


def fvd(generated: np.ndarray, reference: np.ndarray, covariance: str = "unbiased") -> float:
    """The Fréchet distance between two sets of clip features `[N, D]` (I3D logits for FVD)."""
    a = FeatureStats().add(generated).mean_cov(covariance)
    b = FeatureStats().add(reference).mean_cov(covariance)
    return frechet_distance(*a, *b)
