"""`vidax demo`: a tiny release in the authors' layout, through the real generate path, to an
mp4 that decodes back to the requested frames."""

import json

import numpy as np

from vidax import demo
from vidax.video import read_video


def test_demo_writes_the_authors_layout_and_a_playable_video(tmp_path, capsys):
    video = demo.run(out=str(tmp_path / "demo.mp4"), cache_dir=str(tmp_path / "cache"))
    out = capsys.readouterr().out
    release = tmp_path / "cache" / "Wan2.1-T2V-tiny"
    # The authors' file names, the DiT's config.json as their save_pretrained writes it.
    for name in ("diffusion_pytorch_model.safetensors", "Wan2.1_VAE.pth",
                 "models_t5_umt5-xxl-enc-bf16.pth", "google/umt5-xxl/tokenizer.json"):
        assert (release / name).is_file(), name
    assert json.loads((release / "config.json").read_text())["_class_name"] == "WanModel"
    for line in ("dit: matched 69/69 tensors", "vae: matched 194/194 tensors",
                 "text_encoder: matched 22/22 tensors"):
        assert line in out
    frames, fps = read_video(video)
    assert fps == 8
    assert frames.shape == (9, 48, 64, 3) and frames.dtype == np.uint8
    assert frames.std() > 1   # random weights: coloured noise, not a blank video
    assert str(video) in out.replace("\n", "")
