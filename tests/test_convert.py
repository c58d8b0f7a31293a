"""``vidax convert``: a Flax-layout folder that ``vidax.load`` takes without translating, written
atomically."""

from __future__ import annotations

import json

import numpy as np
import pytest
from flax import nnx

import vidax
from tests.sharding.common import small_config, write_authors_dit
from vidax import cli, convert, loading, sharding
from vidax.errors import CheckpointError, VidaxError
from vidax.models.wan2_1.dit import WanDiTConfig
from vidax.translator.io import converted, open_checkpoint
from vidax.translator.mapping import Target
from vidax.translator.verify import flat_params


@pytest.fixture(scope="module")
def authors_file(tmp_path_factory):
    cfg = WanDiTConfig.tiny()
    path = tmp_path_factory.mktemp("convert") / "diffusion_pytorch_model.safetensors"
    return cfg, write_authors_dit(cfg, path)


def _arrays(model: nnx.Module) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in flat_params(model).items()}


def _cli_convert(path, out, *extra) -> int:
    return cli.main(["convert", "wan2_1", "--component", "dit", "--variant", "tiny",
                     "--checkpoint", str(path), "--out", str(out), *extra])


def test_convert_then_load_skips_translation(authors_file, tmp_path, monkeypatch, capsys):
    cfg, path = authors_file
    out = tmp_path / "wan_dit_flax"
    assert _cli_convert(path, out) == 0
    assert "vidax.load of this folder skips translation" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == sorted([converted.MARKER, converted.WEIGHTS])
    info = json.loads((out / converted.MARKER).read_text())
    assert (info["model_type"], info["component"], info["variant"]) == ("wan2_1", "dit", "tiny")
    assert WanDiTConfig.from_dict(info["config"]) == cfg
    assert info["source"][0]["file"] == path.name and len(info["source"][0]["sha256"]) == 64
    with open_checkpoint(out / converted.WEIGHTS) as ckpt:
        assert "blocks.0.self_attn.q.kernel" in ckpt and ckpt.metadata["vidax"] == "flax-layout"

    want = _arrays(vidax.load("wan2_1", "dit", path, config=cfg))

    def no_mapper(*args, **kwargs):
        raise AssertionError("a converted folder must not go through the mapper")

    monkeypatch.setattr(loading, "verify_tensors", no_mapper)
    monkeypatch.setattr(loading, "_detect_config", no_mapper)
    got = _arrays(vidax.load("wan2_1", "dit", out))              # config from the marker
    assert got.keys() == want.keys()
    assert all(np.array_equal(got[k], want[k]) for k in want)
    mesh = sharding.make_mesh("fsdp=4,tp=2")
    sharded = _arrays(vidax.load("wan2_1", "dit", out, mesh=mesh))
    assert all(np.array_equal(sharded[k], want[k]) for k in want)


def test_convert_casts_on_the_host(authors_file, tmp_path):
    cfg, path = authors_file
    out = convert.convert("wan2_1", "dit", path, tmp_path / "bf16", config=cfg,
                          dtype="bfloat16")
    got = _arrays(vidax.load("wan2_1", "dit", out))
    want = _arrays(vidax.load("wan2_1", "dit", path, config=cfg, dtype="bfloat16"))
    assert {str(a.dtype) for a in got.values()} == {"bfloat16"}
    assert all(np.array_equal(got[k], want[k]) for k in want)


def test_a_converted_folder_is_checked(authors_file, tmp_path):
    cfg, path = authors_file
    out = convert.convert("wan2_1", "dit", path, tmp_path / "c", config=cfg)
    with pytest.raises(VidaxError, match=r"converted from a wan2_1 dit checkpoint \(original "
                                         r"layout\), not wan2_1 vae"):
        vidax.load("wan2_1", "vae", out)
    with pytest.raises(VidaxError, match="was converted at config"):
        vidax.load("wan2_1", "dit", out, config=small_config())
    with pytest.raises(VidaxError, match="exists; pass overwrite"):
        convert.convert("wan2_1", "dit", path, out, config=cfg)
    assert convert.convert("wan2_1", "dit", path, out, config=cfg, overwrite=True) == out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]      # the old copy is gone


def test_an_interrupted_convert_leaves_nothing_that_looks_complete(authors_file, tmp_path,
                                                                   monkeypatch):
    cfg, path = authors_file
    out = tmp_path / "out"
    real = Target.materialize
    calls = []

    def dies_midway(self, *args, **kwargs):
        calls.append(self.path)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Target, "materialize", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        convert.convert("wan2_1", "dit", path, out, config=cfg)
    assert list(tmp_path.iterdir()) == []          # the partial folder was removed

    # Killed before it could clean up: the partial folder has no marker, is not at the final
    # name, and its half-written file is refused by the reader.
    calls.clear()
    monkeypatch.setattr(convert.shutil, "rmtree", lambda *a, **k: None)
    with pytest.raises(KeyboardInterrupt):
        convert.convert("wan2_1", "dit", path, out, config=cfg)
    (partial,) = tmp_path.iterdir()
    assert partial.name.startswith(".out.partial-") and not out.exists()
    assert not converted.is_converted(partial)
    with pytest.raises(CheckpointError):
        open_checkpoint(partial / converted.WEIGHTS)

    # Dying at the very last step (the rename) leaves no folder under the final name either.
    monkeypatch.setattr(Target, "materialize", real)
    monkeypatch.setattr(convert, "_install", lambda tmp, out: (_ for _ in ()).throw(OSError()))
    with pytest.raises(OSError):
        convert.convert("wan2_1", "dit", path, out, config=cfg)
    assert not out.exists()
