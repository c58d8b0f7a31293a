"""The authors' LTX-Video models (PyPI ``ltx-video``, package ``ltx_video``, Lightricks/LTX-Video)
as CPU oracles, and their release file layout.

``ltx-video`` is installed with ``--no-deps`` (its pins, e.g. ``transformers<4.52`` and
``huggingface-hub~=0.30``, are older than this environment's). What the model modules really
import is already here: torch, diffusers (``ConfigMixin``/``ModelMixin``, ``RMSNorm``,
``AdaLayerNormSingle``, ``PixArtAlpha*`` embeddings, ``GELU``, LoRA attention processors --
all still in diffusers 0.42), einops, safetensors, numpy. Nothing is patched: the package's
``__init__.py`` files are empty, no module asserts CUDA at import, and ``torch_xla`` is
imported under ``try`` only.

Release layout (what the authors' single-file loaders read):

* ``ltxv-*-0.9.8-*.safetensors``: ``model.diffusion_model.`` + ``Transformer3DModel``
  state dict, ``vae.`` + ``CausalVideoAutoencoder`` state dict, ``vae.per_channel_statistics.``
  + five [latent_channels] vectors; ``__metadata__["config"]`` = JSON
  ``{"transformer": ..., "vae": ..., "scheduler": ...}``.
  ``Transformer3DModel.from_pretrained(file)`` keeps the ``model.diffusion_model.`` keys and
  loads them strictly; ``CausalVideoAutoencoder.from_pretrained(file)`` keeps the ``vae.`` keys,
  silently drops any ``*norm*`` key its model lacks, loads the rest strictly and registers
  ``std-of-means`` / ``mean-of-means`` as buffers.
* ``ltxv-spatial-upscaler-*.safetensors``: the bare ``LatentUpsampler`` state dict, with the
  upsampler's own config dict as ``__metadata__["config"]``.

Test-only; vidax never imports torch.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

DIT_PREFIX = "model.diffusion_model."
VAE_PREFIX = "vae."
STATISTICS = ("channel", "mean-of-means", "mean-of-stds", "mean-of-stds_over_std-of-means",
              "std-of-means")

#: The authors' names this module gives, and where they live. They are imported on first use
#: (module ``__getattr__``), so importing this module costs nothing until an oracle is built.
_LAZY = {"vae_encode": ("ltx_video.models.autoencoders.vae_encode", None),   # the module
         "CausalVideoAutoencoder": ("ltx_video.models.autoencoders.causal_video_autoencoder",
                                    "CausalVideoAutoencoder"),
         "LatentUpsampler": ("ltx_video.models.autoencoders.latent_upsampler",
                             "LatentUpsampler"),
         "SymmetricPatchifier": ("ltx_video.models.transformers.symmetric_patchifier",
                                 "SymmetricPatchifier"),
         "Transformer3DModel": ("ltx_video.models.transformers.transformer3d",
                                "Transformer3DModel"),
         "SkipLayerStrategy": ("ltx_video.utils.skip_layer_strategy", "SkipLayerStrategy")}
_STRATEGY_NAMES = {"attention_values": "AttentionValues", "attention_skip": "AttentionSkip",
                   "residual": "Residual", "transformer_block": "TransformerBlock"}

__all__ = ["CausalVideoAutoencoder", "LatentUpsampler", "SymmetricPatchifier",  # noqa: F822
           "Transformer3DModel", "vae_encode", "write_release_file", "write_upsampler_file"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = importlib.import_module(module)
        value = value if attr is None else getattr(value, attr)
    elif name == "SKIP_LAYER_STRATEGIES":
        strategy = __getattr__("SkipLayerStrategy")
        value = {k: getattr(strategy, v) for k, v in _STRATEGY_NAMES.items()}
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def _contiguous(state: dict) -> dict:
    return {k: v.detach().contiguous() for k, v in state.items()}


def write_release_file(path: Path, transformer, transformer_config: dict, vae,
                       vae_config: dict, statistics: dict) -> Path:
    """One ``ltxv-*.safetensors`` file as released: both models' own ``state_dict()`` under
    their prefixes (a ``Transformer3DModel``, a ``CausalVideoAutoencoder``), the five
    statistics vectors (torch tensors), and the JSON config in the metadata."""
    import safetensors.torch

    tensors = {DIT_PREFIX + k: v for k, v in _contiguous(transformer.state_dict()).items()}
    tensors |= {VAE_PREFIX + k: v for k, v in _contiguous(vae.state_dict()).items()}
    tensors |= {f"{VAE_PREFIX}per_channel_statistics.{k}": v.contiguous()
                for k, v in statistics.items()}
    config = {"transformer": transformer_config, "vae": vae_config,
              "scheduler": {"_class_name": "RectifiedFlowScheduler", "num_train_timesteps": 1000,
                            "sampler": "LinearQuadratic"}}
    safetensors.torch.save_file(tensors, path, metadata={"config": json.dumps(config)})
    return path


def write_upsampler_file(path: Path, upsampler) -> Path:
    """``ltxv-spatial-upscaler-*.safetensors``: a ``LatentUpsampler``'s state dict and its
    ``config()`` as metadata."""
    import safetensors.torch

    safetensors.torch.save_file(_contiguous(upsampler.state_dict()), path,
                                metadata={"config": json.dumps(upsampler.config())})
    return path


def pixel_coords(frames: int, height: int, width: int, batch: int, vae, causal_fix: bool):
    """The authors' pipeline token positions ``[B, 3, N]`` (a torch tensor):
    ``SymmetricPatchifier(1)`` latent coordinates through ``latent_to_pixel_coords`` with the
    VAE's scale factors."""
    patchifier = __getattr__("SymmetricPatchifier")(patch_size=1)
    latent = patchifier.get_latent_coords(frames, height, width, batch, "cpu")
    return __getattr__("vae_encode").latent_to_pixel_coords(latent, vae, causal_fix=causal_fix)
