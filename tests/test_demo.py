"""`vidax demo MODEL_TYPE`: a tiny release in the authors' layout, through the real generate
path, to an mp4 that decodes back to the requested frames; the printed command writes the same
mp4 byte for byte; every file the demo writes passes `vidax verify` and `vidax convert`."""

import importlib.util
import io
import json
import shlex

import numpy as np
import pytest
from rich.console import Console

from vidax import cli, demo, manifests, registry
from vidax.demo import layouts
from vidax.errors import VidaxError
from vidax.translator.io import converted, open_checkpoint
from vidax.video import read_video

#: The demos whose module is in the tree (another helper's may still be missing).
PRESENT = [m for m, module in demo.DEMOS.items() if importlib.util.find_spec(module)]


def _run(model_type, tmp_path):
    """The demo into tmp_path; (video, printed text, release folder)."""
    buf = io.StringIO()
    video = demo.run(model_type, out=str(tmp_path / "demo.mp4"),
                     cache_dir=str(tmp_path / "cache"), console=Console(file=buf, width=80))
    return video, buf.getvalue(), tmp_path / "cache" / demo.family(model_type).FOLDER


def _assert_command_reproduces(printed, video, tmp_path, capsys):
    """The printed `vidax generate` line, parsed as a shell would, run again into another
    file: the same mp4 bytes (the muxer writes no timestamps: creation times are 0) and the
    same decoded frames."""
    lines = [line for line in printed.splitlines() if line.startswith("running: vidax ")]
    assert len(lines) == 1, printed
    argv = shlex.split(lines[0].removeprefix("running: vidax "))
    assert argv[argv.index("--out") + 1] == str(video)
    again = tmp_path / "again.mp4"
    argv[argv.index("--out") + 1] = str(again)
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert again.read_bytes() == video.read_bytes()
    # ... and not only because both runs fell in the same second: no creation time is stored
    data = video.read_bytes()
    for box in (b"mvhd", b"tkhd", b"mdhd"):
        at = data.find(box)
        assert at > 0 and data[at + 4] == 0, box      # version 0: 32-bit times follow
        assert data[at + 8:at + 16] == bytes(8), box  # creation and modification times 0
    (a, fps_a), (b, fps_b) = read_video(video), read_video(again)
    assert fps_a == fps_b and np.array_equal(a, b)
    return argv


def test_demo_writes_the_authors_layout_and_a_playable_video(tmp_path, capsys):
    video, out, release = _run("wan2_1", tmp_path)
    out += capsys.readouterr().out     # the generate run prints to the CLI's console
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
    # The printed command carries the seed and the fps (it left out --fps before) and
    # reproduces the file byte for byte.
    argv = _assert_command_reproduces(out, video, tmp_path, capsys)
    assert argv[argv.index("--fps") + 1] == "8" and argv[argv.index("--seed") + 1] == "0"


@pytest.mark.slow     # a tiny generate run each, ~15-30 s on 2 CPU cores
@pytest.mark.parametrize("model_type, files, shape, fps", [
    ("wan2_2", ("diffusion_pytorch_model.safetensors", "config.json", "Wan2.2_VAE.pth",
                "models_t5_umt5-xxl-enc-bf16.pth", "google/umt5-xxl/tokenizer.json"),
     (9, 64, 96, 3), 24),
    ("cosmos3", ("model_index.json", "transformer/config.json",
                 "transformer/diffusion_pytorch_model.safetensors.index.json",
                 "transformer/diffusion_pytorch_model-00001-of-00002.safetensors",
                 "vae/config.json", "text_tokenizer/tokenizer.json",
                 "scheduler/scheduler_config.json"), (9, 32, 64, 3), 16),
    ("ltx_video", ("ltxv-tiny-0.9.8.safetensors", "text_encoder/model.safetensors",
                   "text_encoder/config.json", "tokenizer/tokenizer.json",
                   "tokenizer/special_tokens_map.json"), (9, 32, 64, 3), 24),
])
def test_family_demo_runs_and_its_command_reproduces(model_type, files, shape, fps, tmp_path,
                                                     capsys):
    video, out, release = _run(model_type, tmp_path)
    for name in files:
        assert (release / name).is_file(), name
    frames, got_fps = read_video(video)
    assert frames.shape == shape and got_fps == fps and frames.std() > 1
    _assert_command_reproduces(out, video, tmp_path, capsys)


def test_ltx_demo_file_carries_the_authors_configs(tmp_path):
    """One safetensors file, both models under their prefixes, the transformer / vae /
    scheduler sections in its metadata, as Lightricks' 0.9.8 files."""
    from vidax.demo import ltx_video

    ltx_video.write(tmp_path)
    with open_checkpoint(tmp_path / "ltxv-tiny-0.9.8.safetensors") as ckpt:
        config = json.loads(ckpt.metadata["config"])
        keys = list(ckpt)
    assert set(config) == {"transformer", "vae", "scheduler"}
    assert config["transformer"]["_class_name"] == "Transformer3DModel"
    assert {k.split(".")[0] for k in keys} == {"model", "vae"}


#: Components whose file alone cannot size them: LTX-2's text projection reads every hidden
#: state of its Gemma, whose width the DiT's metadata does not give (ltx-core fixes Gemma 12B's
#: 3840 x 49; the pipeline takes the folder's Gemma). ``--variant tiny`` gives the demo's.
NEEDS_VARIANT = {("ltx2_5", "text_projection"), ("ltx2_5-2.5", "text_projection")}


def _verify_argv(model_type, component, path, *extra):
    """`vidax verify` of a demo component, as the demo prints it: under the registered model
    that implements it (Wan2.2's UMT5 is wan2_1's text_encoder, LTX-Video's T5 is t5's
    encoder)."""
    if (model_type, component) in NEEDS_VARIANT and "--variant" not in extra:
        extra = (*extra, "--variant", "tiny")
    return [*demo.verify_argv(model_type, component, path.name, path.parent), *extra]


@pytest.mark.parametrize("model_type", PRESENT)
def test_every_demo_component_is_identified_as_the_demo(model_type, tmp_path):
    """Before: `vidax verify` without --variant said "could not tell which release this is"
    (the demo's configs are the pipelines' tiny releases, no packaged manifest's)."""
    mod = demo.family(model_type)
    mod.write(tmp_path)
    for component, rel in mod.COMPONENTS:
        key = layouts.demo_spec(model_type, component)
        assert key is not None, component
        with open_checkpoint(tmp_path / rel) as ckpt:
            tensors = {k: (tuple(v.shape), str(v.dtype)) for k, v in ckpt.items()}
        found = manifests.identify(tensors, path=str(tmp_path / rel))
        names = [m.name for m in found.candidates()]
        want = [m.name for m in layouts.demo_manifests()
                if (m.family, m.component, m.layout) == key and m.name in names]
        assert want, (component, names)
        # The recorded config is what the registry builds for that demo variant.
        spec = registry.get(*key)
        variant = want[0].split("/")[1].split("__")[0]
        assert spec.make_config(variant) == spec.make_config(
            overrides=next(m.config for m in layouts.demo_manifests() if m.name == want[0]))


def test_demo_file_loads_from_python_without_a_variant(tmp_path):
    """vidax.load finds the demo's config from the file alone (before: "could not tell which
    wan2_1 vae release this is")."""
    import vidax
    from vidax.demo import wan2_1

    wan2_1.write(tmp_path)
    vae = vidax.load("wan2_1", "vae", tmp_path / "Wan2.1_VAE.pth")
    assert vae is not None


def test_demo_configs_are_the_pipelines_tiny_releases():
    """What verify/convert find for a demo file is what `vidax generate` loads it at."""
    from vidax.pipelines import wan2_1, wan2_2

    for name, configs in (("wan2_1", wan2_1.tiny_configs("t2v")),
                          ("wan2_2", wan2_2.tiny_configs("ti2v"))):
        for component, config in configs.items():
            key = layouts.demo_spec(name, component)
            variant = "demo" if key[0] == name else f"demo-{name}"
            assert registry.get(*key).make_config(variant) == config, (name, component)


@pytest.mark.slow     # a verify and a convert per component, ~0.1-1 s each
@pytest.mark.parametrize("model_type", PRESENT)
def test_demo_files_verify_and_convert_from_the_cli(model_type, tmp_path, capsys):
    """Before: `vidax verify wan2_1 --component dit --checkpoint <demo>/...` exited 1 ("could
    not tell which release", or mis-shaped at --variant tiny); now each file verifies without
    a variant, and converts to a folder at the demo's config."""
    mod = demo.family(model_type)
    release = tmp_path / "release"
    mod.write(release)
    for i, (component, rel) in enumerate(mod.COMPONENTS):
        argv = _verify_argv(model_type, component, release / rel)
        assert cli.main(argv) == 0, (argv, capsys.readouterr())
        assert "matched" in capsys.readouterr().out
        # convert does not detect the layout as verify does (its default is 'original'):
        # name it (see the report of issue #11's demo slice)
        key = layouts.demo_spec(model_type, component)
        out = tmp_path / f"converted-{i}"
        convert = ["convert", *argv[1:4], "--checkpoint", str(release / rel), "--out", str(out),
                   "--layout", key[2]]
        if (model_type, component) in NEEDS_VARIANT:
            convert += ["--variant", "tiny"]
        assert cli.main(convert) == 0, (convert, capsys.readouterr())
        # converted at the demo's recorded config, which the folder's marker gives back
        info = converted.read_info(out)
        spec = registry.get(*key)
        name = layouts.SHARED_LAYOUTS.get(model_type, model_type)
        variant = "demo" if key[0] == name else f"demo-{name}"
        assert converted.stored_config(out, spec, info) == spec.make_config(variant), info


@pytest.mark.slow     # a verify per component, ~0.1-1 s each
@pytest.mark.parametrize("model_type", ["wan2_1", "wan2_2", "ltx_video"])
def test_demo_files_verify_with_variant_tiny(model_type, tmp_path, capsys):
    """`--variant tiny` on a demo's file means the demo's tiny config (the file is matched
    against the recorded layouts: vidax.demo.layouts.tiny_config, asked by
    loading.resolve_config); on any other file it stays the component's tiny(). Before: the
    DiT mis-shaped (text_embedding [48, 64] vs [32, 64]), the VAE too (z_dim 16 vs 4)."""
    mod = demo.family(model_type)
    mod.write(tmp_path)
    for component, rel in mod.COMPONENTS:
        argv = _verify_argv(model_type, component, tmp_path / rel, "--variant", "tiny")
        assert cli.main(argv) == 0, (argv, capsys.readouterr())


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["wan2_2", "ltx_video"])
def test_demo_files_convert_with_variant_tiny_and_no_layout(model_type, tmp_path, capsys):
    mod = demo.family(model_type)
    mod.write(tmp_path)
    for i, (component, rel) in enumerate(mod.COMPONENTS):
        argv = _verify_argv(model_type, component, tmp_path / rel)
        convert = ["convert", *argv[1:4], "--checkpoint", str(tmp_path / rel),
                   "--out", str(tmp_path / f"out-{i}"), "--variant", "tiny"]
        assert cli.main(convert) == 0, (convert, capsys.readouterr())


def test_demo_options_determine_the_video():
    """Every demo names the seed and the fps (the options the printed command left out), and
    its steps unless its release samples fixed sigma lists (a distilled LTX-2: ``--steps`` is
    refused there)."""
    for model_type in PRESENT:
        module = demo.family(model_type)
        fixed = getattr(module, "FIXED_SCHEDULE", False)
        for option in ("--prompt", "--frames", "--size", "--steps", "--seed", "--fps"):
            assert (option in module.GENERATE) != (fixed and option == "--steps"), (
                model_type, option)


def test_unwritable_cache_folder_is_a_user_error(tmp_path, capsys):
    """A --cache-dir that cannot hold the release is one error line, exit 1 (not an internal
    error), and nothing is written."""
    blocker = tmp_path / "a-file"
    blocker.write_text("mine")
    assert cli.main(["demo", "wan2_1", "--cache-dir", str(blocker)]) == 1
    err = capsys.readouterr().err
    assert "cannot write the tiny release" in err and str(blocker) in err.replace("\n", "")
    assert "internal error" not in err and blocker.read_text() == "mine"


def test_unknown_demo_suggests_the_model_type():
    with pytest.raises(VidaxError, match="did you mean 'wan2_1'"):
        demo.family("wan2.1")
    with pytest.raises(VidaxError, match="Demos: wan2_1, wan2_2, ltx_video"):
        demo.family("sora")


def test_converted_ltx_demo_dit_loads_back(tmp_path, capsys):
    """A converted LTX-Video DiT loads back (it did not while the marker's config went
    through LTX's from_dict, which reads the authors' keys: 'activation_fn geglu')."""
    import vidax
    from vidax.demo import ltx_video

    ltx_video.write(tmp_path / "release")
    out = tmp_path / "converted"
    assert cli.main(["convert", "ltx_video", "--component", "dit", "--checkpoint",
                     str(tmp_path / "release" / "ltxv-tiny-0.9.8.safetensors"),
                     "--out", str(out)]) == 0, capsys.readouterr()
    assert vidax.load("ltx_video", "dit", out) is not None
