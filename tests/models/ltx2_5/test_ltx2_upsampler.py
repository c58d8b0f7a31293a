"""vidax's LTX-2.x latent upscaler (``ltx2_5`` / ``upsampler``: the LTX-Video model in
``vidax.models.ltx_video.upsampler`` plus ltx-core's rational resampler) against the authors'
ltx-core 1.0.0 ``LatentUpsampler``.

Oracle (DESIGN.md §6): ltx-core's tiny upsampler, random values in every tensor (the blur
kernel buffer included), saved with safetensors in the release layout (bare state-dict keys,
``{"config": json}`` metadata with ltx-core's keys) and rebuilt from that file by ltx-core's
own builder (``SingleGPUModelBuilder`` + ``LatentUpsamplerConfigurator``, what ltx-pipelines'
``ModelLedger`` does); vidax loads it with ``vidax.load("ltx2_5", "upsampler", path)`` and no
config. Four layouts: the x1.5 rational resampler (x3 shuffle + stride-2 blur), the x2
rational resampler (blur at stride 1: the kernel loaded, unused), the plain 2x pixel shuffle
(``upsampler.0``), temporal x2. Latents [2, 3, 5, 7, 16], odd H and W (x1.5: ceil(3H/2)).
Float32, matmul precision "highest", bound max |vidax - reference| <= 1e-4 x std(reference).
Negative controls that must fail it: the x1.5 file with a uniform blur kernel instead of
the stored one; the others with two convs swapped.

Structure at full size: each derived manifest (tests/models/ltx2_5/manifests/, written by
scripts/derive_ltx2_upsampler_manifests.py from ltx-core's class on the meta device) verifies
1:1, its metadata config gives the registry's preset, and the script still derives it.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import jax
# ltx_core (requirements/reference.txt) is a required oracle: imported plainly, so a broken
# install fails these tests instead of skipping them.
import ltx_core  # noqa: F401
import numpy as np
import pytest
from flax import nnx

import vidax
from tests.parity import (assert_fails, assert_parity, edited_copy, randomize, swap,
                          to_channels_last, to_ncthw)
from vidax import registry
from vidax.loading import verify_manifest
from vidax.manifests import load_manifest
from vidax.models.ltx_video.config import LTX2UpsamplerConfig

jax.config.update("jax_default_matmul_precision", "highest")

LATENTS = (2, 3, 5, 7, 16)
KERNEL = "upsampler.blur_down.kernel"
MANIFESTS = Path(__file__).with_name("manifests")
_TINY = {"_class_name": "LatentUpsampler", "in_channels": 16, "mid_channels": 64,
         "num_blocks_per_stage": 1, "dims": 3}
CASES = {
    "x1.5": dict(_TINY, spatial_upsample=True, temporal_upsample=False, spatial_scale=1.5,
                 rational_resampler=True),
    "x2_rational": dict(_TINY, spatial_upsample=True, temporal_upsample=False,
                        spatial_scale=2.0, rational_resampler=True),
    "x2": dict(_TINY, spatial_upsample=True, temporal_upsample=False, spatial_scale=2.0,
               rational_resampler=False),
    "temporal": dict(_TINY, spatial_upsample=False, temporal_upsample=True, spatial_scale=1.0,
                     rational_resampler=True),
}
OUT_SHAPES = {"x1.5": (2, 3, 8, 11, 16), "x2_rational": (2, 3, 10, 14, 16),
              "x2": (2, 3, 10, 14, 16), "temporal": (2, 5, 5, 7, 16)}


def _write(path: Path, config: dict, seed: int) -> Path:
    import safetensors.torch
    import torch
    from ltx_core.model.upsampler import LatentUpsamplerConfigurator

    model = LatentUpsamplerConfigurator.from_config(config)
    randomize([*model.named_parameters(), *model.named_buffers()], seed)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    assert all(v.dtype == torch.float32 for v in state.values())
    safetensors.torch.save_file(state, str(path), metadata={"config": json.dumps(config)})
    return path


def _reference(path: Path):
    """ltx-core's builder over the file: the config from its metadata, then the weights."""
    import torch
    from ltx_core.loader.single_gpu_model_builder import SingleGPUModelBuilder
    from ltx_core.model.upsampler import LatentUpsamplerConfigurator

    builder = SingleGPUModelBuilder(model_path=str(path),
                                    model_class_configurator=LatentUpsamplerConfigurator)
    return builder.build(device=torch.device("cpu"), dtype=torch.float32).eval()


@nnx.jit
def _run(model, latents):
    return model(latents)


@pytest.fixture(scope="module")
def latents():
    return np.random.default_rng(7).standard_normal(LATENTS).astype(np.float32)


@pytest.mark.parametrize("case", list(CASES))
def test_matches_ltx_core(case, latents, tmp_path, record_property):
    import torch

    path = _write(tmp_path / "upscaler.safetensors", CASES[case], seed=11)
    reference = _reference(path)
    with torch.no_grad():
        expected = to_channels_last(reference(to_ncthw(latents)))
    assert expected.shape == OUT_SHAPES[case]

    loaded = vidax.load("ltx2_5", "upsampler", path)
    assert loaded.config == LTX2UpsamplerConfig.from_dict(CASES[case])
    assert hasattr(loaded.upsampler, "blur_down") == case.startswith(("x1.5", "x2_rational"))
    assert_parity(f"ltx2_upsampler_{case}", _run(loaded, latents), expected, record_property)

    if case == "x1.5":   # the stored kernel is what runs: a uniform blur must fail
        def uniform(tensors):
            tensors[KERNEL] = np.full_like(tensors[KERNEL], 1 / 25)
        bad = edited_copy(path, tmp_path / "bad.safetensors", uniform)
    else:
        bad = edited_copy(path, tmp_path / "bad.safetensors",
                          swap(("res_blocks.0.conv1.weight", "res_blocks.0.conv2.weight")))
    assert_fails(f"ltx2_upsampler_{case}_negative",
                 _run(vidax.load("ltx2_5", "upsampler", bad), latents), expected,
                 record_property)


def test_the_blur_kernel_is_ltx_cores():
    """The model's initial kernel is ltx-core's BlurDownsample buffer (a file's value
    replaces it on load, as in ltx-core)."""
    from ltx_core.model.upsampler.blur_downsample import BlurDownsample

    from vidax.models.ltx_video.upsampler import binomial_kernel

    np.testing.assert_array_equal(np.asarray(binomial_kernel()),
                                  BlurDownsample(dims=2, stride=2).kernel.numpy())


def test_configs():
    """ltx-core's defaults for omitted keys; refused: another class, dims=2, unknown keys, a
    scale the rational resampler lacks. LTX-Video's reader still refuses ltx-core's keys."""
    from vidax.errors import VidaxError
    from vidax.models.ltx_video.config import LTXVideoUpsamplerConfig

    assert LTX2UpsamplerConfig.from_dict({}) == LTX2UpsamplerConfig(
        in_channels=128, mid_channels=512, num_blocks_per_stage=4)
    for bad, message in [({"_class_name": "Other"}, "_class_name"), ({"dims": 2}, "dims=2"),
                         ({"temporal": True}, "unknown"),
                         ({"rational_resampler": True, "spatial_scale": 3.0}, "supports")]:
        with pytest.raises(VidaxError, match=message):
            LTX2UpsamplerConfig.from_dict(bad)
    # inert where ltx-core ignores them: a temporal file's spatial_scale 1.0
    assert not LTX2UpsamplerConfig.temporal_x2().uses_rational_resampler
    with pytest.raises(VidaxError, match="unknown"):
        LTXVideoUpsamplerConfig.from_dict({"dims": 3, "rational_resampler": False})


# ----------------------------------------------------------------------------- structure
def _derivation():
    spec = importlib.util.spec_from_file_location(
        "derive_ltx2_upsampler_manifests",
        Path(__file__).resolve().parents[3] / "scripts" / "derive_ltx2_upsampler_manifests.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


#: variant -> (tensors, parameters) of its manifest
EXPECTED = {"2.0-spatial-x2": (73, 497_867_929), "2.0-temporal-x2": (72, 130_968_192),
            "2.3-spatial-x2-1.0": (73, 497_867_929), "2.3-spatial-x2-1.1": (72, 497_867_904),
            "2.3-spatial-x1.5": (73, 545_058_969), "2.3-temporal-x2": (72, 130_968_192),
            "2.5-spatial-x2": (72, 497_867_904), "2.5-temporal-x2": (72, 130_968_192)}


def test_every_released_upscaler_has_a_manifest():
    spec = registry.get("ltx2_5", "upsampler")
    stored = sorted(p.name for p in MANIFESTS.glob("*__upsampler.json"))
    assert stored == sorted(f"{v}__upsampler.json" for v in spec.variants) == \
        sorted(f"{v}__upsampler.json" for v in EXPECTED)


@pytest.mark.parametrize("variant", list(EXPECTED))
def test_manifest_verifies(variant):
    """The derived manifest through the mapper against the model at the registry's preset:
    every tensor matched (the blur kernel too), and the file's metadata config is the
    preset."""
    manifest = load_manifest(MANIFESTS / f"{variant}__upsampler.json")
    assert (manifest.family, manifest.variant, manifest.component) == \
        ("ltx2_5", variant, "upsampler")
    spec = registry.get("ltx2_5", "upsampler")
    assert LTX2UpsamplerConfig.from_dict(manifest.config["instantiated_with"]) == \
        spec.make_config(variant)
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    assert (report.matched, report.num_params) == EXPECTED[variant] == \
        (manifest.num_tensors, manifest.num_params)
    assert not report.ignored


def test_manifests_are_ltx_cores_class_at_the_release_configs():
    """The stored manifests are what the derivation script builds now (ltx-core's class on
    the meta device), and its byte-count check holds."""
    derived = _derivation().derive_all()
    for variant, manifest in derived.items():
        assert manifest == json.loads((MANIFESTS / f"{variant}__upsampler.json").read_text())


@pytest.mark.parametrize("preset,out", [("spatial_x1_5", (1, 4, 24, 33, 128)),
                                        ("spatial_x2_rational", (1, 4, 32, 44, 128)),
                                        ("spatial_x2", (1, 4, 32, 44, 128)),
                                        ("temporal_x2", (1, 7, 16, 22, 128))])
def test_released_presets_at_full_size(preset, out):
    """Each released config traced abstractly (no weights, no compute) over latents
    [1, 4, 16, 22, 128]: x1.5 gives ceil(1.5 H), x2 doubles, temporal gives 2F - 1."""
    from tests.parity import AbstractModel
    from vidax.models.ltx_video.upsampler import LTXVideoLatentUpsampler

    cfg = getattr(LTX2UpsamplerConfig, preset)()
    model = AbstractModel(lambda: LTXVideoLatentUpsampler(cfg))
    assert model.shapes("__call__", (1, 4, 16, 22, 128)).shape == out
