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

   Optional true classifier-free guidance (``true_cfg_scale`` > 1: the authors'
   ``--cfg-scale`` with ``--neg-prompt``, diffusers' ``true_cfg_scale`` with
   ``negative_prompt``): the negative prompt is encoded as the prompt is (template, Llama,
   CLIP), the DiT runs the ``[prompt, negative]`` pair as a batch of 2, both halves with the
   same embedded guidance, and ``v = v_neg + true_cfg_scale (v_prompt - v_neg)``. Without a
   negative prompt the authors' default (:data:`NEGATIVE_PROMPT`) is used, as their
   ``sample_video.py`` does (diffusers would silently skip true CFG); a negative prompt with
   ``true_cfg_scale`` 1 (the default) is an error, as neither reference would read it.
4. Decoding: ``latents / 0.476986``, the causal VAE in diffusers' temporal tiles
   (``framewise=True``, diffusers' default; the authors tile too), each in diffusers'
   ``enable_tiling()`` spatial tiles (256 px every 192) where the frame is larger; frames
   ``(x + 1) / 2`` clamped and truncated to uint8 as their ``save_videos_grid``.

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

Not done: the authors' ``guidance_rescale`` (0 in their sampler, not an option of
``sample_video.py``), prompt rewriting, the fp8 DiT file, batch > 1, the I2V release.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax import registry
from vidax.errors import VidaxError
from vidax.models.clip.model import CLIPTextConfig
from vidax.models.hunyuan_video.dit import HunyuanVideoDiTConfig
from vidax.models.hunyuan_video.vae import HunyuanVideoVAEConfig, tile_geometry
from vidax.models.llama.model import LlamaConfig
from vidax.pipelines import memory
from vidax.pipelines.base import (Defaults, Needed, Part, PipelineBase, Release, Request, Run,
                                  find_files, open_folder)
from vidax.pipelines.inputs import number, read_json_config, refuse
from vidax.schedulers.flow_euler import FlowMatchEulerScheduler, flow_match_schedule  # noqa: F401
from vidax.sharding import constrain_batch
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
#: The authors' default negative prompt (hyvideo/constants.py ``NEGATIVE_PROMPT``, used by
#: their ``HunyuanVideoSampler.predict`` when ``--cfg-scale`` > 1 and no ``--neg-prompt``).
NEGATIVE_PROMPT = ("Aerial view, aerial view, overexposed, low quality, deformation, a poor "
                   "composition, bad hands, bad teeth, bad eyes, bad limbs, distortion")
#: ``--text-len`` (Llama tokens after the crop) and ``--text-len-2`` (CLIP tokens).
TEXT_LEN, CLIP_LEN = 256, 77
#: ``--hidden-state-skip-layer``: the feature is ``hidden_states[-(2 + 1)]``.
HIDDEN_STATE_SKIP = 2
#: VAE stride (time, space) times the DiT's 2x2 patches: sizes are multiples of 16.
SIZE_MULTIPLE = 16

#: ``sample_video.py``'s defaults (hyvideo/config.py and the README's command): 720x1280, 129
#: frames, 50 steps, embedded guidance 6.0, flow shift 7.0, 24 fps (size is (width, height)).
DEFAULTS = Defaults(steps=50, guidance_scale=6.0, shift=7.0, size=(1280, 720), frames=129,
                    fps=24.0)


def defaults_for(variant: str) -> Defaults:
    if variant in VARIANTS:
        return DEFAULTS
    return dataclasses.replace(DEFAULTS, steps=3, size=(64, 48), frames=5)  # tiny: a CPU's


# ----------------------------------------------------------------------------- the release
#: component -> (registry model_type, layout, what it is).
COMPONENTS = {
    "dit": (MODEL_TYPE, "original", "the DiT"),
    "vae": (MODEL_TYPE, "original", "the VAE"),
    "text_encoder": ("llama", "transformers", "the LLaVA-Llama-3-8B language model"),
    "text_encoder_2": ("clip", "transformers", "the CLIP-L text encoder"),
}
#: The Parts ``--dit``, ``--vae``, ``--text-encoder [llm=]PATH`` / ``clip=PATH`` replace
#: (:mod:`vidax.pipelines.overrides`; a text encoder's folder holds its tokenizer too).
COMPONENT_OPTIONS = {"dit": "dit", "vae": "vae", "text_encoder": {
    "": "text_encoder", "llm": "text_encoder", "clip": "text_encoder_2"}}


def inspect_folder(folder, variant: str | None = None) -> Release:
    """Find every component of a HunyuanVideo 1.0 release (the authors' ``ckpts/`` layout, see
    the module docstring) without reading a weight; one :class:`VidaxError` lists every
    missing file. ``variant``: ``"t2v-720p"`` or ``"tiny"`` (default: from the folder). Each
    text encoder's folder (``files["<key>_folder"]``) holds its tokenizer too."""
    folder = open_folder(folder, "HunyuanVideo", VARIANTS, variant, "the authors' ckpts/")
    specs = {key: registry.get(model_type, "text_encoder" if key.startswith("text") else key,
                               layout) for key, (model_type, layout, _) in COMPONENTS.items()}
    # the DiT's missing line names the bf16 file (the fp8 one, with its map, is found too)
    parts = [Part(key, spec, COMPONENTS[key][2], under=DIT_FOLDER if key in ("dit", "vae")
                  else key, shown=spec.files[0] if key == "dit" else None)
             for key, spec in specs.items()]
    needed = [Needed("vae_folder", f"{DIT_FOLDER}/vae", ("config.json",), "the VAE's settings")]
    needed += [Needed(f"{key}_folder", key, (name,), f"{COMPONENTS[key][2]}'s {what}")
               for key in ("text_encoder", "text_encoder_2")
               for name, what in (("config.json", "settings"), ("tokenizer.json", "tokenizer"))]
    files = find_files(folder, parts, needed, what="HunyuanVideo 1.0 release")
    dit_config_path = folder / DIT_FOLDER / "transformers" / "config.json"
    if dit_config_path.is_file():
        dit_config = HunyuanVideoDiTConfig.from_dict(read_json_config(dit_config_path))
        found = "t2v-720p" if dit_config == HunyuanVideoDiTConfig.t2v_720p() else "tiny"
    else:
        dit_config, found = HunyuanVideoDiTConfig.t2v_720p(), "t2v-720p"
    if variant not in (None, found):
        raise VidaxError(f"{files['dit']} is the HunyuanVideo {found} DiT, not {variant}")
    configs = {"dit": dit_config, "vae": HunyuanVideoVAEConfig.from_dict(
        read_json_config(files["vae_folder"] / "config.json"))}
    for key, config_class in (("text_encoder", LlamaConfig), ("text_encoder_2", CLIPTextConfig)):
        configs[key] = config_class.from_dict(read_json_config(files[f"{key}_folder"]
                                                               / "config.json"))
    for key, width, needed in (
            ("text_encoder", configs["text_encoder"].hidden_size, dit_config.text_states_dim),
            ("text_encoder_2", configs["text_encoder_2"].dim, dit_config.text_states_dim_2)):
        if width != needed:
            raise VidaxError(f"{files[f'{key}_folder']}: a text encoder of width {width}; the "
                             f"DiT reads {needed}. Not the {COMPONENTS[key][2]} of this release")
    if configs["vae"].latent_channels != dit_config.in_channels:
        raise VidaxError(f"{files['vae']}: a VAE of {configs['vae'].latent_channels} latent "
                         f"channels; the DiT reads {dit_config.in_channels}")
    if configs["text_encoder_2"].max_position_embeddings < CLIP_LEN:
        raise VidaxError(f"{files['text_encoder_2_folder']}: CLIP with "
                         f"{configs['text_encoder_2'].max_position_embeddings} positions; "
                         f"HunyuanVideo encodes {CLIP_LEN} tokens")
    return Release(folder, TASKS[0], found, defaults_for(found), configs, files, specs)


# ----------------------------------------------------------------------------- the request
@dataclasses.dataclass(frozen=True, kw_only=True)
class HunyuanVideoRequest(Request):
    """:class:`vidax.pipelines.base.Request` with ``true_cfg_scale`` (1: no true CFG, then
    ``negative_prompt`` is None)."""

    true_cfg_scale: float = 1.0

    @property
    def true_cfg(self) -> bool:
        return self.true_cfg_scale > 1


def make_request(task: str, variant: str, prompt: str, *, negative_prompt=None,
                 true_cfg_scale=None, image=None, last_image=None, sample_solver=None,
                 noise=None, **options) -> HunyuanVideoRequest:
    """Validate and resolve a generation's options (:meth:`base.Request.resolve`'s; None:
    the release's default). ``guidance_scale`` is the EMBEDDED guidance (the authors'
    ``--embedded-cfg-scale``, diffusers' ``guidance_scale``). ``true_cfg_scale`` (default 1:
    off; > 1 runs true CFG, see the module docstring) with ``negative_prompt`` (default, and
    when empty: :data:`NEGATIVE_PROMPT`; refused without ``true_cfg_scale`` > 1). ``image``,
    ``last_image`` and ``sample_solver`` exist for the CLI's common signature and are
    refused."""
    if task not in TASKS:
        raise VidaxError(f"HunyuanVideo task must be one of {TASKS}, got {task!r}")
    t2v = "HunyuanVideo 1.0 T2V is text-to-video only"
    refuse("HunyuanVideo", image=(image, t2v), last_image=(last_image, t2v),
           sample_solver=(sample_solver, "the sampler is fixed: flow-matching Euler"))
    scale = number("true_cfg_scale", 1.0 if true_cfg_scale is None else true_cfg_scale)
    if scale < 1:
        raise VidaxError(f"true_cfg_scale (--true-cfg-scale) must be 1 (off, the default) or "
                         f"more (true CFG with a negative prompt), got {scale!r}")
    if negative_prompt is not None and not isinstance(negative_prompt, str):
        raise VidaxError(f"the negative prompt must be a string, got "
                         f"{type(negative_prompt).__name__}")
    if negative_prompt and scale == 1:
        raise VidaxError(
            "HunyuanVideo reads --negative-prompt (negative_prompt) only with true CFG: give "
            "--true-cfg-scale (true_cfg_scale) > 1 too. The release is guidance-distilled; "
            "by default it runs one DiT call per step and no negative prompt")
    return HunyuanVideoRequest.resolve(
        task, defaults_for(variant), prompt, size_multiple=SIZE_MULTIPLE,
        negative_prompt=(negative_prompt or NEGATIVE_PROMPT) if scale > 1 else None,
        true_cfg_scale=scale, **options).with_noise(noise)


# ----------------------------------------------------------------------------- the pipeline
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


class HunyuanVideoPipeline(PipelineBase):
    """A loaded HunyuanVideo 1.0 release (:class:`vidax.pipelines.base.PipelineBase`; the
    DiT's weights in the policy's compute dtype); options are :func:`make_request`'s."""

    NAME = "HunyuanVideo"
    CHEAPER_GUIDANCE = True   # on true CFG's [prompt, negative] pair
    PAIRED_INPUTS = ("text", "text_mask", "pooled")
    make_request = staticmethod(make_request)

    def setup(self) -> None:
        # transformers' fast tokenizers as the authors call them: the file's own special
        # tokens, truncation, right padding
        files = self.release.files
        self.tokenizer = Tokenizer(files["text_encoder_folder"], seq_len=TEXT_LEN + CROP_START,
                                   clean=None, special="file")
        self.tokenizer_2 = Tokenizer(files["text_encoder_2_folder"], seq_len=CLIP_LEN,
                                     clean=None, special="file", pad_token="<|endoftext|>")

    def step_cache_key(self, request: Request | None) -> str:
        """MagCache's authors calibrate 720p and 544p runs (by height)."""
        key = super().step_cache_key(request)
        return key + "@544p" if request is not None and request.size[1] == 544 else key

    def dit_geometry(self, request: HunyuanVideoRequest) -> memory.DiTGeometry:
        """Batch 1 (embedded guidance; 2 with true CFG), the video and the 256 text tokens in
        one attention."""
        cfg = self.release.configs["dit"]
        return memory.DiTGeometry(2 if request.true_cfg else 1,
                                  memory.patches(request.latent_shape, cfg.patch_size),
                                  cfg.hidden_size, cfg.heads_num, cfg.mlp_dim, joint=TEXT_LEN,
                                  masked=True)

    def vae_geometry(self, request: Request) -> memory.VAEGeometry:
        """diffusers' temporal tiles (5 latent frames -> 17 frames) above 4 latent frames,
        each in its spatial tiles (256 px every 192) where the frame is larger; the mid
        block's frame-causal attention over a tile's latent pixels."""
        cfg = self.release.configs["vae"]
        tiles = tile_geometry(request.latent_shape, framewise=True, tiled=True, config=cfg)
        return memory.tiled_vae(tiles, 2 * cfg.block_out_channels[0], request,
                                cfg.block_out_channels[-1])

    def encode_text(self, prompts: list[str]) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(Llama states ``[B, 256, D]`` float32, their mask ``[B, 256]`` int32, CLIP pooled
        ``[B, 768]`` float32); warns when a prompt is truncated."""
        tokens = self.tokenizer([PROMPT_TEMPLATE.format(p) for p in prompts])  # warns if cut
        ids_2 = self.tokenizer_2(prompts).ids
        graphdef, params = nnx.split(self.text_encoder)
        states = _encode_llama(graphdef, params, self._place(tokens.ids),
                               self._place(tokens.mask))
        graphdef, params = nnx.split(self.text_encoder_2)
        pooled = _encode_clip(graphdef, params, self._place(ids_2))
        return states, self._place(tokens.mask[:, CROP_START:]), pooled

    def prepare(self, request: HunyuanVideoRequest) -> Run:
        """The prompt (and with true CFG the negative prompt: the ``[prompt, negative]``
        batch) through both encoders; the embedded guidance is a DiT input of both halves.
        ``"guidance_scale"`` (true CFG: :meth:`PipelineBase.velocity`'s pair) only with
        ``true_cfg_scale`` > 1, else one DiT call per step."""
        prompts = [request.prompt] + ([request.negative_prompt] if request.true_cfg else [])
        what = "prompt and the negative prompt" if request.true_cfg else "prompt"
        with self._progress.phase(f"encoding the {what} (Llama, CLIP)"):
            text, text_mask, pooled = self.encode_text(prompts)
        # diffusers: torch.tensor([g], dtype) * 1000.0, in float32
        guidance = jnp.float32(np.float32(request.guidance_scale) * np.float32(1000))
        inputs = {"text": text, "text_mask": text_mask, "pooled": pooled, "guidance": guidance}
        cfg = ""
        if request.true_cfg:
            inputs["guidance_scale"] = jnp.float32(request.true_cfg_scale)
            cfg = f", true CFG {request.true_cfg_scale:g}"
        return Run(self.initial_noise(request),
                   FlowMatchEulerScheduler(request.steps, request.shift), inputs,
                   nnx.split(self.dit), f"{request.steps} steps, shift {request.shift:g}, "
                   f"embedded guidance {request.guidance_scale:g}{cfg}")

    @staticmethod
    def predict(dit, x, t, inputs, compute_dtype):
        """One DiT call; with true CFG ``x`` and the text inputs are the ``[prompt,
        negative]`` batch of 2 (the embedded guidance, a scalar, serves both)."""
        return dit(x, t, constrain_batch(inputs["text"]), constrain_batch(inputs["text_mask"]),
                   constrain_batch(inputs["pooled"]), inputs["guidance"],
                   compute_dtype=compute_dtype)

    def decode_latents(self, latents: jax.Array, on_chunk=None) -> jax.Array:
        """The causal VAE in diffusers' temporal tiles, each in its spatial tiles
        (``enable_tiling()``'s 256 px every 192) where the frame is larger than one."""
        return self.vae.decode(latents, framewise=True, tiled=True, on_chunk=on_chunk)


Pipeline = HunyuanVideoPipeline
