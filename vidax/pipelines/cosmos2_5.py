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
from vidax.models.cosmos2_5.dit import CosmosDiTConfig
from vidax.models.reason1.model import Reason1Config, full_concat
from vidax.pipelines import base, memory, wan2_1
from vidax.pipelines.base import Defaults, Needed, Part, PipelineBase, Run, find_files, open_folder
from vidax.pipelines.inputs import load_image, read_json_config, refuse, to_unit_range
from vidax.pipelines.image import resize_nearest
from vidax.schedulers.flow_unipc import KarrasFlowUniPCScheduler, karras_flow_sigmas  # noqa: F401
from vidax.sharding import constrain_batch
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

#: ``Cosmos2_5_PredictBasePipeline.__call__``'s defaults (size is (width, height)).
DEFAULTS = Defaults(steps=36, guidance_scale=7.0, size=(1280, 704), frames=93, fps=16,
                    negative_prompt=NEGATIVE_PROMPT)


def defaults_for(variant: str) -> Defaults:
    if variant in VARIANTS:
        return DEFAULTS
    return dataclasses.replace(DEFAULTS, steps=3, size=(64, 48), frames=5)  # tiny: a CPU's


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
class Release(base.Release):
    """:class:`vidax.pipelines.base.Release`; ``layout``: ``"original"`` (the authors') or
    ``"diffusers"``, the DiT's."""

    @property
    def layout(self) -> str:
        return self.specs["dit"].layout


ROLES = {"dit": "the DiT", "vae": "the Wan2.1 VAE", "text_encoder": "the Reason1 text encoder",
         "tokenizer": "the Qwen2.5-VL tokenizer"}
#: The Parts ``--dit`` / ``--vae`` / ``--text-encoder FILE`` replace
#: (:mod:`vidax.pipelines.overrides`; ``--text-encoder DIR`` is ``text_encoder_dir``).
COMPONENT_OPTIONS = {"dit": "dit", "vae": "vae", "text_encoder": "text_encoder"}


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
    folder = open_folder(folder, "Cosmos-Predict2.5", VARIANTS, variant, "the authors' or "
                         "diffusers' layout")
    layout = "diffusers" if (folder / "transformer" / "config.json").is_file() else "original"
    # the text encoder's folder as given, absolute: it stands as itself below the folder
    given = text_encoder_dir or (os.environ.get(TEXT_ENCODER_ENV) if layout == "original"
                                 else None)
    given = str(Path(given).absolute()) if given else None
    if layout == "diffusers":
        text, tokenizer = given or "text_encoder", given or "tokenizer"
        specs = {"dit": registry.get(MODEL_TYPE, "dit", "diffusers"),
                 "vae": registry.get("wan2_1", "vae", "diffusers")}
        parts = [Part(key, spec, ROLES[key]) for key, spec in specs.items()]
        needed, hint = [Needed("vae_folder", "vae", ("config.json",), "the VAE's settings")], ""
    else:
        if variant == "tiny":
            raise VidaxError(f"{folder}: a tiny Cosmos-Predict2.5 release must be in diffusers' "
                             "layout (transformer/config.json gives its sizes); the authors' "
                             "layout holds only the released 2B / 14B networks")
        stage = "pre-trained" if variant and variant.endswith("pre-trained") else "post-trained"
        if variant is None and not any((folder / "base" / stage).glob("*_ema_bf16.pt")):
            stage = "pre-trained" if any(folder.glob("base/pre-trained/*_ema_bf16.pt")) else stage
        text = tokenizer = given or TEXT_ENCODER_SUBDIR
        vae = registry.get("wan2_1", "vae")  # Wan2.1's, as tokenizer.pth
        specs = {"dit": registry.get(MODEL_TYPE, "dit", "original"),
                 "vae": dataclasses.replace(vae, files=("tokenizer.pth",))}
        parts = [Part("dit", specs["dit"], ROLES["dit"], under=f"base/{stage}"),
                 Part("vae", specs["vae"], ROLES["vae"])]
        needed = []
        hint = (f" -- give the Cosmos-Reason1-7B folder with text_encoder_dir=, the "
                f"{TEXT_ENCODER_ENV} environment variable, or as {TEXT_ENCODER_SUBDIR}/ in the "
                "release folder")
    specs["text_encoder"] = registry.get("reason1", "text_encoder", "transformers")
    parts.append(Part("text_encoder", specs["text_encoder"], ROLES["text_encoder"] + hint,
                      under=text))
    needed += [Needed("text_encoder_folder", text, ("config.json",),
                      f"{ROLES['text_encoder']}'s settings"),
               Needed("tokenizer", tokenizer, ("tokenizer.json",), ROLES["tokenizer"])]
    files = find_files(folder, parts, needed,
                       what=f"Cosmos-Predict2.5 release ({layout} layout)")
    if layout == "diffusers":
        dit_config = CosmosDiTConfig.from_dict(
            read_json_config(folder / "transformer" / "config.json"))
        vae_config = specs["vae"].make_config(
            overrides=read_json_config(folder / "vae" / "config.json"))
        variant = variant or next((v for v in VARIANTS if registry.get(
            MODEL_TYPE, "dit").make_config(v) == dit_config), "tiny")
    else:
        found = f"predict-{_dit_size(files['dit'])}-{stage}"
        if variant not in (None, found):
            raise VidaxError(f"{files['dit']} is the {found} DiT, not {variant}")
        variant = found
        dit_config = specs["dit"].make_config(variant)
        vae_config = specs["vae"].make_config("t2v-1.3b")
    te = files["text_encoder_folder"]
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
    return Release(folder, RELEASE_TASK, variant, defaults_for(variant), configs, files, specs)


# ----------------------------------------------------------------------------- the request
@dataclass(frozen=True, kw_only=True)
class Request(base.Request):
    """:class:`vidax.pipelines.base.Request`; ``condition``: the frames the VAE encodes into
    the conditioning latents (image2world 1, video2world 5), float32 ``[F, H, W, 3]`` in
    [-1, 1] at the output size, or None."""

    condition: np.ndarray | None = None

    @property
    def condition_latent_frames(self) -> int:
        return CONDITION_LATENT_FRAMES[self.task]


def make_request(task: str, variant: str, prompt: str, *, image=None, video=None,
                 last_image=None, shift=None, sample_solver=None, noise=None,
                 **options) -> Request:
    """Validate and resolve a generation's options (:meth:`base.Request.resolve`'s; None:
    the release's default).

    ``task``: one of :data:`TASKS`, or :data:`RELEASE_TASK` to let the inputs choose.
    ``image``: image2world's first frame (a file, a PIL image or uint8 ``[H, W, 3]``);
    ``video``: video2world's input clip (a video file, uint8 ``[F, H, W, 3]`` or a sequence of
    images; its last 5 frames are used). Both are resized to ``size`` (see the module
    docstring). ``last_image``, ``shift`` and ``sample_solver`` exist for the CLI's common
    signature and are refused: the schedule has no shift or solver choice.
    """
    task = world_task("Cosmos-Predict2.5", task, image, video)
    fixed = "the sampler is fixed: UniPC over a Karras schedule, no shift"
    refuse("Cosmos-Predict2.5", last_image=(last_image, "no last-frame conditioning"),
           shift=(shift, fixed), sample_solver=(sample_solver, fixed))
    request = Request.resolve(task, defaults_for(variant), prompt, **options)
    if task != "text2world":
        needed = conditioning_frames(task, request.frames)
        pixels = load_image(image)[None] if task == "image2world" else load_video(video)
        if pixels.shape[0] < needed:
            raise VidaxError(f"video2world needs an input video of at least {needed} frames "
                             f"(its last {needed} condition the output), got "
                             f"{pixels.shape[0]}")
        width, height = request.size
        request = dataclasses.replace(request, condition=to_unit_range(
            resize_nearest(pixels[-needed:], height, width)))
    return request.with_noise(noise)


def world_task(family: str, task: str, image, video) -> str:
    """``task`` checked against the inputs (Cosmos-Predict2.5's and Cosmos3's: one DiT, the
    inputs choose): :data:`RELEASE_TASK` becomes video2world with a video, image2world with
    an image, else text2world; a task given with the wrong inputs is one error."""
    if task == RELEASE_TASK:
        task = ("video2world" if video is not None else
                "image2world" if image is not None else "text2world")
    if task not in TASKS:
        raise VidaxError(f"{family} task must be one of {TASKS} (or {RELEASE_TASK!r}: chosen "
                         f"by the inputs), got {task!r}")
    for name, given in (("image2world", image is not None), ("video2world", video is not None)):
        if given != (task == name):
            what = "--image" if name == "image2world" else "--video"
            raise VidaxError(f"{family} {task} " + (f"needs {what}" if task == name
                                                    else f"takes no {what} (that is {name})"))
    return task


def conditioning_frames(task: str, frames: int) -> int:
    """The video frames a world task's conditioning latent frames span (image2world 1,
    video2world 5: ``4 (latent - 1) + 1``), checked against the request's ``frames``."""
    latent_frames = CONDITION_LATENT_FRAMES[task]
    needed = 4 * (latent_frames - 1) + 1
    if frames < needed:
        raise VidaxError(f"{task} conditions on the first {latent_frames} latent frame(s) "
                         f"({needed} video frames); ask for at least {needed} frames, got "
                         f"{frames}")
    return needed


def load_video(video) -> np.ndarray:
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


# ----------------------------------------------------------------------------- the pipeline
@functools.partial(jax.jit, static_argnums=0)
def _encode_text(graphdef, params, ids):
    """Reason1 on the ids (causal, no mask) -> ``full_concat`` ``[B, L, layers x width]``."""
    return full_concat(nnx.merge(graphdef, params)(ids))


class Cosmos25Pipeline(PipelineBase):
    """A loaded Cosmos-Predict2.5 release (:class:`vidax.pipelines.base.PipelineBase`);
    options are :func:`make_request`'s."""

    NAME = "Cosmos-Predict2.5"
    CHEAPER_GUIDANCE = True
    PAIRED_INPUTS = ("context",)
    make_request = staticmethod(make_request)

    def describe(self) -> str:
        return f"{self.NAME} {self.variant} ({self.release.layout} layout)"

    def param_dtype(self, component: str):
        """The DiT keeps float32 weights (its compute dtype is the policy's)."""
        return jnp.float32 if component == "dit" else super().param_dtype(component)

    def setup(self) -> None:
        self.tokenizer = chat_tokenizer(self.release.files["tokenizer"])

    def dit_geometry(self, request: Request) -> memory.DiTGeometry:
        cfg = self.release.configs["dit"]
        patch = (cfg.patch_temporal, cfg.patch_spatial, cfg.patch_spatial)
        return memory.DiTGeometry(
            2 if request.guidance_scale > 1 else 1, memory.patches(request.latent_shape, patch),
            cfg.model_channels, cfg.num_heads, int(cfg.model_channels * cfg.mlp_ratio), TEXT_LEN,
            split=True)

    def vae_geometry(self, request: Request) -> memory.VAEGeometry:
        return wan2_1.vae_geometry(self.release.configs["vae"], request)

    def decode_latents(self, latents: jax.Array, on_chunk=None) -> jax.Array:
        """The Wan2.1 VAE over whole frames up to 720p, in spatial tiles above
        (:func:`vidax.pipelines.wan2_1.vae_tiles`)."""
        return wan2_1.decode_latents(self.vae, latents, on_chunk)

    def encode_text(self, prompts: list[str]) -> jax.Array:
        """``[len(prompts), 512, layers x width]``; warns when a prompt is truncated."""
        ids = self.tokenizer([chat_text(p) for p in prompts]).ids   # warns if cut
        graphdef, params = nnx.split(self.text_encoder)
        return _encode_text(graphdef, params, self._place(ids))

    def encode_condition(self, request: Request) -> tuple[jax.Array, jax.Array]:
        """The clean latents ``[1, T, h, w, C]`` float32 (the encoded conditioning frames first,
        zeros after: the mask hides them) and the float32 frame mask ``[T]`` (Cosmos3's too)."""
        shape = (1, *request.latent_shape)
        mask = np.zeros(shape[1], np.float32)
        mask[: request.condition_latent_frames] = 1
        if request.condition is None:
            return self._place(np.zeros(shape, np.float32)), jnp.asarray(mask)
        with self._progress.phase(f"encoding {request.condition.shape[0]} conditioning "
                                  "frame(s)"):
            encoded = jnp.asarray(self.vae.encode(self._place(request.condition[None])),
                                  jnp.float32)
        pad = shape[1] - encoded.shape[1]
        return jnp.pad(encoded, ((0, 0), (0, pad), (0, 0), (0, 0), (0, 0))), jnp.asarray(mask)

    def prepare(self, request: Request) -> Run:
        """The prompt (and, when guided, the negative prompt) encoded, the conditioning
        latents, and diffusers' ``gt_velocity``: the initial noise minus the clean latents on
        the conditioning frames, fixed for the run."""
        guided = request.guidance_scale > 1  # diffusers' do_classifier_free_guidance
        with self._progress.phase("encoding the prompt" + (" and the negative prompt"
                                                           if guided else "")):
            context = self.encode_text([request.prompt] + (
                [request.negative_prompt] if guided else []))
        latents = self.initial_noise(request)
        clean, frame_mask = self.encode_condition(request)
        inputs = {"context": context, "clean": clean, "frame_mask": frame_mask,
                  "gt_velocity": (latents - clean) * frame_mask[None, :, None, None, None]}
        if guided:
            inputs["guidance_scale"] = jnp.float32(request.guidance_scale)
        return Run(latents, KarrasFlowUniPCScheduler(request.steps), inputs,
                   nnx.split(self.dit), f"{request.task}, guidance {request.guidance_scale:g}")

    def step_inputs(self, request, run, index, t):
        # diffusers hands the DiT sigma; vidax's DiT takes scheduler units
        return run.model, jnp.float32(run.scheduler.sigmas[index]) * jnp.float32(1000), {}

    @staticmethod
    def predict(dit, x, t, inputs, compute_dtype):
        """The DiT on ``x`` (one latent, or the ``[cond, uncond]`` pair). ``frame_mask [T]`` is
        1 on the conditioning latent frames (none for text2world): there the DiT sees the
        clean latents, the condition-mask channel 1 and :data:`CONDITIONAL_FRAME_TIMESTEP`,
        and each half's velocity is ``gt_velocity``, as diffusers'."""
        frame_mask = inputs["frame_mask"]
        mask = frame_mask[None, :, None, None, None]                   # [1, T, 1, 1, 1]
        x = mask * inputs["clean"] + (1 - mask) * x
        cond_t = jnp.float32(CONDITIONAL_FRAME_TIMESTEP * 1000)   # vidax's DiT: scheduler units
        timesteps = jnp.broadcast_to(frame_mask * cond_t + (1 - frame_mask) * t,
                                     (x.shape[0], frame_mask.shape[0]))
        flow = dit(x, timesteps, constrain_batch(inputs["context"]),
                   condition_mask=jnp.broadcast_to(mask, (1, *x.shape[1:4], 1)),
                   compute_dtype=compute_dtype)
        return inputs["gt_velocity"] + flow * (1 - mask)

    @staticmethod
    def guide(cond, uncond, scale):
        """Cosmos' convention: ``cond + g (cond - uncond)``."""
        return cond + scale * (cond - uncond)


Pipeline = Cosmos25Pipeline
