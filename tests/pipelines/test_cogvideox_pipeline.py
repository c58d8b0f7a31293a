"""CogVideoX pipelines end to end (DESIGN.md §6.3): vidax against diffusers'
``CogVideoXPipeline`` / ``CogVideoXImageToVideoPipeline`` on the same tiny release folder,
from the same random numbers; the mp4 ``vidax generate cogvideox`` writes; bad input.

The tiny release folders are written by diffusers itself: ``CogVideoXPipeline(...)``
/ ``CogVideoXImageToVideoPipeline(...)`` built from diffusers' tiny
``CogVideoXTransformer3DModel`` and ``AutoencoderKLCogVideoX`` (random values in every tensor,
the 5b-i2v learned position table included), transformers' tiny ``T5EncoderModel`` (random),
a T5 tokenizer saved from a SentencePiece model trained here, and the released scheduler
config (``scripts/convert_cogvideox_to_diffusers.py``'s), then ``save_pretrained``.

Oracle: the diffusers pipeline object that was saved, called with ``output_type="latent"``,
float32 on CPU, ``latents=`` the initial noise vidax gets too. Where diffusers draws from its
generator -- the I2V image latent's posterior sample, the DPM sampler's per-step noise
(twice on a second-order step; the second draw is the one used) -- a twin generator replays
the draws and vidax receives them as :class:`~vidax.pipelines.cogvideox.Draws`.

Cases (3 steps, CFG 6, 9 frames at 96x64 -> latents 3 x 8 x 12 x 4):
* 2b: DDIM, sincos positions, 2B scheduler config (SNR shift 3);
* 1.5-5b: DPM + dynamic CFG (the authors' demo), temporal patching with a padding frame
  sampled and cropped, slice RoPE;
* 5b-i2v: DDIM, learned position table, image latent x scaling_factor;
* 1.5-5b-i2v: DPM + dynamic CFG, ofs, image latent / scaling_factor (invert_scale_latents).

Bound: final latents, max |vidax - diffusers| <= 1e-4 x std(diffusers) (matmul "highest").
Negative control per case: prompt and negative prompt exchanged (the DDIM kinds), the first
of a second-order step's two noise draws replayed instead of the second (the DPM++ kinds),
must fail it.
"""

from __future__ import annotations

import dataclasses
import io
import random
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest
import torch

from tests.parity import assert_fails, compare, randomize
from vidax import cli, video
from vidax.models.cogvideox.dit import CogVideoXDiTConfig
from vidax.models.cogvideox.vae import CogVideoXVAEConfig
from vidax.pipelines import cogvideox as cog
from vidax.schedulers.cogvideox import RELEASED_CONFIG

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore:Some donated buffers were not usable"),
              # the prompt is longer than the tiny DiT's 8 text tokens on purpose (both
              # sides truncate it the same way)
              pytest.mark.filterwarnings("ignore:prompt .* tokens were dropped:UserWarning")]

FRAMES, WIDTH, HEIGHT, STEPS, GUIDANCE = 9, 96, 64, 3, 6.0
PROMPT = "a cat runs across the snowy field at sunset"
NEGATIVE = "blurry jittery"
T5_DIM = 20                      # CogVideoXDiTConfig.tiny's text_embed_dim
LATENT = 4                       # CogVideoXVAEConfig.tiny's latent channels
#: kind -> (sampler, dynamic CFG)
CASES = {"2b": ("ddim", False), "1.5-5b": ("dpm++", True), "5b-i2v": ("ddim", False),
         "1.5-5b-i2v": ("dpm++", True)}


# ----------------------------------------------------------------------------- the tiny release
def _write_tokenizer(folder: Path):
    """transformers' T5 tokenizer (saved with its tokenizer.json) over a SentencePiece
    unigram model of 90 pieces trained here, plus 10 extra ids: vocabulary 100."""
    import sentencepiece as spm
    from transformers import T5Tokenizer

    words = ("a cat dog runs jumps over the lazy brown fox in snowy field forest at sunset "
             "camera slowly pans golden wheat blurry jittery").split()
    rng = random.Random(0)
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(2000)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, model_type="unigram",
        vocab_size=90, hard_vocab_limit=False, character_coverage=1.0,
        normalization_rule_name="nmt_nfkc", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
        minloglevel=2, num_threads=1)
    src = folder / "_spiece"
    src.mkdir(parents=True)
    (src / "spiece.model").write_bytes(model.getvalue())
    tokenizer = T5Tokenizer.from_pretrained(src, extra_ids=10, local_files_only=True)
    shutil.rmtree(src)
    return tokenizer


def build_release(kind: str, folder: Path):
    """diffusers' tiny pipeline of ``kind``, saved to ``folder`` by ``save_pretrained``."""
    from diffusers import (AutoencoderKLCogVideoX, CogVideoXDDIMScheduler,
                           CogVideoXImageToVideoPipeline, CogVideoXPipeline,
                           CogVideoXTransformer3DModel)
    from transformers import T5Config, T5EncoderModel

    i2v = kind in cog.I2V_VARIANTS
    dit_cfg = dataclasses.replace(CogVideoXDiTConfig.tiny(kind), out_channels=LATENT,
                                  in_channels=LATENT * (2 if i2v else 1))
    dit = CogVideoXTransformer3DModel(**dataclasses.asdict(dit_cfg)).eval()
    randomize(sorted(dit.named_parameters()), seed=0)
    if dit_cfg.use_learned_positional_embeddings:   # a persistent buffer, not a parameter
        table = dit.patch_embed.pos_embedding
        table.copy_(0.5 * torch.randn(table.shape, generator=torch.Generator().manual_seed(1)))
    vae_cfg = CogVideoXVAEConfig.tiny()
    one_five = kind.startswith("1.5")
    vae = AutoencoderKLCogVideoX(block_out_channels=vae_cfg.block_out_channels,
                                 latent_channels=vae_cfg.latent_channels,
                                 norm_num_groups=vae_cfg.norm_num_groups,
                                 scaling_factor=0.7 if kind != "2b" else 1.15258426,
                                 invert_scale_latents=one_five).eval()
    randomize(sorted(vae.named_parameters()), seed=2)
    t5 = T5EncoderModel(T5Config(vocab_size=100, d_model=T5_DIM, d_kv=8, d_ff=40, num_layers=2,
                                 num_heads=4, feed_forward_proj="gated-gelu",
                                 relative_attention_num_buckets=32,
                                 relative_attention_max_distance=128)).eval()
    randomize(sorted(t5.named_parameters()), seed=3)
    scheduler = CogVideoXDDIMScheduler.from_config(
        dict(RELEASED_CONFIG, clip_sample=False, snr_shift_scale=3.0 if kind == "2b" else 1.0))
    cls = CogVideoXImageToVideoPipeline if i2v else CogVideoXPipeline
    pipe = cls(tokenizer=_write_tokenizer(folder), text_encoder=t5, vae=vae, transformer=dit,
               scheduler=scheduler)
    pipe.save_pretrained(folder)
    return pipe


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    kind = request.param
    folder = tmp_path_factory.mktemp(f"cogvideox_{kind}") / "release"
    reference = build_release(kind, folder)
    pipe = cog.Pipeline.from_release(cog.inspect_folder(folder), precision="fp32")
    return kind, folder, reference, pipe


# ----------------------------------------------------------------------------- the runs
def _image() -> np.ndarray:
    return np.random.default_rng(7).integers(0, 256, (HEIGHT, WIDTH, 3), np.uint8)


def _step_noise(kind_solver: str, gen: torch.Generator, timesteps, shape,
                first_draw: bool = False) -> np.ndarray | None:
    """The DPM step noise their ``step`` uses, from a twin of the pipeline's generator, as
    vidax's ``[N, F', h, w, C]`` (``first_draw``: a second-order step's first draw instead,
    the negative control's wrong noise)."""
    if kind_solver != "dpm++":
        return None
    out = []
    for k, t in enumerate(timesteps):
        noise = torch.randn(shape, generator=gen)
        if k > 0 and int(t) - 1000 // len(timesteps) >= 0:
            second = torch.randn(shape, generator=gen)     # the second-order update's draw
            noise = noise if first_draw else second
        out.append(noise[0].permute(0, 2, 3, 1).numpy())
    return np.stack(out)


def _runs(kind, reference, pipe, *, swap=False, first_draw=False):
    """(vidax's, diffusers') final latents ``[F, h, w, C]`` from the same draws (``swap`` or
    ``first_draw``: a negative control, vidax's run only)."""
    from diffusers import CogVideoXDPMScheduler

    solver, dynamic = CASES[kind]
    i2v = kind in cog.I2V_VARIANTS
    request = cog.make_request("i2v" if i2v else "t2v", kind, NEGATIVE if swap else PROMPT,
                               negative_prompt=PROMPT if swap else NEGATIVE, frames=FRAMES,
                               size=(WIDTH, HEIGHT), steps=STEPS, guidance_scale=GUIDANCE,
                               sample_solver=solver, dynamic_cfg=dynamic,
                               image=_image() if i2v else None)
    shape = dataclasses.replace(request, latent_channels=LATENT).latent_shape
    pad = cog.latent_frames(kind, FRAMES)[1]
    initial = np.random.default_rng(11).standard_normal(shape).astype(np.float32)
    if solver == "dpm++":
        reference.scheduler = CogVideoXDPMScheduler.from_config(reference.scheduler.config)
    reference.scheduler.set_timesteps(STEPS)
    twin = torch.Generator().manual_seed(5)
    encode = None
    if i2v:   # their first draw: the image latent's posterior sample [1, C, 1, h, w]
        encode = torch.randn((1, LATENT, 1, *shape[1:3]), generator=twin)
        encode = encode[0].permute(1, 2, 3, 0).numpy()
    steps = _step_noise(solver, twin, reference.scheduler.timesteps,
                        (1, shape[0], LATENT, *shape[1:3]), first_draw=first_draw)
    ours = pipe.sample(request=dataclasses.replace(request, noise=initial),
                       draws=cog.Draws(encode=encode, steps=steps))
    if swap or first_draw:
        return ours, None
    kwargs = dict(prompt=PROMPT, negative_prompt=NEGATIVE, height=HEIGHT, width=WIDTH,
                  num_frames=FRAMES, num_inference_steps=STEPS, guidance_scale=GUIDANCE,
                  use_dynamic_cfg=dynamic, generator=torch.Generator().manual_seed(5),
                  latents=torch.from_numpy(initial).permute(0, 3, 1, 2)[None],
                  output_type="latent", max_sequence_length=pipe.dit.config.max_text_seq_length)
    if i2v:
        from PIL import Image

        kwargs["image"] = Image.fromarray(_image())
    with torch.no_grad():
        theirs = reference(**kwargs).frames
    return ours, theirs[0, pad:].permute(0, 2, 3, 1).numpy()


#: kind -> diffusers' final latents, kept by the parity test for the negative controls
_THEIRS: dict = {}


def _theirs(kind, reference, pipe):
    """diffusers' latents of ``kind``: the parity test's (kept), else a new pair of runs."""
    if kind not in _THEIRS:
        _THEIRS[kind] = _runs(kind, reference, pipe)[1]
    return _THEIRS[kind]


def test_matches_diffusers_pipeline(case, record_property):
    kind, _, reference, pipe = case
    ours, theirs = _runs(kind, reference, pipe)
    _THEIRS[kind] = theirs
    stats = compare(f"cogvideox_{kind}_latents", ours, theirs, record_property)
    assert stats["max_abs_diff"] <= stats["bound"]
    if kind == "2b":   # negative control: the prompts exchanged
        swapped, _ = _runs(kind, reference, pipe, swap=True)
        assert_fails(f"cogvideox_{kind}_swapped_prompts", swapped, theirs, record_property)


@pytest.mark.slow
@pytest.mark.parametrize("case", [k for k in CASES if k != "2b"], indirect=True)
def test_negative_control(case, record_property):
    """One more vidax run (same shapes: nothing new compiled) against the reference the parity
    test computed: the DPM++ kinds with a second-order step's first draw of noise instead of
    the second (their sampler's noise must matter), 5b-i2v with the prompts exchanged."""
    kind, _, reference, pipe = case
    theirs = _theirs(kind, reference, pipe)
    if CASES[kind][0] == "dpm++":
        bad, _ = _runs(kind, reference, pipe, first_draw=True)
        assert_fails(f"cogvideox_{kind}_negative_first_draw", bad, theirs, record_property)
    else:
        swapped, _ = _runs(kind, reference, pipe, swap=True)
        assert_fails(f"cogvideox_{kind}_swapped_prompts", swapped, theirs, record_property)


def test_dynamic_guidance_is_theirs():
    """The cosine ramp at the first and last of 50 trailing steps (t = 999, 19)."""
    assert cog.dynamic_guidance(6.0, 999, 50) == 1 + 6.0 * (
        (1 - np.cos(np.pi * ((50 - 999) / 50) ** 5.0)) / 2)
    assert cog.dynamic_guidance(6.0, 19, 50) != 6.0


# ----------------------------------------------------------------------------- the CLI
def _generate(folder, out, *extra) -> int:
    return cli.main(["generate", "cogvideox", "--checkpoint-dir", str(folder), "--prompt",
                     PROMPT, "--out", str(out), *extra])


def test_generate_writes_the_mp4(case, tmp_path, capsys):
    kind, folder, _, _ = case
    if kind != "2b":
        pytest.skip("one CLI run (the 2b folder) is enough")
    out = tmp_path / "video.mp4"
    rc = _generate(folder, out, "--frames", "9", "--size", "96x64", "--steps", "2",
                   "--fps", "8", "--precision", "fp32")
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    assert f"wrote {out.resolve()}: 9 frames, 96x64, 8 fps" in printed.out
    frames, fps = video.read_video(out)
    assert frames.shape == (9, 64, 96, 3) and fps == 8
    # bad input: a frame count the VAE cannot make, an image for a t2v release
    rc = _generate(folder, tmp_path / "b.mp4", "--frames", "8")
    assert rc == 1 and "4k+1" in capsys.readouterr().err
    rc = _generate(folder, tmp_path / "c.mp4", "--image", str(out))
    assert rc == 1 and "text-to-video" in " ".join(capsys.readouterr().err.split())


def test_incomplete_folder_is_one_error(tmp_path):
    (tmp_path / "transformer").mkdir()
    with pytest.raises(cog.VidaxError, match="not a complete CogVideoX release folder"):
        cog.inspect_folder(tmp_path)


def test_sizes_the_dit_cannot_take_are_refused_before_loading(case, monkeypatch):
    """The learned position table (1.0 5B I2V) and the position grid (1.5) are the release's
    configs: ``check_memory`` (what ``vidax generate`` calls before loading) refuses a size
    they cannot take before any weight is read (before: only after loading every model)."""
    kind, folder, _, _ = case
    release = cog.inspect_folder(folder)
    cfg, i2v = release.configs["dit"], kind in cog.I2V_VARIANTS
    monkeypatch.setattr(cog.base.loading, "load_with_report",
                        lambda *a, **k: pytest.fail("a weight was read"))
    small = cog.make_request(release.task, kind, PROMPT, frames=FRAMES, size=(WIDTH, HEIGHT),
                             image=_image() if i2v else None)
    estimate = cog.Pipeline.check_memory(release, small, precision="fp32")
    assert set(estimate.phases) == {"DiT step", "VAE decode"} and estimate.fits
    if not (cfg.use_learned_positional_embeddings or cfg.patch_size_t):
        return
    big = (cfg.sample_width * 16 + 64, cfg.sample_height * 16 + 64)
    request = cog.make_request(release.task, kind, PROMPT, frames=FRAMES, size=big,
                               image=_image() if i2v else None)
    with pytest.raises(cog.VidaxError, match="its sample size|position grid"):
        cog.Pipeline.check_memory(release, request)
