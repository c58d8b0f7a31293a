"""HunyuanVideo-1.5 (Tencent-Hunyuan/HunyuanVideo-1.5): the 8.3B diffusion transformer and the
VAE. Its Qwen2.5-VL text encoder is :mod:`vidax.models.reason1`, byT5 :mod:`vidax.models.t5`,
SigLIP :mod:`vidax.models.siglip`."""
