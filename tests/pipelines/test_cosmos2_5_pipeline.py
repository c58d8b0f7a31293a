"""Cosmos-Predict2.5 text2world, image2world and video2world (``vidax.pipelines.cosmos2_5``)
against diffusers' ``Cosmos2_5_PredictBasePipeline`` end to end.

Oracle: a tiny diffusers-layout release written here by each component's own
``save_pretrained`` -- ``CosmosTransformer3DModel`` (random values in every tensor),
``AutoencoderKLWan`` (z 16, base width 8), transformers' ``Qwen2_5_VLForConditionalGeneration``
(3 layers of 64: ``full_concat`` gives 192 = the DiT's projection input), a tiny byte-level
``tokenizer.json`` with Qwen's special tokens and a chat template that renders Qwen2.5-VL's
text-only format -- and the scheduler the diffusers converter writes. diffusers runs it
(float32) with the same initial noise; vidax loads the folder with ``inspect_folder`` /
``Pipeline.from_release(precision="fp32")``.

Measured: the final latents (``output_type="latent"``), max |diff| <= 1e-4 x std(reference),
with guidance 7 (the batch-of-2 path) and 1 (diffusers then runs the prompt alone) over 3
steps; the Karras flow schedule (timesteps and
sigmas) against diffusers' scheduler exactly. Negative control: Wan's guidance convention
(``uncond + g (cond - uncond)``) in place of Cosmos' must fail the bound.

image2world (an image of another size than the output: the nearest-neighbour resize is part
of what is compared) and video2world (a 7-frame clip: its last 5 frames condition 2 latent
frames), guidance 7, 9 frames (3 latent frames, so some are generated), 3 steps: final latents
against diffusers' at the same bound. Negative control: the DiT's condition-mask channel left
at zero (everything else the same) must fail it.

The CLI writes an mp4 (image2world, the text encoder and tokenizer given with
``--text-encoder``); ``--text-encoder`` naming the release folder itself is refused (every
family takes a text encoder from elsewhere: tests/pipelines/test_component_overrides.py).

The diffusers reference's q/k RMSNorm eps is set to 1e-6 (the authors' value, what vidax uses
for every release; diffusers builds 1e-5: ``tests/models/cosmos2_5/test_cosmos2_5_dit.py``).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json  # noqa: E402
import types  # noqa: E402
import warnings  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from tests.parity import compare, randomize  # noqa: E402
from vidax.pipelines import cosmos2_5 as cp  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

FRAMES, WIDTH, HEIGHT, STEPS, GUIDANCE, SEQ_LEN = 5, 32, 16, 3, 7.0, 128
COND_FRAMES = 9   # image2world / video2world: 3 latent frames, 1 or 2 of them conditioning
TEXT = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1e6,
            rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]})
VISION = dict(depth=1, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64,
              fullatt_block_indexes=[0])
# Qwen2.5-VL's template restricted to what the pipeline sends (text-only content lists).
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% for c in m['content'] %}{{ c['text'] }}{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
PROMPT, NEGATIVE = "a red bus drives through snow", "blurry, static"


def _tokenizer(folder):
    """A byte-level BPE trained on a few sentences, with Qwen's special tokens added, saved
    by transformers (tokenizer.json + tokenizer_config.json with the chat template)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=280, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator([cp.SYSTEM_PROMPT, PROMPT, NEGATIVE, cp.NEGATIVE_PROMPT,
                                 "system user assistant"], trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<|endoftext|>",
                                  eos_token="<|im_end|>")
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(folder)
    return tok


class _NoGuardrail:
    def to(self, *_):
        return self

    def check_text_safety(self, _):
        return True


def _torchvision_stub():
    """diffusers' Cosmos forward resizes the padding mask with torchvision (absent here):
    nearest ``interpolate``, which is what torchvision does for NEAREST."""
    def resize(img, size, interpolation):
        return torch.nn.functional.interpolate(img, size=list(size), mode="nearest")
    return types.SimpleNamespace(functional=types.SimpleNamespace(resize=resize),
                                 InterpolationMode=types.SimpleNamespace(NEAREST="nearest"))


def _to_tensor_stub():
    """The pipeline's image2world path calls torchvision's ``to_tensor`` (absent here): uint8
    ``[H, W, 3]`` -> float ``[3, H, W]`` / 255, as torchvision does for arrays."""
    def to_tensor(image):
        return torch.from_numpy(np.asarray(image)).permute(2, 0, 1).float().div(255)
    return types.SimpleNamespace(transforms=types.SimpleNamespace(
        functional=types.SimpleNamespace(to_tensor=to_tensor)))


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    import diffusers.models.transformers.transformer_cosmos as cosmos_module
    import diffusers.pipelines.cosmos.pipeline_cosmos2_5_predict as pipeline_module
    from diffusers import AutoencoderKLWan, CosmosTransformer3DModel, UniPCMultistepScheduler
    from diffusers.pipelines.cosmos.pipeline_cosmos2_5_predict import (
        Cosmos2_5_PredictBasePipeline,
    )
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    root = tmp_path_factory.mktemp("cosmos2_5_release")
    torch.manual_seed(0)
    dit = CosmosTransformer3DModel(
        in_channels=17, out_channels=16, num_attention_heads=4, attention_head_dim=16,
        num_layers=2, mlp_ratio=4.0, text_embed_dim=32, adaln_lora_dim=16,
        max_size=(128, 240, 240), patch_size=(1, 2, 2), rope_scale=(1.0, 3.0, 3.0),
        concat_padding_mask=True, extra_pos_embed_type=None, use_crossattn_projection=True,
        crossattn_proj_in_channels=3 * 64, encoder_hidden_states_channels=32).eval()
    randomize(sorted(dit.named_parameters()), seed=1)
    dit.save_pretrained(root / "transformer")
    for block in dit.transformer_blocks:
        for attn in (block.attn1, block.attn2):
            attn.norm_q.eps = attn.norm_k.eps = 1e-6
    vae = AutoencoderKLWan(base_dim=8, z_dim=16).eval()
    randomize(sorted(vae.named_parameters()), seed=2)
    vae.save_pretrained(root / "vae")
    text = Qwen2_5_VLForConditionalGeneration(
        Qwen2_5_VLConfig(text_config=TEXT, vision_config=VISION)).eval()
    randomize(text.named_parameters(), seed=3)
    text.save_pretrained(root / "text_encoder")
    tokenizer = _tokenizer(root / "tokenizer")
    scheduler = UniPCMultistepScheduler(use_karras_sigmas=True, use_flow_sigmas=True,
                                        prediction_type="flow_prediction", sigma_max=200.0,
                                        sigma_min=0.01)
    pipe = Cosmos2_5_PredictBasePipeline(text_encoder=text, tokenizer=tokenizer,
                                         transformer=dit, vae=vae, scheduler=scheduler,
                                         safety_checker=_NoGuardrail())
    noise = np.random.default_rng(4).standard_normal(
        (16, (FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8)).astype(np.float32)
    # diffusers' pipeline truncates/pads to max_sequence_length; 512 would make the tiny
    # test slow, so both sides use 128 (the chat format of these prompts is shorter).
    cond_noise = np.random.default_rng(5).standard_normal(
        (16, (COND_FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8)).astype(np.float32)
    rng = np.random.default_rng(6)
    image = rng.integers(0, 256, (HEIGHT + 8, WIDTH + 8, 3), dtype=np.uint8)
    clip = rng.integers(0, 256, (7, HEIGHT + 8, WIDTH + 8, 3), dtype=np.uint8)
    conditioned = dict(prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH,
                       num_frames=COND_FRAMES, num_inference_steps=STEPS,
                       guidance_scale=GUIDANCE, latents=torch.from_numpy(cond_noise)[None],
                       output_type="latent", max_sequence_length=SEQ_LEN)
    with pytest.MonkeyPatch.context() as mp, torch.no_grad():
        mp.setattr(cosmos_module, "transforms", _torchvision_stub(), raising=False)
        mp.setattr(pipeline_module, "torchvision", _to_tensor_stub(), raising=False)
        image2world = pipe(image=image, **conditioned).frames
        # a float [F, H, W, 3] array in [0, 1]: diffusers' array path (resized like tensors)
        video2world = pipe(video=clip.astype(np.float32) / np.float32(255),
                           **conditioned).frames
        latents = pipe(prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH,
                       num_frames=FRAMES, num_inference_steps=STEPS, guidance_scale=GUIDANCE,
                       latents=torch.from_numpy(noise)[None], output_type="latent",
                       max_sequence_length=SEQ_LEN).frames
        # guidance 1: diffusers skips the negative prompt (do_classifier_free_guidance)
        unguided = pipe(prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH,
                        num_frames=FRAMES, num_inference_steps=STEPS, guidance_scale=1.0,
                        latents=torch.from_numpy(noise)[None], output_type="latent",
                        max_sequence_length=SEQ_LEN).frames
    return SimpleNamespace(root=root, noise=noise, scheduler=scheduler,
                           expected=latents[0].permute(1, 2, 3, 0).numpy(),
                           unguided=unguided[0].permute(1, 2, 3, 0).numpy(),
                           cond_noise=cond_noise, image=image, clip=clip,
                           image2world=image2world[0].permute(1, 2, 3, 0).numpy(),
                           video2world=video2world[0].permute(1, 2, 3, 0).numpy())


@pytest.fixture(scope="module")
def vidax_pipe(case):
    release = cp.inspect_folder(case.root)
    assert release.layout == "diffusers" and release.variant == "tiny"
    pipe = cp.Pipeline.from_release(release, precision="fp32")
    pipe.tokenizer.seq_len = SEQ_LEN
    return pipe


def test_schedule_is_diffusers(case):
    ours = cp.KarrasFlowUniPCScheduler(STEPS)
    case.scheduler.set_timesteps(STEPS)
    np.testing.assert_array_equal(ours.timesteps, case.scheduler.timesteps.numpy())
    np.testing.assert_array_equal(ours.sigmas, case.scheduler.sigmas.numpy())


@pytest.mark.parametrize("guidance", [pytest.param(GUIDANCE, marks=pytest.mark.slow), 1.0])
def test_latents_match_diffusers(case, vidax_pipe, guidance, record_property):
    request = cp.make_request("text2world", "tiny", PROMPT, negative_prompt=NEGATIVE,
                              frames=FRAMES, size=(WIDTH, HEIGHT), steps=STEPS,
                              guidance_scale=guidance, noise=case.noise)
    expected = case.expected if guidance > 1 else case.unguided
    stats = compare(f"cosmos2_5_text2world_latents_g{guidance:g}",
                    vidax_pipe.sample(request=request), expected, record_property)
    assert stats["max_abs_diff"] <= stats["bound"], stats


def test_negative_control_wan_guidance(case, vidax_pipe, record_property, monkeypatch):
    """``uncond + g (cond - uncond)`` (Wan's convention) must not pass. The pipeline becomes a
    subclass with that ``guide``: the sampling step is jitted per class, so it is traced
    anew."""
    class WanGuidance(cp.Pipeline):
        @staticmethod
        def guide(cond, uncond, scale):
            return uncond + scale * (cond - uncond)

    monkeypatch.setattr(vidax_pipe, "__class__", WanGuidance)
    request = cp.make_request("text2world", "tiny", PROMPT, negative_prompt=NEGATIVE,
                              frames=FRAMES, size=(WIDTH, HEIGHT), steps=STEPS,
                              guidance_scale=GUIDANCE, noise=case.noise)
    stats = compare("cosmos2_5_text2world_negative", vidax_pipe.sample(request=request),
                    case.expected, record_property)
    assert stats["max_abs_diff"] > stats["bound"], stats


def _conditioned_request(case, task):
    inputs = {"image": case.image} if task == "image2world" else {"video": case.clip}
    return cp.make_request(cp.RELEASE_TASK, "tiny", PROMPT, negative_prompt=NEGATIVE,
                           frames=COND_FRAMES, size=(WIDTH, HEIGHT), steps=STEPS,
                           guidance_scale=GUIDANCE, noise=case.cond_noise, **inputs)


@pytest.mark.parametrize("task", ["image2world", "video2world"])
def test_conditioned_latents_match_diffusers(case, vidax_pipe, task, record_property):
    request = _conditioned_request(case, task)
    assert request.task == task and request.condition.shape[0] == (1 if task == "image2world"
                                                                  else 5)
    stats = compare(f"cosmos2_5_{task}_latents", vidax_pipe.sample(request=request),
                    getattr(case, task), record_property)
    assert stats["max_abs_diff"] <= stats["bound"], stats


def test_negative_control_no_condition_mask(case, vidax_pipe, record_property, monkeypatch):
    """The condition-mask channel left at zero (clean frames, their timestep and the velocity
    replacement unchanged) must not pass. The pipeline becomes a subclass, so that the sampling
    step (jitted per class) traces the patched DiT instead of reusing the cached step."""
    from vidax.models.cosmos2_5.dit import CosmosDiT

    class Retraced(cp.Pipeline):
        pass

    original = CosmosDiT._condition_mask
    monkeypatch.setattr(CosmosDiT, "_condition_mask",
                        lambda self, mask, shape: original(self, None, shape))
    monkeypatch.setattr(vidax_pipe, "__class__", Retraced)
    stats = compare("cosmos2_5_image2world_negative",
                    vidax_pipe.sample(request=_conditioned_request(case, "image2world")),
                    case.image2world, record_property)
    assert stats["max_abs_diff"] > stats["bound"], stats


def test_cli_writes_mp4(case, tmp_path):
    """image2world from the CLI, the text encoder and its tokenizer in one folder given by
    ``--text-encoder`` (in place of the diffusers folder's text_encoder/ and tokenizer/)."""
    from PIL import Image

    from vidax import cli

    text = tmp_path / "reason1"
    text.mkdir()
    for src in [*(case.root / "text_encoder").iterdir(), case.root / "tokenizer" /
                "tokenizer.json"]:
        (text / src.name).symlink_to(src)
    release = tmp_path / "release"
    release.mkdir()
    for name in ("transformer", "vae"):
        (release / name).symlink_to(case.root / name)
    Image.fromarray(case.image).save(tmp_path / "first.png")
    out = tmp_path / "i2w.mp4"
    rc = cli.main(["generate", "cosmos2_5", "--checkpoint-dir", str(release), "--prompt",
                   PROMPT, "--image", str(tmp_path / "first.png"), "--text-encoder", str(text),
                   "--frames", "5", "--size", f"{WIDTH}x{HEIGHT}", "--steps", "2",
                   "--precision", "fp32", "--out", str(out)])
    assert rc == 0 and out.stat().st_size > 0


def test_cli_video2world_is_the_python_path(case, vidax_pipe, tmp_path, monkeypatch):
    """``vidax generate cosmos2_5 --video CLIP.mp4``: video2world from a clip file; the final
    latents the CLI decodes equal the Python path's on the same file and seed, exactly."""
    from vidax import cli
    from vidax.video import write_mp4

    clip = write_mp4(tmp_path / "clip.mp4", case.clip, fps=16)
    seen = []
    decode = cp.Pipeline.decode
    monkeypatch.setattr(cp.Pipeline, "decode",
                        lambda self, latents: seen.append(np.asarray(latents)) or decode(
                            self, latents))
    out = tmp_path / "v2w.mp4"
    rc = cli.main(["generate", "cosmos2_5", "--checkpoint-dir", str(case.root), "--prompt",
                   PROMPT, "--negative-prompt", NEGATIVE, "--video", str(clip), "--frames",
                   str(COND_FRAMES), "--size", f"{WIDTH}x{HEIGHT}", "--steps", str(STEPS),
                   "--guidance-scale", str(GUIDANCE), "--seed", "3", "--precision", "fp32",
                   "--out", str(out)])
    assert rc == 0 and out.stat().st_size > 0 and len(seen) == 1
    request = cp.make_request(cp.RELEASE_TASK, "tiny", PROMPT, negative_prompt=NEGATIVE,
                              frames=COND_FRAMES, size=(WIDTH, HEIGHT), steps=STEPS,
                              guidance_scale=GUIDANCE, seed=3, video=clip)
    assert request.task == "video2world"
    # the module's pipeline tokenizes to the reference's SEQ_LEN; the CLI to the release's
    monkeypatch.setattr(vidax_pipe.tokenizer, "seq_len", cp.TEXT_LEN)
    np.testing.assert_array_equal(seen[0], vidax_pipe.sample(request=request))


def test_cli_video_refused_elsewhere(tmp_path, capsys):
    from vidax import cli

    rc = cli.main(["generate", "wan2_1", "--checkpoint-dir", str(tmp_path), "--prompt", "x",
                   "--video", str(tmp_path / "c.mp4"), "--out", str(tmp_path / "x.mp4")])
    assert rc == 1 and "--video" in capsys.readouterr().err


def test_cli_text_encoder_of_the_release_folder_refused(tmp_path, capsys):
    from vidax import cli

    rc = cli.main(["generate", "wan2_1", "--checkpoint-dir", str(tmp_path), "--prompt", "x",
                   "--text-encoder", str(tmp_path), "--out", str(tmp_path / "x.mp4")])
    err = capsys.readouterr().err
    assert rc == 1 and "--text-encoder" in err and "release folder" in err


def test_errors(case, tmp_path):
    from vidax.errors import VidaxError

    with pytest.raises(VidaxError, match="text2world takes no --image"):
        cp.make_request("text2world", "tiny", PROMPT, image=case.image)
    with pytest.raises(VidaxError, match="image2world needs --image"):
        cp.make_request("image2world", "tiny", PROMPT)
    with pytest.raises(VidaxError, match="at least 5 frames"):
        cp.make_request(cp.RELEASE_TASK, "tiny", PROMPT, video=case.clip, frames=1)
    with pytest.raises(VidaxError, match="at least 5 frames .* got 3"):
        cp.make_request(cp.RELEASE_TASK, "tiny", PROMPT, video=case.clip[:3])
    with pytest.raises(VidaxError, match="Cosmos-Reason1-7B"):
        cp.inspect_folder(tmp_path)
    assert json.loads((case.root / "transformer" / "config.json").read_text())


@pytest.mark.parametrize("seq_len", [SEQ_LEN, 40])
def test_token_ids_are_the_chat_template(case, seq_len):
    """vidax's chat rendering + padding/truncation = transformers' ``apply_chat_template``
    as ``_get_prompt_embeds`` calls it (40: both prompts truncated)."""
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(case.root / "tokenizer")
    tokenizer = cp.chat_tokenizer(case.root / "tokenizer", seq_len=seq_len)
    with warnings.catch_warnings(record=True):     # seq_len 40 cuts both, and says so
        warnings.simplefilter("always")
        tokens = tokenizer([cp.chat_text(p) for p in (PROMPT, NEGATIVE)])
    ours, dropped = tokens.ids, tokens.dropped
    for row, prompt in enumerate([PROMPT, NEGATIVE]):
        messages = [{"role": "system", "content": [{"type": "text", "text": cp.SYSTEM_PROMPT}]},
                    {"role": "user", "content": [{"type": "text", "text": prompt}]}]
        ids = reference.apply_chat_template(
            messages, tokenize=True, add_generation_prompt=False, add_vision_id=False,
            max_length=seq_len, truncation=True, padding="max_length")
        ids = ids["input_ids"] if not isinstance(ids, list) else ids
        np.testing.assert_array_equal(ours[row], ids)
    assert (min(dropped) > 0) == (seq_len == 40)


def test_authors_layout_is_found(case, tmp_path, monkeypatch):
    """The authors' folder (``base/{pre,post}-trained/*_ema_bf16.pt``, ``tokenizer.pth``) with
    the text encoder given by the environment variable: size and stage identified from one
    tensor's shape, nothing else read. Stand-in files: only the DiT's patch embedding is real
    (2B width); the others are empty, which inspection never opens."""
    from vidax.errors import VidaxError

    release = tmp_path / "Cosmos-Predict2.5-2B"
    for stage in ("pre-trained", "post-trained"):
        (release / "base" / stage).mkdir(parents=True)
        torch.save({"net.x_embedder.proj.1.weight": torch.zeros(2048, 72, dtype=torch.bfloat16)},
                   release / "base" / stage / f"{stage}_ema_bf16.pt")
    (release / "tokenizer.pth").touch()
    reason1 = tmp_path / "Cosmos-Reason1-7B"
    reason1.mkdir()
    (reason1 / "model-00001-of-00005.safetensors").touch()
    (reason1 / "tokenizer.json").write_text((case.root / "tokenizer" / "tokenizer.json")
                                            .read_text())
    (reason1 / "config.json").write_text(json.dumps(
        {"model_type": "qwen2_5_vl", "vocab_size": 152064, "hidden_size": 3584,
         "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
         "num_key_value_heads": 4, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
         "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}))
    with pytest.raises(VidaxError, match=cp.TEXT_ENCODER_ENV):
        cp.inspect_folder(release)
    monkeypatch.setenv(cp.TEXT_ENCODER_ENV, str(reason1))
    found = cp.inspect_folder(release)
    assert (found.layout, found.variant) == ("original", "predict-2b-post-trained")
    assert found.files["dit"].parent.name == "post-trained"
    assert found.configs["dit"] == cp.CosmosDiTConfig.predict_2b()
    pre = cp.inspect_folder(release, "predict-2b-pre-trained")
    assert pre.files["dit"].parent.name == "pre-trained"
    # a text encoder of another width (the tiny one) is refused
    (reason1 / "config.json").write_text((case.root / "text_encoder" / "config.json")
                                         .read_text())
    with pytest.raises(VidaxError, match="not the text encoder of this release"):
        cp.inspect_folder(release, text_encoder_dir=reason1)


def test_memory_is_checked_before_loading(case, monkeypatch):
    from tests.pipelines.memory_checks import check_before_loading

    def make(release, size, frames):
        return cp.make_request("text2world", "tiny", PROMPT, frames=frames or FRAMES,
                               size=size or (WIDTH, HEIGHT), steps=STEPS,
                               guidance_scale=GUIDANCE)

    check_before_loading(cp, case.root, make, monkeypatch)
