"""The Python API of ``vidax`` (issue #11): the verification report is public
(``vidax.verify``, ``vidax.load_with_report``), ``vidax.load`` builds the config from the
``config.json`` beside diffusers/transformers weights (a checkpoint that is no named release
loads without the family's config class), its fall-back error names both the CLI's
``--variant`` and Python's ``variant=``, and ``vidax.compiled`` gives a loaded model one
compiled call equal to the eager one.

Checkpoints: the demo's tiny layouts (``vidax/data/tiny/*.json``: the key names and the
``config.json`` that diffusers' / transformers' ``save_pretrained`` wrote for tiny reference
models), in random values, each edited to a config no release has (fewer layers).
"""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pytest
from flax import nnx

import vidax
from vidax import cli
from vidax.demo.common import random_tensors, tiny_layout, write_safetensors
from vidax.errors import VidaxError
from vidax.translator.verify import Report


def _write(folder, family: str, component: str, *, config=None, drop: str | None = None,
           name: str | None = None):
    """The tiny layout's component in ``folder`` with ``config`` (default: the layout's) as
    its ``config.json`` (None: none); ``drop``: a regex of keys left out."""
    entry = tiny_layout(family)[component]
    tensors = random_tensors(entry, np.random.default_rng(0), np.float32)
    if drop:
        tensors = {k: v for k, v in tensors.items() if not re.match(drop, k)}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name or entry["file"].rsplit("/", 1)[-1])
    write_safetensors(path, tensors)
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return path


# ------------------------------------------------------------------------ the public names
def test_public_api_names():
    for name in ("config", "load", "load_with_report", "verify", "compiled", "pipeline"):
        assert name in vidax.__all__ and callable(getattr(vidax, name))
    namespace: dict = {}
    exec("from vidax import *", namespace)
    assert "verify" in namespace and "load_with_report" in namespace


def test_verify_returns_the_report_without_reading_weights(tmp_path):
    config = tiny_layout("wan2_1")["dit"]["config"]
    path = _write(tmp_path / "wan", "wan2_1", "dit", config=config)
    report = vidax.verify("wan2_1", "dit", path)
    assert isinstance(report, Report) and report.ok
    assert report.matched == report.num_tensors == 69
    assert str(report).startswith("matched 69/69 tensors")
    model, loaded = vidax.load_with_report("wan2_1", "dit", path)
    assert loaded.headline() == report.headline()


# ------------------------------------------------------------------------------ config.json
def _cogvideox(tmp_path):
    config = dict(tiny_layout("cogvideox")["dit"]["config"], num_layers=1)
    return _write(tmp_path / "transformer", "cogvideox", "dit", config=config,
                  drop=r"transformer_blocks\.1\."), config


def test_cogvideox_config_json_is_read(tmp_path):
    from vidax.models.cogvideox.config import CogVideoXDiTConfig

    path, config = _cogvideox(tmp_path)
    model, report = vidax.load_with_report("cogvideox", "dit", path)
    assert report.ok and model.config == CogVideoXDiTConfig.from_dict(config)
    assert model.config.num_layers == 1
    assert report.config_from == str(path.parent / "config.json")
    assert f"config: {path.parent / 'config.json'}" in str(report)
    # the folder, too; and verify (the CLI's, with no --variant) reads it the same way
    assert vidax.load("cogvideox", "dit", path.parent).config == model.config
    assert cli.main(["verify", "cogvideox", "--component", "dit", "--checkpoint",
                     str(path.parent)]) == 0


def test_cosmos_diffusers_config_json_is_read(tmp_path):
    from vidax.models.cosmos2_5.config import CosmosDiTConfig

    config = dict(tiny_layout("cosmos2_5")["dit"]["config"], num_layers=1)
    path = _write(tmp_path / "transformer", "cosmos2_5", "dit", config=config,
                  drop=r"transformer_blocks\.1\.")
    model = vidax.load("cosmos2_5", "dit", path)
    assert model.config == CosmosDiTConfig.from_dict(config) and model.config.num_blocks == 1


def test_reason1_transformers_config_json_is_read(tmp_path):
    from vidax.models.reason1.config import Reason1Config

    config = copy.deepcopy(tiny_layout("cosmos2_5")["text_encoder"]["config"])
    config["text_config"].update(num_hidden_layers=2, layer_types=["full_attention"] * 2)
    path = _write(tmp_path / "text_encoder", "cosmos2_5", "text_encoder", config=config,
                  drop=r"model\.layers\.2\.")
    model = vidax.load("reason1", "text_encoder", path)
    assert model.config == Reason1Config.from_dict(config)
    assert model.config.num_hidden_layers == 2


def test_wan_dit_reads_its_config_json_but_the_vae_beside_it_does_not(tmp_path):
    """The authors' Wan2.1 folder: ``config.json`` (the DiT's, saved by diffusers'
    ``ModelMixin``) beside ``diffusion_pytorch_model.safetensors`` and ``Wan2.1_VAE.pth``."""
    from vidax.demo.common import write_pth

    layout = tiny_layout("wan2_1")
    path = _write(tmp_path, "wan2_1", "dit", config=layout["dit"]["config"])
    assert vidax.load("wan2_1", "dit", path).config.text_dim == 48      # not tiny()'s 32
    vae = tmp_path / "Wan2.1_VAE.pth"
    write_pth(vae, random_tensors(layout["vae"], np.random.default_rng(0), np.float32))
    from vidax.models.wan2_1.config import WanVAEConfig

    # The DiT's config.json would be refused by the VAE's config class (unknown keys); the
    # VAE is found by its tensors instead (the demo's recorded layout).
    with pytest.raises(VidaxError, match="unknown"):
        WanVAEConfig.from_dict(layout["dit"]["config"])
    assert vidax.load("wan2_1", "vae", vae).config == WanVAEConfig.from_dict(
        layout["vae"]["config"])


def test_without_config_json_the_error_names_variant_for_cli_and_python(tmp_path):
    path, _ = _cogvideox(tmp_path)
    (path.parent / "config.json").unlink()
    with pytest.raises(VidaxError) as e:
        vidax.load("cogvideox", "dit", path)
    message = str(e.value)
    assert "could not tell which cogvideox dit release" in message
    assert "--variant" in message and "variant=" in message and "config=" in message
    assert "\n" not in message


def test_an_unreadable_config_json_is_named(tmp_path):
    path, _ = _cogvideox(tmp_path)
    (path.parent / "config.json").write_text(json.dumps({"num_layers": 1, "no_such_key": 3}))
    with pytest.raises(VidaxError, match="no_such_key") as e:
        vidax.load("cogvideox", "dit", path)
    assert str(path.parent / "config.json") in str(e.value) and "--variant" in str(e.value)


def test_a_config_json_that_disagrees_with_the_weights_is_named(tmp_path):
    path, config = _cogvideox(tmp_path)
    (path.parent / "config.json").write_text(json.dumps(dict(config, num_layers=2)))
    with pytest.raises(VidaxError, match="missing") as e:
        vidax.load("cogvideox", "dit", path)
    assert f"config: {path.parent / 'config.json'}" in str(e.value)
    assert "transformer_blocks.1." in str(e.value)


def test_an_explicit_variant_or_config_wins_over_config_json(tmp_path):
    path, _ = _cogvideox(tmp_path)
    with pytest.raises(VidaxError, match="missing"):       # tiny() has 2 layers
        vidax.load("cogvideox", "dit", path, variant="tiny")


# -------------------------------------------------------------------------- compiled calls
class _Toy(nnx.Module):
    traces = 0

    def __init__(self):
        self.lin = nnx.Linear(3, 4, rngs=nnx.Rngs(0))

    def __call__(self, x, *, scale: float = 1.0, bias=None):
        _Toy.traces += 1
        y = self.lin(x) * scale
        return y if bias is None else y + bias

    def host_loop(self, x):
        return np.asarray(self.lin(x))


def test_compiled_equals_eager_and_compiles_once_per_signature():
    model, x = _Toy(), np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    call = vidax.compiled(model)
    eager = np.asarray(model(x, scale=2.0))
    _Toy.traces = 0
    np.testing.assert_allclose(np.asarray(call(x, scale=2.0)), eager, rtol=1e-6, atol=1e-6)
    call(x + 1, scale=2.0)
    assert _Toy.traces == 1                          # same shapes and constants: cached
    call(x, scale=3.0)                               # a new constant compiles anew
    call(np.ones((5, 3), np.float32), scale=2.0)     # a new shape too
    assert _Toy.traces == 3
    bias = np.ones(4, np.float32)
    np.testing.assert_allclose(np.asarray(call(x, scale=2.0, bias=bias)), eager + 1, rtol=1e-6)
    bound = vidax.compiled(model.__call__)
    np.testing.assert_allclose(np.asarray(bound(x, scale=2.0)), eager, rtol=1e-6, atol=1e-6)


def test_compiled_refuses_what_it_cannot_compile():
    model = _Toy()
    with pytest.raises(VidaxError, match="host code"):
        vidax.compiled(model, "host_loop")(np.ones((1, 3), np.float32))
    with pytest.raises(VidaxError, match="hashable"):
        vidax.compiled(model)(np.ones((1, 3), np.float32), scale={2.0})
    with pytest.raises(VidaxError, match="nnx.Module"):
        vidax.compiled(lambda x: x)
    with pytest.raises(VidaxError, match="no method"):
        vidax.compiled(model, "nope")


@pytest.mark.slow
def test_compiled_wan_dit_equals_eager(tmp_path):
    """A loaded tiny Wan2.1 DiT (about 10 s eager on first call, 3 s compiled)."""
    config = tiny_layout("wan2_1")["dit"]["config"]
    dit = vidax.load("wan2_1", "dit", _write(tmp_path, "wan2_1", "dit", config=config))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 3, 8, 8, 16)).astype(np.float32)
    t = np.array([500.0], np.float32)
    context = rng.standard_normal((1, 7, 48)).astype(np.float32)
    compiled = np.asarray(vidax.compiled(dit)(x, t, context))
    eager = np.asarray(dit(x, t, context))
    assert np.abs(eager).max() > 0.1
    np.testing.assert_allclose(compiled, eager, rtol=1e-5, atol=1e-5)


def test_load_dtype_is_validated_up_front(tmp_path):
    config = tiny_layout("wan2_1")["dit"]["config"]
    path = _write(tmp_path / "wan", "wan2_1", "dit", config=config)
    with pytest.raises(VidaxError, match="float33.*accepted"):
        vidax.load("wan2_1", "dit", path, dtype="float33")
    leaves = nnx.state(vidax.load("wan2_1", "dit", path, dtype="bf16"), nnx.Param)
    assert {str(x.dtype) for x in __import__("jax").tree.leaves(leaves)} == {"bfloat16"}


def test_verify_reads_a_converted_folder(tmp_path):
    from vidax.convert import convert

    config = tiny_layout("wan2_1")["dit"]["config"]
    path = _write(tmp_path / "wan", "wan2_1", "dit", config=config)
    out = convert("wan2_1", "dit", path, tmp_path / "cache")
    report = vidax.verify("wan2_1", "dit", out)
    assert report.ok and report.matched == 69
