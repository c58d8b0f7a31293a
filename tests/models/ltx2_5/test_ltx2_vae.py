"""vidax's LTX-2 video VAE (19B, 2.3, LTX-2.5 conv) against the authors' ltx-core
(``ltx_core.model.video_vae``: ``VideoEncoder`` / ``VideoDecoder`` built by their
configurators).

Oracles (DESIGN.md §6): for each of the two block stacks (the 19B one: residual
``compress_all`` decoder stages, reflect-padded decoder, five statistics vectors; the 2.3 /
2.5 one: ``compress_all_res`` without widening, non-residual ``compress_time`` /
``compress_space`` / ``compress_all`` decoder stages that narrow by their multiplier, zero
padding, two statistics vectors), ltx-core's tiny encoder and decoder with random values in
every tensor and statistics buffer, written as a release monolith's ``vae.encoder.*``,
``vae.decoder.*``, ``vae.per_channel_statistics.*`` with ``{"vae": config}`` in the metadata.
The references are then rebuilt from that file through ltx-core's own key filters
(``VAE_{ENCODER,DECODER}_COMFY_KEYS_FILTER``), and vidax loads it with ``vidax.load`` and no
config (the config comes from the metadata). The 2.3 file is also written with bare keys, as
LTX-2.5's conv VAE file is, and loaded as ``video_vae_conv``.

Measured: encode (ltx-core returns normalised means: vidax ``normalize(encode(x))``) over a
9-frame 32x48 video, batch 2; decode (ltx-core un-normalises first: vidax
``decode_normalized``) of 3 x 2 x 3 latents. Float32, matmul precision "highest", bound
max |vidax - reference| <= 1e-4 x std(reference). Negative controls that must fail it: two
encoder convs, or two decoder convs, swapped in the file; the 19B decoder run with zero
instead of reflect padding.

Structure at full size: every ``ltx2_5`` video VAE manifest verifies 1:1, and its
``config`` gives the preset.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
# ltx_core (requirements/reference.txt) is a required oracle: imported plainly, so a broken
# install fails these tests instead of skipping them; its video VAE loads in the fixtures.
import ltx_core  # noqa: F401
import numpy as np
import pytest
import safetensors.numpy
from flax import nnx

import vidax
from tests.parity import (VAECase, assert_fails, assert_parity, draw_inputs, edited_copy,
                          randomize, swap, to_channels_last, to_ncthw)
from vidax import registry
from vidax.errors import VidaxError
from vidax.loading import verify_manifest
from vidax.manifests import all_manifests, get_manifest
from vidax.models.ltx2_5.vae import LTX2VideoVAEConfig


jax.config.update("jax_default_matmul_precision", "highest")

VIDEO = (2, 9, 32, 48, 3)                 # -> latents [2, 3, 2, 3, 8]
LATENTS = (1, 3, 2, 3, 8)                 # -> video [1, 9, 32, 48, 3]
STATS_USED = ("mean-of-means", "std-of-means")
STATS_19B_UNUSED = ("channel", "mean-of-stds", "mean-of-stds_over_std-of-means")

# The tiny configs as a release file's metadata carries them. The 19B one omits
# spatial_padding_mode, as the 19B file does: ltx-core then pads the decoder with reflect.
CONFIGS = {
    "19b": {
        "_class_name": "CausalVideoAutoencoder", "dims": 3, "in_channels": 3,
        "out_channels": 3, "latent_channels": 8, "decoder_base_channels": 4,
        "encoder_blocks": [["res_x", {"num_layers": 1}], ["compress_space_res", {"multiplier": 2}],
                           ["res_x", {"num_layers": 1}], ["compress_time_res", {"multiplier": 2}],
                           ["res_x", {"num_layers": 1}], ["compress_all_res", {"multiplier": 2}],
                           ["res_x", {"num_layers": 1}]],
        "decoder_blocks": [["res_x", {"num_layers": 1, "inject_noise": False}],
                           ["compress_all", {"residual": True, "multiplier": 2}],
                           ["res_x", {"num_layers": 1, "inject_noise": False}],
                           ["compress_all", {"residual": True, "multiplier": 2}],
                           ["res_x", {"num_layers": 2, "inject_noise": False}]],
        "scaling_factor": 1.0, "norm_layer": "pixel_norm", "patch_size": 4,
        "latent_log_var": "uniform", "use_quant_conv": False, "causal_decoder": False,
        "timestep_conditioning": False, "normalize_latent_channels": False},
    "2.3": {
        "_class_name": "CausalVideoAutoencoder", "dims": 3, "in_channels": 3,
        "out_channels": 3, "latent_channels": 8, "decoder_base_channels": 4,
        "encoder_blocks": [["res_x", {"num_layers": 1}], ["compress_space_res", {"multiplier": 2}],
                           ["res_x", {"num_layers": 1}], ["compress_time_res", {"multiplier": 2}],
                           ["res_x", {"num_layers": 2}], ["compress_all_res", {"multiplier": 1}],
                           ["res_x", {"num_layers": 1}]],
        "decoder_blocks": [["res_x", {"num_layers": 1}], ["compress_space", {"multiplier": 2}],
                           ["res_x", {"num_layers": 1}], ["compress_time", {"multiplier": 2}],
                           ["res_x", {"num_layers": 1}], ["compress_all", {"multiplier": 1}],
                           ["res_x", {"num_layers": 2}]],
        "scaling_factor": 1.0, "norm_layer": "pixel_norm", "patch_size": 4,
        "latent_log_var": "uniform", "use_quant_conv": False, "causal_decoder": False,
        "timestep_conditioning": False, "normalize_latent_channels": False,
        "spatial_padding_mode": "zeros"},
}


def _write_release(stack: str, path: Path) -> Path:
    """ltx-core's tiny encoder + decoder, random everywhere, as a monolith's ``vae.*``."""
    import safetensors.torch
    import torch
    from ltx_core.model import video_vae as vv

    config = {"vae": CONFIGS[stack]}
    encoder = vv.VideoEncoderConfigurator.from_config(config)
    decoder = vv.VideoDecoderConfigurator.from_config(config)
    randomize(encoder.named_parameters(), seed=1)
    randomize(decoder.named_parameters(), seed=2)
    gen = torch.Generator().manual_seed(3)
    latent_channels = CONFIGS[stack]["latent_channels"]
    names = STATS_USED + (STATS_19B_UNUSED if stack == "19b" else ())
    stats = {name: torch.randn(latent_channels, generator=gen) for name in names}
    stats["std-of-means"] = 0.5 + stats["std-of-means"].abs()
    tensors = {f"vae.per_channel_statistics.{k}": v for k, v in stats.items()}
    for part, module in (("encoder", encoder), ("decoder", decoder)):
        tensors.update({f"vae.{part}.{k}": v for k, v in module.state_dict().items()
                        if not k.startswith("per_channel_statistics.")})
    safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()}, str(path),
                                metadata={"config": json.dumps(config)})
    return path


def _references(path: Path):
    """ltx-core's encoder and decoder rebuilt from the file through its own key filters."""
    import safetensors.torch
    from ltx_core.model import video_vae as vv

    config = json.loads(safetensors.safe_open(str(path), "pt").metadata()["config"])
    stored = safetensors.torch.load_file(str(path))
    models = []
    for configurator, keys in ((vv.VideoEncoderConfigurator, vv.VAE_ENCODER_COMFY_KEYS_FILTER),
                               (vv.VideoDecoderConfigurator, vv.VAE_DECODER_COMFY_KEYS_FILTER)):
        model = configurator.from_config(config)
        state = {keys.apply_to_key(k): v for k, v in stored.items()
                 if keys.apply_to_key(k) is not None}
        missing, unexpected = model.load_state_dict(state, strict=False)
        assert not missing, missing
        # ltx-core 1.0 keeps two statistics buffers; the 19B file's other three go unused.
        assert sorted(unexpected) == sorted(f"per_channel_statistics.{k}"
                                            for k in STATS_19B_UNUSED
                                            if "vae.per_channel_statistics." + k in stored)
        models.append(model.eval())
    return models


@nnx.jit
def _encode(vae, video):
    return vae.normalize(vae.encode(video))


@nnx.jit
def _decode(vae, latents):
    return vae.decode_normalized(latents)


def _case(stack: str, folder: Path) -> VAECase:
    import torch

    path = _write_release(stack, folder / "ltx-2-vae.safetensors")
    encoder, decoder = _references(path)
    videos, latents = draw_inputs(4, {"video": VIDEO}, {"latents": LATENTS})
    with torch.no_grad():
        encoded = to_channels_last(encoder(to_ncthw(videos["video"])))
        decoded = to_channels_last(decoder(to_ncthw(latents["latents"])))
    return VAECase("ltx2_5", path, None, {**videos, **latents},
                   {"encoded": encoded, "decoded": decoded})


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    """``cases(stack)``: the release file of one stack, its inputs and ltx-core's outputs."""
    made = {}

    def get(stack: str) -> VAECase:
        if stack not in made:
            made[stack] = _case(stack, tmp_path_factory.mktemp(stack))
        return made[stack]
    return get


# The 2.3 / 2.5 stack in the fast lane; the 19B one in CI (``-m slow``).
STACKS = [pytest.param("19b", marks=pytest.mark.slow), "2.3"]


@pytest.mark.parametrize("stack", STACKS)
def test_config_comes_from_the_file_metadata(cases, stack):
    path = cases(stack).path
    spec = registry.get("ltx2_5", "vae", "original")
    with safetensors.safe_open(str(path), "np") as f:
        cfg = spec.config_from_file_metadata(f.metadata(), str(path))
    assert cfg == LTX2VideoVAEConfig.from_dict(CONFIGS[stack])
    assert cfg.decoder_padding_mode == ("reflect" if stack == "19b" else "zeros")
    assert cfg.spatial_padding_mode == "zeros"


@pytest.mark.parametrize("stack", STACKS)
def test_encode_matches_ltx_core(cases, stack, record_property):
    case = cases(stack)
    assert case["encoded"].shape == (2, 3, 2, 3, 8)
    assert_parity(f"encode_{stack}", _encode(case.load(), case["video"]), case["encoded"],
                  record_property)


@pytest.mark.parametrize("stack", STACKS)
def test_decode_matches_ltx_core(cases, stack, record_property):
    case = cases(stack)
    assert case["decoded"].shape == (1, 9, 32, 48, 3)
    assert_parity(f"decode_{stack}", _decode(case.load(), case["latents"]), case["decoded"],
                  record_property)


def _swap_convs(block: str):
    return swap((block + "conv1.conv.weight", block + "conv2.conv.weight"))


@pytest.mark.parametrize("stack", STACKS)
def test_encode_negative_control_swapped_convs(cases, stack, tmp_path, record_property):
    case = cases(stack)
    bad = edited_copy(case.path, tmp_path / "swapped.safetensors",
                      _swap_convs("vae.encoder.down_blocks.2.res_blocks.0."))
    assert_fails(f"encode_{stack}_negative", _encode(case.load(bad), case["video"]),
                 case["encoded"], record_property)


@pytest.mark.parametrize("stack", STACKS)
def test_decode_negative_control_swapped_convs(cases, stack, tmp_path, record_property):
    case = cases(stack)
    bad = edited_copy(case.path, tmp_path / "swapped.safetensors",
                      _swap_convs("vae.decoder.up_blocks.0.res_blocks.1."))
    assert_fails(f"decode_{stack}_negative", _decode(case.load(bad), case["latents"]),
                 case["decoded"], record_property)


@pytest.mark.slow
def test_decode_negative_control_zero_padding(cases, record_property):
    """The 19B decoder pads with reflect although its config does not say so: zeros fail."""
    case = cases("19b")
    cfg = dataclasses.replace(LTX2VideoVAEConfig.from_dict(CONFIGS["19b"]),
                              decoder_spatial_padding_mode="zeros")
    assert_fails("decode_19b_negative_zero_padding", _decode(case.load(config=cfg),
                                                             case["latents"]),
                 case["decoded"], record_property)


def test_bare_key_file_loads_as_ltx2_5_conv_vae(cases, tmp_path):
    """LTX-2.5's conv VAE file: the 2.3 tensors under bare keys, loaded as video_vae_conv."""
    path = cases("2.3").path
    tensors = safetensors.numpy.load_file(str(path))
    metadata = safetensors.safe_open(str(path), "np").metadata()
    bare = tmp_path / "ltx-2.5-video-vae-conv-bf16.safetensors"
    safetensors.numpy.save_file({k.removeprefix("vae."): v for k, v in tensors.items()},
                                str(bare), metadata=metadata)
    want = nnx.state(vidax.load("ltx2_5", "vae", path))
    got = nnx.state(vidax.load("ltx2_5", "video_vae_conv", bare))
    for (name, a), (_, b) in zip(jax.tree_util.tree_leaves_with_path(want),
                                 jax.tree_util.tree_leaves_with_path(got), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=str(name))


# ----------------------------------------------------------------------------- configs
def test_ltx_core_defaults_are_refused_where_vidax_differs():
    # ltx-core's decoder defaults to timestep conditioning; no LTX-2 release uses it.
    config = {k: v for k, v in CONFIGS["2.3"].items() if k != "timestep_conditioning"}
    with pytest.raises(VidaxError, match="timestep_conditioning"):
        LTX2VideoVAEConfig.from_dict(config)
    with pytest.raises(VidaxError, match="unknown"):
        LTX2VideoVAEConfig.from_dict({**CONFIGS["2.3"], "encoder_base_channels": 8})


VAE_MANIFESTS = sorted(m.name for m in all_manifests() if m.name.startswith("ltx2_5/")
                       and m.name.endswith(("__vae", "__video_vae_conv")))


def test_manifest_coverage():
    assert len(VAE_MANIFESTS) == 5, VAE_MANIFESTS


@pytest.mark.parametrize("name", VAE_MANIFESTS)
def test_release_manifest_verifies(name):
    manifest = get_manifest(name)
    report = verify_manifest(manifest)
    assert report.ok, report.headline()
    preset = (LTX2VideoVAEConfig.ltx2_19b() if "2.0-19b" in name
              else LTX2VideoVAEConfig.ltx2_3_22b())
    assert LTX2VideoVAEConfig.from_dict(manifest.config["instantiated_with"]) == preset
