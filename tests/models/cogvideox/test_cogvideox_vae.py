"""The CogVideoX VAE (``vidax.models.cogvideox.vae``) against diffusers' ``AutoencoderKLCogVideoX``.

Oracle (DESIGN.md §6): diffusers' own class at a tiny config with the released structure
(4 levels, time compressed in the first two, 3 resnets per encoder level, 4 spatial-norm
resnets per decoder level; widths 8-16, 4 groups, 4 latent channels), random values in every
tensor (GroupNorm affines and the spatial norms' ``conv_y`` / ``conv_b`` included), written by
diffusers itself (``save_pretrained``: ``diffusion_pytorch_model.safetensors`` +
``config.json``). vidax reads the config from that ``config.json`` and the weights through
``vidax.load``. Tiling and slicing are off in the reference, so diffusers runs its frame
batching: 25 frames encode as 9 + 8 + 8 (three chunks, the conv caches carried twice) and
7 latent frames decode as 3 + 2 + 2; GroupNorm statistics are per chunk, so the outputs match
only if vidax cuts the video where diffusers does.

Bound: float32, matmul precision "highest", max |vidax - diffusers| <= 1e-4 x std(diffusers)
for the posterior mean, its log-variance and the decoded video (before any clamp; diffusers'
``decode`` does not clamp). Measured: see the printed lines (``pytest -s``) and the docs'
VAE section. Negative controls: ``conv_y`` <-> ``conv_b`` of one decoder spatial norm, and
``conv1`` <-> ``conv2`` of one encoder resnet, exchanged in the saved file, must fail it.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest

from tests.parity import AbstractModel, VAECase, assert_fails, randomize, swap_prefixes
from vidax import manifests, registry
from vidax.errors import VidaxError
from vidax.loading import verify_manifest
from vidax.models.cogvideox.vae import CogVideoXVAE, CogVideoXVAEConfig, frame_batches

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

VARIANTS = ("2b", "5b", "5b-i2v", "1.5-5b", "1.5-5b-i2v")
BATCH, FRAMES, LATENT_FRAMES = 2, 25, 7
HEIGHT, WIDTH = 16, 24                      # latent 2 x 3
NEGATIVE = {
    "decode": ("decoder.up_blocks.1.resnets.2.norm2.conv_y.",
               "decoder.up_blocks.1.resnets.2.norm2.conv_b."),
    "encode": ("encoder.down_blocks.1.resnets.1.conv1.",
               "encoder.down_blocks.1.resnets.1.conv2."),
}


# ----------------------------------------------------------------------------- full size
@pytest.mark.parametrize("variant", VARIANTS)
def test_manifest_verifies(variant):
    report = verify_manifest(manifests.get_manifest(f"cogvideox/{variant}__vae"))
    assert report.ok, "\n".join(report.lines(10))
    assert report.headline() == "matched 436/436 tensors, 215,583,907 parameters"


@pytest.mark.parametrize("variant", VARIANTS)
def test_presets_are_the_released_configs(variant):
    """Each release's ``vae/config.json`` (the manifest's ``config``) reads as its preset."""
    released = manifests.get_manifest(f"cogvideox/{variant}__vae").config
    spec = registry.get("cogvideox", "vae", "diffusers")
    assert CogVideoXVAEConfig.from_dict(released) == spec.make_config(variant)


def test_full_size_chunks_trace():
    """The released VAE (bf16 weights, abstract) at 480 x 720: encode chunks of 9 then 8
    frames -> 3 then 2 latent frames; decode chunks of 3 then 2 latent frames -> 9 then 8
    frames; the second chunk of each takes the first one's cache."""
    model = AbstractModel(lambda: CogVideoXVAE(CogVideoXVAEConfig.cogvideox_5b(),
                                               param_dtype=jnp.bfloat16))
    moments, cache = model.shapes("encode_chunk", (1, 9, 480, 720, 3), None)
    assert moments.shape == (1, 3, 60, 90, 32)
    assert model.shapes("encode_chunk", (1, 8, 480, 720, 3), cache)[0].shape == (1, 2, 60, 90, 32)
    video, cache = model.shapes("decode_chunk", (1, 3, 60, 90, 16), None)
    assert video.shape == (1, 9, 480, 720, 3)
    assert model.shapes("decode_chunk", (1, 2, 60, 90, 16), cache)[0].shape == (1, 8, 480, 720, 3)


def test_config_reader_refuses_what_it_cannot_run():
    for bad in ({"use_quant_conv": True}, {"act_fn": "relu"}, {"temporal_compression_ratio": 3},
                {"down_block_types": ["DownEncoderBlock2D"] * 4}, {"frobnicate": 1}):
        with pytest.raises(VidaxError):
            CogVideoXVAEConfig.from_dict(bad)


def test_frame_batches_are_diffusers():
    """diffusers' ``_encode`` / ``_decode`` bounds (8 frames / 2 latent frames per chunk, the
    leftover frames in the first chunk)."""
    assert frame_batches(49, 8) == [(0, 9), (9, 17), (17, 25), (25, 33), (33, 41), (41, 49)]
    assert frame_batches(13, 2) == [(0, 3), (3, 5), (5, 7), (7, 9), (9, 11), (11, 13)]
    assert frame_batches(4, 2) == [(0, 2), (2, 4)]
    assert frame_batches(1, 2) == [(0, 1)]
    assert frame_batches(5, 8) == [(0, 5)]
    assert frame_batches(20, 8) == [(0, 12), (12, 20)]


# ----------------------------------------------------------------------------- tiny parity
@pytest.fixture(scope="module")
def case(tmp_path_factory) -> VAECase:
    """diffusers' tiny VAE saved by itself, the inputs, and its outputs (channels-last)."""
    from diffusers import AutoencoderKLCogVideoX

    cfg = CogVideoXVAEConfig.tiny()
    ref = AutoencoderKLCogVideoX(block_out_channels=cfg.block_out_channels,
                                 latent_channels=cfg.latent_channels,
                                 norm_num_groups=cfg.norm_num_groups).eval()
    ref.disable_tiling()
    ref.disable_slicing()
    randomize(sorted(ref.named_parameters()), seed=0)
    folder = tmp_path_factory.mktemp("cogvideox_vae")
    ref.save_pretrained(folder)
    case = VAECase.posterior("cogvideox", folder / "diffusion_pytorch_model.safetensors", cfg,
                             ref, video=(BATCH, FRAMES, HEIGHT, WIDTH, 3),
                             latents=(BATCH, LATENT_FRAMES, HEIGHT // 8, WIDTH // 8,
                                      cfg.latent_channels))
    assert case["decoded"].shape[1] == 4 * (LATENT_FRAMES - 1) + 1
    return case


def test_vae_matches_diffusers(case, record_property):
    spec = registry.get("cogvideox", "vae", "diffusers")
    cfg = spec.make_config(overrides=json.loads((case.path.parent / "config.json").read_text()))
    assert cfg == case.config
    model = case.load(config=cfg)
    assert isinstance(model, CogVideoXVAE)
    case.check_posterior(model, "cogvideox_vae", record_property)


@pytest.mark.slow
@pytest.mark.parametrize("direction, frames", [("encode", 1), ("decode", 4)])
def test_vae_other_lengths(case, direction, frames, record_property):
    """One frame (the image-to-video pipelines encode the conditioning image alone: no
    temporal pooling, first-frame padding only) and an even latent count (decoded 2 + 2, no
    odd first chunk)."""
    case.check_input(case.load(), direction, case.other_input(direction, frames),
                     f"cogvideox_vae_{direction}_{frames}_frames", record_property)


@pytest.mark.parametrize("direction", ["decode", "encode"])
def test_vae_negative_control(case, direction, tmp_path, record_property):
    case.check_negative(tmp_path, direction, swap_prefixes(*NEGATIVE[direction]),
                        f"cogvideox_vae_negative_{direction}", record_property)


@pytest.mark.slow
def test_decode_chunking_matters(case, monkeypatch, record_property):
    """The parity above depends on cutting where diffusers does: decoding the same weights in
    chunks of 7 latent frames (one chunk) instead of 3 + 2 + 2 fails the bound."""
    from vidax.models.cogvideox import vae

    monkeypatch.setattr(vae, "DECODE_FRAMES_PER_CHUNK", LATENT_FRAMES)
    assert_fails("cogvideox_vae_negative_one_chunk", case.outputs(case.load(), "decode"),
                 case["decoded"], record_property)
