"""``vidax inspect`` on LoRA files and ``vidax generate --lora`` refusals (exit != 0, one
paragraph naming the file and the keys, before any weight is read)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vidax import cli
from vidax.demo.common import write_safetensors
from vidax.manifests import get_manifest


def _release_lora(path, *, underscored: bool = False, rank: int = 2):
    """A rank-2 LoRA on every self-attention q of the Wan2.1 T2V-1.3B release (its shapes)."""
    tensors = {}
    for key, spec in get_manifest("wan2_1/t2v-1.3b__dit").tensors.items():
        if key.endswith("self_attn.q.weight"):
            m = key.removesuffix(".weight")
            name = "lora_unet_" + m.replace(".", "_") if underscored else f"diffusion_model.{m}"
            tensors[f"{name}.lora_down.weight"] = np.zeros((rank, spec.shape[1]), np.float32)
            tensors[f"{name}.lora_up.weight"] = np.zeros((spec.shape[0], rank), np.float32)
            tensors[f"{name}.alpha"] = np.asarray(4.0, np.float32)
    write_safetensors(path, tensors)
    return path


@pytest.mark.parametrize("underscored", [False, True])
def test_inspect_names_form_rank_alpha_and_release(tmp_path, capsys, underscored):
    path = _release_lora(tmp_path / "style.safetensors", underscored=underscored)
    assert cli.main(["inspect", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)["lora"]
    assert info["form"] == ("kohya" if underscored else "lora_down/up")
    assert info["ranks"] == [2] and info["alphas"] == [4.0] and info["modules"] == 30
    assert {"release": "wan2_1/t2v-1.3b", "component": "dit", "layout": "original",
            "matched": 30, "total": 30} in info["fits"]
    assert all(f["release"].startswith(("wan2_1/t2v-1.3b", "wan2_2/ti2v")) or
               f["matched"] == 30 for f in info["fits"])
    assert cli.main(["inspect", str(path)]) == 0
    assert "LoRA:" in capsys.readouterr().out


def test_generate_refuses_a_bad_lora_before_loading(tmp_path, capsys):
    from vidax.demo import wan2_1 as demo

    folder = tmp_path / "release"
    demo.write(folder)
    bad = _release_lora(tmp_path / "big.safetensors")          # 1.3B shapes, tiny release
    argv = ["generate", "wan2_1", "--checkpoint-dir", str(folder), "--prompt", "p",
            "--out", str(tmp_path / "a.mp4"), "--lora", f"{bad}:0.5"]
    assert cli.main(argv) != 0
    err = capsys.readouterr().err
    assert "big.safetensors" in err and "blocks.0.self_attn.q" in err and "nothing was" in err
    assert not (tmp_path / "a.mp4").exists()
    assert cli.main([*argv[:-2], "--lora", f"{bad}@high"]) != 0
    assert "one DiT" in capsys.readouterr().err


def test_pipeline_refuses_a_folder_option_the_family_lacks(tmp_path):
    import vidax
    from vidax.errors import VidaxError

    with pytest.raises(VidaxError, match="no option distilled_lora for this family"):
        vidax.pipeline("wan2_1", tmp_path, distilled_lora="x.safetensors")
