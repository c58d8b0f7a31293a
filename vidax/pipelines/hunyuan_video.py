"""HunyuanVideo 1.0 text-to-video, as the authors' ``sample_video.py`` runs it (and diffusers'
``HunyuanVideoPipeline``, the oracle of the tests, computes it).

1. Text, two encoders (the authors' ``TextEncoder`` pair, diffusers' ``encode_prompt``):

   * LLaVA-Llama-3-8B's language model: the prompt inside the authors' video template
     (:data:`PROMPT_TEMPLATE`, their ``PROMPT_TEMPLATE["dit-llm-encode-video"]``), tokenized
     by the folder's ``tokenizer.json`` (BOS added by its post-processor) to
     ``256 + 95`` tokens -- right truncation and right padding with the tokenizer's pad
     token --, encoded with that attention mask; the feature is ``hidden_states[-3]`` (the
     output of the third-to-last layer, no final norm: ``hidden_state_skip_layer=2``), of
     which the first 95 positions (the template's system turn, ``crop_start``) are dropped:
     256 states and their mask reach the DiT.
   * CLIP-L's text tower: the bare prompt, 77 tokens (start / end-of-text added, padded with
     the pad token), ``pooler_output`` (the final-normed state at the end-of-text token, no
     projection) -> the DiT's ``vector_in``.

2. Noise ``[T', H/8, W/8, 16]`` with ``T' = (F - 1) / 4 + 1``, from a seed (JAX's PRNG) or
   given (``noise=``: the authors' / diffusers' ``[16, T', h, w]`` or vidax's layout).
3. Sampling: flow-matching Euler (:class:`vidax.schedulers.FlowMatchEulerScheduler`, the
   authors' ``FlowMatchDiscreteScheduler`` with ``--flow-reverse``, diffusers'
   ``FlowMatchEulerDiscreteScheduler``): sigmas ``linspace(1, 0, N + 1)`` shifted by
   ``shift s / (1 + (s - 1) sigma)`` (``--flow-shift`` 7.0), the DiT called at
   ``t = 1000 sigma`` with the embedded guidance ``6.0 x 1000`` (the release is
   guidance-distilled: one DiT call per step, no negative prompt), then
   ``x <- x + (sigma_next - sigma) v``.
4. Decoding: ``latents / 0.476986``, the causal VAE in diffusers' temporal tiles
   (``framewise=True``, diffusers' default; the authors tile too), frames ``(x + 1) / 2``
   clamped and truncated to uint8 as their ``save_videos_grid``.

Release folder (the authors' ``ckpts/`` as their README lays it out; only this layout is
read -- the hunyuanvideo-community diffusers conversion is not)::

    hunyuan-video-t2v-720p/transformers/mp_rank_00_model_states.pt   the DiT ({"module": ...})
    hunyuan-video-t2v-720p/vae/pytorch_model.pt + config.json        the VAE
    text_encoder/    config.json, model*.safetensors, tokenizer.json  (the Llama LM the
                     authors' preprocess_text_encoder_tokenizer_utils.py writes; a saved
                     LlamaModel or the whole LLaVA folder load too)
    text_encoder_2/  config.json, model.safetensors, tokenizer.json   (openai
                     clip-vit-large-patch14, or a saved CLIPTextModel)

The DiT file carries no config: the release's (:meth:`HunyuanVideoDiTConfig.t2v_720p`) is
used, unless ``transformers/config.json`` exists beside it (the authors' argument names,
:meth:`HunyuanVideoDiTConfig.from_dict`; not part of the release -- vidax's tests use it for
tiny DiTs, whose variant is then ``"tiny"``).

Precision policies: ``"bf16"`` (default) keeps the DiT's weights in bfloat16 (as released)
and computes with the DiT's bfloat16 policy (float32 modulations, norms and residuals; see
:mod:`vidax.models.hunyuan_video.dit`), runs both text encoders in bfloat16 (the authors:
float16) and the VAE in float32 (the authors: float16); latents and the sampler stay
float32. ``"fp32"``: everything float32 at "highest" matmul precision.

Not done: true classifier-free guidance with a negative prompt (the authors' ``cfg_scale``
> 1; the release is guidance-distilled and runs without it by default), prompt rewriting,
the fp8 DiT file, batch > 1, spatial VAE tiling, the I2V / 1.5 releases.
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
from vidax.models.clip.model import CLIPTextConfig
from vidax.models.hunyuan_video.dit import HunyuanVideoDiTConfig
from vidax.models.hunyuan_video.vae import HunyuanVideoVAEConfig
from vidax.models.llama.model import LlamaConfig
from vidax.pipelines.base import (  # noqa: F401  (re-exported: the CLI's family API)
    PipelineBase,
    verify_component,
    PRECISIONS,
    Progress,
    check_frames,
    check_size,
    load_component,
    noise_array,
    number,
    parse_size,
    precision_policy,
    read_json_config,
)
from vidax.schedulers.flow_euler import FlowMatchEulerScheduler, flow_match_schedule  # noqa: F401
from vidax.text import Tokenizer

MODEL_TYPE = "hunyuan_video"
TASKS = ("t2v",)
VARIANTS = ("t2v-720p",)
DIT_FOLDER = "hunyuan-video-t2v-720p"

#: The authors' ``PROMPT_TEMPLATE["dit-llm-encode-video"]`` (hyvideo/constants.py; diffusers'
#: ``DEFAULT_PROMPT_TEMPLATE``) and its ``crop_start``: the tokens of the system turn and the
#: user header, dropped from the encoder's output.
PROMPT_TEMPLATE = (
    "<|start_header_id|>system<|end_header_id|>\n\nDescribe the video by detailing the following "
    "aspects: 1. The main content and theme of the video.2. The color, shape, size, texture, "
    "quantity, text, and spatial relationships of the objects.3. Actions, events, behaviors "
    "temporal relationships, physical movement changes of the objects.4. background "
    "environment, light, style and atmosphere.5. camera angles, movements, and transitions "
    "used in the video:<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>")
CROP_START = 95
#: ``--text-len`` (Llama tokens after the crop) and ``--text-len-2`` (CLIP tokens).
TEXT_LEN, CLIP_LEN = 256, 77
#: ``--hidden-state-skip-layer``: the feature is ``hidden_states[-(2 + 1)]``.
HIDDEN_STATE_SKIP = 2
NUM_TRAIN_TIMESTEPS = 1000
LATENT_CHANNELS = 16
#: VAE stride (time, space) times the DiT's 2x2 patches: sizes are multiples of 16.
SIZE_MULTIPLE = 16


@dataclass(frozen=True)
class Defaults:
    """``sample_video.py``'s defaults (hyvideo/config.py and the README's command): 720x1280,
    129 frames, 50 steps, embedded guidance 6.0, flow shift 7.0, 24 fps. ``size`` is
    (width, height)."""

    steps: int = 50
    guidance_scale: float = 6.0
    shift: float = 7.0
    size: tuple[int, int] = (1280, 720)
    frames: int = 129
    fps: float = 24.0


def defaults_for(variant: str) -> Defaults:
    if variant in VARIANTS:
        return Defaults()
    return Defaults(steps=3, size=(64, 48), frames=5)  # tiny: seconds on a CPU


# ----------------------------------------------------------------------------- tokenizers
# ----------------------------------------------------------------------------- the release
@dataclass(frozen=True)
class Release:
    """A HunyuanVideo 1.0 release folder: variant, each component's config and file
    (``text_encoder`` / ``text_encoder_2``: their folders, which hold the tokenizers too)."""

    folder: Path
    task: str
    variant: str
    configs: dict
    files: dict

    @property
    def defaults(self) -> Defaults:
        return defaults_for(self.variant)


#: component -> (registry model_type, layout, what it is).
COMPONENTS = {
    "dit": (MODEL_TYPE, "original", "the DiT"),
    "vae": (MODEL_TYPE, "original", "the VAE"),
    "text_encoder": ("llama", "transformers", "the LLaVA-Llama-3-8B language model"),
    "text_encoder_2": ("clip", "transformers", "the CLIP-L text encoder"),
}


def _first(folder: Path, *patterns: str) -> Path | None:
    for pattern in patterns:
        found = sorted(folder.glob(pattern))
        if found:
            return found[0]
    return None


def inspect_folder(folder: str | os.PathLike, variant: str | None = None) -> Release:
    """Find every component of a HunyuanVideo 1.0 release (the authors' ``ckpts/`` layout, see
    the module docstring) without reading a weight; one :class:`VidaxError` lists every
    missing file. ``variant``: ``"t2v-720p"`` or ``"tiny"`` (default: from the folder)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise VidaxError(f"{folder}: no such folder (expected a HunyuanVideo release folder, "
                         "the authors' ckpts/)")
    if variant is not None and variant not in (*VARIANTS, "tiny"):
        raise VidaxError(f"unknown HunyuanVideo variant {variant!r}; known: "
                         f"{', '.join(VARIANTS)} (and 'tiny')")
    dit_dir = folder / DIT_FOLDER
    files = {"dit": dit_dir / "transformers" / "mp_rank_00_model_states.pt",
             "vae": dit_dir / "vae" / "pytorch_model.pt",
             "text_encoder": folder / "text_encoder", "text_encoder_2": folder / "text_encoder_2"}
    missing = []
    for component in ("dit", "vae"):
        if not files[component].is_file():
            missing.append(f"{files[component].relative_to(folder)} "
                           f"({COMPONENTS[component][2]})")
    if not (dit_dir / "vae" / "config.json").is_file():
        missing.append(f"{DIT_FOLDER}/vae/config.json (the VAE's settings)")
    for component in ("text_encoder", "text_encoder_2"):
        sub = files[component]
        for need, what in (("config.json", "settings"), ("tokenizer.json", "tokenizer")):
            if not (sub / need).is_file():
                missing.append(f"{sub.name}/{need} ({COMPONENTS[component][2]}'s {what})")
        if _first(sub, "model*.safetensors") is None:
            missing.append(f"{sub.name}/model*.safetensors ({COMPONENTS[component][2]})")
    if missing:
        raise VidaxError(f"{folder} is not a complete HunyuanVideo 1.0 release folder: missing "
                         + "; ".join(missing) + ". Nothing was loaded.")
    dit_config_path = dit_dir / "transformers" / "config.json"
    if dit_config_path.is_file():
        dit_config = HunyuanVideoDiTConfig.from_dict(read_json_config(dit_config_path))
        found = "t2v-720p" if dit_config == HunyuanVideoDiTConfig.t2v_720p() else "tiny"
    else:
        dit_config, found = HunyuanVideoDiTConfig.t2v_720p(), "t2v-720p"
    if variant not in (None, found):
        raise VidaxError(f"{files['dit']} is the HunyuanVideo {found} DiT, not {variant}")
    configs = {
        "dit": dit_config,
        "vae": HunyuanVideoVAEConfig.from_dict(read_json_config(dit_dir / "vae" / "config.json")),
        "text_encoder": LlamaConfig.from_dict(
            read_json_config(files["text_encoder"] / "config.json")),
        "text_encoder_2": CLIPTextConfig.from_dict(
            read_json_config(files["text_encoder_2"] / "config.json")),
    }
    for component, width, needed in (
            ("text_encoder", configs["text_encoder"].hidden_size, dit_config.text_states_dim),
            ("text_encoder_2", configs["text_encoder_2"].dim, dit_config.text_states_dim_2)):
        if width != needed:
            raise VidaxError(f"{files[component]}: a text encoder of width {width}; the DiT "
                             f"reads {needed}. Not the {COMPONENTS[component][2]} of this "
                             "release")
    if configs["vae"].latent_channels != dit_config.in_channels:
        raise VidaxError(f"{files['vae']}: a VAE of {configs['vae'].latent_channels} latent "
                         f"channels; the DiT reads {dit_config.in_channels}")
    if configs["text_encoder_2"].max_position_embeddings < CLIP_LEN:
        raise VidaxError(f"{files['text_encoder_2']}: CLIP with "
                         f"{configs['text_encoder_2'].max_position_embeddings} positions; "
                         f"HunyuanVideo encodes {CLIP_LEN} tokens")
    return Release(folder, TASKS[0], found, configs, files)


# ----------------------------------------------------------------------------- the request
@dataclass(frozen=True)
class Request:
    """One generation, every option resolved; ``noise`` ``[T', h, w, 16]`` or None (seed)."""

    task: str
    prompt: str
    frames: int
    size: tuple[int, int]
    steps: int
    guidance_scale: float
    shift: float
    seed: int
    fps: float
    noise: np.ndarray | None = None

    @property
    def latent_shape(self) -> tuple[int, int, int, int]:
        width, height = self.size
        return (self.frames - 1) // 4 + 1, height // 8, width // 8, LATENT_CHANNELS


def make_request(task: str, variant: str, prompt: str, *, negative_prompt: str | None = None,
                 image=None, last_image=None, frames: int | None = None,
                 size: tuple[int, int] | str | None = None, steps: int | None = None,
                 guidance_scale: float | None = None, shift: float | None = None,
                 sample_solver: str | None = None, seed: int = 0, noise=None,
                 fps: float | None = None) -> Request:
    """Validate and resolve a generation's options (None: the release's default).
    ``guidance_scale`` is the EMBEDDED guidance (the authors' ``--embedded-cfg-scale``,
    diffusers' ``guidance_scale``). ``negative_prompt``, ``image``, ``last_image`` and
    ``sample_solver`` exist for the CLI's common signature and are refused."""
    if task not in TASKS:
        raise VidaxError(f"HunyuanVideo task must be one of {TASKS}, got {task!r}")
    for name, value, why in (
            ("--negative-prompt", negative_prompt, "the release is guidance-distilled and "
             "runs one DiT call per step; true CFG with a negative prompt is not implemented"),
            ("--image", image, "HunyuanVideo 1.0 T2V is text-to-video only"),
            ("--last-image", last_image, "HunyuanVideo 1.0 T2V is text-to-video only"),
            ("--sample-solver", sample_solver, "the sampler is fixed: flow-matching Euler")):
        if value is not None:
            raise VidaxError(f"HunyuanVideo takes no {name}: {why}")
    if not isinstance(prompt, str):
        raise VidaxError(f"the prompt must be a string, got {type(prompt).__name__}")
    d = defaults_for(variant)
    frames = check_frames(d.frames if frames is None else frames)
    if isinstance(size, str):
        size = parse_size(size)
    size = check_size(d.size if size is None else size, SIZE_MULTIPLE)
    steps = d.steps if steps is None else steps
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise VidaxError(f"steps must be a positive integer, got {steps!r}")
    guidance_scale = number("guidance_scale", d.guidance_scale if guidance_scale is None
                            else guidance_scale, positive=False)
    shift = number("shift", d.shift if shift is None else shift)
    fps = number("fps", d.fps if fps is None else fps)
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise VidaxError(f"seed must be a non-negative integer, got {seed!r}")
    request = Request(task, prompt, frames, size, int(steps), guidance_scale, shift, int(seed),
                      fps)
    if noise is not None:
        request = dataclasses.replace(request, noise=noise_array(noise, request.latent_shape))
    return request


# ----------------------------------------------------------------------------- jitted pieces
@functools.partial(jax.jit, static_argnums=0)
def _encode_llama(graphdef, params, ids, mask):
    """``hidden_states[-(skip + 1)]`` cropped past the template: ``[B, L - 95, D]``."""
    states = nnx.merge(graphdef, params)(ids, mask)[-(HIDDEN_STATE_SKIP + 1)]
    return states[:, CROP_START:].astype(jnp.float32)


@functools.partial(jax.jit, static_argnums=0)
def _encode_clip(graphdef, params, ids):
    """CLIP's ``pooler_output`` ``[B, D]`` (no mask, as diffusers; right padding makes the
    authors' masked call the same: the pooled token sees no padding)."""
    return nnx.merge(graphdef, params)(ids)[1].astype(jnp.float32)


@functools.partial(jax.jit, static_argnums=(0, 1, 2), donate_argnums=(4, 5))
def _denoise_step(graphdef, solver_step, compute_dtype, params, latents, state, index, t, text,
                  text_mask, pooled, guidance):
    """One Euler step: the DiT's flow at ``t``, then the scheduler's update."""
    flow = nnx.merge(graphdef, params)(latents, t, text, text_mask, pooled, guidance,
                                       compute_dtype=compute_dtype)
    return solver_step(flow, index, latents, state)


# ----------------------------------------------------------------------------- the pipeline
class HunyuanVideoPipeline(PipelineBase):
    """A loaded HunyuanVideo 1.0 release: ``pipe(prompt, **options)`` -> uint8 frames
    ``[F, H, W, 3]``; :meth:`sample` gives the final latents, :meth:`decode` frames,
    :meth:`write` an mp4. Options are :func:`make_request`'s."""

    def __init__(self, release: Release, *, dit, vae, text_encoder, text_encoder_2, tokenizer,
                 tokenizer_2, mesh=None, precision: str = "bf16", console=None):
        super().__init__(release, mesh=mesh, precision=precision, console=console)
        self.dit, self.vae = dit, vae
        self.text_encoder, self.text_encoder_2 = text_encoder, text_encoder_2
        self.tokenizer, self.tokenizer_2 = tokenizer, tokenizer_2

    @property
    def defaults(self) -> Defaults:
        return self.release.defaults

    @classmethod
    def from_release(cls, release: Release, *, mesh=None, precision: str = "bf16",
                     console=None) -> HunyuanVideoPipeline:
        """Verify every component file against its model (no weight read), then load them."""
        policy = precision_policy(precision)
        progress = Progress(console)
        for component, (model_type, layout, _) in COMPONENTS.items():
            verify_component(registry.get(model_type, "text_encoder" if component.startswith("text")
                                 else component, layout),
                    release.files[component], release.configs[component])
        progress.line(f"HunyuanVideo {release.variant} in {release.folder}: every component "
                      f"verified; loading with precision {policy.name}")
        dtypes = {"dit": policy.dit_compute, "vae": policy.vae,
                  "text_encoder": policy.text_encoder, "text_encoder_2": policy.text_encoder}
        models = {}
        for component, (model_type, _, _) in COMPONENTS.items():
            models[component] = load_component(
                progress, model_type, "text_encoder" if component.startswith("text")
                else component, release.files[component], release.configs[component],
                dtypes[component], mesh)
        # transformers' fast tokenizers as the authors call them: the file's own special
        # tokens, truncation, right padding
        tokenizer = Tokenizer(release.files["text_encoder"], seq_len=TEXT_LEN + CROP_START,
                              clean=None, special="file")
        tokenizer_2 = Tokenizer(release.files["text_encoder_2"], seq_len=CLIP_LEN, clean=None,
                                special="file", pad_token="<|endoftext|>")
        return cls(release, **models, tokenizer=tokenizer, tokenizer_2=tokenizer_2, mesh=mesh,
                   precision=precision, console=console)

    def request(self, prompt: str, **options) -> Request:
        return make_request(self.task, self.variant, prompt, **options)

    def _place(self, array):
        if self.mesh is None:
            return jnp.asarray(array)
        from jax.sharding import NamedSharding, PartitionSpec

        return jax.device_put(array, NamedSharding(self.mesh, PartitionSpec()))

    def encode_text(self, prompts: list[str]) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(Llama states ``[B, 256, D]`` float32, their mask ``[B, 256]`` int32, CLIP pooled
        ``[B, 768]`` float32); warns when a prompt is truncated."""
        tokens = self.tokenizer([PROMPT_TEMPLATE.format(p) for p in prompts])  # warns if cut
        ids, mask = tokens.ids, tokens.mask
        ids_2 = self.tokenizer_2(prompts).ids
        graphdef, params = nnx.split(self.text_encoder)
        states = _encode_llama(graphdef, params, self._place(ids), self._place(mask))
        graphdef, params = nnx.split(self.text_encoder_2)
        pooled = _encode_clip(graphdef, params, self._place(ids_2))
        return states, self._place(mask[:, CROP_START:]), pooled

    def initial_noise(self, request: Request) -> jax.Array:
        if request.noise is not None:
            return self._place(request.noise[None])
        key = jax.random.key(request.seed)
        return self._place(jax.random.normal(key, (1, *request.latent_shape), jnp.float32))

    def sample(self, prompt: str | None = None, *, request: Request | None = None,
               **options) -> np.ndarray:
        """The final latents ``[T', H/8, W/8, 16]`` (float32, scaled as the DiT sees them)."""
        if request is None:
            request = self.request(prompt, **options)
        elif prompt is not None or options:
            raise VidaxError("pass either a request or a prompt with options, not both")
        progress = self._progress
        scheduler = FlowMatchEulerScheduler(request.steps, request.shift)
        # diffusers: torch.tensor([g], dtype) * 1000.0, in float32
        guidance = jnp.float32(np.float32(request.guidance_scale) * np.float32(1000))
        with self._matmul_precision():
            with progress.phase("encoding the prompt (Llama, CLIP)"):
                text, text_mask, pooled = self.encode_text([request.prompt])
            latents = self.initial_noise(request)
            state = scheduler.init()
            graphdef, params = nnx.split(self.dit)
            width, height = request.size
            with progress.phase(f"sampling {request.frames} frames at {width}x{height}, "
                                f"{request.steps} steps", total=request.steps) as advance:
                for k, t in enumerate(scheduler.timesteps):
                    latents, state = _denoise_step(
                        graphdef, scheduler.step, self.precision.dit_compute, params, latents,
                        state, jnp.int32(k), jnp.float32(t), text, text_mask, pooled, guidance)
                    latents.block_until_ready()
                    advance()
        return np.asarray(latents[0])

    def decode(self, latents) -> np.ndarray:
        """Latents ``[T', h, w, 16]`` -> uint8 frames ``[4(T' - 1) + 1, 8h, 8w, 3]``."""
        from vidax.video import to_uint8

        latents = np.asarray(latents, np.float32)
        with self._matmul_precision(), self._progress.phase(
                f"decoding {latents.shape[0]} latent frames"):
            video = self.vae.decode(self._place(latents[None]), framewise=True)
        return to_uint8(video[0])


Pipeline = HunyuanVideoPipeline
