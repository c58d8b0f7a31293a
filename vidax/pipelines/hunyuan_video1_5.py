"""HunyuanVideo-1.5 text- and image-to-video, as the authors' ``generate.py`` runs it
(Tencent-Hunyuan/HunyuanVideo-1.5 ``hyvideo/pipelines/hunyuan_video_pipeline.py`` at commit
60783e70; diffusers' ``HunyuanVideo15Pipeline`` / ``HunyuanVideo15ImageToVideoPipeline``, the
oracles of the tests, compute the same).

1. Three condition streams:

   * Qwen2.5-VL-7B's language model on the prompt inside the authors' video chat template
     (:data:`SYSTEM_MESSAGE`, their ``PROMPT_TEMPLATE_ENCODE_VIDEO_JSON``; the rendering is
     Qwen2.5-VL's ``chat_template`` with the generation prompt), tokenized by the folder's
     ``tokenizer.json`` to ``1000 + crop_start`` tokens (right truncation and padding with
     ``<|endoftext|>``), encoded with that mask; the feature is ``hidden_states[-3]`` (no
     final norm) past the first ``crop_start`` positions, found as the authors find it: the
     position right after ``<|im_start|>user\\n`` (:func:`crop_start`; 108 with the real
     tokenizer, diffusers' constant).
   * byT5 (Glyph-SDXL-v2) on the quoted text of the prompt (``"..."`` or ``“...”``),
     formatted ``Text "a". Text "b". `` (:func:`vidax.glyph.glyph_prompt`), 256 bytes with
     the color / font tokens, masked; a prompt with no quote gives zero states and an
     all-zero mask, as the authors.
   * image-to-video: SigLIP's ``last_hidden_state`` of the first frame resized and
     center-cropped to the video size (LANCZOS, their ``resize_and_center_crop``) then put
     through the folder's ``SiglipImageProcessor`` settings; text-to-video: none (the authors
     pass zeros, which the DiT masks out: the same output, tested in the DiT's tests).

2. Size. Image-to-video takes the authors' bucket of the image's aspect ratio at the DiT's
   resolution (480p: 640 px base, 720p: 960, in 16 px steps; :func:`vidax.pipelines.image.
   resolution_bucket`); text-to-video the 16:9 bucket by default (``aspect_ratio="W:H"``
   picks another bucket; an explicit ``size`` is taken as given, multiples of 16, as
   diffusers takes ``height`` / ``width``). Frames ``4k + 1`` (121 by default).
3. The DiT input: [noisy latents 32 | condition latents 32 | mask 1]. Image-to-video: the
   first frame through the VAE (posterior mean times the scaling factor) in frame 0 of the
   condition, the mask 1 on frame 0; text-to-video: zeros.
4. Sampling: flow-matching Euler (:class:`vidax.schedulers.FlowMatchEulerScheduler`, the
   authors' ``FlowMatchDiscreteScheduler(reverse=True)``) at the authors' shift per release
   (:data:`RELEASE_SETTINGS`: 5 at 480p, 9 at 720p text-to-video, 7 at 720p image-to-video
   and for the step-distilled DiT). Base DiTs: true CFG, scale 6, with the empty negative
   prompt (its byT5 stream is zeros); CFG-distilled DiTs: one DiT pass per step (scale 1;
   the authors prescribe 50 steps); the step-distilled DiT (MeanFlow): ``t_r`` is the next
   timestep, 0 on the last, 12 steps by default and 8 or 4 allowed (the counts the authors
   give). ``720p_i2v_distilled_sparse`` runs dense attention: the authors' SSTA block-sparse
   kernel approximates it; the weights are the same.
5. Decoding: ``latents / 1.03682`` through the VAE in the authors' spatial tiles over every
   frame (256 px, overlap 0.125; 128 px, 0.25 on an accelerator of at most 21 GiB: their
   ``get_vae_inference_config``; they tile this VAE in space only), frames ``(x + 1) / 2``
   clamped and truncated to uint8, 24 fps.

Release folder (the authors' ``ckpts/`` as their checkpoints-download.md lays it out)::

    transformer/<variant>/diffusion_pytorch_model.safetensors + config.json   the DiT
    vae/diffusion_pytorch_model.safetensors + config.json                     the VAE
    text_encoder/llm/            Qwen2.5-VL-7B-Instruct (config.json, model*.safetensors,
                                 tokenizer.json)
    text_encoder/byt5-small/     google/byt5-small (config.json, tokenizer settings)
    text_encoder/Glyph-SDXL-v2/  checkpoints/byt5_model.pt, assets/color_idx.json,
                                 assets/multilingual_10-lang_idx.json
    vision_encoder/siglip/       FLUX.1-Redux-dev (image_encoder/, feature_extractor/);
                                 read for image-to-video only

A folder with several ``transformer/<variant>/`` folders needs ``variant=``. Not done: the
super-resolution stage (``*_sr_distilled``: the authors' default, no installable oracle;
docs/models/hunyuan_video1_5.md says what is known), prompt rewriting, step caching, SSTA.

Precision policies: ``"bf16"`` (default) keeps the DiT's weights in bfloat16 and computes
with its bfloat16 policy (the authors: bf16 autocast), the text encoders in bfloat16, the
VAE and SigLIP in float32 (the authors: float16); ``"fp32"``: all float32, "highest".
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax import registry
from vidax.errors import VidaxError
from vidax.models.hunyuan_video1_5.config import (AUTHORS_SMALL_GPU_TILES, AUTHORS_TILES,
                                                  HunyuanVideo15DiTConfig,
                                                  HunyuanVideo15VAEConfig, TileSettings)
from vidax.models.hunyuan_video1_5.vae import tile_geometry
from vidax.models.reason1.config import Reason1Config
from vidax.models.siglip.config import SiglipVisionConfig
from vidax.models.t5.config import T5Config
from vidax.pipelines import base, memory, overrides
from vidax.pipelines.base import Needed, Part, PipelineBase, Run, find_files, open_folder
from vidax.pipelines.image import (BUCKET_BASE, resize_cover_center_crop, resolution_bucket,
                                   siglip_pixels)
from vidax.pipelines.inputs import load_image, read_json_config, refuse, to_unit_range
from vidax.schedulers.flow_euler import FlowMatchEulerScheduler
from vidax.sharding import constrain_batch
from vidax.glyph import ByT5GlyphTokenizer
from vidax.text import Tokenizer

MODEL_TYPE = "hunyuan_video1_5"
TASKS = ("t2v", "i2v")
VARIANTS = ("480p_t2v", "480p_i2v", "720p_t2v", "720p_i2v", "480p_t2v_distilled",
            "480p_i2v_distilled", "720p_i2v_distilled", "720p_i2v_distilled_sparse",
            "480p_i2v_step_distilled")

#: The authors' ``PIPELINE_CONFIGS`` (hyvideo/commons/__init__.py): CFG scale and flow shift per
#: release, and the step-distilled DiT's step count; the README's table prescribes 50 steps
#: for the others (the cfg-distilled ones "must use 50 steps").
RELEASE_SETTINGS = {
    "480p_t2v": (6.0, 5.0), "480p_i2v": (6.0, 5.0), "720p_t2v": (6.0, 9.0),
    "720p_i2v": (6.0, 7.0), "480p_t2v_distilled": (1.0, 5.0), "480p_i2v_distilled": (1.0, 5.0),
    "720p_i2v_distilled": (1.0, 7.0), "720p_i2v_distilled_sparse": (1.0, 7.0),
    "480p_i2v_step_distilled": (1.0, 7.0)}
#: The step counts the step-distilled DiT is distilled for: 12 (the authors' default) and 8
#: (README: "8 or 12 steps (recommended)"), and 4 ("faster speed with slightly reduced
#: quality").
MEANFLOW_STEPS = (12, 8, 4)
TINY_BUCKET_BASE = 64       # a tiny test release's buckets (64 px: a CPU's)

#: ``PROMPT_TEMPLATE_ENCODE_VIDEO_JSON``'s system turn. The authors write it as one Python
#: string continued over lines, so each point is joined by the next line's 8-space indent
#: after the space before the backslash: 9 spaces (diffusers' ``system_message`` is the same
#: string).
SYSTEM_MESSAGE = (" " * 9).join([
    "You are a helpful assistant. Describe the video by detailing the following aspects:",
    "1. The main content and theme of the video.",
    "2. The color, shape, size, texture, quantity, text, and spatial relationships of the "
    "objects.",
    "3. Actions, events, behaviors temporal relationships, physical movement changes of the "
    "objects.",
    "4. background environment, light, style and atmosphere.",
    "5. camera angles, movements, and transitions used in the video."])
#: ``TextEncoder(max_length=1000)``; ``byt5_max_length``; ``hidden_state_skip_layer=2``.
TEXT_LEN, BYT5_LEN, HIDDEN_STATE_SKIP = 1000, 256, 2
#: ``calculate_crop_start``'s marker and the text ``TextEncoder.__init__`` measures it on.
USER_MARKER, CROP_PROBE = "<|im_start|>user\n", "a photo of a cat"
FPS = 24.0                  # generate.py's ``save_video``


def chat_text(prompt: str) -> str:
    """The string Qwen2.5-VL's ``chat_template`` renders for the authors' two turns with
    ``add_generation_prompt=True``; an empty prompt becomes one space, as their
    ``apply_text_to_template`` (and diffusers' ``format_text_input``) make it."""
    return (f"<|im_start|>system\n{SYSTEM_MESSAGE}<|im_end|>\n"
            f"<|im_start|>user\n{prompt or ' '}<|im_end|>\n<|im_start|>assistant\n")


def crop_start(tokenizer: Tokenizer) -> int:
    """The authors' ``calculate_crop_start``: the index after the first occurrence of the
    ``<|im_start|>user\\n`` tokens in the templated probe text (0 if absent)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tokens = tokenizer([chat_text(CROP_PROBE), USER_MARKER])
    probe = tokens.ids[0][: tokens.lengths[0]].tolist()
    marker = tokens.ids[1][: tokens.lengths[1]].tolist()
    for i in range(len(probe) - len(marker) + 1):
        if probe[i: i + len(marker)] == marker:
            return i + len(marker)
    return 0


# ----------------------------------------------------------------------------- defaults
@dataclasses.dataclass(frozen=True, kw_only=True)
class Defaults(base.Defaults):
    """:class:`vidax.pipelines.base.Defaults` plus the bucket base of the release's
    resolution and whether its DiT is step-distilled."""

    bucket_base: int = 640
    meanflow: bool = False


def defaults_for(variant: str, tiny: bool = False) -> Defaults:
    if variant not in RELEASE_SETTINGS:
        raise VidaxError(f"unknown HunyuanVideo-1.5 variant {variant!r}; known: "
                         f"{', '.join(VARIANTS)}")
    guidance, shift = RELEASE_SETTINGS[variant]
    meanflow = variant.endswith("step_distilled")
    base_size = TINY_BUCKET_BASE if tiny else BUCKET_BASE[variant[:4]]
    height, width = resolution_bucket(9, 16, base_size)
    steps = MEANFLOW_STEPS[0] if meanflow else 50
    if tiny:
        steps = MEANFLOW_STEPS[-1] if meanflow else 3
    return Defaults(steps=steps, guidance_scale=guidance, shift=shift, size=(width, height),
                    frames=5 if tiny else 121, fps=FPS, negative_prompt="",
                    bucket_base=base_size, meanflow=meanflow)


# ----------------------------------------------------------------------------- the release
ROLES = {"dit": "the DiT", "vae": "the VAE", "text_encoder": "the Qwen2.5-VL text encoder",
         "byt5": "the Glyph-SDXL-v2 byT5 encoder", "image_encoder": "the SigLIP image encoder"}
#: The Parts ``--dit``, ``--vae``, ``--text-encoder [llm=]PATH`` / ``byt5=FILE`` and
#: ``--image-encoder`` replace (:mod:`vidax.pipelines.overrides`).
COMPONENT_OPTIONS = {"dit": "dit", "vae": "vae", "image_encoder": "image_encoder",
                     "text_encoder": {"": "text_encoder", "llm": "text_encoder", "byt5": "byt5"}}
GLYPH = "text_encoder/Glyph-SDXL-v2"
SIGLIP = "vision_encoder/siglip"


@dataclasses.dataclass(frozen=True)
class Release(base.Release):
    """:class:`vidax.pipelines.base.Release`; ``variant`` is the ``transformer/`` folder's
    name, ``tiny`` whether its DiT config is not that release's (a test release)."""

    tiny: bool = False


def _variant_folder(folder: Path, variant: str | None) -> str:
    found = sorted(p.name for p in (folder / "transformer").glob("*")
                   if (p / "config.json").is_file() and "_sr_" not in p.name)
    if variant is not None:
        if "_sr_" in variant:
            raise VidaxError(f"{folder}/transformer/{variant} is a super-resolution DiT, which "
                             "vidax does not run yet (docs/models/hunyuan_video1_5.md: what is "
                             "known of it); give a base release's folder: vidax writes the "
                             "base-resolution video")
        if variant not in found:
            raise VidaxError(f"{folder}/transformer/{variant}: no such DiT folder (with its "
                             f"config.json); the release holds: {', '.join(found) or 'none'}")
        return variant
    if len(found) != 1:
        raise VidaxError(
            f"{folder}/transformer holds " + (f"several DiTs ({', '.join(found)}): choose one "
                                              "with --variant (variant=)" if found else
                                              "no DiT folder with a config.json") +
            ". Nothing was loaded.")
    return found[0]


def inspect_folder(folder, variant: str | None = None) -> Release:
    """Find every component of a HunyuanVideo-1.5 release (the authors' ``ckpts/``, see the
    module docstring) without reading a weight; one :class:`VidaxError` lists every missing
    file. ``variant``: the ``transformer/<variant>`` folder (default: the only one)."""
    folder = open_folder(folder, "HunyuanVideo-1.5", VARIANTS, None, "the authors' ckpts/")
    variant = _variant_folder(folder, variant)
    dit_folder = folder / "transformer" / variant
    dit_config = HunyuanVideo15DiTConfig.from_dict(read_json_config(dit_folder / "config.json"))
    task = dit_config.ideal_task or ("i2v" if "_i2v" in variant else "t2v")
    if variant not in RELEASE_SETTINGS:
        raise VidaxError(f"{dit_folder}: an unknown HunyuanVideo-1.5 release; vidax runs "
                         f"{', '.join(VARIANTS)} (the super-resolution DiTs are not ported)")
    if dit_config.use_meanflow != variant.endswith("step_distilled"):
        raise VidaxError(f"{dit_folder}/config.json: use_meanflow={dit_config.use_meanflow} "
                         f"does not fit the {variant} release")
    specs = {"dit": registry.get(MODEL_TYPE, "dit", "original"),
             "vae": registry.get(MODEL_TYPE, "vae", "original"),
             "text_encoder": registry.get("reason1", "text_encoder", "transformers"),
             "byt5": registry.get("t5", "encoder", "t5stack")}
    unders = {"vae": "", "text_encoder": "text_encoder/llm", "byt5": f"{GLYPH}/checkpoints"}
    if task == "i2v":
        specs["image_encoder"] = registry.get("siglip", "vision_encoder", "transformers")
        unders["image_encoder"] = f"{SIGLIP}/image_encoder"
    parts = [Part(key, specs[key], ROLES[key], under=unders[key]) for key in unders]
    needed = [Needed("vae_folder", "vae", ("config.json",), "the VAE's settings"),
              Needed("text_encoder_folder", "text_encoder/llm", ("config.json", "tokenizer.json"),
                     "Qwen2.5-VL-7B-Instruct's settings and tokenizer"),
              Needed("byt5_folder", "text_encoder/byt5-small", ("config.json",),
                     "google/byt5-small's settings"),
              Needed("glyph_folder", f"{GLYPH}/assets",
                     ("color_idx.json", "multilingual_10-lang_idx.json"),
                     "Glyph-SDXL-v2's color and font tokens")]
    if task == "i2v":
        needed += [Needed("image_encoder_folder", f"{SIGLIP}/image_encoder", ("config.json",),
                          "SigLIP's settings"),
                   Needed("feature_extractor_folder", f"{SIGLIP}/feature_extractor",
                          ("preprocessor_config.json",), "SigLIP's image processor settings")]
    dit_file = overrides.path_for("dit", specs["dit"]) or (
        dit_folder / "diffusion_pytorch_model.safetensors")
    files = find_files(folder, parts, needed, what="HunyuanVideo-1.5 release",
                       also_missing=[] if dit_file.is_file() else [
                           f"transformer/{variant}/{dit_file.name} (the DiT)"])
    files["dit"] = dit_file
    configs = {"dit": dit_config,
               "vae": HunyuanVideo15VAEConfig.from_dict(read_json_config(
                   files["vae_folder"] / "config.json")),
               "text_encoder": Reason1Config.from_dict(read_json_config(
                   files["text_encoder_folder"] / "config.json"))}
    glyph = ByT5GlyphTokenizer.from_folders(files["byt5_folder"], files["glyph_folder"].parent,
                                            seq_len=BYT5_LEN)
    configs["byt5"] = dataclasses.replace(T5Config.from_dict(read_json_config(
        files["byt5_folder"] / "config.json")), vocab_size=glyph.vocab_size)
    if task == "i2v":
        configs["image_encoder"] = SiglipVisionConfig.from_dict(read_json_config(
            files["image_encoder_folder"] / "config.json"))
        configs["feature_extractor"] = read_json_config(
            files["feature_extractor_folder"] / "preprocessor_config.json")
    _check_widths(files, configs)
    preset = getattr(HunyuanVideo15DiTConfig, f"{task}_{variant[:4]}{variant[8:]}", None)
    tiny = preset is None or dit_config != preset()
    return Release(folder, task, variant, defaults_for(variant, tiny), configs, files, specs,
                   tiny=tiny)


def _check_widths(files: dict, configs: dict) -> None:
    """Each encoder's width against what the DiT reads, the VAE's channels against its
    latents: one clear error naming the folder of the one that does not fit."""
    dit = configs["dit"]
    checks = [("text_encoder_folder", "Qwen2.5-VL", configs["text_encoder"].hidden_size,
               dit.text_states_dim),
              ("byt5_folder", "byT5", configs["byt5"].dim, dit.byt5_states_dim),
              ("vae_folder", "VAE latent", configs["vae"].latent_channels, dit.in_channels)]
    if "image_encoder" in configs:
        checks.append(("image_encoder_folder", "SigLIP", configs["image_encoder"].dim,
                       dit.vision_states_dim))
    for key, what, width, needed in checks:
        if width != needed:
            raise VidaxError(f"{files[key]}: a {what} width of {width}; the DiT of "
                             f"{files['dit'].parent.name} reads {needed}. Not a component of "
                             "this release. Nothing was loaded.")


# ----------------------------------------------------------------------------- the request
@dataclasses.dataclass(frozen=True, kw_only=True)
class Request(base.Request):
    """:class:`vidax.pipelines.base.Request`; image-to-video: ``image`` the first frame as
    given, uint8 ``[H, W, 3]`` (:attr:`first_frame` fits it to ``size`` when the pipeline
    runs, so that a request too large for the devices is refused before any resize)."""

    @property
    def first_frame(self) -> np.ndarray | None:
        """The first frame resized (LANCZOS) to cover the video size and center-cropped, uint8:
        SigLIP's input; ``to_unit_range`` of it is the VAE's."""
        if self.image is None:
            return None
        width, height = self.size
        return resize_cover_center_crop(self.image, height, width)


def make_request(task: str, variant: str, prompt: str, *, negative_prompt=None, image=None,
                 last_image=None, sample_solver=None, size=None, steps=None,
                 aspect_ratio: str | None = None, noise=None, release: Release | None = None,
                 **options) -> Request:
    """Validate and resolve a generation's options (:meth:`base.Request.resolve`'s; None:
    the release's default). ``guidance_scale`` > 1 runs true CFG with ``negative_prompt``
    (default empty, as the authors). ``aspect_ratio``: text-to-video's ``"W:H"``, the bucket
    of that ratio (default 16:9; an explicit ``size`` is taken as given). Image-to-video:
    the authors' bucket of the image's aspect ratio, unless a ``size`` is given (the image is
    then resized to cover it and center-cropped, as to a bucket)."""
    if task not in TASKS:
        raise VidaxError(f"HunyuanVideo-1.5 task must be one of {TASKS}, got {task!r}")
    d = release.defaults if release is not None else defaults_for(variant)
    name = f"the {variant} DiT"
    refuse("HunyuanVideo-1.5", last_image=(last_image, "it conditions on one first frame"),
           sample_solver=(sample_solver, "the sampler is fixed: flow-matching Euler"))
    if task == "i2v" and image is None:
        raise VidaxError(f"{name} is image-to-video: give the first frame with --image IMAGE "
                         "(or load a t2v DiT for text-to-video)")
    if task == "t2v" and image is not None:
        raise VidaxError(f"{name} is text-to-video and takes no --image: load an i2v DiT "
                         "(transformer/480p_i2v, ...) for image-to-video")
    if d.meanflow and steps is not None and steps not in MEANFLOW_STEPS:
        raise VidaxError(f"{name} is step-distilled (MeanFlow) for "
                         f"{' or '.join(map(str, MEANFLOW_STEPS))} steps (the authors: 8 or "
                         f"12 recommended, 4 faster with slightly lower quality); got "
                         f"--steps {steps}")
    if aspect_ratio is not None and (size is not None or image is not None):
        raise VidaxError("aspect_ratio picks a text-to-video bucket; it goes with neither an "
                         "explicit size nor an image (whose aspect ratio is used)")
    vae = release.configs["vae"] if release is not None else HunyuanVideo15VAEConfig()
    spatial, temporal = vae.spatial_compression_ratio, vae.temporal_compression_ratio
    first = None
    if image is not None:
        first = load_image(image)
        if size is None:
            height, width = resolution_bucket(first.shape[0], first.shape[1], d.bucket_base)
            size = (width, height)
    elif aspect_ratio is not None:
        try:
            w, h = (int(x) for x in aspect_ratio.split(":"))
            if w <= 0 or h <= 0:
                raise ValueError
        except ValueError:
            raise VidaxError(f"aspect_ratio {aspect_ratio!r}: give it as W:H, e.g. 16:9, "
                             "two positive integers") from None
        height, width = resolution_bucket(h, w, d.bucket_base)
        size = (width, height)
    request = Request.resolve(task, d, prompt, negative_prompt=negative_prompt, size=size,
                              steps=steps, size_multiple=spatial,
                              latent_channels=vae.latent_channels,
                              vae_stride=(temporal, spatial, spatial), image=first,
                              **options)
    if negative_prompt and request.guidance_scale <= 1:
        raise VidaxError(f"{name} runs one DiT pass per step at guidance "
                         f"{request.guidance_scale:g}, which reads no negative prompt: give "
                         "--guidance-scale above 1 (CFG) with --negative-prompt, or neither")
    return request.with_noise(noise)


# ----------------------------------------------------------------------------- the pipeline
@functools.partial(jax.jit, static_argnums=(0, 4))
def _encode_qwen(graphdef, params, ids, mask, crop: int):
    """``hidden_states[-(skip + 1)]`` past the template: ``[B, L - crop, D]`` float32."""
    states = nnx.merge(graphdef, params)(ids, mask)[-(HIDDEN_STATE_SKIP + 1)]
    return states[:, crop:].astype(jnp.float32)


@functools.partial(jax.jit, static_argnums=0)
def _encode_byt5(graphdef, params, ids, mask):
    return nnx.merge(graphdef, params)(ids, mask).astype(jnp.float32)


@functools.partial(jax.jit, static_argnums=0)
def _encode_siglip(graphdef, params, pixels):
    return nnx.merge(graphdef, params)(pixels).astype(jnp.float32)


class HunyuanVideo15Pipeline(PipelineBase):
    """A loaded HunyuanVideo-1.5 release (:class:`vidax.pipelines.base.PipelineBase`);
    options are :func:`make_request`'s."""

    NAME = "HunyuanVideo-1.5"
    CHEAPER_GUIDANCE = True
    PAIRED_INPUTS = ("text", "text_mask", "byt5", "byt5_mask", "vision")
    make_request = staticmethod(make_request)

    def param_dtype(self, component: str):
        if component == "vision_encoder":
            return self.precision.image_encoder
        return super().param_dtype(component)

    def describe(self) -> str:
        sparse = (" -- SSTA sparse attention replaced by dense attention (exact; the "
                  "authors' kernel approximates it)" if self.variant.endswith("_sparse") else "")
        return f"{self.NAME} {self.variant}{' (tiny)' if self.release.tiny else ''}{sparse}"

    def request(self, prompt: str, **options) -> Request:
        return make_request(self.task, self.variant, prompt, release=self.release, **options)

    def setup(self) -> None:
        files = self.release.files
        self.tokenizer = Tokenizer(files["text_encoder_folder"], seq_len=TEXT_LEN, clean=None,
                                   special="none", pad_token="<|endoftext|>")
        self.crop_start = crop_start(self.tokenizer)
        self.tokenizer = Tokenizer(files["text_encoder_folder"], seq_len=TEXT_LEN + self.crop_start,
                                   clean=None, special="none", pad_token="<|endoftext|>")
        self.glyph_tokenizer = ByT5GlyphTokenizer.from_folders(
            files["byt5_folder"], files["glyph_folder"].parent, seq_len=BYT5_LEN)

    def dit_geometry(self, request: Request) -> memory.DiTGeometry:
        """The [cond, uncond] batch of 2 with CFG; the video tokens with 1000 Qwen, 256
        byT5 and (image-to-video) 729 SigLIP tokens in one attention."""
        cfg = self.release.configs["dit"]
        joint = TEXT_LEN + BYT5_LEN
        if request.task == "i2v":
            vision = self.release.configs["image_encoder"]
            joint += (vision.image_size // vision.patch_size) ** 2
        return memory.DiTGeometry(2 if request.guidance_scale > 1 else 1,
                                  memory.patches(request.latent_shape, cfg.patch_size),
                                  cfg.hidden_size, cfg.heads_num, cfg.mlp_dim, joint=joint,
                                  masked=True)

    # ------------------------------------------------------------------------- encoders
    def encode_text(self, prompts: list[str]) -> tuple[jax.Array, jax.Array]:
        """Qwen states ``[B, 1000, D]`` float32 and their mask ``[B, 1000]``; warns when a
        prompt is truncated."""
        tokens = self.tokenizer([chat_text(p) for p in prompts])
        graphdef, params = nnx.split(self.text_encoder)
        states = _encode_qwen(graphdef, params, self._place(tokens.ids),
                              self._place(tokens.mask), self.crop_start)
        return states, self._place(tokens.mask[:, self.crop_start:])

    def encode_glyphs(self, prompts: list[str]) -> tuple[jax.Array, jax.Array]:
        """byT5 states ``[B, 256, 1472]`` and mask ``[B, 256]`` of the prompts' quoted text
        (:func:`vidax.glyph.glyph_prompt`): zeros and an all-zero mask for a prompt without
        any, as the authors."""
        tokens = self.glyph_tokenizer(prompts)      # warns if cut
        states = np.zeros((*tokens.ids.shape, self.release.configs["byt5"].dim), np.float32)
        rows = np.flatnonzero(self.glyph_tokenizer.has_glyph(tokens))
        if rows.size:
            graphdef, params = nnx.split(self.byt5)
            states[rows] = np.asarray(_encode_byt5(graphdef, params, self._place(tokens.ids[rows]),
                                                   self._place(tokens.mask[rows])))
        return self._place(states), self._place(tokens.mask)

    def encode_image(self, request: Request) -> tuple[jax.Array | None, jax.Array | None]:
        """Image-to-video: SigLIP states ``[1, N, 1152]`` and the first frame's latent
        ``[1, 1, h, w, 32]`` (posterior mean times the scaling factor); (None, None) for
        text-to-video."""
        if request.image is None:
            return None, None
        with self._progress.phase("encoding the first frame (SigLIP, the VAE)"):
            first = request.first_frame
            pixels = siglip_pixels(first, self.release.configs["feature_extractor"])
            graphdef, params = nnx.split(self.image_encoder)
            vision = _encode_siglip(graphdef, params, self._place(pixels[None]))
            latent = self.vae.encode(self._place(to_unit_range(first)[None, None]))
        return vision, latent

    def prepare(self, request: Request) -> Run:
        """The prompt (and, with CFG, the negative prompt) through Qwen and byT5, the image
        through SigLIP and the VAE; the condition channels fixed for the run."""
        guided = request.guidance_scale > 1     # the authors' do_classifier_free_guidance
        prompts = [request.prompt] + ([request.negative_prompt or ""] if guided else [])
        with self._progress.phase("encoding the prompt (Qwen2.5-VL, byT5)"
                                  + (" and the negative prompt" if guided else "")):
            text, text_mask = self.encode_text(prompts)
            # the authors' unconditional byT5 row is always the empty prompt's (zeros);
            # diffusers encodes the negative prompt's quotes instead
            byt5, byt5_mask = self.encode_glyphs(prompts[:1] + [""] * guided)
        vision, image_latent = self.encode_image(request)
        latents = self.initial_noise(request)
        condition = jnp.zeros((*latents.shape[:-1], latents.shape[-1] + 1), jnp.float32)
        if image_latent is not None:
            condition = condition.at[:, :1, ..., :-1].set(image_latent)
            condition = condition.at[:, :1, ..., -1].set(1.0)
        if vision is not None and guided:
            vision = jnp.concatenate([vision, vision])
        inputs = {"text": text, "text_mask": text_mask, "byt5": byt5, "byt5_mask": byt5_mask,
                  "vision": vision, "condition": condition, "t_r": None}
        if guided:
            inputs["guidance_scale"] = jnp.float32(request.guidance_scale)
        scheduler = FlowMatchEulerScheduler(request.steps, request.shift)
        what = (f"{request.steps} steps, shift {request.shift:g}, "
                + (f"CFG {request.guidance_scale:g}" if guided else "one DiT pass per step")
                + (", MeanFlow" if self.release.defaults.meanflow else ""))
        if self.variant.endswith("_sparse"):
            what += ", dense attention in place of SSTA"
        return Run(latents, scheduler, inputs, nnx.split(self.dit), what)

    def step_inputs(self, request: Request, run: Run, index: int, t):
        """MeanFlow: ``t_r`` is the next timestep, 0 on the last step."""
        if not self.release.defaults.meanflow:
            return run.model, jnp.float32(t), {}
        timesteps = run.scheduler.timesteps
        t_r = timesteps[index + 1] if index + 1 < len(timesteps) else 0.0
        return run.model, jnp.float32(t), {"t_r": jnp.float32(t_r)}

    @staticmethod
    def predict(dit, x, t, inputs, compute_dtype):
        condition = jnp.broadcast_to(inputs["condition"], (*x.shape[:-1],
                                                           inputs["condition"].shape[-1]))
        def c(a):
            return None if a is None else constrain_batch(a)

        return dit(jnp.concatenate([x, condition], axis=-1), t, c(inputs["text"]),
                   c(inputs["text_mask"]), c(inputs["byt5"]), c(inputs["byt5_mask"]),
                   c(inputs["vision"]), inputs["t_r"], compute_dtype=compute_dtype)

    def vae_tiles(self) -> TileSettings:
        """The authors' tiles (``get_vae_inference_config``): 256 px with overlap 0.125, or
        128 px with 0.25 on an accelerator of at most 21 GiB (its ``bytes_limit``; the CPU
        takes the large ones)."""
        devices = list(self.mesh.devices.flat) if self.mesh is not None else jax.devices()[:1]
        try:
            limit = (devices[0].memory_stats() or {}).get("bytes_limit")
        except Exception:  # noqa: BLE001 -- a backend without memory statistics
            limit = None
        small = devices[0].platform != "cpu" and limit is not None and limit <= 21 * 2**30
        return AUTHORS_SMALL_GPU_TILES if small else AUTHORS_TILES

    def vae_geometry(self, request: Request) -> memory.VAEGeometry:
        """The largest spatial tile, decoded over every frame (nobody tiles this VAE in
        time), with the mid block's frame-causal attention over its latent pixels."""
        cfg = self.release.configs["vae"]
        tiles = tile_geometry(request.latent_shape, tiled=self.vae_tiles(), config=cfg)
        return memory.tiled_vae(tiles, cfg.block_out_channels[0], request,
                                cfg.block_out_channels[-1])

    def decode_latents(self, latents: jax.Array, on_chunk=None) -> jax.Array:
        """The VAE in the authors' spatial tiles (:meth:`vae_tiles`) over all frames, as
        their ``memory_efficient_context`` decodes (a frame of at most one tile in one
        pass)."""
        return self.vae.decode(latents, tiled=self.vae_tiles(), on_chunk=on_chunk)


Pipeline = HunyuanVideo15Pipeline
