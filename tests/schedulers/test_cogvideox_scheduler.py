"""CogVideoX's DDIM and DPM samplers against diffusers' ``CogVideoXDDIMScheduler`` /
``CogVideoXDPMScheduler`` built from the released scheduler configs (2B: SNR shift 3; 5B: 1).

* ``alphas_cumprod``: equal to torch's float64 table within 1e-14 relative (torch's
  vectorised float64 ``sqrt`` is off by one ulp on ~15 of 1000 entries; the linspace is
  reproduced bit for bit);
* timesteps: identical, for several step counts;
* per-step float32 coefficients: bit-identical to the float64 0-d tensor expressions of
  their ``step`` rounded to float32 (what multiplies the latents there);
* step outputs: float32 round-off only. XLA's CPU backend contracts ``a * x + b * y`` into
  fused multiply-adds, torch does not, so single steps differ by a few float32 ulps
  (measured <= 1.2e-6 at |x| up to ~8; bound 2e-6) and 50-step trajectories by <= 1e-5
  (measured <= 3.1e-6).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from vidax.errors import VidaxError
from vidax.schedulers.cogvideox import (
    RELEASED_CONFIG,
    CogVideoXDDIMScheduler,
    CogVideoXDPMScheduler,
    alphas_cumprod,
)

CONFIGS = {"2b": dict(RELEASED_CONFIG, clip_sample=False),
           "5b": dict(RELEASED_CONFIG, clip_sample=False, snr_shift_scale=1.0)}
STEP_COUNTS = (1, 2, 3, 7, 50)
SHAPE = (1, 3, 4, 6, 8)   # diffusers' [B, F, C, H, W]; elementwise either way


def _theirs(cls_name: str, config: dict, steps: int):
    import diffusers

    sched = getattr(diffusers, cls_name).from_config(config)
    sched.set_timesteps(steps)
    return sched


@pytest.mark.parametrize("release", sorted(CONFIGS))
def test_alphas_cumprod_match(release):
    ref = _theirs("CogVideoXDDIMScheduler", CONFIGS[release], 1).alphas_cumprod.numpy()
    ours = alphas_cumprod(dict(RELEASED_CONFIG, **CONFIGS[release]))
    assert ours[-1] == ref[-1] == 0.0                       # zero terminal SNR
    np.testing.assert_allclose(ours, ref, rtol=1e-14, atol=0)


@pytest.mark.parametrize("release", sorted(CONFIGS))
@pytest.mark.parametrize("steps", STEP_COUNTS)
def test_timesteps_and_ddim_coefficients_are_theirs(release, steps):
    ref = _theirs("CogVideoXDDIMScheduler", CONFIGS[release], steps)
    ours = CogVideoXDDIMScheduler(steps, CONFIGS[release])
    np.testing.assert_array_equal(ours.timesteps, ref.timesteps.numpy())
    for k, t in enumerate(ref.timesteps):
        a_t = ref.alphas_cumprod[t]
        prev = int(t) - 1000 // steps
        a_prev = ref.alphas_cumprod[prev] if prev >= 0 else ref.final_alpha_cumprod
        a = ((1 - a_prev) / (1 - a_t)) ** 0.5
        theirs = (a_t ** 0.5, (1 - a_t) ** 0.5, a, a_prev ** 0.5 - a_t ** 0.5 * a)
        for name, value in zip(ours.coefficients._fields, theirs):
            assert getattr(ours.coefficients, name)[k] == value.float().item(), (k, name)


def _trajectories(cls, cls_name, config, steps, *, resync: bool):
    """Run both samplers on the same model outputs (and DPM noise); ``resync``: restart
    each vidax step from torch's sample, so each step is compared on its own."""
    ref = _theirs(cls_name, config, steps)
    ours = cls(steps, config)
    np.testing.assert_array_equal(ours.timesteps, ref.timesteps.numpy())
    gen, noise_gen, twin = (torch.Generator().manual_seed(s) for s in (0, 9, 9))
    x = torch.randn(SHAPE, generator=gen)
    xj = jnp.asarray(x.numpy())
    state = ours.init(xj.shape)
    step = jax.jit(ours.step)
    worst, old = 0.0, None
    for k, t in enumerate(ref.timesteps):
        v = torch.randn(SHAPE, generator=gen)
        noise = None
        if cls is CogVideoXDDIMScheduler:
            x = ref.step(v, t, x, return_dict=False)[0]
        else:
            noise = torch.randn(SHAPE, generator=twin)
            if old is not None and int(t) - 1000 // steps >= 0:
                noise = torch.randn(SHAPE, generator=twin)  # their second draw is used
            noise = jnp.asarray(noise.numpy())
            x, old = ref.step(v, old, t, ref.timesteps[k - 1] if k else None, x,
                              generator=noise_gen, return_dict=False)
        xj, state = step(jnp.asarray(v.numpy()), k, xj, state, noise)
        worst = max(worst, float(np.abs(np.asarray(xj) - x.numpy()).max()))
        if resync:
            xj = jnp.asarray(x.numpy())
            if cls is CogVideoXDPMScheduler:
                state = state._replace(x0_prev=jnp.asarray(old.numpy()))
    return worst


@pytest.mark.parametrize("release", sorted(CONFIGS))
@pytest.mark.parametrize("cls,cls_name", [
    (CogVideoXDDIMScheduler, "CogVideoXDDIMScheduler"),
    (CogVideoXDPMScheduler, "CogVideoXDPMScheduler")])
def test_steps_match_theirs(release, cls, cls_name):
    for steps in STEP_COUNTS:
        assert _trajectories(cls, cls_name, CONFIGS[release], steps, resync=True) <= 2e-6
    assert _trajectories(cls, cls_name, CONFIGS[release], 50, resync=False) <= 1e-5


def test_dpm_limits_are_finite():
    """Zero terminal SNR makes the first step's lambda -inf and the last step's +inf; the
    coefficients must come out as torch's (0, -1, ...) without NaN."""
    sched = CogVideoXDPMScheduler(4)
    for column in sched.coefficients:
        assert np.isfinite(column).all()
    assert sched.coefficients.m1[0] == 0 and sched.coefficients.m_noise[-1] == 0
    assert sched.coefficients.m2[-1] == -1


def test_bad_configs():
    with pytest.raises(VidaxError, match="prediction_type"):
        CogVideoXDDIMScheduler(4, {"prediction_type": "epsilon"})
    with pytest.raises(VidaxError, match="unknown scheduler config key"):
        CogVideoXDDIMScheduler(4, {"eta": 0.5})
    with pytest.raises(VidaxError, match="num_inference_steps"):
        CogVideoXDPMScheduler(0)
