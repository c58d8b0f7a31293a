"""vidax's Wan2.1 VAE against the authors' ``WanVAE_`` (``wan/modules/vae2_1.py``).

Oracle (DESIGN.md §6): the authors' module at ``WanVAEConfig.tiny()`` (the released block
structure at width 8, 4 latent channels), random values in every tensor (norm gammas and
biases included), saved with ``torch.save(state_dict())`` as ``Wan2.1_VAE.pth`` and loaded
through ``vidax.load``. Both sides run their own chunked loops (encoder: 1 frame, then 4 at a
time; decoder: one latent frame at a time), so the causal-conv caches carry over several
chunks: 9 and 13 frames <-> 3 and 4 latent frames, batch 2, 16 x 24 pixels (unequal sides so a
transposed axis shows), and the 1-frame edge case.

Bound: float32, matmul precision "highest", max |vidax - reference| <= 1e-4 x std(reference).
Measured: encode <= 3e-6 x std, decode <= 9e-6 x std. Each negative control (two tensors swapped
or one reordered in the saved file) must fail that bound.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from tests.parity import (VAECase, assert_fails, assert_parity, chunked_vae_run, swap,
                          wan_vae_without_cache)
from tests.reference import wan22
from vidax.errors import VidaxError
from vidax.loading import verify_manifest
from vidax.manifests import get_manifest
from vidax.models.wan2_1.vae import WanVAE, WanVAEConfig
from vidax.nn.causal_conv import CausalConv3d
from vidax.nn.layers import KeyGen

jax.config.update("jax_default_matmul_precision", "highest")
# vae2_1 imports torch.cuda.amp, deprecated in torch 2.x.
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")
BATCH, HEIGHT, WIDTH = 2, 16, 24
VIDEO_FRAMES = (1, 9, 13)
LATENT_FRAMES = (1, 3, 4)


# ----------------------------------------------------------------------------- the oracle

@pytest.fixture(scope="module")
def case(tmp_path_factory) -> VAECase:
    """The tiny authors' VAE saved as Wan2.1_VAE.pth, inputs (``videos``, ``latents`` by frame
    count), and its outputs (``encoded``, ``moments``, ``decoded``: see
    :func:`tests.reference.wan22.vae_outputs`)."""
    cfg = WanVAEConfig.tiny()
    return wan22.vae_case(
        "wan2_1", cfg, tmp_path_factory.mktemp("wan2_1_vae") / "Wan2.1_VAE.pth",
        videos={t: (BATCH, t, HEIGHT, WIDTH, 3) for t in VIDEO_FRAMES},
        latents={t: (BATCH, t, HEIGHT // 8, WIDTH // 8, cfg.z_dim) for t in LATENT_FRAMES})


@pytest.fixture(scope="module")
def vidax_run(case):
    """vidax's outputs on the oracle's file and inputs, with the traces they compiled."""
    return chunked_vae_run(case, WanVAE)


# ----------------------------------------------------------------------------- parity
@pytest.mark.parametrize("frames", VIDEO_FRAMES)
def test_encode_matches_authors(case, vidax_run, frames, record_property):
    out = vidax_run["encoded"][frames]
    assert out.shape == (BATCH, (frames - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8, case.config.z_dim)
    assert_parity(f"encode_{frames}", out, case["encoded"][frames], record_property)


def test_encode_raw_moments_match_authors(case, vidax_run, record_property):
    mu, log_var = vidax_run["model"].encode(case["videos"][9], normalize=False,
                                            return_log_var=True)
    ref_mu, ref_log_var = case["moments"][9]
    assert_parity("raw_mu", np.asarray(mu), ref_mu, record_property)
    assert_parity("log_var", np.asarray(log_var), ref_log_var, record_property)


@pytest.mark.parametrize("frames", LATENT_FRAMES)
def test_decode_matches_authors(case, vidax_run, frames, record_property):
    out = vidax_run["decoded"][frames]
    assert isinstance(out, np.ndarray)
    assert out.shape == (BATCH, 4 * (frames - 1) + 1, HEIGHT, WIDTH, 3)
    assert_parity(f"decode_{frames}", out, case["decoded"][frames], record_property)


def test_decode_clamps_like_the_wrapper(case, vidax_run):
    """``Wan2_1_VAE.decode`` clamps to [-1, 1]; so does ``decode`` by default."""
    out = vidax_run["model"].decode(case["latents"][3])
    np.testing.assert_array_equal(out, np.clip(vidax_run["decoded"][3], -1, 1))
    assert np.abs(vidax_run["decoded"][3]).max() > 1  # the clamp did something


def test_one_compiled_program_per_chunk_shape(vidax_run):
    """Encoding 1, 9 and 13 frames and decoding 1, 3 and 4 latent frames traced each
    direction twice: once for the first chunk (no cache), once for all later chunks."""
    latent = (BATCH, 1, HEIGHT // 8, WIDTH // 8, WanVAEConfig.tiny().z_dim)
    assert sorted(vidax_run["traces"]) == sorted([
        ("encode_chunk", (BATCH, 1, HEIGHT, WIDTH, 3), True),
        ("encode_chunk", (BATCH, 4, HEIGHT, WIDTH, 3), False),
        ("decode_chunk", latent, True),
        ("decode_chunk", latent, False),
    ])


# ----------------------------------------------------------------------------- negative controls
def _reorder_time_conv_halves(sd):
    """The upsampling time_conv's two output halves (frame 2t, frame 2t+1) exchanged."""
    import torch

    for leaf in ("weight", "bias"):
        key = f"decoder.upsamples.3.time_conv.{leaf}"
        sd[key] = torch.roll(sd[key], sd[key].shape[0] // 2, dims=0)


def _flip_downsample_time_kernel(sd):
    """The encoder's temporal downsampling kernel reversed in time (previous chunk's frame
    and the current ones exchanged)."""
    import torch

    key = "encoder.downsamples.5.time_conv.weight"
    sd[key] = torch.flip(sd[key], dims=(2,))


def _swap(a: str, b: str):
    return swap(*((f"{a}.{leaf}", f"{b}.{leaf}") for leaf in ("weight", "bias")))


NEGATIVE = {
    "encoder_residual_convs_swapped": (
        "encode", _swap("encoder.downsamples.0.residual.2", "encoder.downsamples.0.residual.6")),
    "downsample_time_kernel_flipped": ("encode", _flip_downsample_time_kernel),
    "decoder_residual_convs_swapped": (
        "decode", _swap("decoder.upsamples.0.residual.2", "decoder.upsamples.0.residual.6")),
    "upsample_frame_order_swapped": ("decode", _reorder_time_conv_halves),
}


@pytest.mark.parametrize("name", sorted(NEGATIVE))
def test_negative_control(case, tmp_path, name, record_property):
    direction, edit = NEGATIVE[name]
    model = case.load_edited(tmp_path, edit)
    if direction == "encode":
        out, ref = np.asarray(model.encode(case["videos"][9])), case["encoded"][9]
    else:
        out, ref = model.decode(case["latents"][3], clamp=False), case["decoded"][3]
    assert_fails(f"negative_{name}", out, ref, record_property)


def test_negative_control_cache_not_carried(case, vidax_run, record_property):
    """The same per-chunk programs with every chunk's cache zeroed (as at the start of the
    video) instead of carried: both directions must fail the bound."""
    encoded, decoded = wan_vae_without_cache(vidax_run["model"], case["videos"][9],
                                             case["latents"][3])
    assert_fails("negative_cache_reset_encode", encoded, case["encoded"][9], record_property)
    assert_fails("negative_cache_reset_decode", decoded, case["decoded"][3], record_property)


# ----------------------------------------------------------------------------- causal conv
@pytest.mark.parametrize("pad_mode", ["zeros", "replicate"])
def test_causal_conv_chunks_equal_whole_video(pad_mode):
    """``vidax.nn.causal_conv``: chunks of 1, 3, 1 and 2 frames (some shorter than the
    context) with the carried cache give the whole video's output, in both pad modes."""
    conv = CausalConv3d(3, 5, (3, 3, 3), padding=1, pad_mode=pad_mode, keys=KeyGen(0))
    x = np.random.default_rng(2).standard_normal((2, 7, 4, 5, 3)).astype(np.float32)
    whole = np.asarray(conv(x))
    cache, outs = None, []
    for start, stop in ((0, 1), (1, 4), (4, 5), (5, 7)):
        y, cache = conv.step(x[:, start:stop], cache)
        assert cache.shape == (2, 2, 4, 5, 3)
        outs.append(np.asarray(y))
    np.testing.assert_allclose(np.concatenate(outs, axis=1), whole, rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- input checks
def test_bad_shapes_raise():
    model = nnx.eval_shape(lambda: WanVAE(WanVAEConfig.tiny()))
    for shape in ((1, 8, 16, 16, 3), (1, 9, 12, 16, 3), (1, 9, 16, 20, 3), (1, 9, 16, 16, 4),
                  (9, 16, 16, 3)):
        with pytest.raises(VidaxError, match="Wan2.1 VAE encode"):
            model.encode(np.zeros(shape, np.float32))
    with pytest.raises(VidaxError, match="Wan2.1 VAE decode"):
        model.decode(np.zeros((1, 2, 2, 2, 16), np.float32))


# ----------------------------------------------------------------------------- structure, config
# Every release component that is this file: Wan2.1 (all four), Wan2.2 A14B, Cosmos-Predict2.5.
MANIFESTS = ("wan2_1/t2v-1.3b__vae", "wan2_1/t2v-14b__vae", "wan2_1/i2v-14b__vae",
             "wan2_1/flf2v-14b__vae", "wan2_2/t2v-a14b__vae", "wan2_2/i2v-a14b__vae",
             "cosmos2_5/predict-2b__vae")


@pytest.mark.parametrize("name", MANIFESTS)
def test_release_manifest_verifies(name):
    manifest = get_manifest(name)
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    assert report.matched == report.num_tensors == manifest.num_tensors == 194
    assert report.num_params == manifest.num_params


def test_config_from_authors_kwargs():
    for name in MANIFESTS[:6]:
        assert WanVAEConfig.from_dict(get_manifest(name).config) == WanVAEConfig.wan2_1()
    authors = {"dim": 96, "z_dim": 16, "dim_mult": [1, 2, 4, 4], "num_res_blocks": 2,
               "attn_scales": [], "temperal_downsample": [False, True, True], "dropout": 0.0}
    assert WanVAEConfig.from_dict(authors) == WanVAEConfig.wan2_1()
    with pytest.raises(VidaxError, match="attn_scales"):
        WanVAEConfig.from_dict(dict(authors, attn_scales=[1.0]))
    with pytest.raises(VidaxError, match="latents_mean"):
        WanVAEConfig.from_dict(dict(authors, z_dim=4))


def test_tiny_keeps_the_released_structure():
    """Same parameter paths as the release; only widths differ."""
    def paths(cfg):
        state = nnx.state(nnx.eval_shape(lambda: WanVAE(cfg)))
        return {".".join(map(str, p)) for p, _ in nnx.to_flat_state(state)}

    assert paths(WanVAEConfig.tiny()) == paths(WanVAEConfig.wan2_1())
    assert dataclasses.replace(WanVAEConfig.tiny(), dim=96, z_dim=16,
                               latents_mean=WanVAEConfig().latents_mean,
                               latents_std=WanVAEConfig().latents_std) == WanVAEConfig.wan2_1()
