"""``vidax demo hunyuan_video1_5`` (text-to-video) and ``vidax demo hunyuan_video1_5-i2v``
(image-to-video from the frame the demo draws): the authors' ``ckpts/`` layout
(tests/test_demo.py covers what every demo shares), an mp4 with the requested frames each.

Fast: the folder's files and their dtypes; every weights file verifies 1:1 from the CLI.
Slow: both demo runs write playable mp4s of the requested size (the i2v one at the size its
command names, the image cover-cropped to it) whose first frames differ from the other's, and
the i2v command, run again, writes the same bytes.
"""

from __future__ import annotations

import io
import os
import shlex

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import safetensors  # noqa: E402
from rich.console import Console  # noqa: E402

from vidax import cli, demo  # noqa: E402
from vidax.demo import hunyuan_video1_5 as module  # noqa: E402
from vidax.demo import hunyuan_video1_5_i2v as i2v  # noqa: E402
from vidax.video import read_video  # noqa: E402

FILES = {
    "transformer/480p_t2v_distilled/diffusion_pytorch_model.safetensors": "F32",
    "transformer/480p_i2v_distilled/diffusion_pytorch_model.safetensors": "F32",
    "vae/diffusion_pytorch_model.safetensors": "F32",
    "text_encoder/llm/model.safetensors": "BF16",
    "vision_encoder/siglip/image_encoder/model.safetensors": "BF16",
}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hv15") / module.FOLDER
    i2v.write(folder)
    return folder


def test_writes_the_authors_layout(written):
    for name, dtype in FILES.items():
        with safetensors.safe_open(str(written / name), "np") as f:
            assert {f.get_slice(k).get_dtype() for k in f.keys()} == {dtype}, name
    for name in ("text_encoder/llm/tokenizer.json", "text_encoder/byt5-small/config.json",
                 "text_encoder/byt5-small/tokenizer_config.json",
                 "text_encoder/Glyph-SDXL-v2/checkpoints/byt5_model.pt",
                 "text_encoder/Glyph-SDXL-v2/assets/color_idx.json",
                 "text_encoder/Glyph-SDXL-v2/assets/multilingual_10-lang_idx.json",
                 "vision_encoder/siglip/feature_extractor/preprocessor_config.json",
                 i2v.IMAGE):
        assert (written / name).is_file(), name


def test_every_file_verifies_from_the_cli(written, capsys):
    checks = [("hunyuan_video1_5", c, f) for c, f in module.COMPONENTS] + list(module.ENCODERS)
    for model_type, component, file in checks:
        rc = cli.main(["verify", model_type, "--component", component, "--checkpoint",
                       str(written / file)])
        out = " ".join(capsys.readouterr().out.split())
        n, total = out.split("matched ")[1].split(" tensors")[0].split("/")
        assert rc == 0 and n == total, (component, out)


def _run(name, root):
    buffer = io.StringIO()
    video = demo.run(name, out=str(root / f"{name}.mp4"), cache_dir=str(root / "cache"),
                     console=Console(file=buffer, width=100))
    return video, buffer.getvalue()


@pytest.mark.slow       # two tiny generate runs and one again, ~40 s on 2 cores
def test_t2v_and_i2v_demos_write_playable_videos(tmp_path, capsys):
    t2v_video, _ = _run("hunyuan_video1_5", tmp_path)
    i2v_video, printed = _run("hunyuan_video1_5-i2v", tmp_path)
    (t2v_frames, fps), (i2v_frames, _) = read_video(t2v_video), read_video(i2v_video)
    assert fps == 24 and t2v_frames.shape == (9, 48, 80, 3) and t2v_frames.std() > 1
    assert i2v_frames.shape == (9, 48, 64, 3) and i2v_frames.std() > 1
    assert not np.array_equal(t2v_frames[0, :, :64], i2v_frames[0])
    line = next(x for x in printed.splitlines() if x.startswith("running: vidax "))
    argv = shlex.split(line.removeprefix("running: vidax "))
    assert argv[argv.index("--image") + 1].endswith(i2v.IMAGE)
    again = tmp_path / "again.mp4"
    argv[argv.index("--out") + 1] = str(again)
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert again.read_bytes() == i2v_video.read_bytes()
