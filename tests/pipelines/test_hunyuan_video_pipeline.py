"""HunyuanVideo 1.0 text-to-video (``vidax.pipelines.hunyuan_video``) against diffusers'
``HunyuanVideoPipeline`` end to end.

Oracle: a tiny release in the authors' ``ckpts/`` layout written here by the reference code:

* the DiT: a random authors'-layout state dict (``test_hunyuan_video_dit.py``'s
  :func:`authors_state`, random values in every tensor) saved as the release is
  (``{"module": sd}`` in ``mp_rank_00_model_states.pt``) plus a ``config.json`` of the tiny
  sizes; diffusers' pipeline runs the same tensors through diffusers' own converter
  (:func:`diffusers_model` of that module);
* the VAE: diffusers' ``AutoencoderKLHunyuanVideo`` (its names are the release's), its
  ``state_dict`` saved as ``pytorch_model.pt`` and its ``config.json``;
* the text encoders: transformers' ``LlamaModel`` (3 layers: ``hidden_states[-3]`` is then
  the first layer's output, so a final norm or a wrong layer shows) and ``CLIPTextModel`` (77
  positions), each ``save_pretrained`` with a tiny byte-level BPE ``tokenizer.json`` (Llama's
  header / BOS / pad special tokens; CLIP's start / end-of-text) saved by transformers.

diffusers runs it in float32 on the same initial noise with its default prompt template
(crop 95, 256 tokens, 2 layers skipped), embedded guidance 6.0, ``FlowMatchEulerDiscrete
Scheduler(shift=7.0)``, ``output_type="latent"``. Measured: the final latents over 3 steps,
max |diff| <= 1e-4 x std(reference); the schedule against diffusers' scheduler exactly; the
token ids and masks against transformers' tokenizers exactly. Negative control: the Llama
feature taken as ``hidden_states[-1]`` (final layer, final norm) must fail the bound. The CLI
writes an mp4.

True CFG: diffusers' same pipeline with ``negative_prompt`` and ``true_cfg_scale=3.0`` (its
two DiT calls per step, the embedded guidance in both) against vidax's ``[prompt,
negative]`` batch of 2, same bound. Negative controls: the guidance formula with the halves
swapped (``v_prompt + s (v_neg - v_prompt)``) must fail, and so must the no-CFG result (the
negative prompt ignored). The CLI takes ``--negative-prompt`` with ``--true-cfg-scale``.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import copy  # noqa: E402
import dataclasses  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from tests.models.hunyuan_video.test_hunyuan_video_dit import authors_state, diffusers_model  # noqa: E402
from tests.parity import assert_fails, assert_parity, compare, randomize  # noqa: E402
from vidax.models.hunyuan_video.dit import HunyuanVideoDiTConfig  # noqa: E402
from vidax.pipelines import hunyuan_video as hv  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

FRAMES, WIDTH, HEIGHT, STEPS, GUIDANCE = 5, 32, 32, 3, 6.0
LLAMA = dict(vocab_size=320, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
             rope_theta=5e5, max_position_embeddings=512)
CLIP = dict(vocab_size=320, hidden_size=24, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=2, max_position_embeddings=77)
PROMPT = "a red bus drives through snow at night"
#: Words of the tiny tokenizer's texts (a short negative: a different valid length).
NEGATIVE, TRUE_CFG = "snow at night", 3.0


def _tokenizer(folder, texts, specials, pad, template, **names):
    """A byte-level BPE trained on ``texts`` with ``specials``, the post-processor
    ``template`` (BOS / EOS), saved by transformers as a fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(texts, trainer)
    backend.post_processor = processors.TemplateProcessing(
        single=template, special_tokens=[(s, backend.token_to_id(s)) for s in specials
                                         if s in template])
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=pad, **names)
    tok.save_pretrained(folder)
    return tok


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    from diffusers import (
        AutoencoderKLHunyuanVideo,
        FlowMatchEulerDiscreteScheduler,
        HunyuanVideoPipeline,
    )
    from transformers import CLIPTextConfig, CLIPTextModel, LlamaConfig, LlamaModel

    root = tmp_path_factory.mktemp("hunyuan_video_release")
    dit_dir = root / hv.DIT_FOLDER
    (dit_dir / "transformers").mkdir(parents=True)
    cfg = dataclasses.replace(HunyuanVideoDiTConfig.tiny(), text_states_dim=LLAMA["hidden_size"],
                              text_states_dim_2=CLIP["hidden_size"])
    state = authors_state(cfg)
    randomize(state.items(), seed=0)
    torch.save({"module": {k: v.contiguous() for k, v in state.items()}},
               dit_dir / "transformers" / "mp_rank_00_model_states.pt")
    (dit_dir / "transformers" / "config.json").write_text(json.dumps(dataclasses.asdict(cfg)))
    transformer = diffusers_model(cfg, state)

    torch.manual_seed(0)
    vae = AutoencoderKLHunyuanVideo(block_out_channels=(8, 16, 32, 32), latent_channels=16,
                                    norm_num_groups=4).eval()
    randomize(sorted(vae.named_parameters()), seed=1)
    (dit_dir / "vae").mkdir()
    torch.save({k: v.contiguous() for k, v in vae.state_dict().items()},
               dit_dir / "vae" / "pytorch_model.pt")
    vae.save_config(dit_dir / "vae")

    texts = [hv.PROMPT_TEMPLATE.format(PROMPT), PROMPT, "system user"]
    tokenizer = _tokenizer(
        root / "text_encoder", texts,
        ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<pad>"],
        "<pad>", "<|begin_of_text|> $A", bos_token="<|begin_of_text|>")
    llama = LlamaModel(LlamaConfig(**LLAMA, pad_token_id=tokenizer.pad_token_id)).eval()
    randomize(llama.named_parameters(), seed=2)
    llama.save_pretrained(root / "text_encoder")
    tokenizer_2 = _tokenizer(root / "text_encoder_2", texts,
                             ["<|startoftext|>", "<|endoftext|>"], "<|endoftext|>",
                             "<|startoftext|> $A <|endoftext|>", bos_token="<|startoftext|>",
                             eos_token="<|endoftext|>")
    clip = CLIPTextModel(CLIPTextConfig(**CLIP, bos_token_id=tokenizer_2.bos_token_id,
                                        eos_token_id=tokenizer_2.eos_token_id,
                                        pad_token_id=tokenizer_2.pad_token_id)).eval()
    randomize(clip.named_parameters(), seed=3)
    clip.save_pretrained(root / "text_encoder_2")

    scheduler = FlowMatchEulerDiscreteScheduler(shift=7.0)
    pipe = HunyuanVideoPipeline(text_encoder=llama, tokenizer=tokenizer,
                                transformer=transformer, vae=vae, scheduler=scheduler,
                                text_encoder_2=clip, tokenizer_2=tokenizer_2)
    noise = np.random.default_rng(4).standard_normal(
        (16, (FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8)).astype(np.float32)
    with torch.no_grad():
        latents = pipe(prompt=PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                       num_inference_steps=STEPS, guidance_scale=GUIDANCE,
                       latents=torch.from_numpy(noise)[None], output_type="latent").frames
        cfg_latents = pipe(prompt=PROMPT, negative_prompt=NEGATIVE, true_cfg_scale=TRUE_CFG,
                           height=HEIGHT, width=WIDTH, num_frames=FRAMES,
                           num_inference_steps=STEPS, guidance_scale=GUIDANCE,
                           latents=torch.from_numpy(noise)[None], output_type="latent").frames
    return SimpleNamespace(root=root, noise=noise, scheduler=scheduler, tokenizer=tokenizer,
                           tokenizer_2=tokenizer_2,
                           expected=latents[0].permute(1, 2, 3, 0).numpy(),
                           expected_cfg=cfg_latents[0].permute(1, 2, 3, 0).numpy())


@pytest.fixture(scope="module")
def vidax_pipe(case):
    release = hv.inspect_folder(case.root)
    assert release.variant == "tiny"
    return hv.Pipeline.from_release(release, precision="fp32")


def _request(case):
    return hv.make_request("t2v", "tiny", PROMPT, frames=FRAMES, size=(WIDTH, HEIGHT),
                           steps=STEPS, guidance_scale=GUIDANCE, noise=case.noise)


def test_schedule_is_diffusers(case):
    timesteps, sigmas = hv.flow_match_schedule(STEPS, 7.0)
    case.scheduler.set_timesteps(sigmas=np.linspace(1.0, 0.0, STEPS + 1)[:-1])
    np.testing.assert_array_equal(timesteps, case.scheduler.timesteps.numpy())
    np.testing.assert_array_equal(sigmas, case.scheduler.sigmas.numpy())


def test_token_ids_are_transformers(case, vidax_pipe):
    prompt = hv.PROMPT_TEMPLATE.format(PROMPT)
    tokens = vidax_pipe.tokenizer([prompt])
    ref = case.tokenizer(prompt, max_length=hv.TEXT_LEN + hv.CROP_START, padding="max_length",
                         truncation=True)
    np.testing.assert_array_equal(tokens.ids[0], ref["input_ids"])
    np.testing.assert_array_equal(tokens.mask[0], ref["attention_mask"])
    tokens_2 = vidax_pipe.tokenizer_2([PROMPT])
    ref_2 = case.tokenizer_2(PROMPT, max_length=hv.CLIP_LEN, padding="max_length",
                             truncation=True)
    np.testing.assert_array_equal(tokens_2.ids[0], ref_2["input_ids"])
    assert tokens.dropped == (0,) and tokens_2.dropped == (0,)
    # a prompt past CLIP's 77 tokens is cut as transformers cuts it (its EOS kept), and said
    long = " ".join([PROMPT] * 40)
    with pytest.warns(UserWarning, match="were dropped"):
        cut = vidax_pipe.tokenizer_2([long])
    ref_cut = case.tokenizer_2(long, max_length=hv.CLIP_LEN, padding="max_length",
                               truncation=True)
    np.testing.assert_array_equal(cut.ids[0], ref_cut["input_ids"])
    assert cut.dropped[0] > 0


def test_latents_match_diffusers(case, vidax_pipe, record_property):
    stats = compare("hunyuan_video_t2v_latents", vidax_pipe.sample(request=_request(case)),
                    case.expected, record_property)
    assert stats["max_abs_diff"] <= stats["bound"], stats


def test_negative_control_last_hidden_state(case, vidax_pipe, record_property, monkeypatch):
    """The Llama feature taken after the last layer and the final norm (``hidden_states[-1]``)
    instead of ``hidden_states[-3]`` must not pass."""
    from flax import nnx

    @functools.partial(jax.jit, static_argnums=0)
    def last_layer(graphdef, params, ids, mask):
        states = nnx.merge(graphdef, params)(ids, mask)[-1]
        return states[:, hv.CROP_START:].astype(jax.numpy.float32)

    monkeypatch.setattr(hv, "_encode_llama", last_layer)
    stats = compare("hunyuan_video_t2v_negative", vidax_pipe.sample(request=_request(case)),
                    case.expected, record_property)
    assert stats["max_abs_diff"] > stats["bound"], stats


def _cfg_request(case):
    return hv.make_request("t2v", "tiny", PROMPT, negative_prompt=NEGATIVE,
                           true_cfg_scale=TRUE_CFG, frames=FRAMES, size=(WIDTH, HEIGHT),
                           steps=STEPS, guidance_scale=GUIDANCE, noise=case.noise)


def test_true_cfg_matches_diffusers(case, vidax_pipe, record_property):
    """True CFG with a negative prompt beside the embedded guidance; the no-CFG latents (the
    negative prompt ignored) must not pass the same bound."""
    request = _cfg_request(case)
    assert request.true_cfg and vidax_pipe.dit_geometry(request).batch == 2
    assert_parity("hunyuan_video_true_cfg_latents", vidax_pipe.sample(request=request),
                  case.expected_cfg, record_property)
    assert_fails("hunyuan_video_true_cfg_negative_ignored", case.expected, case.expected_cfg,
                 record_property)


def test_true_cfg_negative_control_swapped_guide(case, vidax_pipe, record_property):
    """``v_prompt + s (v_neg - v_prompt)`` (the halves swapped) must not pass. A subclass: the
    jitted step is cached per pipeline class."""
    class Swapped(hv.Pipeline):
        @staticmethod
        def guide(cond, uncond, scale):
            return cond + scale * (uncond - cond)

    pipe = copy.copy(vidax_pipe)
    pipe.__class__ = Swapped
    assert_fails("hunyuan_video_true_cfg_swapped", pipe.sample(request=_cfg_request(case)),
                 case.expected_cfg, record_property)


def test_true_cfg_options():
    from vidax.errors import VidaxError

    off = hv.make_request("t2v", "tiny", PROMPT)
    assert not off.true_cfg and off.negative_prompt is None and off.true_cfg_scale == 1.0
    # the authors' default negative prompt when none (or an empty one) is given
    for negative in (None, ""):
        on = hv.make_request("t2v", "tiny", PROMPT, true_cfg_scale=2, negative_prompt=negative)
        assert on.true_cfg and on.negative_prompt == hv.NEGATIVE_PROMPT
    with pytest.raises(VidaxError, match="only with true CFG: give --true-cfg-scale"):
        hv.make_request("t2v", "tiny", PROMPT, negative_prompt="blurry")
    with pytest.raises(VidaxError, match="true_cfg_scale .* must be 1"):
        hv.make_request("t2v", "tiny", PROMPT, true_cfg_scale=0.5)
    with pytest.raises(VidaxError, match="true_cfg_scale must be a number"):
        hv.make_request("t2v", "tiny", PROMPT, true_cfg_scale="x")


def test_cli_writes_mp4(case, tmp_path):
    """With true CFG: ``--negative-prompt`` and ``--true-cfg-scale`` reach make_request."""
    from vidax import cli

    out = tmp_path / "t2v.mp4"
    rc = cli.main(["generate", "hunyuan_video", "--checkpoint-dir", str(case.root), "--prompt",
                   PROMPT, "--negative-prompt", NEGATIVE, "--true-cfg-scale", "3",
                   "--frames", "5", "--size", f"{WIDTH}x{HEIGHT}", "--steps", "2",
                   "--precision", "fp32", "--out", str(out)])
    assert rc == 0 and out.stat().st_size > 0


def test_errors(case, tmp_path):
    from vidax.errors import VidaxError

    with pytest.raises(VidaxError, match="multiples of 16"):
        hv.make_request("t2v", "tiny", PROMPT, size=(40, 32))
    with pytest.raises(VidaxError, match="mp_rank_00_model_states.pt"):
        hv.inspect_folder(tmp_path)
    with pytest.raises(VidaxError, match="not t2v-720p"):
        hv.inspect_folder(case.root, "t2v-720p")


def test_memory_is_checked_before_loading(case, monkeypatch):
    from tests.pipelines.memory_checks import check_before_loading

    def make(release, size, frames):
        return hv.make_request("t2v", "tiny", PROMPT, frames=frames or 33,   # 9 latent: tiles
                               size=size or (WIDTH, HEIGHT), steps=STEPS)

    check_before_loading(hv, case.root, make, monkeypatch)


@pytest.mark.slow   # ~5 s: the tiled decode compiles
def test_decode_reports_each_temporal_tile(vidax_pipe):
    """``on_chunk`` once per diffusers temporal tile (9 latent frames: tiles at 0, 3, 6)."""
    vae = vidax_pipe.vae
    z = np.random.default_rng(3).standard_normal(
        (1, 9, 2, 2, vae.config.latent_channels)).astype(np.float32)
    calls = []
    video = vae.decode(z, framewise=True, on_chunk=lambda *c: calls.append(c))
    assert calls == [(1, 3), (2, 3), (3, 3)] and video.shape[:2] == (1, 33)
