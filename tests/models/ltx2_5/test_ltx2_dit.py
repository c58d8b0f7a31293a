"""vidax's LTX-2.x audio-video DiT and text connectors against the authors' own code (PyPI
``ltx-core`` 1.0.0: ``LTXModel``, ``Embeddings1DConnector``).

Oracles (DESIGN.md §6):

* One release-layout file per structure: ltx-core's tiny ``LTXModel`` (built by its own
  ``LTXModelConfigurator`` from the metadata dict, so the 19B caption projections come with it)
  and both connectors (``Embeddings1DConnectorConfigurator`` /
  ``AudioEmbeddings1DConnectorConfigurator``), random values in every tensor, saved with
  safetensors as ``model.diffusion_model.<LTXModel key>`` and
  ``model.diffusion_model.{video,audio}_embeddings_connector.<key>`` (the authors' key layout)
  with ``{"transformer": ...}`` in ``__metadata__["config"]``. vidax loads it through
  ``vidax.load`` with no config: the config comes from the metadata.
* Structures: the 19B one (6-row tables, caption projections, ungated attention) and the 2.3
  one (gated attention, cross-attention AdaLN with the prompt AdaLN, no caption projection,
  gated connectors). The 2.5 additions (video FFN without bias, keyframe embedding) have no
  oracle in ltx-core 1.0.0: the manifest check covers their structure.

Cases: the audio+video forward (batch 2, per-token timesteps with a conditioning frame at
t = 0, different video and audio sigmas so the AV cross-attention's timesteps are exercised,
text padding, positions from ltx-core's own patchifiers), the video-only forward, both
connectors (left-padded text, learnable registers), and vidax's ``own`` AV-timestep mode (the
authors' later code) where it must agree with 1.0.0's. Without an oracle: the 2.5 keyframe
embedding acts only through the marked tokens. Bound: float32, matmul precision
"highest", max |vidax - reference| <= 1e-4 x std(reference). Negative control: one file with
the q and k projections of block 0's video and audio self-attention and of the connectors'
first block swapped must fail the bound on every output.

Structure at full size: every ltx2_5 DiT manifest (19B, 2.3, 2.5) verifies 1:1, and the presets
equal ``from_dict`` of each manifest's config.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re

import jax
# ltx_core (requirements/reference.txt) is a required oracle: imported plainly, so a broken
# install fails these tests instead of skipping them; its modules load in the tests.
import ltx_core  # noqa: F401
import numpy as np
import pytest
import safetensors.numpy
from flax import nnx

import vidax
from tests.parity import assert_fails, assert_parity, randomize
from vidax import registry
from vidax.errors import VidaxError
from vidax.loading import verify_manifest
from vidax.manifests import all_manifests, get_manifest
from vidax.models.ltx2_5.dit import (LTX2DiT, LTX2DiTConfig, Modality, Perturbations,
                                     audio_positions, video_positions)


jax.config.update("jax_default_matmul_precision", "highest")
PREFIX = "model.diffusion_model."
BATCH, FRAMES, HEIGHT, WIDTH, FPS = 2, 3, 2, 3, 24.0     # 18 video tokens
AUDIO_FRAMES, AUDIO_CHANNELS, MEL_BINS = 7, 2, 4           # 8 = audio_in_channels
TEXT_LEN, TEXT_LENS = 128, (90, 128)                       # connectors need a multiple of 128

# ltx-core's transformer section at tiny sizes (the tiny preset), as a release file carries it.
CONFIG_19B = {
    "_class_name": "AVTransformer3DModel", "activation_fn": "gelu-approximate",
    "attention_bias": True, "attention_head_dim": 16, "attention_type": "default",
    "audio_attention_head_dim": 8, "audio_cross_attention_dim": 16, "audio_in_channels": 8,
    "audio_num_attention_heads": 2, "audio_out_channels": 8,
    "audio_positional_embedding_max_pos": [20], "av_ca_timestep_scale_multiplier": 1000.0,
    "av_cross_ada_norm": True, "caption_channels": 24, "causal_temporal_positioning": True,
    "connector_attention_head_dim": 12, "connector_norm_output": True,
    "connector_num_attention_heads": 2, "connector_num_layers": 1,
    "connector_num_learnable_registers": 128, "connector_positional_embedding_max_pos": [4096],
    "cross_attention_dim": 32, "cross_attention_norm": True, "double_self_attention": False,
    "dropout": 0.0, "frequencies_precision": "float64", "in_channels": 16,
    "norm_elementwise_affine": False, "norm_eps": 1e-06, "norm_num_groups": 32,
    "num_attention_heads": 2, "num_embeds_ada_norm": 1000, "num_layers": 2,
    "num_vector_embeds": None, "only_cross_attention": False, "out_channels": 16,
    "positional_embedding_max_pos": [20, 2048, 2048], "positional_embedding_theta": 10000.0,
    "positional_embedding_type": "rope", "qk_norm": "rms_norm", "rope_type": "split",
    "share_ff": False, "standardization_norm": "rms_norm", "timestep_scale_multiplier": 1000,
    "upcast_attention": False, "use_audio_video_cross_attention": True,
    "use_embeddings_connector": True, "use_linear_projection": False,
    "use_middle_indices_grid": True}
# The 2.3 switches; the connectors then run at each stream's width (video 2 x 16, audio 2 x 8).
CONFIG_2_3 = {**CONFIG_19B, "apply_gated_attention": True, "cross_attention_adaln": True,
              "caption_proj_before_connector": True, "connector_apply_gated_attention": True,
              "connector_attention_head_dim": 16, "audio_connector_num_attention_heads": 2,
              "audio_connector_attention_head_dim": 8}
STRUCTURES = {"19b": CONFIG_19B, "2.3": CONFIG_2_3}
SWAPS = ("transformer_blocks.0.attn1", "transformer_blocks.0.audio_attn1",
         "video_embeddings_connector.transformer_1d_blocks.0.attn1",
         "audio_embeddings_connector.transformer_1d_blocks.0.attn1")


# ----------------------------------------------------------------------------- release files
def _write(path, model, video_connector, audio_connector, config, swap: bool = False):
    import safetensors.torch

    tensors = {PREFIX + k: v for k, v in model.state_dict().items()}
    for name, connector in (("video", video_connector), ("audio", audio_connector)):
        tensors.update({f"{PREFIX}{name}_embeddings_connector.{k}": v
                        for k, v in connector.state_dict().items()})
    tensors = {k: v.detach().contiguous().clone() for k, v in tensors.items()}
    if swap:
        for module in SWAPS:
            q, k = f"{PREFIX}{module}.to_q.weight", f"{PREFIX}{module}.to_k.weight"
            tensors[q], tensors[k] = tensors[k], tensors[q]
    safetensors.torch.save_file(tensors, path,
                                metadata={"config": json.dumps({"transformer": config})})
    return path


@functools.cache
def _reference(structure: str):
    """ltx-core's tiny model and connectors with random values in every tensor."""
    from ltx_core.model.transformer.model_configurator import LTXModelConfigurator
    from ltx_core.text_encoders.gemma.embeddings_connector import (
        AudioEmbeddings1DConnectorConfigurator,
        Embeddings1DConnectorConfigurator,
    )

    full = {"transformer": STRUCTURES[structure]}
    model = LTXModelConfigurator.from_config(full)
    model = model.to_empty(device="cpu").eval()     # the caption projections start on meta
    video_connector = Embeddings1DConnectorConfigurator.from_config(full).eval()
    audio_connector = AudioEmbeddings1DConnectorConfigurator.from_config(full).eval()
    randomize(model.named_parameters(), seed=0)
    randomize(video_connector.named_parameters(), seed=1)
    randomize(audio_connector.named_parameters(), seed=2)
    return model, video_connector, audio_connector


# The 2.3 structure in the fast lane (gated attention, cross-attention AdaLN, the projection
# before the connectors); the 19B one in CI (``-m slow``).
@pytest.fixture(scope="module", params=[pytest.param("19b", marks=pytest.mark.slow), "2.3"])
def release(request, tmp_path_factory):
    structure = request.param
    refs = _reference(structure)
    folder = tmp_path_factory.mktemp(f"ltx2_{structure}")
    path = _write(folder / "ltx-2-tiny.safetensors", *refs, STRUCTURES[structure])
    return structure, path, refs


# ----------------------------------------------------------------------------- inputs
def _inputs(structure: str, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    cfg = STRUCTURES[structure]
    n_video = FRAMES * HEIGHT * WIDTH
    v_context = cfg["caption_channels"] if structure == "19b" else 32
    a_context = cfg["caption_channels"] if structure == "19b" else 16
    mask = np.zeros((BATCH, TEXT_LEN), np.int64)
    for i, n in enumerate(TEXT_LENS):
        mask[i, TEXT_LEN - n:] = 1                       # left padding, as the tokenizer does
    v_sigma, a_sigma = np.array([0.83, 0.21], np.float32), np.array([0.55, 0.9], np.float32)
    v_t = np.repeat(v_sigma[:, None], n_video, axis=1)
    v_t[1, :HEIGHT * WIDTH] = 0.0                        # a conditioning first frame
    f = lambda *s: rng.standard_normal(s).astype(np.float32)   # noqa: E731
    return {"v_latent": f(BATCH, n_video, cfg["in_channels"]), "v_sigma": v_sigma, "v_t": v_t,
            "v_context": f(BATCH, TEXT_LEN, v_context), "mask": mask,
            "a_latent": f(BATCH, AUDIO_FRAMES, cfg["audio_in_channels"]), "a_sigma": a_sigma,
            "a_t": np.repeat(a_sigma[:, None], AUDIO_FRAMES, axis=1),
            "a_context": f(BATCH, TEXT_LEN, a_context)}


def _ref_positions():
    """Positions as ltx-core's ``VideoLatentTools`` / ``AudioLatentTools`` build them."""
    from ltx_core.components.patchifiers import (
        AudioPatchifier,
        VideoLatentPatchifier,
        get_pixel_coords,
    )
    from ltx_core.types import AudioLatentShape, VideoLatentShape

    bounds = VideoLatentPatchifier(1).get_patch_grid_bounds(
        VideoLatentShape(BATCH, 16, FRAMES, HEIGHT, WIDTH))
    video = get_pixel_coords(bounds, (8, 32, 32), causal_fix=True).float()
    video[:, 0] = video[:, 0] / FPS
    audio = AudioPatchifier(MEL_BINS).get_patch_grid_bounds(
        AudioLatentShape(BATCH, AUDIO_CHANNELS, AUDIO_FRAMES, MEL_BINS))
    return video, audio


def test_positions_match_ltx_core():
    video, audio = _ref_positions()
    np.testing.assert_array_equal(
        np.broadcast_to(video_positions(FRAMES, HEIGHT, WIDTH, FPS), video.shape), video.numpy())
    np.testing.assert_array_equal(
        np.broadcast_to(audio_positions(AUDIO_FRAMES), audio.shape), audio.numpy())


def _reference_forward(model, x, video_only: bool, perturbations=None):
    import torch
    from ltx_core.model.transformer.modality import Modality as RefModality

    video_pos, audio_pos = _ref_positions()
    t = torch.from_numpy
    video = RefModality(latent=t(x["v_latent"]), sigma=t(x["v_sigma"]), timesteps=t(x["v_t"]),
                        positions=video_pos, context=t(x["v_context"]),
                        context_mask=t(x["mask"]))
    audio = None if video_only else RefModality(
        latent=t(x["a_latent"]), sigma=t(x["a_sigma"]), timesteps=t(x["a_t"]),
        positions=audio_pos, context=t(x["a_context"]), context_mask=t(x["mask"]))
    with torch.no_grad():
        v, a = model(video, audio, perturbations)
    return v.numpy(), None if a is None else a.numpy()


@functools.partial(nnx.jit, static_argnames=("video_only",))
def _run(model, x, video_only, perturb=None):
    video = Modality(x["v_latent"], x["v_sigma"], x["v_t"],
                     video_positions(FRAMES, HEIGHT, WIDTH, FPS), x["v_context"], x["mask"])
    audio = None if video_only else Modality(
        x["a_latent"], x["a_sigma"], x["a_t"], audio_positions(AUDIO_FRAMES), x["a_context"],
        x["mask"])
    return model(video, audio, perturb=perturb)


@functools.partial(nnx.jit)
def _run_connectors(model, v, a, mask):
    return model.connect_text(v, a, mask)


def _connector_inputs(structure: str, model_cfg) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(5)
    v_dim = model_cfg.connector_num_attention_heads * model_cfg.connector_attention_head_dim
    a_dim = (model_cfg.audio_connector_num_attention_heads
             * model_cfg.audio_connector_attention_head_dim)
    mask = np.zeros((1, TEXT_LEN), np.int64)            # ltx-core's connector takes batch 1
    mask[0, TEXT_LEN - TEXT_LENS[0]:] = 1
    return (rng.standard_normal((1, TEXT_LEN, v_dim)).astype(np.float32),
            rng.standard_normal((1, TEXT_LEN, a_dim)).astype(np.float32), mask)


def _reference_connectors(refs, v, a, mask):
    import torch

    additive = (torch.from_numpy(mask) - 1).float().reshape(1, 1, 1, -1) * torch.finfo(
        torch.float32).max                               # EmbeddingsProcessor's conversion
    with torch.no_grad():
        return (refs[1](torch.from_numpy(v), additive)[0].numpy(),
                refs[2](torch.from_numpy(a), additive)[0].numpy())


# ----------------------------------------------------------------------------- parity
def test_config_comes_from_the_file_metadata(release):
    structure, path, _ = release
    config = vidax.load("ltx2_5", "dit", path).config
    if structure == "19b":
        assert config == LTX2DiTConfig.tiny()
    else:
        assert config == dataclasses.replace(
            LTX2DiTConfig.tiny(), apply_gated_attention=True, cross_attention_adaln=True,
            caption_proj_before_connector=True, connector_apply_gated_attention=True,
            connector_attention_head_dim=16, audio_connector_attention_head_dim=8)


def test_dit_parity(release, record_property):
    structure, path, refs = release
    model = vidax.load("ltx2_5", "dit", path)
    x = _inputs(structure)
    ref_v, ref_a = _reference_forward(refs[0], x, video_only=False)
    out_v, out_a = _run(model, x, video_only=False)
    for name, out, ref in (("video", out_v, ref_v), ("audio", out_a, ref_a)):
        assert_parity(f"ltx2 {structure} dit {name}", out, ref, record_property)


@pytest.mark.slow
def test_dit_video_only_parity(release, record_property):
    structure, path, refs = release
    model = vidax.load("ltx2_5", "dit", path)
    x = _inputs(structure, seed=1)
    ref_v, _ = _reference_forward(refs[0], x, video_only=True)
    out_v, out_a = _run(model, x, video_only=True)
    assert out_a is None
    assert_parity(f"ltx2 {structure} dit video-only", out_v, ref_v, record_property)


@pytest.mark.slow
def test_own_timestep_mode_agrees_where_the_two_coincide(tmp_path, record_property):
    """``av_ca_scale_shift_timestep="own"`` (the authors' later code, 2.5's default) reads each
    stream's per-token timesteps; with every token at the other stream's sigma it must give
    ltx-core 1.0.0's output. (The 19B structure only: the path is the same in 2.3.)"""
    structure, refs = "19b", _reference("19b")
    path = _write(tmp_path / "ltx-2-tiny.safetensors", *refs, CONFIG_19B)
    cfg = vidax.load("ltx2_5", "dit", path).config
    model = vidax.load("ltx2_5", "dit", path,
                       config=dataclasses.replace(cfg, av_ca_scale_shift_timestep="own"))
    x = _inputs(structure, seed=2)
    x["v_t"] = np.repeat(x["a_sigma"][:, None], x["v_t"].shape[1], axis=1)
    x["a_t"] = np.repeat(x["v_sigma"][:, None], x["a_t"].shape[1], axis=1)
    ref_v, ref_a = _reference_forward(refs[0], x, video_only=False)
    out_v, out_a = _run(model, x, video_only=False)
    for name, out, ref in (("video", out_v, ref_v), ("audio", out_a, ref_a)):
        assert_parity(f"ltx2 {structure} own-timestep {name}", out, ref, record_property)


@pytest.mark.slow
def test_keyframe_embedding_runs_on_the_marked_tokens():
    """2.5 (no oracle in ltx-core 1.0.0): marking the first frame changes the output, and only
    through the embedding (zeroed, the marked and unmarked runs agree)."""
    cfg = dataclasses.replace(LTX2DiTConfig.tiny(), ff_bias=False,
                              use_keyframes_abs_pos_embedding=True,
                              av_ca_scale_shift_timestep="own")
    model = LTX2DiT(cfg, keys=0)
    x = _inputs("19b", seed=3)
    n = x["v_latent"].shape[1]
    first = np.zeros((BATCH, n), np.float32)
    first[:, :HEIGHT * WIDTH] = 1

    @nnx.jit
    def run(model, keyframes):
        video = Modality(x["v_latent"], x["v_sigma"], x["v_t"],
                         video_positions(FRAMES, HEIGHT, WIDTH, FPS), x["v_context"], x["mask"],
                         keyframes)
        return model(video)[0]

    unmarked = np.asarray(run(model, np.zeros_like(first)))
    assert not np.allclose(np.asarray(run(model, first)), unmarked)
    model.keyframes_abs_pos_embedding[...] = 0     # then marking must change nothing
    np.testing.assert_array_equal(np.asarray(run(model, first)), unmarked)


def test_connector_parity(release, record_property):
    structure, path, refs = release
    model = vidax.load("ltx2_5", "dit", path)
    v, a, mask = _connector_inputs(structure, model.config)
    ref_v, ref_a = _reference_connectors(refs, v, a, mask)
    out_v, out_a = _run_connectors(model, v, a, mask)
    for name, out, ref in (("video", out_v, ref_v), ("audio", out_a, ref_a)):
        assert_parity(f"ltx2 {structure} connector {name}", out, ref, record_property)


def test_negative_control_swapped_q_k_fails(release, tmp_path, record_property):
    structure, _, refs = release
    path = _write(tmp_path / "swapped.safetensors", *refs, STRUCTURES[structure], swap=True)
    model = vidax.load("ltx2_5", "dit", path)
    x = _inputs(structure)
    ref_v, ref_a = _reference_forward(refs[0], x, video_only=False)
    out_v, out_a = _run(model, x, video_only=False)
    v, a, mask = _connector_inputs(structure, model.config)
    ref_cv, ref_ca = _reference_connectors(refs, v, a, mask)
    out_cv, out_ca = _run_connectors(model, v, a, mask)
    for name, out, ref in (("video", out_v, ref_v), ("audio", out_a, ref_a),
                           ("connector video", out_cv, ref_cv),
                           ("connector audio", out_ca, ref_ca)):
        assert_fails(f"ltx2 {structure} swapped q/k {name}", out, ref, record_property)


# ----------------------------------------------------------------------------- structure
DIT_MANIFESTS = sorted(m.name for m in all_manifests()
                       if m.family == "ltx2_5" and m.component == "dit")


def test_every_dit_manifest_is_covered():
    assert len(DIT_MANIFESTS) == 6, DIT_MANIFESTS


# 2.3-22b-dev in the fast lane; the other five in CI (``-m slow``).
@pytest.mark.parametrize("name", [n if n == "ltx2_5/2.3-22b-dev__dit" else
                                  pytest.param(n, marks=pytest.mark.slow)
                                  for n in DIT_MANIFESTS])
def test_manifest_verifies(name):
    report = verify_manifest(get_manifest(name))
    assert report.ok, str(report)


@pytest.mark.parametrize("name", DIT_MANIFESTS)
def test_preset_is_the_release_config(name):
    manifest = get_manifest(name)
    spec, variant = registry.resolve(manifest.family, manifest.variant, manifest.component,
                                     manifest.layout)
    assert spec.make_config(variant) == LTX2DiTConfig.from_dict(
        manifest.config["instantiated_with"])


def test_unsupported_rope_layout_is_refused():
    with pytest.raises(VidaxError, match="rope_type"):
        LTX2DiTConfig.from_dict({**CONFIG_19B, "rope_type": "interleaved"})


def test_tiny_file_keys_are_the_release_layout(release):
    """Every key of the tiny file has a counterpart pattern in the 19B/2.3 manifests."""
    structure, path, _ = release
    manifest = get_manifest("ltx2_5/2.0-19b-dev__dit" if structure == "19b"
                            else "ltx2_5/2.3-22b-dev__dit")
    released = {re.sub(r"\.\d+\.", ".N.", k) for k in manifest.tensors}
    stored = {re.sub(r"\.\d+\.", ".N.", k) for k in safetensors.numpy.load_file(path)}
    assert stored == released


def test_perturbed_forward_matches_ltx_core(release, record_property):
    """The dev guidance's perturbed passes (ltx-core's ``BatchedPerturbationConfig``): sample 0
    skips the video and audio self-attention of block 1 (STG), sample 1 every audio<->video
    cross-attention (the isolated-modality pass). Negative control: the same call with no
    perturbation must differ from the perturbed reference."""
    from ltx_core.guidance.perturbations import (
        BatchedPerturbationConfig,
        Perturbation,
        PerturbationConfig,
        PerturbationType,
    )

    structure, path, refs = release
    model = vidax.load("ltx2_5", "dit", path)
    x = _inputs(structure, seed=4)
    T = PerturbationType
    config = BatchedPerturbationConfig([
        PerturbationConfig([Perturbation(T.SKIP_VIDEO_SELF_ATTN, [1]),
                            Perturbation(T.SKIP_AUDIO_SELF_ATTN, [1])]),
        PerturbationConfig([Perturbation(T.SKIP_A2V_CROSS_ATTN, None),
                            Perturbation(T.SKIP_V2A_CROSS_ATTN, None)])])
    ref_v, ref_a = _reference_forward(refs[0], x, video_only=False, perturbations=config)
    perturb = Perturbations.make(model.config.num_layers, BATCH, video_self=[(0, [1])],
                                 audio_self=[(0, [1])], a2v=[(1, None)], v2a=[(1, None)])
    out_v, out_a = _run(model, x, video_only=False, perturb=perturb)
    plain_v, plain_a = _run(model, x, video_only=False)
    for name, out, plain, ref in (("video", out_v, plain_v, ref_v),
                                  ("audio", out_a, plain_a, ref_a)):
        assert_parity(f"ltx2 {structure} perturbed {name}", out, ref, record_property)
        for sample in range(BATCH):
            assert_fails(f"ltx2 {structure} unperturbed {name} sample {sample}",
                         np.asarray(plain)[sample], ref[sample], record_property)
