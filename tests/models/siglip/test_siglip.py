"""HunyuanVideo-1.5's vision encoder: SigLIP's vision tower (``vidax.models.siglip.model``) against
transformers' ``SiglipVisionModel``, compared on ``last_hidden_state`` (what the DiT reads).

Oracle (DESIGN.md §6): ``SiglipVisionModel`` at a tiny config with random values in every
tensor (pooling head included, as in the release), written by its own ``save_pretrained``
(transformers 5: names without the ``vision_model.`` prefix). The image is 30 px in 7 px
patches, so -- like so400m-patch14-384, which reads 378 of its 384 pixels -- the unpadded patch
conv drops a remainder. vidax loads the file through ``vidax.load`` with the config read from
the saved ``config.json``; the release's transformers-4.x names (``vision_model.*``) are the
same file with the prefix put back, and must load to the same model. Bound: float32, matmul
precision "highest", max |diff| <= 1e-4 x std(reference). Negative control: q_proj and k_proj
of layer 1 swapped in the file must fail it.

Nothing comes from the hub: HF_HUB_OFFLINE=1 and every file is written here.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import safetensors.numpy  # noqa: E402

import vidax  # noqa: E402
from tests.parity import assert_fails, assert_parity, randomize  # noqa: E402
from vidax import registry  # noqa: E402
from vidax.loading import load_with_report, verify_manifest  # noqa: E402
from vidax.manifests import all_manifests, get_manifest  # noqa: E402
from vidax.models.siglip.model import SiglipVisionConfig  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")
TINY = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            image_size=30, patch_size=7)


@pytest.fixture(scope="module")
def siglip_case(tmp_path_factory):
    """The saved model folder, its config, the pixels (channels-last) and the reference."""
    import torch
    from transformers import SiglipVisionConfig as HFSiglipVisionConfig
    from transformers import SiglipVisionModel

    torch.manual_seed(0)
    model = SiglipVisionModel(HFSiglipVisionConfig(**TINY)).eval()
    randomize(model.named_parameters(), seed=1)
    root = tmp_path_factory.mktemp("siglip")
    model.save_pretrained(root)
    pixels = torch.randn(2, 3, 30, 30, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = model(pixel_values=pixels).last_hidden_state.numpy()
    config = SiglipVisionConfig.from_dict(json.loads((root / "config.json").read_text()))
    return root / "model.safetensors", config, pixels.permute(0, 2, 3, 1).numpy(), expected


def _vidax_output(path, config, pixels) -> np.ndarray:
    model = vidax.load("siglip", "vision_encoder", path, config=config)
    return np.asarray(model(pixels))


def test_saved_file_and_config(siglip_case):
    path, config, _, expected = siglip_case
    keys = set(safetensors.numpy.load_file(path))
    assert "embeddings.position_embedding.weight" in keys and "head.probe" in keys
    assert config == SiglipVisionConfig(image_size=30, patch_size=7, dim=64, mlp_dim=96,
                                        num_heads=4, num_layers=2)
    assert expected.shape == (2, 16, 64)            # 4 x 4 patches: 2 pixels per side dropped


def test_vision_encoder_matches_transformers(siglip_case, record_property):
    path, config, pixels, expected = siglip_case
    assert_parity("siglip", _vidax_output(path, config, pixels), expected, record_property)


def test_release_prefix_loads_the_same(siglip_case, tmp_path):
    """The released names (transformers 4.x: ``vision_model.*``): same parameters, the head
    ignored with its reason."""
    path, config, pixels, _ = siglip_case
    tensors = safetensors.numpy.load_file(path)
    prefixed = tmp_path / "model.safetensors"
    safetensors.numpy.save_file({f"vision_model.{k}": v for k, v in tensors.items()}, prefixed)
    model, report = load_with_report("siglip", "vision_encoder", prefixed, config=config)
    assert report.ok and sorted(report.ignored) == sorted(
        f"vision_model.{k}" for k in tensors if k.startswith("head."))
    np.testing.assert_array_equal(np.asarray(model(pixels)),
                                  _vidax_output(path, config, pixels))


def test_vision_encoder_negative_control_swapped_q_k(siglip_case, tmp_path, record_property):
    path, config, pixels, expected = siglip_case
    tensors = safetensors.numpy.load_file(path)
    q, k = (f"encoder.layers.1.self_attn.{n}_proj.weight" for n in "qk")
    tensors[q], tensors[k] = tensors[k], tensors[q]
    bad = tmp_path / "model.safetensors"
    safetensors.numpy.save_file(tensors, bad)
    assert_fails("siglip_negative", _vidax_output(bad, config, pixels), expected,
                 record_property)


def test_wrong_image_size_is_refused(siglip_case):
    path, config, pixels, _ = siglip_case
    model = vidax.load("siglip", "vision_encoder", path, config=config)
    with pytest.raises(vidax.errors.VidaxError, match="SigLIP vision input"):
        model(pixels[:, :28, :28])


# ----------------------------------------------------------------------------- structure
def test_siglip_manifests_are_all_listed():
    assert sorted(m.name for m in all_manifests() if m.component == "vision_encoder") == [
        "hunyuan_video1_5/flux1-redux-dev-siglip__vision_encoder"]


def test_manifest_verifies():
    """The released ``image_encoder/model.safetensors`` (448 tensors): 437 mapped 1:1 through
    the HunyuanVideo-1.5 alias, the 11 of the pooling head ignored."""
    manifest = get_manifest("hunyuan_video1_5/flux1-redux-dev-siglip__vision_encoder")
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    assert report.num_tensors == manifest.num_tensors == 448
    assert report.matched == 437 and len(report.ignored) == 11
    assert all(k.startswith("vision_model.head.") for k in report.ignored)
    assert report.num_params == manifest.num_params - 15_238_352    # the head's parameters


def test_release_config():
    manifest = get_manifest("hunyuan_video1_5/flux1-redux-dev-siglip__vision_encoder")
    preset = SiglipVisionConfig.flux1_redux_dev_siglip()
    assert SiglipVisionConfig.from_dict(manifest.config) == preset
    assert preset.num_patches == 729
    spec, variant = registry.resolve("hunyuan_video1_5", "flux1-redux-dev-siglip",
                                     "vision_encoder", "transformers")
    assert spec.key == ("siglip", "vision_encoder", "transformers")
    assert spec.make_config(variant) == preset
