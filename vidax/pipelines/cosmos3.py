"""Cosmos3 (Nano, Edge) text-, image- and video-to-world, as diffusers 0.42.1's
``Cosmos3OmniPipeline`` runs them for a video (``pipelines/cosmos/pipeline_cosmos3_omni.py``:
``tokenize_prompt``, ``prepare_latents``, ``_prepare_text_segment``, ``_prepare_vision_segment``,
``_mask_velocity_predictions``, ``__call__``); no sound, no action.

One DiT does the three tasks; the inputs choose (a release's task is ``"world"``):
``text2world`` (a prompt), ``image2world`` (``image=``: the first frame) and ``video2world``
(``video=``: its first 5 frames, the first 2 latent frames, diffusers'
``condition_frame_indexes_vision=(0, 1)`` with ``condition_video_keep="first"``).

1. Text (``tokenize_prompt``): there is no text encoder; the DiT reads token ids. The prompt
   gets ``" The video is {F / fps:.1f} seconds long and is of {fps:.0f} FPS."`` and ``" This
   video is of {H}x{W} resolution."`` appended (each after the text with its trailing dots
   stripped and ``". "``), the negative prompt (default ``""``) the inverse sentences ("is not
   ..."). Each is rendered in the tokenizer's ChatML chat template -- system "You are a helpful
   assistant who will generate videos from a give prompt." (the pipeline's spelling), the text
   as the user turn, the generation prompt -- tokenized without added special tokens, then the
   tokenizer's EOS id and ``<|vision_start|>`` appended (:class:`PromptTokenizer`). vidax
   renders the template itself (no jinja): a tokenizer folder whose chat template is not
   ChatML (``<|im_start|>role\\n ... <|im_end|>\\n``) is refused. The Nano release's is
   Qwen3-VL's (cosmos-framework's converter saves ``Qwen/Qwen3-VL-8B-Instruct``'s
   tokenizer); Edge's published template was not available here to check.
2. The DiT's :meth:`~vidax.models.cosmos3.dit.Cosmos3DiT.encode_prompt` computes each
   prompt's per-layer keys and values once; every step reuses them (``prompt_kv``).
3. Noise ``[T_lat, H/16, W/16, 48]``, ``T_lat = (F - 1) / 4 + 1``. The conditioning latent
   frames (image: 1, video: 2) are the VAE's normalised posterior mean of the image
   (:func:`cover_crop`: antialiased bilinear cover-resize, centre crop, ``x / 127.5 - 1``) /
   the clip's first 5 frames (:func:`resize_frames`: Pillow bilinear, ``2 (x / 255) - 1``);
   the initial latents are those clean frames there and the noise
   elsewhere (diffusers encodes the whole padded clip; the VAE is causal, so its first latent
   frames depend only on the frames encoded here).
4. Sampling: ``UniPCMultistepScheduler`` from ``scheduler/scheduler_config.json`` -- the
   converter writes Karras flow sigmas (``use_karras_sigmas``, ``use_flow_sigmas``,
   ``sigma_max`` 200, ``sigma_min`` 0.147; no shift: the Karras path ignores ``flow_shift``),
   i.e. :class:`vidax.schedulers.flow_unipc.KarrasFlowUniPCScheduler`. The DiT sees the
   scheduler's integer timesteps (``t.item()``), ``fps`` (positions), the condition mask
   (conditioning frames: no timestep embedding, output 0); the velocity on the conditioning
   frames is 0 in both halves (``_mask_velocity_predictions``), so UniPC keeps them. Guidance
   when ``guidance_scale != 1``: ``uncond + g (cond - uncond)``; the two halves run one after
   the other in the jitted step (their prompts differ in length, and the video positions start
   after the prompt).
5. Decoding: the Wan2.2 VAE with the release's ``latents_mean`` / ``latents_std``.

Release folder: diffusers' (``nvidia/Cosmos3-Nano``, ``nvidia/Cosmos3-Edge``):
``model_index.json``, ``transformer/`` (sharded safetensors + index), ``vae/``,
``text_tokenizer/`` (``tokenizer.json``, ``tokenizer_config.json``, the chat template),
``scheduler/scheduler_config.json``. Not done: the guardrail, sound, actions, text-to-image
(``num_frames == 1``), a batch of prompts (diffusers runs one sample).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax import registry
from vidax.errors import VidaxError
from vidax.models.cosmos3.config import Cosmos3DiTConfig
from vidax.models.wan2_2.config import vae_config_from_diffusers
from vidax.pipelines import base, cosmos2_5, wan2_1
from vidax.pipelines import step_cache as step_caching
from vidax.pipelines.base import Defaults, Needed, Part, PipelineBase, Run, find_files, open_folder
# One DiT, the inputs choose the task, as Cosmos-Predict2.5's: its tasks, conditioning frames
# (image 1, video 2 latent frames), request (the conditioning pixels) and input readers.
from vidax.pipelines.cosmos2_5 import (CONDITION_LATENT_FRAMES, RELEASE_TASK,  # noqa: F401
                                       Request, conditioning_frames, load_video, world_task)
from vidax.pipelines.inputs import load_image, read_json_config, refuse
from vidax.schedulers.flow_unipc import KarrasFlowUniPCScheduler
from vidax.text import Tokenizer

MODEL_TYPE = "cosmos3"
TASKS = ("text2world", "image2world", "video2world")   # Cosmos-Predict2.5's (world_task)
VARIANTS = ("nano", "edge")
TOKENIZER_DIR = "text_tokenizer"
#: ``_SYSTEM_PROMPT_VIDEO`` (sic).
SYSTEM_PROMPT = "You are a helpful assistant who will generate videos from a give prompt."
DURATION = "The video is {duration:.1f} seconds long and is of {fps:.0f} FPS."
RESOLUTION = "This video is of {height}x{width} resolution."
INVERSE_DURATION = "The video is not {duration:.1f} seconds long and is not of {fps:.0f} FPS."
INVERSE_RESOLUTION = "This video is not of {height}x{width} resolution."
VISION_START = "<|vision_start|>"
#: The pieces of the ChatML template vidax renders (Qwen3-VL's, text turns only).
CHATML = ("<|im_start|>", "<|im_end|>")
_MAX_TOKENS = 1 << 16

ROLES = {"dit": "the Cosmos3 DiT", "vae": "the Wan2.2 VAE"}
#: The Parts ``--dit`` / ``--vae`` replace (:mod:`vidax.pipelines.overrides`).
COMPONENT_OPTIONS = {"dit": "dit", "vae": "vae"}


def defaults_for(variant: str) -> Defaults:
    """``Cosmos3OmniPipeline.__call__``'s defaults (189 frames at 1280x720, 24 fps, 35 steps,
    guidance 6, negative prompt ""); ``tiny``: a short clip at a small size."""
    if variant == "tiny":
        return Defaults(steps=3, guidance_scale=6.0, size=(64, 32), frames=9, fps=24.0)
    return Defaults(steps=35, guidance_scale=6.0, size=(1280, 720), frames=189, fps=24.0)


# ----------------------------------------------------------------------------- the text
def _append(text: str, addition: str) -> str:
    text = text.rstrip(".")
    return f"{text}. {addition}" if text else addition


def prompt_texts(prompt: str, negative_prompt: str | None, *, frames: int, height: int,
                 width: int, fps: float) -> tuple[str, str]:
    """The prompt and the negative prompt with ``tokenize_prompt``'s duration and resolution
    sentences (the inverse ones for the negative prompt; None is ``""``)."""
    def templated(text, duration, resolution):
        text = _append(text, duration.format(duration=frames / fps, fps=fps))
        return _append(text, resolution.format(height=height, width=width))

    return (templated(prompt, DURATION, RESOLUTION),
            templated(negative_prompt or "", INVERSE_DURATION, INVERSE_RESOLUTION))


def chat_text(text: str, system: str | None = SYSTEM_PROMPT) -> str:
    """What a ChatML template (Qwen3-VL's) renders for the system and user turns with the
    generation prompt."""
    head = f"<|im_start|>system\n{system}<|im_end|>\n" if system is not None else ""
    return f"{head}<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def _chat_template(folder: Path) -> str | None:
    """The folder's chat template: ``chat_template.jinja``, else ``tokenizer_config.json``'s or
    ``chat_template.json``'s ``chat_template``."""
    if (folder / "chat_template.jinja").is_file():
        return (folder / "chat_template.jinja").read_text(encoding="utf-8")
    for name in ("tokenizer_config.json", "chat_template.json"):
        if (folder / name).is_file():
            value = read_json_config(folder / name).get("chat_template")
            if isinstance(value, str):
                return value
    return None


class PromptTokenizer:
    """A release's ``text_tokenizer/`` for the Cosmos3 pipeline: :meth:`ids` is
    ``tokenize_prompt``'s id list for one (already templated) text."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        template = _chat_template(self.folder)
        if template is None or not all(t in template for t in CHATML) or (
                "add_generation_prompt" not in template):
            raise VidaxError(
                f"{self.folder}: " + ("no chat template (chat_template.jinja or "
                                      "tokenizer_config.json's chat_template)" if template is None
                                      else "its chat template is not ChatML (<|im_start|>role ... "
                                      "<|im_end|>)")
                + "; vidax renders the Qwen3-VL ChatML template of the Cosmos3 releases")
        config = read_json_config(self.folder / "tokenizer_config.json")
        eos = config.get("eos_token")
        eos = eos.get("content") if isinstance(eos, dict) else eos
        if not isinstance(eos, str):
            raise VidaxError(f"{self.folder / 'tokenizer_config.json'}: no eos_token")
        self._tokenizer = Tokenizer(self.folder, seq_len=_MAX_TOKENS, clean=None,
                                    special="none", pad_token=eos)
        self.eos_id = self._id(eos, "EOS")
        self.vision_start_id = self._id(VISION_START, "start-of-generation")
        self.vocab_size = self._tokenizer.vocab_size

    def _id(self, token: str, role: str) -> int:
        token_id = self._tokenizer._backend.token_to_id(token)
        if token_id is None:
            raise VidaxError(f"{self.folder}: the {role} token {token!r} is not in the "
                             "vocabulary; not a Cosmos3 text tokenizer")
        return int(token_id)

    def ids(self, text: str, system: str | None = SYSTEM_PROMPT) -> np.ndarray:
        tokens = self._tokenizer([chat_text(text, system)])
        ids = tokens.ids[0][tokens.mask[0].astype(bool)]
        return np.concatenate([ids, [self.eos_id, self.vision_start_id]]).astype(np.int32)

    def check_fits(self, dit: Cosmos3DiTConfig, where: Path) -> None:
        """The tokenizer must be the DiT's: every id it makes within the embedding."""
        top = max(self.vocab_size - 1, self.eos_id, self.vision_start_id)
        if top >= dit.vocab_size:
            raise VidaxError(
                f"{self.folder}: a tokenizer of {self.vocab_size} ids, but the DiT "
                f"({where}) embeds {dit.vocab_size}: not this release's tokenizer (e.g. the "
                "Nano (Qwen3-VL) tokenizer with the Edge DiT, or the reverse)")


# ----------------------------------------------------------------------------- the release
class Release(base.Release):
    """:class:`vidax.pipelines.base.Release` of a Cosmos3 folder."""


def _scheduler(path: Path) -> dict:
    """``scheduler_config.json`` read as what vidax runs: Karras flow sigmas (the settings
    Cosmos3's converter writes); anything else is refused."""
    cfg = read_json_config(path)
    want = {"use_karras_sigmas": True, "use_flow_sigmas": True,
            "prediction_type": "flow_prediction", "solver_type": "bh2", "predict_x0": True,
            "final_sigmas_type": "zero", "lower_order_final": True}
    wrong = {k: cfg[k] for k, v in want.items() if k in cfg and cfg[k] != v}
    if cfg.get("_class_name", "UniPCMultistepScheduler") != "UniPCMultistepScheduler" or wrong:
        raise VidaxError(f"{path}: vidax runs UniPCMultistepScheduler with {want}; this file "
                         f"has {wrong or cfg.get('_class_name')}")
    return {"sigma_min": float(cfg.get("sigma_min") or 0.147),
            "sigma_max": float(cfg.get("sigma_max") or 200.0),
            "solver_order": int(cfg.get("solver_order", 2)),
            "num_train_timesteps": int(cfg.get("num_train_timesteps", 1000))}


def inspect_folder(folder: str | os.PathLike, variant: str | None = None) -> Release:
    """Find and check every component of a Cosmos3 release (diffusers' layout) without
    reading a weight; the variant (``nano``, ``edge``, or ``tiny`` for another size) is
    identified from ``transformer/config.json``. The tokenizer is checked to fit the DiT."""
    folder = open_folder(folder, "Cosmos3", VARIANTS, variant, "diffusers' layout, as "
                         "nvidia/Cosmos3-Nano / -Edge publish it")
    specs = {"dit": registry.get(MODEL_TYPE, "dit", "diffusers"),
             "vae": registry.get("wan2_2", "vae", "diffusers")}
    parts = [Part(key, spec, ROLES[key]) for key, spec in specs.items()]
    needed = [Needed("dit_folder", "transformer", ("config.json",), "the DiT's settings"),
              Needed("vae_folder", "vae", ("config.json",), "the VAE's settings"),
              Needed("tokenizer", TOKENIZER_DIR, ("tokenizer.json", "tokenizer_config.json"),
                     "the text tokenizer"),
              Needed("scheduler", "scheduler", ("scheduler_config.json",), "the sampler")]
    files = find_files(folder, parts, needed, what="Cosmos3 release")
    dit_json = read_json_config(folder / "transformer" / "config.json")
    if "Cosmos3" not in str(dit_json.get("_class_name", "Cosmos3")):
        raise VidaxError(f"{folder / 'transformer' / 'config.json'}: a "
                         f"{dit_json['_class_name']}, not Cosmos3OmniTransformer")
    dit = Cosmos3DiTConfig.from_dict(dit_json)
    found = next((v for v in VARIANTS if getattr(Cosmos3DiTConfig, v)() == dit), "tiny")
    if variant not in (None, "tiny", found):
        raise VidaxError(f"{folder}: its DiT is Cosmos3 {found}, not {variant}")
    variant = variant or found
    vae = vae_config_from_diffusers(read_json_config(folder / "vae" / "config.json"))
    if getattr(vae, "z_dim", None) != dit.latent_channel or not hasattr(vae, "latents_mean"):
        raise VidaxError(f"{folder / 'vae'}: a VAE of {vae.z_dim} latent channels (Wan2.1?); "
                         f"the DiT reads {dit.latent_channel} of the Wan2.2 VAE")
    PromptTokenizer(files["tokenizer"]).check_fits(dit, folder / "transformer")
    index = folder / "model_index.json"
    pipe_cfg = read_json_config(index) if index.is_file() else {}
    if pipe_cfg.get("use_native_flow_schedule"):
        raise VidaxError(f"{index}: use_native_flow_schedule is not supported (vidax runs the "
                         "scheduler's Karras flow sigmas)")
    configs = {"dit": dit, "vae": vae, "scheduler": _scheduler(
        folder / "scheduler" / "scheduler_config.json"),
        "use_system_prompt": bool(pipe_cfg.get("default_use_system_prompt", True))}
    return Release(folder, RELEASE_TASK, variant, defaults_for(variant), configs, files, specs)


# ----------------------------------------------------------------------------- the request
def _rgb(image, what: str) -> np.ndarray:
    try:
        pixels = load_image(image)
    except (TypeError, ValueError) as e:
        raise VidaxError(f"{what} must be an image file, a PIL image or a uint8 [H, W, 3] "
                         f"array, got {type(image).__name__}") from e
    if pixels.dtype != np.uint8 or pixels.ndim != 3 or pixels.shape[-1] != 3:
        raise VidaxError(f"{what} must be an RGB image (uint8 [H, W, 3]), got {pixels.dtype} "
                         f"{list(pixels.shape)}")
    return pixels


def make_request(task: str, variant: str, prompt: str, *, image=None, video=None,
                 last_image=None, shift=None, sample_solver=None, noise=None,
                 **options) -> Request:
    """Validate and resolve a generation's options (None: the release's default).

    ``task``: one of :data:`TASKS`, or :data:`RELEASE_TASK` to let the inputs choose.
    ``image``: image2world's first frame; ``video``: video2world's clip (its first 5 frames
    condition the output). The image is cover-resized and centre-cropped to the size, the
    video's frames resized to it (see :func:`cover_crop`, :func:`resize_frames`)."""
    task = world_task("Cosmos3", task, image, video)
    fixed = "the sampler is the release's scheduler (UniPC over Karras flow sigmas, no shift)"
    refuse("Cosmos3", last_image=(last_image, "no last-frame conditioning"),
           shift=(shift, fixed), sample_solver=(sample_solver, fixed))
    request = Request.resolve(task, defaults_for(variant), prompt, size_multiple=16,
                              latent_channels=48, vae_stride=(4, 16, 16), **options)
    if task != "text2world":
        needed = conditioning_frames(task, request.frames)
        pixels = _rgb(image, "image=")[None] if task == "image2world" else load_video(video)
        if pixels.shape[0] < needed:
            raise VidaxError(f"video2world conditions on the clip's first {needed} frames (2 "
                             f"latent frames); the video has {pixels.shape[0]}")
        width, height = request.size
        if task == "image2world":   # _preprocess_conditioning_image: in [-1, 1] as x / 127.5 - 1
            unit = cover_crop(pixels[0], height, width)[None] / np.float32(127.5) - np.float32(1)
        else:   # preprocess_video: PIL bilinear to the size, then 2 (x / 255) - 1
            frames = resize_frames(pixels[:needed], height, width).astype(np.float32)
            unit = np.float32(2) * (frames / np.float32(255)) - np.float32(1)
        request = dataclasses.replace(request, condition=unit.astype(np.float32))
    # read against the loaded DiT's latent channels in Pipeline.resolve
    return dataclasses.replace(request, noise=noise)


def _aa_bilinear_matrix(n_in: int, n_out: int) -> np.ndarray:
    """``[n_out, n_in]`` float32: torch's ``F.interpolate(mode="bilinear", antialias=True,
    align_corners=False)`` along one axis (its ``_compute_indices_weights_aa``: a triangle of
    support ``max(scale, 1)``, normalised per output, float32)."""
    scale = np.float32(n_in / n_out)
    support = scale if scale >= 1 else np.float32(1)
    invscale = np.float32(1) / scale if scale >= 1 else np.float32(1)
    m = np.zeros((n_out, n_in), np.float32)
    for i in range(n_out):
        center = scale * np.float32(i + 0.5)
        lo = max(int(center - support + np.float32(0.5)), 0)
        hi = min(int(center + support + np.float32(0.5)), n_in)
        x = (np.arange(lo, hi, dtype=np.float32) - center + np.float32(0.5)) * invscale
        w = np.maximum(np.float32(1) - np.abs(x), np.float32(0))
        total = w.sum(dtype=np.float32)
        m[i, lo:hi] = w / total if total else w
    return m


def cover_crop(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """uint8 ``[H, W, 3]`` -> float32 ``[height, width, 3]`` in 0..255, as
    ``_preprocess_conditioning_image``: scaled (antialiased bilinear) by the larger ratio to
    cover the size (sizes rounded up), the centre window (offsets rounded), rounded, clamped.
    The image itself at its own size."""
    src_h, src_w = image.shape[:2]
    scale = max(width / src_w, height / src_h)
    new_h, new_w = math.ceil(scale * src_h), math.ceil(scale * src_w)
    x = image.astype(np.float32)
    if new_w != src_w:   # width first, then height, each pass in float32 as torch's kernel
        x = np.einsum("ow,hwc->hoc", _aa_bilinear_matrix(src_w, new_w), x)
    if new_h != src_h:
        x = np.einsum("oh,hwc->owc", _aa_bilinear_matrix(src_h, new_h), x)
    top, left = round((new_h - height) / 2), round((new_w - width) / 2)
    return np.clip(np.round(x[top:top + height, left:left + width]), 0, 255).astype(np.float32)


def resize_frames(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """uint8 frames resized to (height, width) with Pillow's bilinear filter, as diffusers'
    ``VideoProcessor(resample="bilinear")`` resizes PIL frames (unchanged at their size)."""
    if frames.shape[1:3] == (height, width):
        return frames
    from PIL import Image

    return np.stack([np.asarray(Image.fromarray(f).resize((width, height), Image.BILINEAR))
                     for f in frames])


# ----------------------------------------------------------------------------- the pipeline
class _DiTAt(nnx.Module):
    """The DiT with the request's fps as static structure (the positions need it concrete)."""

    def __init__(self, dit, fps: float):
        self.dit, self.fps = dit, float(fps)


@functools.partial(nnx.jit, static_argnames=("compute_dtype",))
def _encode_prompt(dit, ids, compute_dtype):
    return dit.encode_prompt(ids, compute_dtype=compute_dtype)


class Cosmos3Pipeline(PipelineBase):
    """A loaded Cosmos3 release (:class:`vidax.pipelines.base.PipelineBase`); options are
    :func:`make_request`'s."""

    NAME = "Cosmos3"
    CHEAPER_GUIDANCE = True   # its two DiT calls: the second left out
    make_request = staticmethod(make_request)

    def setup(self) -> None:
        self.tokenizer = PromptTokenizer(self.release.files["tokenizer"])

    def resolve(self, request: Request, draws=None) -> Request:
        """The request at the DiT's latent channels, its initial noise read against them."""
        if draws is not None:
            raise VidaxError(f"{self.NAME} takes no explicit draws")
        channels = self.release.configs["dit"].latent_channel
        return dataclasses.replace(request, noise=None,
                                   latent_channels=channels).with_noise(request.noise)

    def token_ids(self, request: Request) -> tuple[np.ndarray, np.ndarray]:
        """``tokenize_prompt``'s (prompt, negative prompt) ids."""
        width, height = request.size
        system = SYSTEM_PROMPT if self.release.configs["use_system_prompt"] else None
        texts = prompt_texts(request.prompt, request.negative_prompt, frames=request.frames,
                             height=height, width=width, fps=request.fps)
        return tuple(self.tokenizer.ids(t, system) for t in texts)

    # the conditioning latents and frame mask, as Cosmos-Predict2.5 builds them
    encode_condition = cosmos2_5.Pipeline.encode_condition

    def dit_geometry(self, request: Request):
        """One DiT call, batch 1 (with guidance the two prompts' calls run one after the
        other): the video tokens (latents zero-padded to the patch) over their own keys and
        the prompt's (those few hundred, and each layer's prompt keys and values, not
        counted)."""
        from vidax.pipelines import memory

        cfg, (frames, height, width, _) = self.release.configs["dit"], request.latent_shape
        p = cfg.latent_patch_size
        return memory.DiTGeometry(1, frames * -(-height // p) * -(-width // p), cfg.hidden_size,
                                  cfg.num_attention_heads, cfg.intermediate_size)

    def vae_geometry(self, request: Request):
        """A Wan2.2 VAE decode chunk (one latent frame), over whole frames up to 720p and
        the largest spatial tile above (:func:`vidax.pipelines.wan2_1.vae_geometry`)."""
        return wan2_1.vae_geometry(self.release.configs["vae"], request)

    def decode_latents(self, latents, on_chunk=None):
        """The Wan2.2 VAE over whole frames up to 720p (diffusers' pipeline: tiling off),
        in spatial tiles above (:func:`vidax.pipelines.wan2_1.vae_tiles`)."""
        return wan2_1.decode_latents(self.vae, latents, on_chunk)

    def prepare(self, request: Request) -> Run:
        guided = request.guidance_scale != 1.0   # diffusers' do_classifier_free_guidance
        cond, uncond = self.token_ids(request)
        cd = self.precision.dit_compute
        with self._progress.phase("encoding the prompt" + (" and the negative prompt"
                                                           if guided else "")):
            inputs = {"prompt_kv": _encode_prompt(self.dit, jnp.asarray(cond[None]), cd)}
            if guided:
                inputs["negative_kv"] = _encode_prompt(self.dit, jnp.asarray(uncond[None]), cd)
                inputs["guidance_scale"] = jnp.float32(request.guidance_scale)
        clean, mask = self.encode_condition(request)
        m = mask[None, :, None, None, None]
        latents = m * clean + (1 - m) * self.initial_noise(request)
        inputs["frame_mask"] = mask
        s = self.release.configs["scheduler"]
        scheduler = KarrasFlowUniPCScheduler(
            request.steps, sigma_min=s["sigma_min"], sigma_max=s["sigma_max"],
            solver_order=s["solver_order"], num_train_timesteps=s["num_train_timesteps"])
        return Run(latents, scheduler, inputs, nnx.split(_DiTAt(self.dit, request.fps)),
                   f"{request.task}, guidance {request.guidance_scale:g}")

    @staticmethod
    def predict(model, x, t, inputs, compute_dtype, kv="prompt_kv"):
        """The DiT's velocity on ``x`` for one prompt's keys/values, zero on the conditioning
        frames (``_mask_velocity_predictions``)."""
        mask = inputs["frame_mask"]
        flow = model.dit(x, t, prompt_kv=inputs[kv], condition_mask=mask, fps=model.fps,
                         compute_dtype=compute_dtype)
        return flow * (1 - mask)[None, :, None, None, None]

    @classmethod
    def velocity(cls, model, latents, t, inputs, compute_dtype):
        cond = cls.predict(model, latents, t, inputs, compute_dtype)
        scale = inputs.get("guidance_scale")
        if scale is None:
            return step_caching.zero_init(cond, inputs)
        uncond = cls.predict(model, latents, t, inputs, compute_dtype, kv="negative_kv")
        return step_caching.zero_init(cls.guided(cond, uncond, scale, inputs), inputs)


Pipeline = Cosmos3Pipeline
