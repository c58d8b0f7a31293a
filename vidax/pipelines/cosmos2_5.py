"""Cosmos-Predict2.5 text-, image- and video-to-world, as diffusers'
``Cosmos2_5_PredictBasePipeline`` runs them (``pipelines/cosmos/pipeline_cosmos2_5_predict.py``).

One DiT does all three tasks; the inputs choose (a release's task is ``"world"``):
``text2world`` (a prompt), ``image2world`` (``image=``: the first frame) and ``video2world``
(``video=``: its last 5 frames).

1. Text: the prompt and the negative prompt (default: the pipeline's ``DEFAULT_NEGATIVE_PROMPT``)
   go through Qwen2.5-VL's chat format -- system "You are a helpful assistant who will provide
   prompts to an image generator.", the prompt as the user turn, no generation prompt --
   truncated / padded with the tokenizer's pad token to exactly 512 ids (no attention mask);
   Reason1 encodes them and :func:`vidax.models.reason1.full_concat` normalises and
   concatenates its 28 hidden states ``[B, 512, 100352]``.
2. Noise ``[T_lat, H/8, W/8, 16]``, ``T_lat = (F - 1) / 4 + 1``, from a seed (JAX's PRNG) or
   given (``noise=``, the authors' ``[C, T, h, w]`` or vidax's ``[T, h, w, C]``).
3. Sampling: UniPC (bh2, order 2, predicting x0) over a Karras schedule in flow space --
   ``sigma_k = s_k / (1 + s_k)`` with ``s`` Karras' rho-7 ramp from 200 down to 0.01, then
   0 -- the ``UniPCMultistepScheduler(use_karras_sigmas=True, use_flow_sigmas=True,
   sigma_max=200, sigma_min=0.01)`` that diffusers' converter writes
   (:class:`vidax.schedulers.KarrasFlowUniPCScheduler`; its update is Wan's UniPC).
   The DiT sees ``sigma_k`` (vidax's DiT takes scheduler units, so ``1000 sigma_k``).
   Guidance, when ``guidance_scale > 1``: ``cond + g (cond - uncond)`` (note: Cosmos'
   convention, not Wan's ``uncond + g (cond - uncond)``); at ``g <= 1`` the DiT runs on the
   prompt alone. Both halves run as one batch of 2 in one jitted step.
4. Conditioning (image2world, video2world; ``__call__``/``prepare_latents`` there): the
   image, or the video's last ``4 (n - 1) + 1`` frames for ``n = 2`` conditioning latent
   frames, resized to the output size by nearest neighbour (diffusers' tensor path:
   ``interpolate``'s default mode), in [-1, 1], encoded by the VAE (posterior mean,
   normalised) into the first ``n`` latent frames (image: ``n = 1``). diffusers encodes the
   whole clip, padded with zeros (image) or the last frame repeated (video); the VAE is causal,
   so the first ``n`` latent frames depend only on the frames encoded here. At every step
   those frames of the DiT's input are the clean latents, the condition-mask channel is 1
   there, their timestep is :data:`CONDITIONAL_FRAME_TIMESTEP`, and their velocity -- in both
   guidance halves -- is replaced by ``noise - clean`` (``noise``: the initial latents),
   before guidance and the UniPC update.
5. Decoding: the Wan2.1 VAE, chunk by chunk; uint8 as :func:`vidax.video.to_uint8`.

Release folders (both are accepted; :func:`inspect_folder` tells them apart):

* the authors' (``nvidia/Cosmos-Predict2.5-2B`` / ``-14B``, main branch):
  ``base/post-trained/*_ema_bf16.pt`` (or ``base/pre-trained/``; ``--variant`` picks one when
  both are there, post-trained is the default), ``tokenizer.pth`` (the VAE). The text encoder
  is a separate release, ``nvidia/Cosmos-Reason1-7B`` (its safetensors shards, ``config.json``
  and ``tokenizer.json``): point at it with ``text_encoder_dir=`` (:func:`inspect_folder`;
  the CLI's ``--text-encoder``), else the ``VIDAX_COSMOS_TEXT_ENCODER`` environment variable,
  else place / symlink it as ``Cosmos-Reason1-7B/`` inside the release folder.
* diffusers' (the ``diffusers/base/post-trained`` revision): ``transformer/``, ``vae/``,
  ``text_encoder/``, ``tokenizer/`` (``tokenizer.json`` read); ``text_encoder_dir=``, when
  given, replaces the last two (the environment variable does not).

Precision policies: ``"bf16"`` (default) runs the DiT in bfloat16 with the authors' float32
islands (:mod:`vidax.models.cosmos2_5.dit`), Reason1 in bfloat16 (the authors' dtype), the VAE in
float32; ``"fp32"`` runs everything in float32 at "highest" matmul precision.

Not done here: the guardrail models; a choice of 1 conditioning latent frame for video2world
(diffusers' ``num_latent_conditional_frames``; vidax uses its default, 2).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax import registry
from vidax.errors import VidaxError
from vidax.models.cosmos2_5.dit import CosmosDiTConfig, nearest_indices
from vidax.models.reason1.model import Reason1Config, full_concat
from vidax.pipelines.base import (  # noqa: F401  (re-exported: the CLI's family API)
    PipelineBase,
    verify_component,
    PRECISIONS,
    Progress,
    check_frames,
    check_size,
    load_component,
    load_image,
    noise_array,
    number,
    parse_size,
    precision_policy,
    read_json_config,
    to_unit_range,
)
from vidax.pipelines.wan2_1 import component_dtype
from vidax.schedulers.flow_unipc import KarrasFlowUniPCScheduler, karras_flow_sigmas  # noqa: F401
from vidax.sharding import constrain_batch, shard_batch, use_mesh
from vidax.text import Tokenizer

MODEL_TYPE = "cosmos2_5"
TASKS = ("text2world", "image2world", "video2world")
#: A release's task: every release does the three; the inputs pick one.
RELEASE_TASK = "world"
#: Conditioning latent frames per task (diffusers: an image gives 1, a video its
#: ``num_latent_conditional_frames``, default 2).
CONDITION_LATENT_FRAMES = {"text2world": 0, "image2world": 1, "video2world": 2}
#: The conditioning frames' timestep in sigma units (diffusers' ``conditional_frame_timestep``;
#: the authors' 0.1 in scheduler units).
CONDITIONAL_FRAME_TIMESTEP = 1e-4
VARIANTS = ("predict-2b-post-trained", "predict-2b-pre-trained", "predict-14b-post-trained",
            "predict-14b-pre-trained")
TEXT_LEN = 512
LATENT_CHANNELS = 16
#: The environment variable naming the Cosmos-Reason1-7B folder (the authors' layout).
TEXT_ENCODER_ENV = "VIDAX_COSMOS_TEXT_ENCODER"
TEXT_ENCODER_SUBDIR = "Cosmos-Reason1-7B"

#: ``_get_prompt_embeds``' system turn.
SYSTEM_PROMPT = "You are a helpful assistant who will provide prompts to an image generator."
#: diffusers' ``DEFAULT_NEGATIVE_PROMPT`` (pipeline_cosmos2_5_predict.py).
NEGATIVE_PROMPT = (
    "The video captures a series of frames showing ugly scenes, static with no motion, motion "
    "blur, over-saturation, shaky footage, low resolution, grainy texture, pixelated images, "
    "poorly lit areas, underexposed and overexposed scenes, poor color balance, washed out "
    "colors, choppy sequences, jerky movements, low frame rate, artifacting, color banding, "
    "unnatural transitions, outdated special effects, fake elements, unconvincing visuals, "
    "poorly edited content, jump cuts, visual noise, and flickering. Overall, the video is of "
    "poor quality.")


@dataclass(frozen=True)
class Defaults:
    """``Cosmos2_5_PredictBasePipeline.__call__``'s defaults (size is (width, height))."""

    steps: int = 36
    guidance_scale: float = 7.0
    size: tuple[int, int] = (1280, 704)
    frames: int = 93
    fps: int = 16
    negative_prompt: str = NEGATIVE_PROMPT


def defaults_for(variant: str) -> Defaults:
    if variant in VARIANTS:
        return Defaults()
    return Defaults(steps=3, size=(64, 48), frames=5)  # tiny: seconds on a CPU


# ----------------------------------------------------------------------------- text
def chat_text(prompt: str) -> str:
    """The string Qwen2.5-VL's chat template renders for ``_get_prompt_embeds``' two turns
    (text content only, ``add_generation_prompt=False``, ``add_vision_id=False``)."""
    return (f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n"
            f"<|im_start|>user\n{prompt}<|im_end|>\n")


def chat_tokenizer(folder: str | os.PathLike, *, seq_len: int = TEXT_LEN) -> Tokenizer:
    """The Qwen2.5-VL ``tokenizer.json`` for Cosmos: called on :func:`chat_text`, ids without
    added special tokens, truncated to the first ``seq_len`` and right-padded with the pad
    token (``apply_chat_template(..., truncation=True, padding="max_length")``)."""
    return Tokenizer(folder, seq_len=seq_len, clean=None, special="none",
                     pad_token="<|endoftext|>")


# ----------------------------------------------------------------------------- the release
@dataclass(frozen=True)
class Release:
    """A Cosmos-Predict2.5 release folder: its layout ("original" or "diffusers"), variant,
    each component's config and file (``tokenizer``: the folder holding tokenizer.json)."""

    folder: Path
    task: str
    variant: str
    layout: str
    configs: dict
    files: dict

    @property
    def defaults(self) -> Defaults:
        return defaults_for(self.variant)


ROLES = {"dit": "the DiT", "vae": "the Wan2.1 VAE", "text_encoder": "the Reason1 text encoder",
         "tokenizer": "the Qwen2.5-VL tokenizer"}


def _text_encoder_folder(folder: Path, text_encoder_dir) -> Path:
    if text_encoder_dir is not None:
        return Path(text_encoder_dir)
    if os.environ.get(TEXT_ENCODER_ENV):
        return Path(os.environ[TEXT_ENCODER_ENV])
    return folder / TEXT_ENCODER_SUBDIR


def _first(folder: Path, pattern: str) -> Path | None:
    found = sorted(folder.glob(pattern))
    return found[0] if found else None


def _dit_size(path: Path) -> str:
    """``2b`` or ``14b`` from the width of the authors' patch embedding (no weight read)."""
    from vidax.translator.io import open_checkpoint

    with open_checkpoint(path) as ckpt:
        for key, tensor in ckpt.items():
            if key.endswith("x_embedder.proj.1.weight"):
                width = tensor.shape[0]
                break
        else:
            raise VidaxError(f"{path}: no net.x_embedder.proj.1.weight; not a "
                             "Cosmos-Predict2.5 DiT checkpoint")
    for size, preset in (("2b", CosmosDiTConfig.predict_2b()),
                         ("14b", CosmosDiTConfig.predict_14b())):
        if preset.model_channels == width:
            return size
    raise VidaxError(f"{path}: a DiT of width {width}, neither Cosmos-Predict2.5 2B (2048) "
                     "nor 14B (5120)")


def inspect_folder(folder: str | os.PathLike, variant: str | None = None, *,
                   text_encoder_dir: str | os.PathLike | None = None) -> Release:
    """Find every component of a Cosmos-Predict2.5 release without reading a weight.

    ``variant``: one of :data:`VARIANTS` (the authors' layout: picks ``pre-trained`` or
    ``post-trained``; the size is read from the file) or ``"tiny"``; default: post-trained
    where present. ``text_encoder_dir``: the Cosmos-Reason1-7B folder (weights, config.json
    and tokenizer.json; see the module docstring for the other ways to give it in the
    authors' layout; in diffusers' it replaces ``text_encoder/`` and ``tokenizer/``). One
    :class:`VidaxError` lists every missing file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise VidaxError(f"{folder}: no such folder (expected a Cosmos-Predict2.5 release "
                         "folder)")
    if variant is not None and variant not in (*VARIANTS, "tiny"):
        raise VidaxError(f"unknown Cosmos-Predict2.5 variant {variant!r}; known: "
                         f"{', '.join(VARIANTS)} (and 'tiny')")
    missing: list[str] = []
    if (folder / "transformer" / "config.json").is_file():
        layout = "diffusers"
        dit_config = CosmosDiTConfig.from_dict(
            read_json_config(folder / "transformer" / "config.json"))
        files = {"dit": _first(folder, "transformer/*.safetensors.index.json")
                 or _first(folder, "transformer/diffusion_pytorch_model*.safetensors"),
                 "vae": _first(folder, "vae/diffusion_pytorch_model*.safetensors"),
                 "text_encoder": folder / "text_encoder", "tokenizer": folder / "tokenizer"}
        if text_encoder_dir is not None:
            files["text_encoder"] = files["tokenizer"] = Path(text_encoder_dir)
        vae_config = registry.get("wan2_1", "vae", "diffusers").make_config(
            overrides=read_json_config(folder / "vae" / "config.json")) \
            if (folder / "vae" / "config.json").is_file() else None
        if variant is None:
            variant = next((v for v in VARIANTS if registry.get(MODEL_TYPE, "dit").make_config(
                v) == dit_config), "tiny")
    else:
        layout = "original"
        stage = "pre-trained" if variant and variant.endswith("pre-trained") else "post-trained"
        dit = _first(folder, f"base/{stage}/*_ema_bf16.pt")
        if dit is None and variant is None:
            stage = "pre-trained"
            dit = _first(folder, f"base/{stage}/*_ema_bf16.pt")
        text_folder = _text_encoder_folder(folder, text_encoder_dir)
        files = {"dit": dit, "vae": folder / "tokenizer.pth" if (
            folder / "tokenizer.pth").is_file() else None,
            "text_encoder": text_folder, "tokenizer": text_folder}
        if variant == "tiny":
            raise VidaxError(f"{folder}: a tiny Cosmos-Predict2.5 release must be in diffusers' "
                             "layout (transformer/config.json gives its sizes); the authors' "
                             "layout holds only the released 2B / 14B networks")
        dit_config = vae_config = None
        if dit is not None:
            found = f"predict-{_dit_size(dit)}-{stage}"
            if variant not in (None, found):
                raise VidaxError(f"{dit} is the {found} DiT, not {variant}")
            variant = found
            dit_config = registry.get(MODEL_TYPE, "dit").make_config(variant)
            vae_config = registry.get("wan2_1", "vae").make_config("t2v-1.3b")
    if files["dit"] is None:
        missing.append("base/post-trained/*_ema_bf16.pt (the DiT)" if layout == "original"
                       else "transformer/diffusion_pytorch_model*.safetensors (the DiT)")
    if files["vae"] is None or vae_config is None:
        missing.append("tokenizer.pth (the Wan2.1 VAE)" if layout == "original"
                       else "vae/config.json and diffusion_pytorch_model.safetensors (the VAE)")
    te = files["text_encoder"]
    if not (te / "config.json").is_file() or _first(te, "model*.safetensors") is None:
        hint = (f" -- give the Cosmos-Reason1-7B folder with text_encoder_dir=, the "
                f"{TEXT_ENCODER_ENV} environment variable, or as {TEXT_ENCODER_SUBDIR}/ in "
                "the release folder" if layout == "original" else "")
        missing.append(f"{te}/config.json and model*.safetensors ({ROLES['text_encoder']}"
                       f"{hint})")
    if not (files["tokenizer"] / "tokenizer.json").is_file():
        missing.append(f"{files['tokenizer']}/tokenizer.json ({ROLES['tokenizer']})")
    if missing:
        raise VidaxError(f"{folder} is not a complete Cosmos-Predict2.5 release folder "
                         f"({layout} layout): missing " + "; ".join(missing)
                         + ". Nothing was loaded.")
    text_config = Reason1Config.from_dict(read_json_config(te / "config.json"))
    width = text_config.hidden_size * text_config.num_hidden_layers
    if dit_config.use_crossattn_projection and dit_config.crossattn_proj_in_channels != width:
        raise VidaxError(f"{te}: the text encoder makes {text_config.num_hidden_layers} x "
                         f"{text_config.hidden_size} = {width} features, but the DiT projects "
                         f"{dit_config.crossattn_proj_in_channels}; not the text encoder of "
                         "this release")
    if vae_config.z_dim != dit_config.in_channels:
        raise VidaxError(f"{files['vae']}: a VAE of {vae_config.z_dim} latent channels; the DiT "
                         f"reads {dit_config.in_channels}")
    configs = {"dit": dit_config, "vae": vae_config, "text_encoder": text_config}
    return Release(folder, RELEASE_TASK, variant, layout, configs, files)


# ----------------------------------------------------------------------------- the request
@dataclass(frozen=True)
class Request:
    """One generation, every option resolved; ``noise`` ``[T, h, w, 16]`` or None (seed);
    ``condition``: the frames the VAE encodes into the conditioning latents (image2world 1,
    video2world 5), float32 ``[F, H, W, 3]`` in [-1, 1] at the output size, or None."""

    task: str
    prompt: str
    negative_prompt: str
    frames: int
    size: tuple[int, int]
    steps: int
    guidance_scale: float
    seed: int
    fps: float
    noise: np.ndarray | None = None
    condition: np.ndarray | None = None

    @property
    def condition_latent_frames(self) -> int:
        return CONDITION_LATENT_FRAMES[self.task]

    @property
    def latent_shape(self) -> tuple[int, int, int, int]:
        width, height = self.size
        return (self.frames - 1) // 4 + 1, height // 8, width // 8, LATENT_CHANNELS


def make_request(task: str, variant: str, prompt: str, *, negative_prompt: str | None = None,
                 image=None, video=None, last_image=None, frames: int | None = None,
                 size: tuple[int, int] | str | None = None, steps: int | None = None,
                 guidance_scale: float | None = None, shift: float | None = None,
                 sample_solver: str | None = None, seed: int = 0, noise=None,
                 fps: float | None = None) -> Request:
    """Validate and resolve a generation's options (None: the release's default).

    ``task``: one of :data:`TASKS`, or :data:`RELEASE_TASK` to let the inputs choose.
    ``image``: image2world's first frame (a file, a PIL image or uint8 ``[H, W, 3]``);
    ``video``: video2world's input clip (a video file, uint8 ``[F, H, W, 3]`` or a sequence of
    images; its last 5 frames are used). Both are resized to ``size`` (see the module
    docstring). ``last_image``, ``shift`` and ``sample_solver`` exist for the CLI's common
    signature and are refused: the schedule has no shift or solver choice.
    """
    if task == RELEASE_TASK:
        task = ("video2world" if video is not None else
                "image2world" if image is not None else "text2world")
    if task not in TASKS:
        raise VidaxError(f"Cosmos-Predict2.5 task must be one of {TASKS} (or {RELEASE_TASK!r}: "
                         f"chosen by the inputs), got {task!r}")
    given = {"image2world": image is not None, "video2world": video is not None}
    for name, needed in given.items():
        if needed != (task == name):
            what = "--image" if name == "image2world" else "video="
            raise VidaxError(f"Cosmos-Predict2.5 {task} " + (f"needs {what}" if task == name
                             else f"takes no {what} (that is {name})"))
    for name, value in (("--last-image", last_image), ("--shift", shift),
                        ("--sample-solver", sample_solver)):
        if value is not None:
            raise VidaxError(f"Cosmos-Predict2.5 takes no {name} (no last-frame conditioning; "
                             "the sampler is fixed: UniPC over a Karras schedule, no shift)")
    if not isinstance(prompt, str):
        raise VidaxError(f"the prompt must be a string, got {type(prompt).__name__}")
    d = defaults_for(variant)
    frames = check_frames(d.frames if frames is None else frames)
    if isinstance(size, str):
        size = parse_size(size)
    size = check_size(d.size if size is None else size)
    steps = d.steps if steps is None else steps
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise VidaxError(f"steps must be a positive integer, got {steps!r}")
    guidance_scale = number("guidance_scale", d.guidance_scale if guidance_scale is None
                            else guidance_scale, positive=False)
    fps = number("fps", d.fps if fps is None else fps)
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise VidaxError(f"seed must be a non-negative integer, got {seed!r}")
    condition = None
    if task != "text2world":
        latent_frames = CONDITION_LATENT_FRAMES[task]
        needed = 4 * (latent_frames - 1) + 1
        if frames < needed:
            raise VidaxError(f"{task} conditions on the first {latent_frames} latent frame(s) "
                             f"({needed} video frames); ask for at least {needed} frames, got "
                             f"{frames}")
        pixels = load_image(image)[None] if task == "image2world" else _load_video(video)
        if pixels.shape[0] < needed:
            raise VidaxError(f"video2world needs an input video of at least {needed} frames "
                             f"(its last {needed} condition the output), got "
                             f"{pixels.shape[0]}")
        condition = to_unit_range(resize_nearest(pixels[-needed:], size[1], size[0]))
    request = Request(task, prompt, negative_prompt or d.negative_prompt, frames, size,
                      int(steps), guidance_scale, int(seed), fps, condition=condition)
    if noise is not None:
        request = dataclasses.replace(request, noise=noise_array(noise, request.latent_shape))
    return request


def _load_video(video) -> np.ndarray:
    """uint8 ``[F, H, W, 3]`` from a video file, such an array, or a sequence of images."""
    if isinstance(video, (str, os.PathLike)):
        from vidax.video import read_video

        return read_video(video)[0]
    if isinstance(video, np.ndarray) and video.ndim == 4:
        if video.dtype != np.uint8 or video.shape[-1] != 3:
            raise VidaxError(f"a video array must be uint8 [F, H, W, 3], got {video.dtype} "
                             f"{list(video.shape)}")
        return video
    try:
        images = [load_image(frame) for frame in video]
    except TypeError as e:
        raise VidaxError("a video must be a video file, a uint8 [F, H, W, 3] array or a "
                         f"sequence of images, got {type(video).__name__}") from e
    if not images or len({im.shape for im in images}) != 1:
        raise VidaxError("a video's frames must be one or more images of one size; got sizes "
                         f"{sorted({im.shape[1::-1] for im in images})} (width, height)")
    return np.stack(images)


def resize_nearest(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """``[F, H, W, C]`` -> ``[F, height, width, C]`` by nearest neighbour, the source pixels
    torch's ``interpolate`` (default mode) picks: diffusers' ``VaeImageProcessor.resize`` on
    the tensors this pipeline's image and array inputs become."""
    return frames[:, nearest_indices(frames.shape[1], height)][
        :, :, nearest_indices(frames.shape[2], width)]


# ----------------------------------------------------------------------------- jitted pieces
@functools.partial(jax.jit, static_argnums=0)
def _encode_text(graphdef, params, ids):
    """Reason1 on the ids (causal, no mask) -> ``full_concat`` ``[B, L, layers x width]``."""
    return full_concat(nnx.merge(graphdef, params)(ids))


@functools.partial(jax.jit, static_argnums=(0, 1, 2), donate_argnums=(4, 5))
def _denoise_step(graphdef, solver_step, compute_dtype, params, latents, state, index, t,
                  context, guidance_scale, clean, frame_mask, gt_velocity):
    """One step of ``Cosmos2_5_PredictBasePipeline.__call__``'s loop: the DiT on the prompt
    (and, with ``context [2, L, C]``, the negative prompt as one batch of 2), Cosmos' guidance
    ``cond + g (cond - uncond)``, the UniPC update.

    ``frame_mask [T]`` is 1 on the conditioning latent frames (none for text2world): there the
    DiT sees ``clean`` (the encoded frames), the condition-mask channel 1 and
    :data:`CONDITIONAL_FRAME_TIMESTEP`, and each half's velocity is replaced by
    ``gt_velocity`` (``(noise - clean) * mask``) before guidance, as theirs.
    """
    dit = nnx.merge(graphdef, params)
    n = context.shape[0]
    mask = frame_mask[None, :, None, None, None]                       # [1, T, 1, 1, 1]
    x = mask * clean + (1 - mask) * latents
    x = constrain_batch(jnp.concatenate([x] * n)) if n > 1 else x
    cond_t = jnp.float32(CONDITIONAL_FRAME_TIMESTEP * 1000)   # vidax's DiT: scheduler units
    timesteps = jnp.broadcast_to(frame_mask * cond_t + (1 - frame_mask) * t,
                                 (n, frame_mask.shape[0]))
    flow = dit(x, timesteps, constrain_batch(context) if n > 1 else context,
               condition_mask=jnp.broadcast_to(mask, (*latents.shape[:4], 1)),
               compute_dtype=compute_dtype)
    flow = gt_velocity + flow * (1 - mask)
    velocity = flow[:1]
    if n > 1:
        velocity = velocity + guidance_scale * (velocity - flow[1:])
    return solver_step(velocity, index, latents, state)


# ----------------------------------------------------------------------------- the pipeline
class Cosmos25Pipeline(PipelineBase):
    """A loaded Cosmos-Predict2.5 release: ``pipe(prompt, **options)`` -> uint8 frames
    ``[F, H, W, 3]``; :meth:`sample` gives the final latents, :meth:`decode` frames,
    :meth:`write` an mp4."""

    def __init__(self, release: Release, *, dit, vae, text_encoder, tokenizer, mesh=None,
                 precision: str = "bf16", console=None):
        super().__init__(release, mesh=mesh, precision=precision, console=console)
        self.dit, self.vae, self.text_encoder, self.tokenizer = dit, vae, text_encoder, tokenizer

    @property
    def defaults(self) -> Defaults:
        return self.release.defaults

    @classmethod
    def from_release(cls, release: Release, *, mesh=None, precision: str = "bf16",
                     console=None) -> Cosmos25Pipeline:
        """Verify every component file against its model (no weight read), then load them."""
        policy = precision_policy(precision)
        progress = Progress(console)
        where = {"dit": (MODEL_TYPE, release.layout), "vae": ("wan2_1", release.layout),
                 "text_encoder": ("reason1", "transformers")}
        for component, (model_type, layout) in where.items():
            verify_component(registry.get(model_type, component, layout), release.files[component],
                    release.configs[component])
        progress.line(f"Cosmos-Predict2.5 {release.variant} ({release.layout} layout) in "
                      f"{release.folder}: every component verified; loading with precision "
                      f"{policy.name}")
        models = {}
        for component, (model_type, _) in where.items():
            models[component] = load_component(
                progress, model_type, component, release.files[component],
                release.configs[component], component_dtype(policy, component), mesh)
        return cls(release, dit=models["dit"], vae=models["vae"],
                   text_encoder=models["text_encoder"],
                   tokenizer=chat_tokenizer(release.files["tokenizer"]), mesh=mesh,
                   precision=precision, console=console)

    def request(self, prompt: str, **options) -> Request:
        return make_request(self.task, self.variant, prompt, **options)

    def _place(self, array):
        return jnp.asarray(array) if self.mesh is None else shard_batch(array, self.mesh)

    def encode_text(self, prompts: list[str]) -> jax.Array:
        """``[len(prompts), 512, layers x width]``; warns when a prompt is truncated."""
        ids = self.tokenizer([chat_text(p) for p in prompts]).ids   # warns if cut
        graphdef, params = nnx.split(self.text_encoder)
        return _encode_text(graphdef, params, self._place(ids))

    def initial_noise(self, request: Request) -> jax.Array:
        if request.noise is not None:
            return self._place(request.noise[None])
        key = jax.random.key(request.seed)
        return self._place(jax.random.normal(key, (1, *request.latent_shape), jnp.float32))

    def encode_condition(self, request: Request) -> tuple[jax.Array, jax.Array]:
        """The clean latents ``[1, T, h, w, 16]`` (the encoded conditioning frames first, zeros
        after: the mask hides them) and the float32 frame mask ``[T]``."""
        shape = (1, *request.latent_shape)
        mask = np.zeros(shape[1], np.float32)
        mask[: request.condition_latent_frames] = 1
        if request.condition is None:
            return self._place(np.zeros(shape, np.float32)), jnp.asarray(mask)
        with self._progress.phase(f"encoding {request.condition.shape[0]} conditioning "
                                  "frame(s)"):
            encoded = self.vae.encode(self._place(request.condition[None]))
        pad = shape[1] - encoded.shape[1]
        return jnp.pad(encoded, ((0, 0), (0, pad), (0, 0), (0, 0), (0, 0))), jnp.asarray(mask)

    def sample(self, prompt: str | None = None, *, request: Request | None = None,
               **options) -> np.ndarray:
        """The final latents ``[T_lat, H/8, W/8, 16]`` (float32, normalised)."""
        if request is None:
            request = self.request(prompt, **options)
        elif prompt is not None or options:
            raise VidaxError("pass either a request or a prompt with options, not both")
        guided = request.guidance_scale > 1  # diffusers' do_classifier_free_guidance
        progress = self._progress
        with self._matmul_precision():
            with progress.phase("encoding the prompt" + (" and the negative prompt"
                                                         if guided else "")):
                context = self.encode_text([request.prompt] + (
                    [request.negative_prompt] if guided else []))
            scheduler = KarrasFlowUniPCScheduler(request.steps)
            latents = self.initial_noise(request)
            clean, frame_mask = self.encode_condition(request)
            # diffusers' gt_velocity: the initial noise minus the clean latents, fixed
            gt_velocity = (latents - clean) * frame_mask[None, :, None, None, None]
            state = scheduler.init(latents.shape, sharding=latents.sharding)
            graphdef, params = nnx.split(self.dit)
            guidance = jnp.float32(request.guidance_scale)
            width, height = request.size
            with progress.phase(f"{request.task}: sampling {request.frames} frames at "
                                f"{width}x{height}, "
                                f"guidance {request.guidance_scale:g}",
                                total=request.steps) as advance:
                for index in range(request.steps):
                    # diffusers hands the DiT sigma; vidax's DiT takes scheduler units
                    t = jnp.float32(scheduler.sigmas[index]) * jnp.float32(1000)
                    with use_mesh(self.mesh) if self.mesh is not None else \
                            contextlib.nullcontext():
                        latents, state = _denoise_step(
                            graphdef, scheduler.step, self.precision.dit_compute, params,
                            latents, state, jnp.int32(index), t, context, guidance, clean,
                            frame_mask, gt_velocity)
                    latents.block_until_ready()
                    advance()
        return np.asarray(latents[0])

    def decode(self, latents) -> np.ndarray:
        """Latents ``[T_lat, h, w, 16]`` -> uint8 frames ``[4(T_lat - 1) + 1, 8h, 8w, 3]``."""
        from vidax.video import to_uint8

        latents = np.asarray(latents, np.float32)
        with self._matmul_precision(), self._progress.phase(
                f"decoding {latents.shape[0]} latent frames"):
            video = self.vae.decode(self._place(latents[None]))
        return to_uint8(video[0])


Pipeline = Cosmos25Pipeline
