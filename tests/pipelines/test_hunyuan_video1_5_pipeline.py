"""HunyuanVideo-1.5 text- and image-to-video (``vidax.pipelines.hunyuan_video1_5``) against
diffusers' ``HunyuanVideo15Pipeline`` / ``HunyuanVideo15ImageToVideoPipeline`` end to end.

Oracle: a tiny release in the authors' ``ckpts/`` layout written here by the reference code:

* four DiTs, ``transformer/{480p_t2v, 480p_t2v_distilled, 480p_i2v, 480p_i2v_step_distilled}``:
  random authors'-layout state dicts (``test_hunyuan_video1_5_dit.py``'s
  :func:`authors_state`, random values in every tensor) with a ``config.json`` of the tiny
  sizes; diffusers runs the same tensors through diffusers' own conversion
  (:func:`to_diffusers` of that module);
* the VAE: a random authors'-layout file (the VAE test's renames give diffusers' model);
* ``text_encoder/llm``: transformers' ``Qwen2_5_VLForConditionalGeneration`` (3 layers:
  ``hidden_states[-3]`` is the first layer's output) saved by its ``save_pretrained``, with
  a tiny byte-level ``tokenizer.json`` carrying Qwen's special tokens and Qwen2.5-VL-7B-
  Instruct's chat template (:data:`QWEN_CHAT_TEMPLATE`, copied as data);
* ``text_encoder/byt5-small`` + ``Glyph-SDXL-v2``: transformers' ``T5EncoderModel`` (its bare
  stack saved as ``byt5_model.pt``, as the authors' file is) widened by the color / font
  tokens of two small asset files in the real files' format, and ``ByT5Tokenizer``;
* ``vision_encoder/siglip``: transformers' ``SiglipVisionModel`` and ``SiglipImageProcessor``
  (a 28 px input) saved by their ``save_pretrained``.

diffusers runs it in float32 on the same initial noise (``output_type="latent"``); its
hard-coded ``crop_start`` of 108 (the real Qwen tokenizer's) is set to what the authors'
``calculate_crop_start`` finds with the tiny tokenizer, and its DiT's ``target_size`` to the
tiny bucket base (64). Measured: the final latents, max |diff| <= 1e-4 x std(reference), for
text-to-video with CFG 6 (3 steps, a prompt with two quoted strings, one of them Chinese:
byT5 runs), text-to-video CFG-distilled (guidance 1, one pass), image-to-video with CFG 6 and
the step-distilled DiT (MeanFlow, 4 steps). Negative controls: the crop start off by one, and
the MeanFlow ``t_r`` taken as the current timestep, must fail the bound.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import dataclasses  # noqa: E402
import json  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from tests.models.hunyuan_video1_5.test_hunyuan_video1_5_dit import authors_state, to_diffusers  # noqa: E402
from tests.models.hunyuan_video1_5.test_hunyuan_video1_5_vae import (  # noqa: E402
    _authors_keys, _diffusers_vae)
from tests.parity import assert_fails, assert_parity, randomize  # noqa: E402
from vidax.errors import VidaxError  # noqa: E402
from vidax.models.hunyuan_video.dit import REFINER_DEPTH  # noqa: E402
from vidax.models.hunyuan_video1_5.config import (HunyuanVideo15DiTConfig,  # noqa: E402
                                                  HunyuanVideo15VAEConfig)
from vidax.pipelines import hunyuan_video1_5 as hp  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

FRAMES, STEPS, MEANFLOW_STEPS, GUIDANCE = 5, 3, 4, 6.0
PROMPT = 'A neon sign reads "OPEN 24/7" above a door, a banner says “欢迎光临”'
TEXT = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1e6,
            rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]})
VISION_TOWER = dict(depth=1, hidden_size=32, intermediate_size=48, num_heads=2,
                    out_hidden_size=64, fullatt_block_indexes=[0])
BYT5 = dict(d_model=32, d_kv=16, d_ff=48, num_layers=2, num_heads=2, feed_forward_proj="gated-gelu",
            is_encoder_decoder=False, vocab_size=384)
SIGLIP = dict(hidden_size=24, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
              image_size=28, patch_size=7)
COLORS = {"white": 0, "black": 1, "red": 2}
FONTS = {"en-Montserrat-Regular": 0, "zh-SourceHanSans": 1}
VARIANTS = ("480p_t2v", "480p_t2v_distilled", "480p_i2v", "480p_i2v_step_distilled")

#: Qwen/Qwen2.5-VL-7B-Instruct's ``chat_template`` (its ``chat_template.json`` on the Hugging
#: Face Hub, as published with the model; the authors' tokenizer folder is that release's),
#: copied as data: what ``apply_chat_template`` renders in the reference.
QWEN_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture "
    "{{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video "
    "{{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def dit_config(variant: str) -> HunyuanVideo15DiTConfig:
    return dataclasses.replace(
        HunyuanVideo15DiTConfig.tiny(), text_states_dim=TEXT["hidden_size"],
        byt5_states_dim=BYT5["d_model"], vision_states_dim=SIGLIP["hidden_size"],
        use_meanflow=variant.endswith("step_distilled"), ideal_resolution="480p",
        ideal_task="i2v" if "_i2v" in variant else "t2v")


def _dit_config_json(cfg: HunyuanVideo15DiTConfig) -> dict:
    out = {"_class_name": "HunyuanVideo_1_5_DiffusionTransformer", "attn_mode": "flash",
           **{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def _write_json(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _qwen(root):
    import torch
    from transformers import AutoTokenizer, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from vidax.demo.common import byte_level_tokenizer

    folder = root / "text_encoder" / "llm"
    tok = byte_level_tokenizer(
        folder, [hp.SYSTEM_MESSAGE, PROMPT, hp.CROP_PROBE, "system user assistant", " "],
        {"pad_token": "<|endoftext|>", "eos_token": "<|im_end|>"},
        tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        config={"chat_template": QWEN_CHAT_TEMPLATE}, qwen2=True)
    text = {**TEXT, "vocab_size": tok.get_vocab_size(with_added_tokens=True)}
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(
        text_config=text, vision_config=VISION_TOWER, **text)).eval()
    randomize(sorted(model.state_dict().items()), seed=1)
    model.save_pretrained(folder)
    return model.model.language_model, AutoTokenizer.from_pretrained(folder)


def _byt5(root):
    import torch
    from transformers import ByT5Tokenizer, T5Config, T5EncoderModel

    small = root / "text_encoder" / "byt5-small"
    glyph = root / "text_encoder" / "Glyph-SDXL-v2"
    tokenizer = ByT5Tokenizer(extra_ids=125)
    tokenizer.save_pretrained(small)
    T5Config(**BYT5).to_json_file(small / "config.json")
    _write_json(glyph / "assets" / "color_idx.json", COLORS)
    _write_json(glyph / "assets" / "multilingual_10-lang_idx.json", FONTS)
    # the authors' add_special_token: colors, then fonts, as special tokens
    tokenizer.add_tokens([f"<color-{i}>" for i in range(len(COLORS))]
                         + [f"<{k[:2]}-font-{v}>" for k, v in FONTS.items()], special_tokens=True)
    model = T5EncoderModel(T5Config(**{**BYT5, "vocab_size": len(tokenizer)})).eval()
    randomize(sorted(model.state_dict().items()), seed=2)
    (glyph / "checkpoints").mkdir(parents=True)
    torch.save(model.encoder.state_dict(), glyph / "checkpoints" / "byt5_model.pt")
    return model, tokenizer


def _siglip(root):
    from transformers import SiglipImageProcessor, SiglipVisionConfig, SiglipVisionModel

    folder = root / "vision_encoder" / "siglip"
    model = SiglipVisionModel(SiglipVisionConfig(**SIGLIP)).eval()
    randomize(sorted(model.state_dict().items()), seed=3)
    model.save_pretrained(folder / "image_encoder")
    size = SIGLIP["image_size"]
    processor = SiglipImageProcessor(size={"height": size, "width": size})
    processor.save_pretrained(folder / "feature_extractor")
    return model, processor


def _vae(root):
    import torch
    from safetensors.torch import save_file

    cfg = HunyuanVideo15VAEConfig.tiny()
    ref = _diffusers_vae(cfg).eval()
    shapes = {k: v.shape for k, v in ref.state_dict().items()}
    names = _authors_keys(cfg, shapes)
    authors = {k: torch.empty(shapes[v]) for k, v in names.items()}
    randomize(sorted(authors.items()), seed=4)
    (root / "vae").mkdir()
    save_file(authors, root / "vae" / "diffusion_pytorch_model.safetensors")
    ref.load_state_dict({names[k]: v for k, v in authors.items()}, strict=True)
    _write_json(root / "vae" / "config.json", {
        "_class_name": "AutoencoderKLConv3D", "in_channels": 3, "out_channels": 3,
        "latent_channels": cfg.latent_channels, "block_out_channels": list(cfg.block_out_channels),
        "layers_per_block": cfg.layers_per_block, "ffactor_spatial": 16, "ffactor_temporal": 4,
        "downsample_match_channel": True, "upsample_match_channel": True,
        "scaling_factor": cfg.scaling_factor, "shift_factor": None})
    return ref


def _dits(root):
    from diffusers import HunyuanVideo15Transformer3DModel
    from safetensors.torch import save_file

    refs = {}
    for seed, variant in enumerate(VARIANTS):
        cfg = dit_config(variant)
        state = authors_state(cfg)
        randomize(sorted(state.items()), seed=10 + seed)
        folder = root / "transformer" / variant
        folder.mkdir(parents=True)
        save_file(state, folder / "diffusion_pytorch_model.safetensors")
        _write_json(folder / "config.json", _dit_config_json(cfg))
        model = HunyuanVideo15Transformer3DModel(
            in_channels=cfg.img_in_channels, out_channels=cfg.out_channels,
            num_attention_heads=cfg.heads_num, attention_head_dim=cfg.head_dim,
            num_layers=cfg.mm_double_blocks_depth, num_refiner_layers=REFINER_DEPTH,
            mlp_ratio=cfg.mlp_width_ratio, text_embed_dim=cfg.text_states_dim,
            text_embed_2_dim=cfg.byt5_states_dim, image_embed_dim=cfg.vision_states_dim,
            rope_theta=cfg.rope_theta, rope_axes_dim=cfg.rope_dim_list,
            target_size=hp.TINY_BUCKET_BASE, task_type=cfg.ideal_task,
            use_meanflow=cfg.use_meanflow)
        model.load_state_dict(to_diffusers(state), strict=True)
        refs[variant] = model.eval()
    return refs


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    root = tmp_path_factory.mktemp("hunyuan_video1_5_release")
    qwen, qwen_tok = _qwen(root)
    byt5, byt5_tok = _byt5(root)
    siglip, processor = _siglip(root)
    return SimpleNamespace(root=root, dits=_dits(root), vae=_vae(root), qwen=qwen,
                           qwen_tok=qwen_tok, byt5=byt5, byt5_tok=byt5_tok, siglip=siglip,
                           processor=processor)


def authors_crop_start(tokenizer) -> int:
    """The authors' ``TextEncoder.calculate_crop_start`` on their probe text, with
    transformers' tokenizer (what diffusers hard-codes as 108 for the real one)."""
    messages = [{"role": "system", "content": hp.SYSTEM_MESSAGE},
                {"role": "user", "content": hp.CROP_PROBE}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                        return_dict=True)["input_ids"]
    marker = tokenizer(hp.USER_MARKER, add_special_tokens=False)["input_ids"]
    for i in range(len(ids) - len(marker) + 1):
        if ids[i: i + len(marker)] == marker:
            return i + len(marker)
    return 0


def diffusers_latents(case, variant, noise, *, guidance, steps, shift, image=None,
                      size=None, crop=None):
    import torch
    from diffusers import (ClassifierFreeGuidance, FlowMatchEulerDiscreteScheduler,
                           HunyuanVideo15ImageToVideoPipeline, HunyuanVideo15Pipeline)

    parts = dict(text_encoder=case.qwen, tokenizer=case.qwen_tok, transformer=case.dits[variant],
                 vae=case.vae, scheduler=FlowMatchEulerDiscreteScheduler(shift=shift),
                 text_encoder_2=case.byt5, tokenizer_2=case.byt5_tok,
                 guider=ClassifierFreeGuidance(guidance_scale=guidance))
    if image is None:
        pipe = HunyuanVideo15Pipeline(**parts)
        kw = dict(height=size[1], width=size[0])
    else:
        from PIL import Image

        pipe = HunyuanVideo15ImageToVideoPipeline(**parts, image_encoder=case.siglip,
                                                   feature_extractor=case.processor)
        kw = dict(image=Image.fromarray(image))
    pipe.prompt_template_encode_start_idx = (authors_crop_start(case.qwen_tok) if crop is None
                                             else crop)
    with torch.no_grad():
        out = pipe(prompt=PROMPT, num_frames=FRAMES, num_inference_steps=steps,
                   latents=torch.from_numpy(noise[None]), output_type="latent", **kw)
    return out.frames[0].permute(1, 2, 3, 0).numpy()


@pytest.fixture(scope="module")
def pipes(case):
    return {v: hp.Pipeline.from_release(hp.inspect_folder(case.root, variant=v), precision="fp32")
            for v in VARIANTS}


def _noise(pipe, request, seed=0):
    t, h, w, c = request.latent_shape
    return np.random.default_rng(seed).standard_normal((c, t, h, w)).astype(np.float32)


def _image(height, width, seed=5):
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def test_crop_start_is_the_authors(case, pipes):
    assert pipes["480p_t2v"].crop_start == authors_crop_start(case.qwen_tok) > 0


@pytest.mark.parametrize("variant,guidance", [
    pytest.param("480p_t2v", GUIDANCE, marks=pytest.mark.slow), ("480p_t2v_distilled", 1.0)])
def test_t2v_latents_match_diffusers(case, pipes, variant, guidance, record_property):
    pipe = pipes[variant]
    request = pipe.request(PROMPT, frames=FRAMES, steps=STEPS)
    assert request.guidance_scale == guidance and request.shift == 5.0
    noise = _noise(pipe, request)
    ours = pipe.sample(request=dataclasses.replace(request, noise=noise.transpose(1, 2, 3, 0)))
    ref = diffusers_latents(case, variant, noise, guidance=guidance, steps=STEPS, shift=5.0,
                            size=request.size)
    assert_parity(f"hv15 {variant}", ours, ref, record_property)


def test_negative_control_crop_start(case, pipes, record_property):
    """diffusers with the template cropped one token later: the bound fails."""
    pipe = pipes["480p_t2v_distilled"]
    request = pipe.request(PROMPT, frames=FRAMES, steps=STEPS)
    noise = _noise(pipe, request)
    ours = pipe.sample(request=dataclasses.replace(request, noise=noise.transpose(1, 2, 3, 0)))
    ref = diffusers_latents(case, "480p_t2v_distilled", noise, guidance=1.0, steps=STEPS,
                            shift=5.0, size=request.size, crop=pipe.crop_start + 1)
    assert_fails("hv15 crop + 1", ours, ref, record_property)


@pytest.mark.parametrize("variant,guidance,steps,shift", [
    pytest.param("480p_i2v", GUIDANCE, STEPS, 5.0, marks=pytest.mark.slow),
    ("480p_i2v_step_distilled", 1.0, MEANFLOW_STEPS, 7.0)])
def test_i2v_latents_match_diffusers(case, pipes, variant, guidance, steps, shift,
                                     record_property):
    pipe = pipes[variant]
    height, width = hp.resolution_bucket(3, 4, hp.TINY_BUCKET_BASE)   # a 4:3 image's bucket
    image = _image(height, width)
    request = pipe.request(PROMPT, image=image, frames=FRAMES, steps=steps)
    assert request.size == (width, height) and request.shift == shift
    noise = _noise(pipe, request)
    ours = pipe.sample(request=dataclasses.replace(request, noise=noise.transpose(1, 2, 3, 0)))
    ref = diffusers_latents(case, variant, noise, guidance=guidance, steps=steps, shift=shift,
                            image=image)
    assert_parity(f"hv15 {variant}", ours, ref, record_property)


def test_negative_control_meanflow_t_r(case, pipes, record_property, monkeypatch):
    """``t_r`` = the current timestep (no interval) instead of the next: the bound fails."""
    pipe = pipes["480p_i2v_step_distilled"]
    height, width = hp.resolution_bucket(3, 4, hp.TINY_BUCKET_BASE)
    image = _image(height, width)
    request = pipe.request(PROMPT, image=image, frames=FRAMES, steps=MEANFLOW_STEPS)
    noise = _noise(pipe, request)
    ref = diffusers_latents(case, "480p_i2v_step_distilled", noise, guidance=1.0,
                            steps=MEANFLOW_STEPS, shift=7.0, image=image)
    monkeypatch.setattr(type(pipe), "step_inputs", lambda self, request, run, index, t: (
        run.model, np.float32(t), {"t_r": np.float32(t)}))
    ours = pipe.sample(request=dataclasses.replace(request, noise=noise.transpose(1, 2, 3, 0)))
    assert_fails("hv15 t_r = t", ours, ref, record_property)


def test_bad_input(case, pipes):
    t2v, i2v, steps = (pipes[v] for v in ("480p_t2v", "480p_i2v", "480p_i2v_step_distilled"))
    image = _image(48, 64)
    with pytest.raises(VidaxError, match="image-to-video: give the first frame"):
        i2v.request(PROMPT)
    with pytest.raises(VidaxError, match="text-to-video and takes no --image"):
        t2v.request(PROMPT, image=image)
    with pytest.raises(VidaxError, match="step-distilled .* for 12 or 8 or 4 steps"):
        steps.request(PROMPT, image=image, steps=50)
    with pytest.raises(VidaxError, match="reads no negative prompt"):
        pipes["480p_t2v_distilled"].request(PROMPT, negative_prompt="blurry")
    assert pipes["480p_t2v"].request(PROMPT, negative_prompt="blurry").negative_prompt
    sparse = dataclasses.replace(i2v.release, variant="720p_i2v_distilled_sparse")
    assert "dense attention" in hp.Pipeline(sparse).describe()
    with pytest.raises(VidaxError, match="super-resolution DiT"):
        hp.inspect_folder(case.root, variant="720p_sr_distilled")
    with pytest.raises(VidaxError, match="several DiTs"):
        hp.inspect_folder(case.root)
    with pytest.raises(VidaxError, match="no such DiT folder"):
        hp.inspect_folder(case.root, variant="720p_t2v")


def test_memory_is_checked_before_loading(case, monkeypatch):
    """The estimate (DiT step with CFG, the tiled decode) before any weight is read; an
    impossible size refused with the numbers."""
    from tests.pipelines.memory_checks import check_before_loading

    module = SimpleNamespace(Pipeline=hp.Pipeline, inspect_folder=lambda folder: (
        hp.inspect_folder(folder, variant="480p_i2v")))

    def make(release, size, frames):
        return hp.make_request("i2v", release.variant, PROMPT, image=_image(48, 64),
                               size=size, frames=frames or FRAMES, release=release)

    check_before_loading(module, case.root, make, monkeypatch)


def test_720p_decode_is_tiled():
    """121 frames at 1280x720 decode in the authors' 24 spatial tiles of 256 px over all 31
    latent frames (the memory estimate's chunk), not in one pass."""
    from vidax.models.hunyuan_video1_5.vae import tile_geometry

    tiles = tile_geometry((31, 45, 80), tiled=hp.AUTHORS_TILES)
    assert (tiles.count, tiles.latent, tiles.sample) == (24, (31, 16, 16), (121, 256, 256))
    assert tile_geometry((31, 45, 80)).count == 1
