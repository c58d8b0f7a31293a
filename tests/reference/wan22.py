"""The authors' Wan DiT, ``wan.modules.model`` of the ``wan22`` package, importable on CPU.

``wan22`` (Wan-Video/Wan2.2, installed with ``--no-deps``) does not import as-is on a
CPU-only machine without its full dependency set. :func:`model_module` returns
``wan.modules.model`` after these patches:

1. ``wan/__init__.py`` imports every pipeline (text2video, image2video, speech2video,
   animate, ...) and their dependencies. It is bypassed: bare module objects for ``wan`` and
   ``wan.modules`` are registered in ``sys.modules`` with ``__path__`` pointing at the
   installed directories, so only ``wan/modules/model.py`` and what it imports
   (``wan/modules/attention.py``, diffusers' ``ConfigMixin``/``ModelMixin``) run.
2. ``wan.modules.attention.flash_attention`` asserts a CUDA device and calls flash-attn
   (not installed). The name the model module uses, ``wan.modules.model.flash_attention``,
   is replaced with :func:`sdpa_flash_attention`: the same variable-length semantics through
   ``torch.nn.functional.scaled_dot_product_attention``. One deliberate difference: the
   original casts float32 inputs to bfloat16 for the kernel; the oracle keeps float32.
3. Nothing else: neither module calls ``torch.cuda.current_device`` at import (checked), so
   it is not patched; the ``torch.amp.autocast("cuda", ...)`` blocks are inactive on a CPU
   build (float32 throughout, so they would change nothing anyway).

Test-only; vidax itself never imports torch.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path


def sdpa_flash_attention(q, k, v, q_lens=None, k_lens=None, dropout_p=0.0, softmax_scale=None,
                         q_scale=None, causal=False, window_size=(-1, -1), deterministic=False,
                         dtype=None, version=None):
    """``wan.modules.attention.flash_attention`` on CPU, ``[B, L, heads, head_dim]`` layout.

    Semantics kept from the flash-attn varlen call it replaces:

    * ``k_lens[b]``: sample ``b`` attends only to its first ``k_lens[b]`` keys (the rest of
      its row is padding); ``None`` means all keys.
    * ``q_lens``: the original drops queries past ``q_lens[b]`` and then unflattens to
      ``(B, Lq)``, which only works when every ``q_lens[b] == Lq``; that is the one case
      accepted here (the model never passes ``q_lens``).
    * ``softmax_scale`` (default ``1/sqrt(head_dim)``) and ``q_scale`` as given; the output
      has ``q``'s dtype.

    Not reproduced (the DiT never asks for them): dropout, causal masking and local windows
    raise; ``dtype``/``version``/``deterministic`` only steer the CUDA kernel.
    """
    import torch
    import torch.nn.functional as F

    del deterministic, dtype, version
    if dropout_p or causal or tuple(window_size) != (-1, -1):
        raise NotImplementedError("the CPU oracle supports only dropout 0, non-causal, global "
                                  "attention")
    lq, lk = q.shape[1], k.shape[1]
    if q_lens is not None and bool((torch.as_tensor(q_lens) != lq).any()):
        raise NotImplementedError("q_lens shorter than the query length")
    if q_scale is not None:
        q = q * q_scale
    mask = None
    if k_lens is not None:
        k_lens = torch.as_tensor(k_lens, device=k.device)
        keep = torch.arange(lk, device=k.device)[None, :] < k_lens[:, None]  # [B, Lk]
        mask = keep[:, None, None, :]
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         attn_mask=mask, scale=softmax_scale)
    return out.transpose(1, 2).to(q.dtype)


def _wan_root() -> Path:
    """The installed ``wan`` directory, also once a bare ``wan`` is in ``sys.modules``."""
    loaded = sys.modules.get("wan")
    if loaded is not None and getattr(loaded, "__path__", None):
        return Path(next(iter(loaded.__path__)))
    spec = importlib.util.find_spec("wan")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the wan22 package is not installed (see requirements/)")
    return Path(next(iter(spec.submodule_search_locations)))


def _packages(*names: str) -> None:
    """Register bare packages (``"wan"``, ``"wan.modules"``, ...) pointing at the installed
    folders, so their submodules import without running the packages' ``__init__.py``.
    Each gets a spec, so ``importlib.util.find_spec`` of it keeps working (transformers and
    diffusers probe with it) whichever oracle is built first."""
    root = _wan_root()
    for name in names:
        if name in sys.modules:
            continue
        path = root.joinpath(*name.split(".")[1:])
        module = types.ModuleType(name)
        module.__path__ = [str(path)]
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(path)]
        module.__spec__ = spec
        sys.modules[name] = module


@functools.cache
def model_module() -> types.ModuleType:
    """``wan.modules.model`` from the installed wan22 package, patched to run on CPU."""
    _packages("wan", "wan.modules")
    module = importlib.import_module("wan.modules.model")
    module.flash_attention = sdpa_flash_attention
    return module


# ----------------------------------------------------------------------------- CLIP (image encoder)
class _Normalize:
    """``torchvision.transforms.Normalize`` (``F.normalize``): ``(x - mean) / std`` per channel
    of a ``[..., C, H, W]`` tensor, in the tensor's dtype; not in place."""

    def __init__(self, mean, std, inplace=False):
        self.mean, self.std, self.inplace = list(mean), list(std), inplace

    def __call__(self, tensor):
        import torch

        mean = torch.as_tensor(self.mean, dtype=tensor.dtype, device=tensor.device).view(-1, 1, 1)
        std = torch.as_tensor(self.std, dtype=tensor.dtype, device=tensor.device).view(-1, 1, 1)
        return (tensor if self.inplace else tensor.clone()).sub_(mean).div_(std)


class _Unused:
    """A torchvision transform the CLIP oracle builds but never calls."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} is a stand-in (torchvision is not "
                                  "installed); CLIPModel.visual does not call it")


def _torchvision_stand_in() -> dict[str, types.ModuleType]:
    transforms = types.ModuleType("torchvision.transforms")
    transforms.Normalize = _Normalize
    transforms.Compose = type("Compose", (), {"__init__": lambda self, t: setattr(
        self, "transforms", list(t))})
    transforms.Resize = type("Resize", (_Unused,), {})
    transforms.ToTensor = type("ToTensor", (_Unused,), {})
    transforms.InterpolationMode = types.SimpleNamespace(BICUBIC="bicubic")
    package = types.ModuleType("torchvision")
    package.transforms = transforms
    return {"torchvision": package, "torchvision.transforms": transforms}


@functools.cache
def clip_module() -> types.ModuleType:
    """``wan.modules.animate.clip`` (the Wan2.1 ``wan/modules/clip.py``: the same code but for
    its relative imports) from the installed wan22 package, patched to run on CPU.

    The same bypass as :func:`model_module` (``wan/__init__.py`` and, here, also
    ``wan/modules/animate/__init__.py``, which imports the whole Animate model, are not run),
    plus:

    * ``flash_attention`` -> :func:`sdpa_flash_attention` (float32 kept).
    * torchvision is not installed; the module imports ``torchvision.transforms as T`` only to
      build ``_clip``'s transforms, of which ``CLIPModel.visual`` calls ``T.Normalize`` alone
      (``transforms.transforms[-1]``). Stand-ins are placed in ``sys.modules`` for the import
      only and removed after it, so nothing else (diffusers' torchvision check) sees them:
      a faithful ``Normalize`` (:class:`_Normalize`) and inert ``Compose``/``Resize``/
      ``ToTensor`` that refuse to run.
    """
    _packages("wan", "wan.modules", "wan.modules.animate")
    # Its other imports first, without the stand-ins: transformers (via the tokenizer wrapper)
    # probes for torchvision with find_spec, which a spec-less stand-in would break.
    for name in ("wan.modules.attention", "wan.modules.tokenizers",
                 "wan.modules.animate.xlm_roberta"):
        importlib.import_module(name)
    stand_ins = {k: v for k, v in _torchvision_stand_in().items() if k not in sys.modules}
    sys.modules.update(stand_ins)
    try:
        module = importlib.import_module("wan.modules.animate.clip")
    finally:
        for name in stand_ins:
            sys.modules.pop(name, None)
    module.flash_attention = sdpa_flash_attention
    return module


@functools.cache
def tokenizers_module() -> types.ModuleType:
    """``wan.modules.tokenizers`` (``HuggingfaceTokenizer``: the authors' prompt cleaning over
    transformers' ``AutoTokenizer``). Needs ftfy, regex and transformers; nothing patched."""
    _packages("wan", "wan.modules")
    return importlib.import_module("wan.modules.tokenizers")


@functools.cache
def t5_module() -> types.ModuleType:
    """``wan.modules.t5`` (``T5Encoder``, the UMT5 text encoder), importable on CPU.

    One patch: ``T5EncoderModel.__init__`` has the default ``device=torch.cuda.current_device()``,
    evaluated when the module is imported, which raises on a CPU-only torch. During the import
    ``torch.cuda.current_device`` returns ``"cpu"`` (so that default becomes the CPU), and is
    restored afterwards. ``T5Encoder`` and the layers the tests use are untouched.
    """
    import torch

    tokenizers_module()
    current_device = torch.cuda.current_device
    torch.cuda.current_device = lambda: "cpu"
    try:
        return importlib.import_module("wan.modules.t5")
    finally:
        torch.cuda.current_device = current_device


@functools.cache
def fm_solvers() -> tuple[types.ModuleType, types.ModuleType]:
    """The authors' flow-matching samplers: ``wan.utils.fm_solvers_unipc`` (UniPC) and
    ``wan.utils.fm_solvers`` (DPM-Solver++, ``get_sampling_sigmas``, ``retrieve_timesteps``).

    Only ``wan/__init__.py`` is bypassed; ``wan/utils/__init__.py`` imports just these two
    modules (and diffusers' scheduler base classes), so it runs as shipped.
    """
    _packages("wan")
    return (importlib.import_module("wan.utils.fm_solvers_unipc"),
            importlib.import_module("wan.utils.fm_solvers"))


@functools.cache
def vae2_1_module() -> types.ModuleType:
    """``wan.modules.vae2_1`` (``WanVAE_``, the Wan2.1 VAE; Wan2.1's ``wan/modules/vae.py``
    under another name). Only ``wan/__init__.py`` is bypassed: the module needs torch and
    einops, runs on CPU as shipped, and calls nothing CUDA at import."""
    _packages("wan", "wan.modules")
    return importlib.import_module("wan.modules.vae2_1")


@functools.cache
def vae2_2_module() -> types.ModuleType:
    """``wan.modules.vae2_2`` (``WanVAE_``, the Wan2.2 VAE). The same bypass as
    :func:`vae2_1_module`: torch and einops only, runs on CPU as shipped."""
    _packages("wan", "wan.modules")
    return importlib.import_module("wan.modules.vae2_2")


@functools.cache
def text2video_module() -> types.ModuleType:
    """``wan.text2video`` (``WanT2V``: the authors' text-to-video sampling loop).

    Its imports are the modules above (built first, so ``wan.modules.t5``'s CUDA default is
    patched and ``flash_attention`` replaced) plus ``wan.distributed``, which imports on CPU
    as shipped. ``WanT2V.__init__`` loads full-size files onto CUDA; callers build a stand-in
    ``self`` (``object.__new__``) holding their own models and call ``generate`` on it.
    """
    model_module()
    t5_module()
    vae2_1_module()
    fm_solvers()
    return importlib.import_module("wan.text2video")


# ------------------------------------------------------------------------- Wan2.2 sampling loops
def _to_tensor(pic):
    """``torchvision.transforms.functional.to_tensor`` for what the loops pass it (a PIL
    image): ``[C, H, W]`` float32 in [0, 1], ``uint8 / 255``."""
    import numpy as np
    import torch

    array = np.array(pic, copy=True)
    if array.ndim == 2:
        array = array[:, :, None]
    return torch.from_numpy(array).permute(2, 0, 1).contiguous().to(torch.float32).div(255)


def _import_with_torchvision_functional(name: str) -> types.ModuleType:
    """Import ``name`` with the torchvision stand-ins of :func:`clip_module` plus
    ``torchvision.transforms.functional`` (only ``to_tensor``: :func:`_to_tensor`), present
    in ``sys.modules`` for the import only. ``wan/utils/utils.py`` imports torchvision at
    the top but uses it only in video writing, which the loops do not call."""
    stand_ins = _torchvision_stand_in()
    functional = types.ModuleType("torchvision.transforms.functional")
    functional.to_tensor = _to_tensor
    stand_ins["torchvision.transforms"].functional = functional
    stand_ins["torchvision.transforms.functional"] = functional
    stand_ins = {k: v for k, v in stand_ins.items() if k not in sys.modules}
    sys.modules.update(stand_ins)
    try:
        return importlib.import_module(name)
    finally:
        for key in stand_ins:
            sys.modules.pop(key, None)


@functools.cache
def textimage2video_module() -> types.ModuleType:
    """``wan.textimage2video`` (``WanTI2V``: TI2V-5B's text- and image-to-video loops).

    The modules it needs are built first (:func:`text2video_module`'s set plus the Wan2.2
    VAE), then it is imported with :func:`_import_with_torchvision_functional` (its
    ``TF.to_tensor``, and ``wan.utils.utils``' top-level torchvision import). Its
    ``__init__`` loads full-size files onto CUDA: callers build a stand-in ``self``.
    """
    text2video_module()
    vae2_2_module()
    _import_with_torchvision_functional("wan.utils.utils")
    return _import_with_torchvision_functional("wan.textimage2video")


@functools.cache
def image2video_module() -> types.ModuleType:
    """``wan.image2video`` (``WanI2V``: the A14B image-to-video loop), imported as
    :func:`textimage2video_module`; callers build a stand-in ``self``."""
    text2video_module()
    return _import_with_torchvision_functional("wan.image2video")


# ----------------------------------------------------------------------------- Wan2.1 DiT layout
#: The authors' Wan2.1 image-branch constants (``MLPProj(1280, dim)``, 257 CLIP tokens).
CLIP_DIM, CLIP_TOKENS = 1280, 257


def wan2_1_dit_state(cfg) -> dict:
    """A state dict in the authors' Wan2.1 DiT layout at ``cfg`` (a vidax ``WanDiTConfig``,
    whose fields are ``WanModel``'s keyword arguments), values uninitialised: the caller
    randomises them.

    Wan2.2's ``WanModel`` (this package) has every tensor of Wan2.1's but the image branch of
    i2v / flf2v, which is added by name and shape as Wan2.1's ``model.py`` defines it:
    ``WanI2VCrossAttention`` (``k_img``, ``v_img``: Linear(dim, dim); ``norm_k_img``:
    RMSNorm(dim)) and ``MLPProj(1280, dim)`` (``img_emb.proj``: LayerNorm(1280),
    Linear(1280, 1280), GELU, Linear(1280, dim), LayerNorm(dim)); flf2v adds ``emb_pos``
    [1, 514, 1280]. diffusers' strict load after its own converter checks this key set."""
    import dataclasses

    import torch

    task = "t2v" if cfg.model_type == "t2v" else "i2v"
    state = dict(model_module().WanModel(**dict(dataclasses.asdict(cfg), model_type=task))
                 .state_dict())
    if cfg.model_type != "t2v":
        d = cfg.dim
        for n in range(cfg.num_layers):
            p = f"blocks.{n}.cross_attn."
            state |= {p + "k_img.weight": torch.empty(d, d), p + "k_img.bias": torch.empty(d),
                      p + "v_img.weight": torch.empty(d, d), p + "v_img.bias": torch.empty(d),
                      p + "norm_k_img.weight": torch.empty(d)}
        state |= {"img_emb.proj.0.weight": torch.empty(CLIP_DIM),
                  "img_emb.proj.0.bias": torch.empty(CLIP_DIM),
                  "img_emb.proj.1.weight": torch.empty(CLIP_DIM, CLIP_DIM),
                  "img_emb.proj.1.bias": torch.empty(CLIP_DIM),
                  "img_emb.proj.3.weight": torch.empty(d, CLIP_DIM),
                  "img_emb.proj.3.bias": torch.empty(d),
                  "img_emb.proj.4.weight": torch.empty(d),
                  "img_emb.proj.4.bias": torch.empty(d)}
        if cfg.model_type == "flf2v":
            state["img_emb.emb_pos"] = torch.empty(1, 2 * CLIP_TOKENS, CLIP_DIM)
    return {k: v.detach().clone().contiguous() for k, v in state.items()}


# ----------------------------------------------------------------------------- Wan VAEs
def authors_vae(cfg):
    """The authors' ``WanVAE_`` at a vidax ``WanVAEConfig`` (Wan2.1, ``wan/modules/vae2_1.py``)
    or ``Wan22VAEConfig`` (Wan2.2, ``vae2_2.py``: the one with a ``dec_dim``), in eval mode."""
    wan2_2 = hasattr(cfg, "dec_dim")
    module = vae2_2_module() if wan2_2 else vae2_1_module()
    return module.WanVAE_(dim=cfg.dim, z_dim=cfg.z_dim, dim_mult=list(cfg.dim_mult),
                          num_res_blocks=cfg.num_res_blocks, attn_scales=[],
                          temperal_downsample=list(cfg.temporal_downsample), dropout=0.0,
                          **({"dec_dim": cfg.dec_dim} if wan2_2 else {})).eval()


def vae_case(family: str, cfg, path: Path, *, videos: dict, latents: dict):
    """A ``tests.parity.VAECase`` of the authors' tiny VAE (:func:`authors_vae`, random values
    in every tensor, seed 0) saved with ``torch.save(state_dict())`` at ``path``: the inputs
    drawn by ``tests.parity.draw_inputs`` (seed 1; ``videos`` / ``latents``: frame count ->
    shape) and the outputs of :func:`vae_outputs`."""
    import torch

    from tests.parity import VAECase, draw_inputs, randomize

    ref = authors_vae(cfg)
    randomize(ref.named_parameters(), seed=0)
    torch.save(ref.state_dict(), path)
    videos, latents = draw_inputs(1, videos, latents)
    return VAECase(family, path, cfg, {"videos": videos, "latents": latents},
                   vae_outputs(ref, cfg, videos, latents), ref)


def vae_outputs(ref, cfg, videos: dict, latents: dict) -> dict:
    """The authors' ``WanVAE_`` (either version) on each video and latent batch, as vidax's
    channels-last arrays by the same keys: ``encoded``, the normalised mu (``WanVAE_.encode``
    with the wrapper's scale, ``cfg.latents_mean`` / ``latents_std``); ``moments``, the raw
    ``(mu, log_var)`` (the output of its ``conv1``, caught with a hook); ``decoded``, the
    unclamped decode of normalised latents."""
    import torch

    from tests.parity import to_channels_last, to_ncthw

    scale = [torch.tensor(cfg.latents_mean), 1.0 / torch.tensor(cfg.latents_std)]
    encoded, moments, decoded = {}, {}, {}
    captured = []
    hook = ref.conv1.register_forward_hook(lambda mod, args, out: captured.append(out))
    with torch.no_grad():
        for t, video in videos.items():
            captured.clear()
            encoded[t] = to_channels_last(ref.encode(to_ncthw(video), scale))
            mu, log_var = captured[0].chunk(2, dim=1)
            moments[t] = (to_channels_last(mu), to_channels_last(log_var))
        hook.remove()
        for t, z in latents.items():
            decoded[t] = to_channels_last(ref.decode(to_ncthw(z), scale))
    return {"encoded": encoded, "moments": moments, "decoded": decoded}
