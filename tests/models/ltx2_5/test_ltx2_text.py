"""LTX-2.x's text embedding projection (``vidax.models.ltx2_5.text``), against ltx-core 1.0.0.

Oracle (DESIGN.md §6): ltx-core's own ``FeatureExtractorV1`` (LTX-2 19B) and
``FeatureExtractorV2`` (LTX-2.3 / 2.5) at a tiny size (4 hidden states of width 16; V2
projects to 24 and 12) with random values in every tensor, their state dicts saved under the
release's ``text_embedding_projection.`` prefix next to a stand-in DiT tensor, with the
release's ``__metadata__["config"]``. Inputs: random hidden states, each with its own scale
and offset (so per-layer statistics matter), and a left-padded mask (LTX-2's tokenizer),
one row fully valid. Measured: the video and audio features, float32, within max |diff| <=
1e-4 x std(reference).

Negative control (must fail the bound): the projection's columns reordered layer-major
(``l * D + d`` instead of ltx-core's ``d * L + l`` flattening) in the saved file -- the
mistake a key/shape match cannot see.
"""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import jax
import numpy as np
import pytest

import vidax
from tests.parity import assert_fails, assert_parity, randomize
from vidax.errors import VidaxError
from vidax.loading import load_with_report, verify_manifest
from vidax.manifests import all_manifests, get_manifest
from vidax.models.ltx2_5.text import LTX2TextProjectionConfig
from vidax.translator.mappings.ltx2_5 import text_projection_config

jax.config.update("jax_default_matmul_precision", "highest")

B, T, D, L = 2, 10, 16, 4
V1 = dataclasses.replace(LTX2TextProjectionConfig.tiny(), version=1, video_dim=D, audio_dim=D)
V2 = LTX2TextProjectionConfig.tiny()


def _reference(version: int):
    import torch
    from ltx_core.text_encoders.gemma.feature_extractor import (
        FeatureExtractorV1,
        FeatureExtractorV2,
    )

    torch.manual_seed(0)
    if version == 1:
        ref = FeatureExtractorV1(torch.nn.Linear(D * L, D, bias=False), is_av=True)
    else:
        ref = FeatureExtractorV2(torch.nn.Linear(D * L, V2.video_dim), D,
                                 torch.nn.Linear(D * L, V2.audio_dim))
    randomize(ref.named_parameters(), seed=version)
    return ref.eval()


def _save(ref, path, *, layer_major: bool = False):
    import safetensors.torch
    import torch

    sd = {f"text_embedding_projection.{k}": v.contiguous() for k, v in ref.state_dict().items()}
    if layer_major:
        for k, v in sd.items():
            if v.ndim == 2:          # columns d * L + l -> l * D + d
                sd[k] = v.reshape(-1, D, L).transpose(1, 2).reshape(-1, D * L).contiguous()
    sd["model.diffusion_model.stand_in.weight"] = torch.zeros(2, 2)
    safetensors.torch.save_file(sd, path, metadata={"config": json.dumps({"transformer": {}})})


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    import torch

    root = tmp_path_factory.mktemp("ltx2_text")
    gen = torch.Generator().manual_seed(3)
    states = tuple((1 + i) * torch.randn(B, T, D, generator=gen) + 0.5 * i for i in range(L))
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, :4] = 0                                  # left padding
    out = SimpleNamespace(root=root, states=[s.numpy() for s in states], mask=mask.numpy())
    for version in (1, 2):
        ref = _reference(version)
        _save(ref, root / f"v{version}.safetensors")
        _save(ref, root / f"v{version}_layer_major.safetensors", layer_major=True)
        with torch.no_grad():
            video, audio = ref(states, mask, "left")
        setattr(out, f"v{version}", (video.numpy(), audio.numpy()))
    return out


def _load(path, config):
    return vidax.load("ltx2_5", "text_projection", path, config=config)


@pytest.mark.parametrize("version", [1, 2])
def test_matches_ltx_core(case, version, record_property):
    config = V1 if version == 1 else V2
    model, report = load_with_report("ltx2_5", "text_projection",
                                     case.root / f"v{version}.safetensors", config=config)
    assert report.ok and report.matched == (1 if version == 1 else 4)
    video, audio = model(case.states, case.mask)
    for name, ours, ref in zip(("video", "audio"), (video, audio), getattr(case, f"v{version}")):
        assert_parity(f"ltx2_text_v{version}_{name}", np.asarray(ours), ref, record_property)
    # the stacked [B, T, D, L] input is accepted too
    stacked = model(np.stack(case.states, -1), case.mask)[0]
    np.testing.assert_array_equal(np.asarray(stacked), np.asarray(video))


@pytest.mark.parametrize("version", [1, 2])
def test_negative_control_layer_major_flattening(case, version, record_property):
    config = V1 if version == 1 else V2
    video = _load(case.root / f"v{version}_layer_major.safetensors", config)(
        case.states, case.mask)[0]
    assert_fails(f"ltx2_text_v{version}_negative", np.asarray(video),
                 getattr(case, f"v{version}")[0], record_property)


def test_bad_inputs(case):
    model = _load(case.root / "v2.safetensors", V2)
    with pytest.raises(VidaxError, match="hidden states"):
        model(case.states[:-1], case.mask)
    with pytest.raises(VidaxError, match="attention_mask"):
        model(case.states, case.mask[:, :3])


# ----------------------------------------------------------------------------- configs
def _dit_metadata(name: str) -> dict[str, str]:
    example = get_manifest(name).config["safetensors_metadata"]["config_json_example"]
    return {"config": json.dumps(example)}


def test_version_from_release_metadata():
    """ltx-core's rule on the releases' DiT configs: the 19B has none of the V2 keys."""
    assert (text_projection_config(_dit_metadata("ltx2_5/2.0-19b-dev__dit"), "19b")
            == LTX2TextProjectionConfig.ltx2_19b())
    assert (text_projection_config(_dit_metadata("ltx2_5/2.3-22b-dev__dit"), "2.3")
            == LTX2TextProjectionConfig.ltx2_3_22b())
    assert text_projection_config({}, "2.5 TE file") is None
    bad = {"transformer": {"caption_proj_before_connector": True}}
    with pytest.raises(VidaxError, match="caption_proj_input_norm"):
        text_projection_config({"config": json.dumps(bad)}, "partial")


MANIFESTS = sorted(m.name for m in all_manifests() if m.component == "text_projection")


def test_manifests_are_all_listed():
    assert len(MANIFESTS) == 5 and all(n.startswith("ltx2_5/") for n in MANIFESTS)


@pytest.mark.parametrize("name", MANIFESTS)
def test_manifest_verifies(name):
    manifest = get_manifest(name)
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    assert report.matched == manifest.num_tensors and not report.ignored
    assert report.num_params == manifest.num_params
