"""The Cosmos3 pipeline (vidax.pipelines.cosmos3) against diffusers 0.42.1's
``Cosmos3OmniPipeline`` on a tiny release written by the reference classes' ``save_pretrained``:

* ``Cosmos3OmniTransformer`` at tiny Nano- and Edge-shaped configs (``Cosmos3DiTConfig.tiny``,
  with the sound / action heads as released), random values in every tensor, saved sharded
  (shards + index);
* ``AutoencoderKLWan`` at a tiny Wan2.2 config (residual, 2x2 patch, z 8 = the DiT's
  channels), random values;
* ``UniPCMultistepScheduler`` with the converter's settings (cosmos-framework
  ``scripts/_convert_model_to_diffusers.py``: Karras + flow sigmas, sigma_max 200,
  sigma_min 0.147);
* tiny byte-level tokenizers (``vidax.demo.common.byte_level_tokenizer``, Qwen2's
  pre-tokenizer) carrying the real special tokens, with Qwen3-VL's chat template reduced to the
  branches the pipeline reaches (text system + user turns, the generation prompt).

diffusers runs from the same noise (its ``randn_tensor`` returns it) with
``output_type="latent"``; the final latents are compared. Bound: float32, "highest" matmul
precision, max |vidax - diffusers| <= 1e-4 x std(diffusers).
"""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest

from tests.parity import assert_fails, assert_parity, randomize
from vidax.errors import VidaxError
from vidax.models.cosmos3.config import Cosmos3DiTConfig
from vidax.pipelines import cosmos3 as c3

pytestmark = pytest.mark.slow

PROMPT = "A robot arm stacks red cubes on a table."
NEGATIVE = "blurry, static."
FRAMES, WIDTH, HEIGHT, STEPS, FPS = 9, 64, 32, 3, 16.0
LATENT = 8

#: Qwen/Qwen3-VL-8B-Instruct's chat template (as quoted, byte-identical to the Hub's, in an
#: NVIDIA cosmos-rl dataset module's ``QWEN3VL_INSTRUCT_CHAT_TEMPLATE``), reduced to the
#: branches ``tokenize_prompt`` reaches: no tools, string contents, system + user turns and
#: the generation prompt. Copied as data.
CHAT_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {{- messages[0].content }}\n"
    "    {{- '<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if message.role == \"user\" %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n")
QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
                 "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
                 "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                 "<|image_pad|>", "<|video_pad|>")


def _texts(kind: str):
    cond, uncond = c3.prompt_texts(PROMPT, NEGATIVE, frames=FRAMES, height=HEIGHT,
                                   width=WIDTH, fps=FPS)
    base = [c3.SYSTEM_PROMPT, "system user assistant"]
    # the Nano tokenizer learns more merges: its vocabulary outgrows the Edge DiT's
    return base + ([cond, uncond, PROMPT, NEGATIVE] if kind == "nano" else [])


def _tokenizer(folder, kind: str):
    from transformers import AutoTokenizer

    from vidax.demo.common import byte_level_tokenizer

    tok = byte_level_tokenizer(folder, _texts(kind), {"pad_token": "<|endoftext|>",
                                                      "eos_token": "<|im_end|>"},
                               tokens=QWEN_SPECIALS, config={"chat_template": CHAT_TEMPLATE},
                               qwen2=True)
    return tok.get_vocab_size(with_added_tokens=True), AutoTokenizer.from_pretrained(folder)


def _dit(cfg: Cosmos3DiTConfig, kind: str, seed: int):
    from tests.models.cosmos3.test_cosmos3_dit import _reference

    ref = _reference(cfg, kind)
    randomize(sorted(ref.named_parameters()), seed=seed)
    return ref


def _vae():
    from diffusers import AutoencoderKLWan

    rng = np.random.default_rng(3)
    ref = AutoencoderKLWan(
        base_dim=8, decoder_base_dim=12, z_dim=LATENT, is_residual=True, in_channels=12,
        out_channels=12, patch_size=2, scale_factor_spatial=16,
        latents_mean=[float(x) for x in rng.normal(0, 0.3, LATENT)],
        latents_std=[float(x) for x in rng.uniform(0.5, 2.0, LATENT)]).eval()
    randomize(sorted(ref.named_parameters()), seed=5)
    return ref


def _release(root, kind: str, vae, seed: int):
    """A Cosmos3 release folder written by diffusers' own pipeline ``save_pretrained``."""
    from diffusers import Cosmos3OmniPipeline, UniPCMultistepScheduler

    vocab, tokenizer = _tokenizer(root.parent / f"{root.name}_tokenizer", kind)
    cfg = dataclasses.replace(Cosmos3DiTConfig.tiny(kind), vocab_size=vocab,
                              latent_channel=LATENT)
    dit = _dit(cfg, kind, seed)
    scheduler = UniPCMultistepScheduler(use_karras_sigmas=True, use_flow_sigmas=True,
                                        prediction_type="flow_prediction", sigma_max=200.0,
                                        sigma_min=0.147)
    pipe = Cosmos3OmniPipeline(transformer=dit, text_tokenizer=tokenizer, vae=vae,
                               scheduler=scheduler, enable_safety_checker=False)
    pipe.save_pretrained(root)
    # the transformer sharded, with its index, as released
    (root / "transformer" / "diffusion_pytorch_model.safetensors").unlink()
    dit.save_pretrained(root / "transformer", max_shard_size="200KB")
    return SimpleNamespace(root=root, pipe=pipe, cfg=cfg, tokenizer=tokenizer)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    vae = _vae()
    return {kind: _release(tmp_path_factory.mktemp(f"cosmos3_{kind}"), kind, vae, seed)
            for seed, kind in ((11, "nano"), (12, "edge"))}


@pytest.fixture(scope="module")
def pipes(case):
    return {k: c3.Pipeline.from_release(c3.inspect_folder(r.root), precision="fp32")
            for k, r in case.items()}


def _noise(seed=0):
    t = (FRAMES - 1) // 4 + 1
    return np.random.default_rng(seed).standard_normal(
        (t, HEIGHT // 16, WIDTH // 16, LATENT)).astype(np.float32)


def diffusers_latents(pipe, noise, monkeypatch, output_type="latent", **kw):
    import torch
    from diffusers.pipelines.cosmos import pipeline_cosmos3_omni as mod

    given = torch.from_numpy(noise).permute(3, 0, 1, 2)[None].contiguous()
    monkeypatch.setattr(mod, "randn_tensor", lambda shape, **_: given.clone())
    with torch.no_grad():
        out = pipe(prompt=PROMPT, negative_prompt=NEGATIVE, num_frames=FRAMES, height=HEIGHT,
                   width=WIDTH, fps=FPS, num_inference_steps=STEPS, guidance_scale=6.0,
                   output_type=output_type, enable_safety_check=False, **kw)
    if output_type == "pt":   # [F, 3, H, W] in [0, 1]
        return out.video.permute(0, 2, 3, 1).numpy()
    return out.video[0].permute(1, 2, 3, 0).numpy()


def _ours(pipe, noise, **kw):
    request = pipe.request(PROMPT, negative_prompt=NEGATIVE, frames=FRAMES,
                           size=(WIDTH, HEIGHT), fps=FPS, steps=STEPS, **kw)
    return pipe.sample(request=dataclasses.replace(request, noise=noise))


def _image(seed=7, size=(HEIGHT, WIDTH)):
    return np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)


def _clip(n=7, seed=8, size=(HEIGHT, WIDTH)):
    return np.random.default_rng(seed).integers(0, 256, (n, *size, 3), dtype=np.uint8)


#: Nano's inputs at other sizes than the output (resized / cropped as diffusers does); Edge's
#: at the output size.
INPUT_SIZE = {"nano": (50, 90), "edge": (HEIGHT, WIDTH)}


# ----------------------------------------------------------------------------- the release
def test_inspect_folder(case):
    for r in case.values():
        release = c3.inspect_folder(r.root)
        assert release.variant == "tiny" and release.configs["dit"] == r.cfg
        assert release.files["dit"].name.endswith(".index.json")
        assert (r.root / "text_tokenizer" / "tokenizer.json").is_file()
        assert release.configs["scheduler"]["sigma_min"] == pytest.approx(0.147)


def test_tokens_are_the_pipelines(case):
    """``tokenize_prompt``'s ids, prompt and negative prompt, both tokenizers."""
    for r in case.values():
        ours = c3.PromptTokenizer(r.root / "text_tokenizer")
        cond, uncond = c3.prompt_texts(PROMPT, NEGATIVE, frames=FRAMES, height=HEIGHT,
                                       width=WIDTH, fps=FPS)
        ref = r.pipe.tokenize_prompt(PROMPT, NEGATIVE, num_frames=FRAMES, height=HEIGHT,
                                     width=WIDTH, fps=FPS)
        assert [ours.ids(cond).tolist(), ours.ids(uncond).tolist()] == [list(x) for x in ref]
        none = r.pipe.tokenize_prompt(PROMPT, None, num_frames=FRAMES, height=HEIGHT,
                                      width=WIDTH, fps=FPS)[1]
        texts = c3.prompt_texts(PROMPT, None, frames=FRAMES, height=HEIGHT, width=WIDTH,
                                fps=FPS)
        assert ours.ids(texts[1]).tolist() == list(none)


def test_image_preprocessing_is_diffusers():
    """``cover_crop`` against ``_preprocess_conditioning_image`` (downscales, upscales, the
    output size): equal but for rare rounding ties (a float32 sum landing within an ulp of
    .5), at most one level."""
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import (
        _preprocess_conditioning_image)

    rng, differ, total = np.random.default_rng(0), 0, 0
    for size in [(50, 90), (40, 40), (100, 30), (HEIGHT, WIDTH), (17, 200), (300, 500),
                 (20, 33), (61, 127)]:
        image = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
        ref = _preprocess_conditioning_image(image, HEIGHT, WIDTH)[0].permute(1, 2, 0).numpy()
        ours = c3.cover_crop(image, HEIGHT, WIDTH) / np.float32(127.5) - np.float32(1)
        diff = np.abs(ours - ref)
        assert diff.max() <= 1 / 127.5 + 1e-6, size
        differ, total = differ + int((diff > 1e-6).sum()), total + diff.size
    assert differ <= 2, (differ, total)


# ----------------------------------------------------------------------------- parity
@pytest.mark.parametrize("kind,task", [("nano", "text2world"), ("nano", "image2world"),
                                       ("nano", "video2world"), ("edge", "text2world"),
                                       ("edge", "image2world"), ("edge", "video2world")])
def test_latents_match_diffusers(case, pipes, kind, task, monkeypatch, record_property):
    from PIL import Image

    noise = _noise()
    kw, ref_kw = {}, {}
    if task == "image2world":
        kw["image"] = _image(size=INPUT_SIZE[kind])
        ref_kw["image"] = Image.fromarray(kw["image"])
    elif task == "video2world":
        kw["video"] = _clip(size=INPUT_SIZE[kind])
        ref_kw["video"] = [Image.fromarray(f) for f in kw["video"]]
    ours = _ours(pipes[kind], noise, **kw)
    ref = diffusers_latents(case[kind].pipe, noise, monkeypatch, **ref_kw)
    assert_parity(f"cosmos3 {kind} {task}", ours, ref, record_property)


def test_decoded_frames_match_diffusers(case, pipes, monkeypatch, record_property):
    """The Wan2.2 VAE with the release's latents_mean / latents_std: vidax's frames from its
    latents against diffusers' ``output_type="pt"`` frames (both in [0, 1])."""
    import jax.numpy as jnp

    noise, pipe = _noise(), pipes["nano"]
    latents = _ours(pipe, noise)
    with pipe._matmul_precision():
        frames = np.asarray(pipe.decode_latents(jnp.asarray(latents[None]))[0])
    ref = diffusers_latents(case["nano"].pipe, noise, monkeypatch, output_type="pt")
    assert_parity("cosmos3 decoded frames", frames / 2 + 0.5, ref, record_property)
    with pipe._matmul_precision():   # negative control: the latent statistics left out
        raw = np.asarray(pipe.vae.decode(jnp.asarray(latents[None]), normalized=False)[0])
    assert_fails("cosmos3 decoded without latents_mean/std", raw / 2 + 0.5, ref,
                 record_property)


def test_negative_control_template(case, pipes, monkeypatch, record_property):
    """vidax with the prompt tokenized without the duration / resolution sentences."""
    noise = _noise()
    pipe = pipes["nano"]
    ref = diffusers_latents(case["nano"].pipe, noise, monkeypatch)
    plain = c3.prompt_texts
    monkeypatch.setattr(c3, "prompt_texts", lambda p, n, **kw: (p, plain(p, n, **kw)[1]))
    assert_fails("cosmos3 without the template", _ours(pipe, noise), ref, record_property)


def test_negative_control_mask(case, pipes, monkeypatch, record_property):
    """image2world with the condition mask dropped (the image encoded, but no frame kept
    clean, every frame's velocity used)."""
    from PIL import Image

    noise, image = _noise(), _image()
    ref = diffusers_latents(case["nano"].pipe, noise, monkeypatch,
                            image=Image.fromarray(image))
    pipe = pipes["nano"]
    encode = pipe.encode_condition
    monkeypatch.setattr(pipe, "encode_condition",
                        lambda request: (encode(request)[0], 0 * encode(request)[1]))
    request = pipe.request(PROMPT, negative_prompt=NEGATIVE, frames=FRAMES,
                           size=(WIDTH, HEIGHT), fps=FPS, steps=STEPS, image=image)
    ours = pipe.sample(request=dataclasses.replace(request, noise=noise))
    assert_fails("cosmos3 without the condition mask", ours, ref, record_property)


def test_bfloat16_is_close(case, pipes):
    """The bf16 policy (bf16 DiT matmuls and prompt keys/values) runs and stays near fp32
    (measured 0.07 x std after 3 steps on the random tiny Nano)."""
    noise = _noise()
    bf16 = c3.Pipeline.from_release(c3.inspect_folder(case["nano"].root), precision="bf16")
    ours, ref = _ours(bf16, noise), _ours(pipes["nano"], noise)
    assert np.isfinite(ours).all() and np.abs(ours - ref).max() < 0.25 * ref.std()


# ----------------------------------------------------------------------------- bad input
def test_bad_input(case, pipes, tmp_path):
    pipe = pipes["nano"]
    kw = dict(frames=FRAMES, size=(WIDTH, HEIGHT))
    with pytest.raises(VidaxError, match="first 5 frames"):
        pipe.request(PROMPT, video=_clip(3), **kw)
    with pytest.raises(VidaxError, match="RGB image|uint8"):
        pipe.request(PROMPT, image=np.zeros((HEIGHT, WIDTH, 4), np.uint8), **kw)
    with pytest.raises(VidaxError, match="image"):
        pipe.request(PROMPT, image="not an image", **kw)
    # a Nano tokenizer with the Edge DiT
    import shutil

    mixed = tmp_path / "mixed"
    shutil.copytree(case["edge"].root, mixed)
    shutil.rmtree(mixed / "text_tokenizer")
    shutil.copytree(case["nano"].root / "text_tokenizer", mixed / "text_tokenizer")
    assert case["nano"].cfg.vocab_size > case["edge"].cfg.vocab_size
    with pytest.raises(VidaxError, match="not this release's tokenizer"):
        c3.inspect_folder(mixed)
    # a Cosmos-Predict2.5 folder is told apart by the DiT's _class_name
    predict = tmp_path / "predict2_5"
    (predict / "transformer").mkdir(parents=True)
    (predict / "transformer" / "config.json").write_text(
        json.dumps({"_class_name": "CosmosTransformer3DModel"}))
    with pytest.raises(VidaxError, match="Cosmos-Predict2.5 release, not a Cosmos3"):
        c3.inspect_folder(predict)
    # a tokenizer whose chat template is not ChatML
    config = mixed / "text_tokenizer" / "tokenizer_config.json"
    data = json.loads(config.read_text())
    data["chat_template"] = "{{ messages[0].content }}"
    config.write_text(json.dumps(data))
    for name in ("chat_template.jinja",):
        (mixed / "text_tokenizer" / name).unlink(missing_ok=True)
    with pytest.raises(VidaxError, match="not ChatML"):
        c3.PromptTokenizer(mixed / "text_tokenizer")
