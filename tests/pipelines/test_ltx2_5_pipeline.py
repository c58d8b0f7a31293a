"""vidax's LTX-2.x sampling against the authors' ``ltx-pipelines`` 1.0.0 (``DistilledPipeline``,
``TI2VidOneStagePipeline``) run one level down at float32 (tests/reference/ltx2.py says how and
why), from the same initial noise and the same text contexts: the final video and audio
latents of each mode.

The release: ltx-core's tiny 2.3-structure ``LTXModel`` (gated attention, cross-attention
AdaLN; 128-wide video and audio tokens, as the real releases, since ltx-pipelines fixes the audio
latent at 8 x 16), its tiny video VAE and ``LatentUpsampler``, random values in every tensor,
saved in the authors' single-file layout (``model.diffusion_model.``, ``vae.``; the upsampler's
own file), loaded by vidax with no config. The text path (Gemma, the projection, the
connectors) has its own parity tests; here both sides take the same random contexts.

Cases (each ``<= 1e-4 x std`` of the reference, float32, matmul precision "highest"):
distilled two-stage (8 + 3 steps, the upsampler between), dev one-stage with the authors' full
guidance (CFG, STG at a block, modality guidance, rescale: four DiT rows), image-to-video
(distilled one-stage, the first latent frame conditioned). Negative controls: the dev run
with the rescale dropped; the two-stage run with stage 2 not re-noised.
"""

from __future__ import annotations

import dataclasses
import functools
import json

import jax
import numpy as np
import pytest

from tests.models.ltx2_5.test_ltx2_dit import CONFIG_2_3
from tests.models.ltx2_5.test_ltx2_vae import CONFIGS as VAE_CONFIGS
from tests.parity import assert_fails, assert_parity, randomize
from tests.reference import ltx2 as ref
from vidax import registry
from vidax.pipelines import base
from vidax.pipelines import ltx2_5 as ltx2
from vidax.schedulers.flow_euler import ltx2_sigmas

jax.config.update("jax_default_matmul_precision", "highest")

FRAMES, FPS = 9, 24.0                      # 2 latent frames, 9 audio latent frames
SIZE = (128, 64)                           # two-stage: 64x32 then 128x64 (latents 1x2, 2x4)
DIT = {**CONFIG_2_3, "in_channels": 128, "out_channels": 128, "audio_in_channels": 128,
       "audio_out_channels": 128}
# 32x spatial and 8x temporal compression as the releases (the pipeline's latent grid), at 128
# channels throughout (the encoder starts latent_channels wide; every multiplier 1)
VAE = {**VAE_CONFIGS["2.3"], "latent_channels": 128, "encoder_blocks": [
    ["res_x", {"num_layers": 1}], ["compress_space_res", {"multiplier": 1}],
    ["compress_time_res", {"multiplier": 1}], ["compress_all_res", {"multiplier": 1}],
    ["compress_all_res", {"multiplier": 1}], ["res_x", {"num_layers": 1}]]}
UPSAMPLER = {"in_channels": 128, "mid_channels": 32, "num_blocks_per_stage": 1, "dims": 3,
             "spatial_upsample": True, "temporal_upsample": False, "spatial_scale": 2.0,
             "rational_resampler": False}
TEXT = 16                                  # context tokens (the connectors' output length)


@functools.cache
def _references():
    """ltx-core's tiny DiT, video encoder and upsampler, random in every tensor."""
    import torch
    from ltx_core.model import video_vae as vv
    from ltx_core.model.transformer.model_configurator import LTXModelConfigurator
    from ltx_core.model.upsampler.model_configurator import LatentUpsamplerConfigurator

    from ltx_core.text_encoders.gemma.embeddings_connector import (
        AudioEmbeddings1DConnectorConfigurator,
        Embeddings1DConnectorConfigurator,
    )

    model = LTXModelConfigurator.from_config({"transformer": DIT}).to_empty(device="cpu").eval()
    randomize(model.named_parameters(), seed=10)
    connectors = {}
    for name, configurator in (("video", Embeddings1DConnectorConfigurator),
                               ("audio", AudioEmbeddings1DConnectorConfigurator)):
        connectors[name] = configurator.from_config({"transformer": DIT}).eval()
        randomize(connectors[name].named_parameters(), seed=15 + len(connectors))
    model.connectors = connectors
    encoder = vv.VideoEncoderConfigurator.from_config({"vae": VAE}).eval()
    randomize(encoder.named_parameters(), seed=11)
    gen = torch.Generator().manual_seed(12)
    stats = {"mean-of-means": torch.randn(128, generator=gen) * 0.1,
             "std-of-means": 0.5 + torch.rand(128, generator=gen)}
    for name, value in stats.items():
        getattr(encoder.per_channel_statistics, name).copy_(value)
    decoder = vv.VideoDecoderConfigurator.from_config({"vae": VAE}).eval()
    randomize(decoder.named_parameters(), seed=14)
    upsampler = LatentUpsamplerConfigurator.from_config(UPSAMPLER).eval()
    randomize(upsampler.named_parameters(), seed=13)
    return model, encoder, upsampler, decoder


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """The tiny release files and a :class:`vidax.pipelines.ltx2_5.Release` over them."""
    import safetensors.torch

    model, encoder, upsampler, decoder = _references()
    folder = tmp_path_factory.mktemp("ltx2_release")
    single = folder / "ltx-2.3-22b-distilled.safetensors"
    tensors = {"model.diffusion_model." + k: v for k, v in model.state_dict().items()}
    for name, connector in model.connectors.items():
        tensors.update({f"model.diffusion_model.{name}_embeddings_connector.{k}": v
                        for k, v in connector.state_dict().items()})
    tensors.update({"vae.encoder." + k: v for k, v in encoder.state_dict().items()
                    if not k.startswith("per_channel_statistics.")})
    tensors.update({"vae.decoder." + k: v for k, v in decoder.state_dict().items()
                    if not k.startswith("per_channel_statistics.")})
    tensors.update({"vae.per_channel_statistics." + k: v for k, v in
                    encoder.per_channel_statistics.state_dict().items()})
    safetensors.torch.save_file(
        {k: v.detach().contiguous().clone() for k, v in tensors.items()}, str(single),
        metadata={"config": json.dumps({"transformer": DIT, "vae": VAE})})
    up_file = folder / "ltx-2.3-spatial-upscaler-x2-1.0.safetensors"
    safetensors.torch.save_file({k: v.contiguous() for k, v in upsampler.state_dict().items()},
                                str(up_file), metadata={"config": json.dumps(UPSAMPLER)})
    return folder, single, up_file


def _pipeline(release, variant: str):
    """The vidax pipeline over the DiT, the video VAE's encoder side and the upsampler (a
    release without the text and audio components: this test feeds contexts)."""
    from vidax import loading

    folder, single, up_file = release
    keys = {"dit": ("dit", single), "vae": ("vae", single), "upsampler": ("upsampler", up_file)}
    specs = {k: registry.get("ltx2_5", c) for k, (c, _) in keys.items()}
    configs = {k: loading.resolve_config(specs[k], path) for k, (_, path) in keys.items()}
    files = {k: path for k, (_, path) in keys.items()}
    rel = ltx2.Release(folder, "t2av", variant, ltx2.defaults_for(variant, True), configs,
                       files, specs, version="2.3")
    return ltx2.Pipeline.from_release(rel, precision="fp32")


def _draws(stages: int, sizes, seed: int = 0):
    rng = np.random.default_rng(seed)
    tokens = [((FRAMES - 1) // 8 + 1) * (h // 32) * (w // 32) for w, h in sizes]
    audio = round(FRAMES / FPS * 25)
    draws = []
    for stage in range(stages):
        draws += [rng.standard_normal((1, tokens[stage], 128)).astype(np.float32),
                  rng.standard_normal((1, audio, 128)).astype(np.float32)]
    return draws


def _contexts(n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((1, TEXT, 32)).astype(np.float32),
             rng.standard_normal((1, TEXT, 16)).astype(np.float32)) for _ in range(n)]


def _vidax(pipe, request, draws, contexts, monkeypatch):
    prompts = {request.prompt: contexts[0], request.negative_prompt: contexts[-1]}
    monkeypatch.setattr(pipe, "encode_text", lambda p: tuple(map(np.asarray, prompts[p])))
    given = {"video": draws[0::2], "audio": draws[1::2]}
    video, audio = pipe.sample(request=request, draws=given, memory_check=False)
    # vidax: video [T, h, w, C], audio [C, T, M]; the authors' [1, C, T, h, w], [1, C, T, M]
    return np.moveaxis(video, -1, 0)[None], audio[None]


def _reference(contexts, draws, request, sigmas, *, guiders=None, image_latents=None):
    import torch

    model, encoder, upsampler, _ = _references()
    t = [(torch.from_numpy(v), torch.from_numpy(a)) for v, a in contexts]
    return ref.run_stages(model, frames=FRAMES, sizes=request.stage_sizes(), fps=FPS,
                          sigmas=sigmas, draws=[torch.from_numpy(d) for d in draws], contexts=t,
                          guiders=guiders, image_latents=image_latents, video_encoder=encoder,
                          upsampler=upsampler)


def _request(pipe, **options):
    return pipe.request("a fox", frames=FRAMES, size=SIZE, fps=FPS, **options)


def test_distilled_two_stage_matches_the_authors(release, monkeypatch, record_property):
    pipe = _pipeline(release, "2.3-22b-distilled")
    request = _request(pipe)
    assert request.stages == 2 and request.stage_sizes() == [(64, 32), (128, 64)]
    draws, contexts = _draws(2, request.stage_sizes()), _contexts(1)
    ref_v, ref_a = _reference(contexts, draws, request,
                              [ltx2.DISTILLED_SIGMAS, ltx2.STAGE_2_SIGMAS])
    out_v, out_a = _vidax(pipe, request, draws, contexts, monkeypatch)
    assert_parity("ltx2 distilled two-stage video", out_v, ref_v, record_property)
    assert_parity("ltx2 distilled two-stage audio", out_a, ref_a, record_property)
    # negative control: stage 2 started from pure noise instead of the re-noised latents
    monkeypatch.setattr(ltx2, "STAGE_2_SIGMAS", (1.0, *ltx2.STAGE_2_SIGMAS[1:]))
    bad_v, bad_a = _vidax(pipe, request, draws, contexts, monkeypatch)
    assert_fails("ltx2 distilled stage 2 not re-noised video", bad_v, ref_v, record_property)
    assert_fails("ltx2 distilled stage 2 not re-noised audio", bad_a, ref_a, record_property)


@pytest.mark.slow     # ~20 s: the distilled case stays in the fast lane
def test_dev_guidance_matches_the_authors(release, monkeypatch, record_property):
    pipe = _pipeline(release, "2.3-22b-dev")
    video_g, audio_g = ltx2.default_guiders("2.3")
    video_g = dataclasses.replace(video_g, stg_blocks=(1,))      # the tiny DiT has 2 blocks
    audio_g = dataclasses.replace(audio_g, stg_blocks=(0,))
    request = _request(pipe, steps=3, video_guider=video_g, audio_guider=audio_g)
    assert request.stages == 1 and len(ltx2._rows(video_g, audio_g)) == 4
    draws, contexts = _draws(1, request.stage_sizes(), seed=2), _contexts(2, seed=3)
    sigmas = ltx2_sigmas(3)
    ref_v, ref_a = _reference(contexts, draws, request, [sigmas], guiders=(video_g, audio_g))
    out_v, out_a = _vidax(pipe, request, draws, contexts, monkeypatch)
    assert_parity("ltx2 dev guided video", out_v, ref_v, record_property)
    assert_parity("ltx2 dev guided audio", out_a, ref_a, record_property)
    no_rescale = dataclasses.replace(request, video_guider=dataclasses.replace(
        video_g, rescale_scale=0.0), audio_guider=dataclasses.replace(audio_g, rescale_scale=0.0))
    bad_v, bad_a = _vidax(pipe, no_rescale, draws, contexts, monkeypatch)
    assert_fails("ltx2 dev without rescale video", bad_v, ref_v, record_property)
    assert_fails("ltx2 dev without rescale audio", bad_a, ref_a, record_property)


def test_ltx2_sigmas_match_ltx_core():
    from ltx_core.components.schedulers import LTX2Scheduler

    # numpy's float32 linspace differs from torch's vectorised one in the last bit here and
    # there (up to 5.4e-7 after the shift); the terminal value and the zero are exact
    for steps in (1, 2, 3, 8, 30, 40):
        expected = LTX2Scheduler().execute(steps=steps).numpy()
        got = ltx2_sigmas(steps)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
        assert got[-1] == 0 and got[-2] == expected[-2]
    assert not np.allclose(ltx2_sigmas(30, tokens=1024), ltx2_sigmas(30), atol=1e-3)


@pytest.mark.slow     # ~20 s: the distilled case stays in the fast lane
def test_image_to_video_matches_the_authors(release, monkeypatch, record_property):
    import torch

    pipe = _pipeline(release, "2.3-22b-distilled")
    image = np.random.default_rng(4).integers(0, 256, (48, 100, 3), dtype=np.uint8)
    request = _request(pipe, stages=1, image=image, image_crf=0)
    assert request.task == "i2av"
    draws, contexts = _draws(1, request.stage_sizes(), seed=5), _contexts(1, seed=6)
    encoder = _references()[1]
    frame = ltx2.conditioning_frame(image, request.size, 0)      # checked in test_image below
    with torch.no_grad():
        latent = encoder(torch.from_numpy(np.moveaxis(frame, -1, 0)[None, :, None].copy()))
    ref_v, ref_a = _reference(contexts, draws, request, [ltx2.DISTILLED_SIGMAS],
                              image_latents=[latent])
    out_v, out_a = _vidax(pipe, request, draws, contexts, monkeypatch)
    assert_parity("ltx2 image-to-video video", out_v, ref_v, record_property)
    assert_parity("ltx2 image-to-video audio", out_a, ref_a, record_property)
    # the first latent frame is the image's, untouched by sampling
    np.testing.assert_allclose(out_v[:, :, :1], latent.numpy(), rtol=0, atol=1e-5)


def test_conditioning_frame_matches_the_authors():
    """``load_image_conditioning``'s resize-and-crop and ``preprocess``'s H.264 round trip."""
    import torch

    ref.import_ltx_audio()
    from ltx_pipelines.utils.media_io import preprocess, resize_and_center_crop

    image = np.random.default_rng(7).integers(0, 256, (50, 90, 3), dtype=np.uint8)
    for crf in (0, 33):
        expected = resize_and_center_crop(torch.from_numpy(preprocess(image, crf)).float(),
                                          64, 96) / 127.5 - 1
        got = ltx2.conditioning_frame(image, (96, 64), crf)
        np.testing.assert_allclose(got, expected[0, :, 0].permute(1, 2, 0).numpy(),
                                   rtol=0, atol=2e-5)
    assert not np.allclose(ltx2.conditioning_frame(image, (96, 64), 33),
                           ltx2.conditioning_frame(image, (96, 64), 0), atol=1e-2)


def test_requests_are_checked():
    """Bad options, refused before anything loads."""
    from vidax.errors import VidaxError

    with pytest.raises(VidaxError, match="distilled LoRA"):
        ltx2.make_request("t2av", "2.3-22b-dev", "x", stages=2)
    with pytest.raises(VidaxError, match="fixed sigma lists"):
        ltx2.make_request("t2av", "2.3-22b-distilled", "x", steps=5)
    with pytest.raises(VidaxError, match="multiples of 64"):
        ltx2.make_request("t2av", "2.3-22b-distilled", "x", stages=2, size=(96, 64))
    assert isinstance(ltx2.make_request("t2av", "2.0-19b-dev", "x"), base.Request)
