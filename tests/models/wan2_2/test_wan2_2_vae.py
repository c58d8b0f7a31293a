"""vidax's Wan2.2 VAE against the authors' ``WanVAE_`` (``wan/modules/vae2_2.py``).

Oracle (DESIGN.md §6): the authors' module at ``Wan22VAEConfig.tiny()`` (the released block
structure: encoder width 8, decoder width 12, 4 latent channels), random values in every
tensor (norm gammas and biases included), saved with ``torch.save(state_dict())`` as
``Wan2.2_VAE.pth`` and loaded through ``vidax.load``. Both sides run their own chunked loops
(encoder: 1 frame, then 4 at a time; decoder: one latent frame at a time), so the causal-conv
caches and the AvgDown3D / DupUp3D shortcuts' first-chunk handling carry over several chunks:
13 frames <-> 4 latent frames, batch 2, 32 x 48 pixels (unequal sides, so a transposed axis or
patch order shows), and the 1-frame edge case.

Bound: float32, matmul precision "highest", max |vidax - reference| <= 1e-4 x std(reference).
Measured: encode ~3e-6 x std, decode ~7e-6 x std. Each negative control (two tensors swapped,
a channel order reversed in the saved file, or the chunk cache dropped) must fail that bound.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from tests.parity import (VAECase, assert_fails, assert_parity, chunked_vae_run, swap,
                          to_channels_last, to_ncthw, wan_vae_without_cache)
from tests.reference import wan22
from vidax.errors import VidaxError
from vidax.loading import verify_manifest
from vidax.manifests import get_manifest
from vidax.models.wan2_2 import vae
from vidax.models.wan2_2.vae import Wan22VAE, Wan22VAEConfig

jax.config.update("jax_default_matmul_precision", "highest")
# vae2_2 imports torch.cuda.amp, deprecated in torch 2.x.
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")
BATCH, HEIGHT, WIDTH = 2, 32, 48
VIDEO_FRAMES = (1, 13)
LATENT_FRAMES = (1, 4)


# ----------------------------------------------------------------------------- the oracle

@pytest.fixture(scope="module")
def case(tmp_path_factory) -> VAECase:
    """The tiny authors' VAE saved as Wan2.2_VAE.pth, inputs (``videos``, ``latents`` by frame
    count), and its outputs (``encoded``, ``moments``, ``decoded``: see
    :func:`tests.reference.wan22.vae_outputs`)."""
    cfg = Wan22VAEConfig.tiny()
    return wan22.vae_case(
        "wan2_2", cfg, tmp_path_factory.mktemp("wan2_2_vae") / "Wan2.2_VAE.pth",
        videos={t: (BATCH, t, HEIGHT, WIDTH, 3) for t in VIDEO_FRAMES},
        latents={t: (BATCH, t, HEIGHT // 16, WIDTH // 16, cfg.z_dim) for t in LATENT_FRAMES})


@pytest.fixture(scope="module")
def vidax_run(case):
    """vidax's outputs on the oracle's file and inputs, with the traces they compiled."""
    return chunked_vae_run(case, Wan22VAE)


# ----------------------------------------------------------------------------- parity
@pytest.mark.parametrize("frames", VIDEO_FRAMES)
def test_encode_matches_authors(case, vidax_run, frames, record_property):
    out = vidax_run["encoded"][frames]
    assert out.shape == (BATCH, (frames - 1) // 4 + 1, HEIGHT // 16, WIDTH // 16,
                         case.config.z_dim)
    assert_parity(f"encode_{frames}", out, case["encoded"][frames], record_property)


def test_encode_raw_moments_match_authors(case, vidax_run, record_property):
    mu, log_var = vidax_run["model"].encode(case["videos"][13], normalize=False,
                                            return_log_var=True)
    ref_mu, ref_log_var = case["moments"][13]
    assert_parity("raw_mu", np.asarray(mu), ref_mu, record_property)
    assert_parity("log_var", np.asarray(log_var), ref_log_var, record_property)


@pytest.mark.parametrize("frames", LATENT_FRAMES)
def test_decode_matches_authors(case, vidax_run, frames, record_property):
    out = vidax_run["decoded"][frames]
    assert isinstance(out, np.ndarray)
    assert out.shape == (BATCH, 4 * (frames - 1) + 1, HEIGHT, WIDTH, 3)
    assert_parity(f"decode_{frames}", out, case["decoded"][frames], record_property)


def test_decode_clamps_like_the_wrapper(case, vidax_run):
    """``Wan2_2_VAE.decode`` clamps to [-1, 1]; so does ``decode`` by default."""
    out = vidax_run["model"].decode(case["latents"][4])
    np.testing.assert_array_equal(out, np.clip(vidax_run["decoded"][4], -1, 1))
    assert np.abs(vidax_run["decoded"][4]).max() > 1  # the clamp did something


def test_one_compiled_program_per_chunk_shape(vidax_run):
    """Encoding 1 and 13 frames and decoding 1 and 4 latent frames traced each direction
    twice: once for the first chunk (no cache), once for all later chunks."""
    latent = (BATCH, 1, HEIGHT // 16, WIDTH // 16, Wan22VAEConfig.tiny().z_dim)
    assert sorted(vidax_run["traces"]) == sorted([
        ("encode_chunk", (BATCH, 1, HEIGHT, WIDTH, 3), True),
        ("encode_chunk", (BATCH, 4, HEIGHT, WIDTH, 3), False),
        ("decode_chunk", latent, True),
        ("decode_chunk", latent, False),
    ])


# ----------------------------------------------------------------------------- the pieces
# 3 frames (odd: zero padding in front, and a crop) in the fast lane; the other counts in CI.
@pytest.mark.parametrize("frames", [pytest.param(1, marks=pytest.mark.slow),
                                    pytest.param(2, marks=pytest.mark.slow), 3,
                                    pytest.param(4, marks=pytest.mark.slow)])
@pytest.mark.parametrize("factor_t,factor_s,in_dim,out_dim",
                         [(1, 2, 4, 4), (2, 2, 4, 8), (2, 2, 8, 16), (1, 1, 8, 8),
                          (2, 1, 6, 4)])
def test_avg_down_and_dup_up_match_authors(frames, factor_t, factor_s, in_dim, out_dim):
    """The parameter-free shortcuts against ``AvgDown3D`` / ``DupUp3D`` themselves, odd
    frame counts (the zero padding in front) and the first-chunk crop included."""
    authors = wan22.vae2_2_module()
    x = np.random.default_rng(frames).standard_normal((2, frames, 4, 6, in_dim)).astype(
        np.float32)
    down = authors.AvgDown3D(in_dim, out_dim, factor_t, factor_s)(to_ncthw(x))
    np.testing.assert_allclose(np.asarray(vae.avg_down(x, out_dim, factor_t, factor_s)),
                               to_channels_last(down), rtol=0, atol=1e-6)
    up = authors.DupUp3D(out_dim, in_dim, factor_t, factor_s)
    y = np.random.default_rng(9).standard_normal((2, frames, 2, 3, out_dim)).astype(np.float32)
    for first in (False, True):
        np.testing.assert_array_equal(
            np.asarray(vae.dup_up(y, in_dim, factor_t, factor_s, first_chunk=first)),
            to_channels_last(up(to_ncthw(y), first_chunk=first)))


def test_patchify_matches_authors():
    authors = wan22.vae2_2_module()
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 6, 3)).astype(np.float32)
    patched = vae.patchify(x)
    np.testing.assert_array_equal(np.asarray(patched),
                                  to_channels_last(authors.patchify(to_ncthw(x), 2)))
    np.testing.assert_array_equal(np.asarray(vae.unpatchify(patched)), x)


# ----------------------------------------------------------------------------- negative controls
def _reorder_time_conv_halves(sd):
    """The upsampling time_conv's two output halves (frame 2t, frame 2t+1) exchanged."""
    import torch

    for leaf in ("weight", "bias"):
        key = f"decoder.upsamples.0.upsamples.3.time_conv.{leaf}"
        sd[key] = torch.roll(sd[key], sd[key].shape[0] // 2, dims=0)


def _transpose_patch_in(sd):
    """The encoder's 12 input channels read as ``(c q r)`` instead of ``(c r q)``: the
    patch's rows and columns exchanged."""
    key = "encoder.conv1.weight"
    w = sd[key]
    sd[key] = w.reshape(w.shape[0], 3, 2, 2, *w.shape[2:]).transpose(2, 3).reshape(w.shape)


def _transpose_patch_out(sd):
    """The decoder's 12 output channels in ``(c q r)`` order."""
    for leaf in ("weight", "bias"):
        key = f"decoder.head.2.{leaf}"
        w = sd[key]
        sd[key] = w.reshape(3, 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def _swap(a: str, b: str):
    return swap(*((f"{a}.{leaf}", f"{b}.{leaf}") for leaf in ("weight", "bias")))


NEGATIVE = {
    "encoder_residual_convs_swapped": (
        "encode", _swap("encoder.downsamples.0.downsamples.0.residual.2",
                        "encoder.downsamples.0.downsamples.0.residual.6")),
    "patch_order_transposed_in": ("encode", _transpose_patch_in),
    "decoder_residual_convs_swapped": (
        "decode", _swap("decoder.upsamples.1.upsamples.0.residual.2",
                        "decoder.upsamples.1.upsamples.0.residual.6")),
    "upsample_frame_order_swapped": ("decode", _reorder_time_conv_halves),
    "patch_order_transposed_out": ("decode", _transpose_patch_out),
}


@pytest.mark.parametrize("name", sorted(NEGATIVE))
def test_negative_control(case, tmp_path, name, record_property):
    direction, edit = NEGATIVE[name]
    model = case.load_edited(tmp_path, edit)
    if direction == "encode":
        out, ref = np.asarray(model.encode(case["videos"][13])), case["encoded"][13]
    else:
        out, ref = model.decode(case["latents"][4], clamp=False), case["decoded"][4]
    assert_fails(f"negative_{name}", out, ref, record_property)


def test_negative_control_cache_not_carried(case, vidax_run, record_property):
    """The same per-chunk programs with every chunk's cache zeroed (as at the start of the
    video) instead of carried: both directions must fail the bound."""
    encoded, decoded = wan_vae_without_cache(vidax_run["model"], case["videos"][13],
                                             case["latents"][4])
    assert_fails("negative_cache_reset_encode", encoded, case["encoded"][13], record_property)
    assert_fails("negative_cache_reset_decode", decoded, case["decoded"][4], record_property)


# ----------------------------------------------------------------------------- input checks
def test_bad_shapes_raise():
    model = nnx.eval_shape(lambda: Wan22VAE(Wan22VAEConfig.tiny()))
    for shape in ((1, 8, 32, 32, 3), (1, 9, 24, 32, 3), (1, 9, 32, 40, 3), (1, 9, 32, 32, 4),
                  (9, 32, 32, 3)):
        with pytest.raises(VidaxError, match="Wan2.2 VAE encode"):
            model.encode(np.zeros(shape, np.float32))
    with pytest.raises(VidaxError, match="Wan2.2 VAE decode"):
        model.decode(np.zeros((1, 2, 2, 2, 48), np.float32))


# ----------------------------------------------------------------------------- structure, config
def test_release_manifest_verifies():
    manifest = get_manifest("wan2_2/ti2v-5b__vae")
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    assert report.matched == report.num_tensors == manifest.num_tensors == 196
    assert report.num_params == manifest.num_params


def test_config_from_authors_kwargs():
    assert Wan22VAEConfig.from_dict(get_manifest("wan2_2/ti2v-5b__vae").config) == \
        Wan22VAEConfig.wan2_2()
    # The Wan2_2_VAE wrapper's own names: c_dim for the encoder width.
    wrapper = {"z_dim": 48, "c_dim": 160, "dim_mult": [1, 2, 4, 4],
               "temperal_downsample": [False, True, True]}
    assert Wan22VAEConfig.from_dict(wrapper) == Wan22VAEConfig.wan2_2()
    with pytest.raises(VidaxError, match="attn_scales"):
        Wan22VAEConfig.from_dict(dict(wrapper, attn_scales=[1.0]))
    with pytest.raises(VidaxError, match="latents_mean"):
        Wan22VAEConfig.from_dict(dict(wrapper, z_dim=16))
    with pytest.raises(VidaxError, match="unknown"):
        Wan22VAEConfig.from_dict(dict(wrapper, window=3))


def test_tiny_keeps_the_released_structure():
    """Same parameter paths as the release; only widths differ."""
    def paths(cfg):
        state = nnx.state(nnx.eval_shape(lambda: Wan22VAE(cfg)))
        return {".".join(map(str, p)) for p, _ in nnx.to_flat_state(state)}

    assert paths(Wan22VAEConfig.tiny()) == paths(Wan22VAEConfig.wan2_2())
    released = Wan22VAEConfig.wan2_2()
    assert dataclasses.replace(Wan22VAEConfig.tiny(), dim=160, dec_dim=256, z_dim=48,
                               latents_mean=released.latents_mean,
                               latents_std=released.latents_std) == released
