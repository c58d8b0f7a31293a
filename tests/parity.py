"""What the numeric tests share (DESIGN.md §6): the parity measure, max |vidax - reference|
against ``rel_tol`` x std(reference) with the correlation, printed and recorded; and the
random values put in every tensor of a reference."""

from __future__ import annotations

import numpy as np
import torch

#: The default bound: max abs diff <= 1e-4 x std(reference) in float32 "highest".
REL_TOL = 1e-4


def compare(name: str, out, ref, record_property=None, *, rel_tol: float = REL_TOL) -> dict:
    """Stats of ``out`` against ``ref``: ``max_abs_diff``, ``ref_std``, ``rel`` (their ratio),
    ``corr`` and ``bound`` (``rel_tol * ref_std``). The caller asserts against ``bound`` --
    ``<=`` for a parity test, ``>`` for its negative control."""
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    assert out.shape == ref.shape, (name, out.shape, ref.shape)
    stats = {"max_abs_diff": float(np.abs(out - ref).max()), "ref_std": float(ref.std()),
             "corr": float(np.corrcoef(out.ravel(), ref.ravel())[0, 1])}
    stats["bound"] = rel_tol * stats["ref_std"]
    stats["rel"] = stats["max_abs_diff"] / stats["ref_std"]
    print(f"{name}: max|diff| {stats['max_abs_diff']:.3e} ({stats['rel']:.2e} x std), "
          f"std(ref) {stats['ref_std']:.4f}, bound {stats['bound']:.3e}, "
          f"corr {stats['corr']:.9f}")
    if record_property is not None:
        record_property(name, stats)
    return stats


def randomize(named_params, seed: int) -> None:
    """Random values in every tensor of a reference (norm scales of 1 and zero biases hide
    swapped weights), scaled so activations stay O(1): free tables (``modulation``,
    ``emb_pos``) ~ 0.5, norm scales (``gamma``, 1-D ``weight``) ~ 1 + 0.2 noise, matrices and
    kernels ~ 1/sqrt(fan_in), biases ~ 0.1. One draw per tensor, in the given order."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in named_params:
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith(("modulation", "emb_pos")):
                p.copy_(0.5 * noise)
            elif name.endswith("gamma"):
                p.copy_(1 + 0.2 * noise)
            elif p.ndim >= 2:
                p.copy_(noise / p[0].numel() ** 0.5)
            elif name.endswith("weight"):
                p.copy_(1 + 0.2 * noise)
            else:
                p.copy_(0.1 * noise)


def to_ncthw(x: np.ndarray) -> torch.Tensor:
    """A channels-last video ``[B, T, H, W, C]`` (vidax) as torch's ``[B, C, T, H, W]`` (a view)."""
    return torch.from_numpy(x).permute(0, 4, 1, 2, 3)


def to_channels_last(x: torch.Tensor) -> np.ndarray:
    """torch's ``[B, C, T, H, W]`` as vidax's channels-last ``[B, T, H, W, C]`` (a view)."""
    return x.permute(0, 2, 3, 4, 1).numpy()
