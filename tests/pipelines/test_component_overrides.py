"""A component from elsewhere (``--dit FILE``, ``--vae FILE``, ``--text-encoder PATH``,
``--image-encoder FILE``; ``vidax.pipeline(..., dit=, ...)``; :mod:`vidax.pipelines.overrides`)
and diffusers folders as ``--checkpoint-dir``.

Releases: the demos' tiny ones (``vidax.demo``: the authors' layouts, random weights, written
in under a second), and a tiny Wan2.2 A14B folder written here from the Wan2.1 demo's layout
(two experts of different random weights). The generation tests move component files out of
the folder -- leaving only the settings and tokenizer files -- and pass them as overrides:
the video must equal the intact folder's exactly (same arrays; the CLI's mp4 byte for byte).
Negative control: the A14B experts given the other way round (``high=`` the low-noise file)
must change the video. The fast tests inspect only (no weight is loaded: ``load_component``
is made to fail), one per family with every declared option moved out of its demo release,
and the errors: a path that does not exist, a file of another component, an option the
family or release does not take, a diffusers folder of a family that does not read them.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import vidax  # noqa: E402
from vidax import cli, demo  # noqa: E402
from vidax.demo import common  # noqa: E402
from vidax.demo import wan2_1 as wan_demo  # noqa: E402
from vidax.errors import VerificationError, VidaxError  # noqa: E402
from vidax.pipelines import base, overrides  # noqa: E402
from vidax.pipelines import family as pipeline_family  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")]

#: A short run: 1 frame at 16x16, fp32 (one compile, shared by every run of a family).
RUN = dict(frames=1, size=(16, 16), steps=2, seed=0)
CLI_RUN = ["--prompt", wan_demo.PROMPT, "--frames", "1", "--size", "16x16", "--steps", "2",
           "--seed", "0", "--precision", "fp32"]
HIGH, LOW = "high_noise_model", "low_noise_model"


def _move(folder: Path, rel: str, elsewhere: Path) -> Path:
    """``folder/rel`` moved to ``elsewhere`` (a file or a folder); its new path."""
    target = elsewhere / rel.replace("/", "__")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(folder / rel), target)
    return target


@pytest.fixture(autouse=True)
def _no_loading_unless_slow(request, monkeypatch):
    """The fast tests must fail if anything reaches the weights."""
    if request.node.get_closest_marker("slow") is None:
        def refuse(*args, **kwargs):
            raise AssertionError("a weight was loaded")

        monkeypatch.setattr(base, "load_component", refuse)


# ----------------------------------------------------------------------------- Wan2.1
@pytest.fixture(scope="module")
def wan21(tmp_path_factory):
    """(the intact demo release, the release without weights, {option: moved file})."""
    root = tmp_path_factory.mktemp("wan21")
    intact, stripped, elsewhere = root / "intact", root / "stripped", root / "elsewhere"
    wan_demo.write(intact)
    shutil.copytree(intact, stripped)
    moved = {"dit": _move(stripped, "diffusion_pytorch_model.safetensors", elsewhere),
             "vae": _move(stripped, "Wan2.1_VAE.pth", elsewhere / "vae"),
             "text_encoder": _move(stripped, "models_t5_umt5-xxl-enc-bf16.pth",
                                   elsewhere / "t5")}
    return intact, stripped, moved


@pytest.mark.slow
def test_wan21_overrides_make_the_same_video(wan21):
    """Python: DiT, VAE and UMT5 from elsewhere (UMT5 as its folder) == the intact folder."""
    intact, stripped, moved = wan21
    reference = vidax.pipeline("wan2_1", intact, precision="fp32")("a red fox", **RUN)
    pipe = vidax.pipeline("wan2_1", stripped, precision="fp32", dit=moved["dit"],
                          vae=str(moved["vae"]), text_encoder=moved["text_encoder"].parent)
    assert pipe.release.files["dit"] == moved["dit"]
    assert pipe.release.files["text_encoder"] == moved["text_encoder"]
    frames = pipe("a red fox", **RUN)
    assert frames.shape == reference.shape and np.array_equal(frames, reference)


@pytest.mark.slow
def test_wan21_cli_overrides_write_the_same_mp4(wan21, tmp_path):
    intact, stripped, moved = wan21
    a, b = tmp_path / "intact.mp4", tmp_path / "overrides.mp4"
    assert cli.main(["generate", "wan2_1", "--checkpoint-dir", str(intact), *CLI_RUN,
                     "--out", str(a)]) == 0
    assert cli.main(["generate", "wan2_1", "--checkpoint-dir", str(stripped), *CLI_RUN,
                     "--dit", str(moved["dit"]), "--vae", str(moved["vae"]),
                     "--text-encoder", str(moved["text_encoder"]), "--out", str(b)]) == 0
    assert a.read_bytes() == b.read_bytes()


def test_missing_path_is_one_error_naming_the_option(wan21, tmp_path, capsys):
    _, stripped, moved = wan21
    nope = tmp_path / "nope.safetensors"
    rc = cli.main(["generate", "wan2_1", "--checkpoint-dir", str(stripped), *CLI_RUN,
                   "--dit", str(nope), "--vae", str(moved["vae"]),
                   "--text-encoder", str(moved["text_encoder"]),
                   "--out", str(tmp_path / "x.mp4")])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 1 and f"--dit {nope}: no such file or folder" in err, err
    with pytest.raises(VidaxError, match=r"--vae .*nope\.pth: no such file"):
        vidax.pipeline("wan2_1", stripped, dit=moved["dit"], vae=tmp_path / "nope.pth")


def test_another_components_file_is_refused_naming_option_and_file(wan21, tmp_path, capsys):
    _, stripped, moved = wan21
    rc = cli.main(["generate", "wan2_1", "--checkpoint-dir", str(stripped), *CLI_RUN,
                   "--dit", str(moved["vae"]), "--vae", str(moved["vae"]),
                   "--text-encoder", str(moved["text_encoder"]),
                   "--out", str(tmp_path / "x.mp4")])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 1, err
    assert f"--dit {moved['vae']}: {moved['vae']} is not a wan2_1 dit checkpoint" in err, err
    with pytest.raises(VerificationError, match=r"--text-encoder .*Wan2.1_VAE.pth.* is not "
                                                r"a wan2_1 text_encoder checkpoint"):
        vidax.pipeline("wan2_1", stripped, dit=moved["dit"], vae=moved["vae"],
                       text_encoder=moved["vae"])


def test_a_component_the_folder_lacks_and_nobody_gives_is_still_missing(wan21):
    _, stripped, moved = wan21
    with pytest.raises(VidaxError, match=r"missing .*Wan2.1_VAE.pth \(the VAE\)"):
        vidax.pipeline("wan2_1", stripped, dit=moved["dit"], text_encoder=moved["text_encoder"])


def test_options_the_release_does_not_take(wan21, tmp_path):
    intact, _, moved = wan21
    with pytest.raises(VidaxError, match=r"--image-encoder .*: a wan2_1 tiny \(t2v\) release "
                                         r"has no such component; it takes --dit FILE"):
        vidax.pipeline("wan2_1", intact, image_encoder=moved["vae"])
    with pytest.raises(VidaxError, match=r"wan2_1 has no dit 'high'"):
        vidax.pipeline("wan2_1", intact, dit={"high": moved["dit"]})
    cosmos3 = pipeline_family("cosmos3")
    with pytest.raises(VidaxError, match=r"--text-encoder: a cosmos3 release takes no "
                                         r"text_encoder from elsewhere"):
        overrides.normalise(cosmos3, {"text_encoder": moved["dit"]}, "cosmos3")


def test_cli_values_parse():
    wan22 = pipeline_family("wan2_2")
    assert overrides.parse_cli(wan22, "dit", ["high=a.safetensors", "low=b.safetensors"]) == {
        "high": "a.safetensors", "low": "b.safetensors"}
    assert overrides.parse_cli(wan22, "dit", ["x=y.safetensors"]) == "x=y.safetensors"
    assert overrides.parse_cli(wan22, "vae", None) is None
    with pytest.raises(VidaxError, match="given twice"):
        overrides.parse_cli(wan22, "dit", ["high=a", "high=b"])


# ----------------------------------------------------------------------------- Wan2.2 A14B
def write_a14b(folder: Path) -> None:
    """A tiny Wan2.2 T2V-A14B folder: the Wan2.1 demo's tiny DiT as each expert (seeds 1 and
    5, each with its ``config.json``), its UMT5, the Wan2.1 VAE and the tokenizer."""
    import ml_dtypes

    layout = common.tiny_layout("wan2_1")
    for name, seed in ((HIGH, 1), (LOW, 5)):
        rng = np.random.default_rng(seed)
        common.write_safetensors(folder / name / "diffusion_pytorch_model.safetensors",
                                 common.random_tensors(layout["dit"], rng, np.float32))
        common.write_json(folder / name / "config.json",
                          {"_class_name": "WanModel", **layout["dit"]["config"]})
    rng = np.random.default_rng(0)
    common.write_pth(folder / layout["text_encoder"]["file"],
                     common.random_tensors(layout["text_encoder"], rng, ml_dtypes.bfloat16))
    common.write_pth(folder / layout["vae"]["file"],
                     common.random_tensors(layout["vae"], rng, np.float32))
    common.word_tokenizer(folder / "google" / "umt5-xxl", wan_demo.WORDS, wan_demo.SPECIALS)


@pytest.fixture(scope="module")
def a14b(tmp_path_factory):
    root = tmp_path_factory.mktemp("a14b")
    intact, stripped, elsewhere = root / "intact", root / "stripped", root / "elsewhere"
    write_a14b(intact)
    shutil.copytree(intact, stripped)
    moved = {e: _move(stripped, f"{e}/diffusion_pytorch_model.safetensors", elsewhere)
             for e in (HIGH, LOW)}
    return intact, stripped, moved


#: Shift 1 over 4 steps: timesteps 1000, 750, 500, 250; the boundary 875 gives the first
#: step to the high-noise expert, the rest to the low-noise one.
A14B_RUN = dict(RUN, steps=4, shift=1.0)


@pytest.mark.slow
def test_a14b_experts_from_elsewhere(a14b, tmp_path):
    intact, stripped, moved = a14b
    reference = vidax.pipeline("wan2_2", intact, precision="fp32")("a red fox", **A14B_RUN)
    pipe = vidax.pipeline("wan2_2", stripped, precision="fp32",
                          dit={"high": moved[HIGH], "low": moved[LOW]})
    assert pipe.release.variant == "tiny" and pipe.release.task == "t2v"
    assert np.array_equal(pipe("a red fox", **A14B_RUN), reference)
    # negative control: the experts the other way round change the video
    swapped = vidax.pipeline("wan2_2", stripped, precision="fp32",
                             dit={"high": moved[LOW], "low": moved[HIGH]})
    assert not np.array_equal(swapped("a red fox", **A14B_RUN), reference)
    # the CLI's --dit high=FILE --dit low=FILE (one expert given, the other in the folder)
    a, b = tmp_path / "intact.mp4", tmp_path / "overrides.mp4"
    run = [*CLI_RUN, "--steps", "4", "--shift", "1"]     # the last --steps wins
    assert cli.main(["generate", "wan2_2", "--checkpoint-dir", str(intact), *run,
                     "--out", str(a)]) == 0
    half = tmp_path / "half"
    shutil.copytree(intact, half)
    (half / HIGH / "diffusion_pytorch_model.safetensors").unlink()
    assert cli.main(["generate", "wan2_2", "--checkpoint-dir", str(half), *run,
                     "--dit", f"high={moved[HIGH]}", "--out", str(b)]) == 0
    assert a.read_bytes() == b.read_bytes()


def test_a14b_option_errors(a14b):
    _, stripped, moved = a14b
    with pytest.raises(VidaxError, match=r"--dit .*: an A14B release has two experts: "
                                         r"--dit high=FILE and/or --dit low=FILE"):
        vidax.pipeline("wan2_2", stripped, dit=moved[HIGH])
    with pytest.raises(VerificationError, match=r"--dit low=.*Wan2.1_VAE.pth is not a wan2_1 dit "):
        vidax.pipeline("wan2_2", stripped, dit={"high": moved[HIGH],
                                               "low": stripped / "Wan2.1_VAE.pth"})


# ----------------------------------------------------------------------------- every family
#: demo -> (option, selector, the file or folder it replaces, relative to the release).
FAMILY_CASES = {
    "wan2_2": [("dit", "", "diffusion_pytorch_model.safetensors"),
               ("vae", "", "Wan2.2_VAE.pth"),
               ("text_encoder", "", "models_t5_umt5-xxl-enc-bf16.pth")],
    "cogvideox": [("dit", "", "transformer/diffusion_pytorch_model.safetensors"),
                  ("vae", "", "vae/diffusion_pytorch_model.safetensors"),
                  ("text_encoder", "", "text_encoder/model.safetensors")],
    "cosmos2_5": [("dit", "", "transformer/diffusion_pytorch_model.safetensors"),
                  ("vae", "", "vae/diffusion_pytorch_model.safetensors"),
                  ("text_encoder", "", "text_encoder/model.safetensors")],
    "cosmos3": [("vae", "", "vae/diffusion_pytorch_model.safetensors")],
    "hunyuan_video": [
        ("dit", "", "hunyuan-video-t2v-720p/transformers/mp_rank_00_model_states.pt"),
        ("vae", "", "hunyuan-video-t2v-720p/vae/pytorch_model.pt"),
        ("text_encoder", "llm", "text_encoder"),     # the folder: weights, config, tokenizer
        ("text_encoder", "clip", "text_encoder_2/model.safetensors")],
    "hunyuan_video1_5-i2v": [
        ("dit", "", "transformer/480p_i2v_distilled/diffusion_pytorch_model.safetensors"),
        ("vae", "", "vae/diffusion_pytorch_model.safetensors"),
        ("text_encoder", "llm", "text_encoder/llm/model.safetensors"),
        ("text_encoder", "byt5", "text_encoder/Glyph-SDXL-v2/checkpoints/byt5_model.pt"),
        ("image_encoder", "", "vision_encoder/siglip/image_encoder/model.safetensors")],
    "ltx_video": [("dit", "", "ltxv-tiny-0.9.8.safetensors"),
                  ("text_encoder", "", "text_encoder")],
    "ltx2_5": [("dit", "", "ltx-2.3-22b-dev.safetensors"),
               ("text_encoder", "", "gemma-3-12b-it-qat-q4_0-unquantized")],
    "ltx2_5-2.5": [("dit", "", None), ("vae", "", "vae/ltx-2.5-video-vae-bf16.safetensors"),
                   ("text_encoder", "", None)],
}


@pytest.mark.parametrize("name", FAMILY_CASES)
def test_every_option_from_elsewhere(name, tmp_path):
    """Every declared option's file (or folder) moved out of the demo release: the release
    takes it from where it now lies, and every component of it verifies 1:1."""
    mod = demo.family(name)
    model_type = getattr(mod, "MODEL_TYPE", name)
    folder = tmp_path / mod.FOLDER
    mod.write(folder)
    given: dict = {}
    moved = {}
    for option, sel, rel in FAMILY_CASES[name]:
        rel = rel or dict(mod.COMPONENTS)[option]
        if option == "dit" and name == "ltx2_5-2.5":
            rel = mod.DIT
        if option == "text_encoder" and name == "ltx2_5-2.5":
            rel = mod.TEXT
        if rel == "ltx-2.3-22b-dev.safetensors":
            rel = mod.SINGLE
        path = _move(folder, rel, tmp_path / "elsewhere")
        if sel:
            given.setdefault(option, {})[sel] = path
        else:
            given[option] = path
        moved[(option, sel)] = path
    module = pipeline_family(model_type)
    variant = "480p_i2v_distilled" if name == "hunyuan_video1_5-i2v" else None
    release = overrides.inspect(module, folder, variant=variant, components=given)
    keys = overrides.declared(module)
    for (option, sel), path in moved.items():
        key = keys[option][sel]
        got = Path(release.files[key])
        assert got == path or got.parent == path, (key, got, path)
    for key, spec in release.specs.items():
        base.verify_component(spec, release.files[key], release.configs[key])


# ----------------------------------------------------------------------------- diffusers folders
#: The authors' UMT5 names -> transformers' ``UMT5EncoderModel`` names (every block keeps its
#: own relative-position table).
_FF = r"encoder.block.\1.layer.1.DenseReluDense."
_UMT5_NAMES = ((r"^token_embedding\.", "shared."), (r"^norm\.", "encoder.final_layer_norm."),
               (r"^blocks\.(\d+)\.pos_embedding\.embedding\.",
                r"encoder.block.\1.layer.0.SelfAttention.relative_attention_bias."),
               (r"^blocks\.(\d+)\.attn\.", r"encoder.block.\1.layer.0.SelfAttention."),
               (r"^blocks\.(\d+)\.norm1\.", r"encoder.block.\1.layer.0.layer_norm."),
               (r"^blocks\.(\d+)\.norm2\.", r"encoder.block.\1.layer.1.layer_norm."),
               (r"^blocks\.(\d+)\.ffn\.gate\.0\.", _FF + "wi_0."),
               (r"^blocks\.(\d+)\.ffn\.fc1\.", _FF + "wi_1."),
               (r"^blocks\.(\d+)\.ffn\.fc2\.", _FF + "wo."))


def write_wan_diffusers(authors: Path, out: Path) -> None:
    """The Wan2.1 demo release as a diffusers ``WanPipeline`` folder, written by diffusers
    and transformers themselves: the DiT and VAE through diffusers' own converters
    (``convert_wan_transformer_to_diffusers`` / ``convert_wan_vae_to_diffusers``) into
    ``WanTransformer3DModel`` / ``AutoencoderKLWan`` (strict loads) and ``save_pretrained``;
    UMT5 renamed into a ``UMT5EncoderModel`` (strict load) and saved; the tokenizer copied."""
    import re

    import safetensors.torch
    import torch
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from diffusers.loaders.single_file_utils import (convert_wan_transformer_to_diffusers,
                                                     convert_wan_vae_to_diffusers)
    from transformers import UMT5Config, UMT5EncoderModel

    from vidax.pipelines import wan2_1

    configs = wan2_1.tiny_configs("t2v")
    cfg, vcfg, tcfg = configs["dit"], configs["vae"], configs["text_encoder"]
    dit = WanTransformer3DModel(
        patch_size=cfg.patch_size, num_attention_heads=cfg.num_heads,
        attention_head_dim=cfg.head_dim, in_channels=cfg.in_dim, out_channels=cfg.out_dim,
        text_dim=cfg.text_dim, freq_dim=cfg.freq_dim, ffn_dim=cfg.ffn_dim,
        num_layers=cfg.num_layers, cross_attn_norm=cfg.cross_attn_norm,
        qk_norm="rms_norm_across_heads", eps=cfg.eps)
    dit.load_state_dict(convert_wan_transformer_to_diffusers(safetensors.torch.load_file(
        authors / "diffusion_pytorch_model.safetensors")), strict=True)
    dit.save_pretrained(out / "transformer")
    vae = AutoencoderKLWan(base_dim=vcfg.dim, z_dim=vcfg.z_dim, dim_mult=list(vcfg.dim_mult),
                           num_res_blocks=vcfg.num_res_blocks,
                           temperal_downsample=list(vcfg.temporal_downsample),
                           latents_mean=list(vcfg.latents_mean),
                           latents_std=list(vcfg.latents_std))
    vae.load_state_dict(convert_wan_vae_to_diffusers(torch.load(authors / "Wan2.1_VAE.pth")),
                        strict=True)
    vae.save_pretrained(out / "vae")
    t5 = UMT5EncoderModel(UMT5Config(
        vocab_size=tcfg.vocab_size, d_model=tcfg.dim, d_kv=tcfg.head_dim, d_ff=tcfg.dim_ffn,
        num_layers=tcfg.num_layers, num_heads=tcfg.num_heads,
        relative_attention_num_buckets=tcfg.num_buckets,
        relative_attention_max_distance=tcfg.max_distance, feed_forward_proj="gated-gelu",
        layer_norm_epsilon=tcfg.eps, is_encoder_decoder=False))
    state = {}
    for key, value in torch.load(authors / "models_t5_umt5-xxl-enc-bf16.pth").items():
        for pattern, repl in _UMT5_NAMES:
            key = re.sub(pattern, repl, key)
        state[key] = value
    state["encoder.embed_tokens.weight"] = state["shared.weight"]
    t5.load_state_dict(state, strict=True)
    t5.to(torch.bfloat16).save_pretrained(out / "text_encoder")
    shutil.copytree(authors / "google" / "umt5-xxl", out / "tokenizer")
    (out / "model_index.json").write_text(json.dumps({
        "_class_name": "WanPipeline", "_diffusers_version": "0.42.1",
        "scheduler": ["diffusers", "UniPCMultistepScheduler"],
        "text_encoder": ["transformers", "UMT5EncoderModel"],
        "tokenizer": ["transformers", "T5TokenizerFast"],
        "transformer": ["diffusers", "WanTransformer3DModel"], "transformer_2": [None, None],
        "vae": ["diffusers", "AutoencoderKLWan"]}))


@pytest.mark.slow
def test_wan_diffusers_folder_makes_the_authors_video(wan21, tmp_path):
    """A Wan2.1 diffusers folder of the demo's weights (converted by diffusers' own
    converters) makes the authors' folder's video, exactly; and takes overrides too."""
    intact, _, moved = wan21
    folder = tmp_path / "Wan2.1-T2V-tiny-Diffusers"
    write_wan_diffusers(intact, folder)
    reference = vidax.pipeline("wan2_1", intact, precision="fp32")("a red fox", **RUN)
    pipe = vidax.pipeline("wan2_1", folder, precision="fp32")
    assert {k: s.layout for k, s in pipe.release.specs.items()} == {
        "dit": "diffusers", "vae": "diffusers", "text_encoder": "transformers"}
    assert np.array_equal(pipe("a red fox", **RUN), reference)
    # the authors' UMT5 file in place of the folder's text_encoder/
    (folder / "text_encoder" / "model.safetensors").unlink()
    pipe = vidax.pipeline("wan2_1", folder, precision="fp32", text_encoder=moved["text_encoder"])
    assert pipe.release.specs["text_encoder"].layout == "original"
    assert np.array_equal(pipe("a red fox", **RUN), reference)
    # Wan2.2 A14B as diffusers writes it: transformer/ (high noise) and transformer_2/ (low
    # noise), boundary_ratio in model_index.json; here both experts are the demo's DiT, against
    # the authors' A14B layout of the same files
    authors = tmp_path / "A14B"
    for expert in (HIGH, LOW):
        (authors / expert).mkdir(parents=True)
        for name in ("diffusion_pytorch_model.safetensors", "config.json"):
            shutil.copy(intact / name, authors / expert / name)
    for name in ("Wan2.1_VAE.pth", "models_t5_umt5-xxl-enc-bf16.pth"):
        shutil.copy(intact / name, authors / name)
    shutil.copytree(intact / "google", authors / "google")
    shutil.copytree(folder / "transformer", folder / "transformer_2")
    index = json.loads((folder / "model_index.json").read_text())
    index.update(transformer_2=index["transformer"], boundary_ratio=0.875)
    (folder / "model_index.json").write_text(json.dumps(index))
    reference = vidax.pipeline("wan2_2", authors, precision="fp32")("a red fox", **A14B_RUN)
    pipe = vidax.pipeline("wan2_2", folder, precision="fp32", text_encoder=moved["text_encoder"])
    assert sorted(pipe.release.specs) == sorted([HIGH, LOW, "vae", "text_encoder"])
    assert pipe.release.defaults.boundary == 0.875
    assert np.array_equal(pipe("a red fox", **A14B_RUN), reference)
    with pytest.raises(VidaxError, match="Wan2.2 A14B: run vidax generate wan2_2"):
        vidax.pipeline("wan2_1", folder)


def _diffusers_folder(folder: Path, class_name: str, parts: dict) -> Path:
    folder.mkdir(parents=True)
    (folder / "model_index.json").write_text(json.dumps({"_class_name": class_name, **parts}))
    return folder


def test_diffusers_folder_names_what_lacks_a_layout(tmp_path):
    folder = _diffusers_folder(tmp_path / "LTX-Video-Diffusers", "LTXPipeline", {
        "transformer": ["diffusers", "LTXVideoTransformer3DModel"],
        "vae": ["diffusers", "AutoencoderKLLTXVideo"],
        "text_encoder": ["transformers", "T5EncoderModel"],
        "tokenizer": ["transformers", "T5TokenizerFast"], "scheduler": ["diffusers", "X"]})
    with pytest.raises(VidaxError) as e:
        vidax.pipeline("ltx_video", folder)
    msg = " ".join(str(e.value).split())
    assert "diffusers LTXPipeline folder" in msg
    assert ("no diffusers layout of transformer/ (LTXVideoTransformer3DModel), vae/ "
            "(AutoencoderKLLTXVideo) (it has those of text_encoder/)") in msg, msg


def test_wan_diffusers_folder_missing_files_are_listed(tmp_path):
    folder = _diffusers_folder(tmp_path / "Wan-Diffusers", "WanPipeline", {
        "transformer": ["diffusers", "WanTransformer3DModel"],
        "vae": ["diffusers", "AutoencoderKLWan"],
        "text_encoder": ["transformers", "UMT5EncoderModel"]})
    with pytest.raises(VidaxError, match=r"missing transformer/config.json"):
        vidax.pipeline("wan2_1", folder)


def test_diffusers_folder_of_another_family(tmp_path, capsys):
    folder = _diffusers_folder(tmp_path / "CogVideoX-2b", "CogVideoXPipeline", {})
    rc = cli.main(["generate", "wan2_2", "--checkpoint-dir", str(folder), *CLI_RUN,
                   "--out", str(tmp_path / "x.mp4")])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 1 and "not a wan2_2 release: vidax generate cogvideox" in err, err
    other = _diffusers_folder(tmp_path / "SD", "StableDiffusionPipeline", {})
    with pytest.raises(VidaxError, match="none of vidax's pipelines runs it"):
        vidax.pipeline("ltx_video", other)


@pytest.mark.parametrize("name", ["cogvideox", "cosmos2_5", "cosmos3"])
def test_diffusers_folders_of_families_that_read_them(name, tmp_path):
    """The families whose pipeline reads diffusers' layout take their diffusers folder
    (model_index.json) as it is."""
    mod = demo.family(name)
    folder = tmp_path / mod.FOLDER
    mod.write(folder)
    assert overrides.diffusers_class(folder)
    release = overrides.inspect(pipeline_family(name), folder)
    assert release.specs["dit"].layout == "diffusers"
