"""HunyuanVideo 1.0 (Tencent-Hunyuan/HunyuanVideo): the DiT and the causal 3D VAE. Its text
encoders are :mod:`vidax.models.llama` (LLaVA-Llama-3-8B) and :mod:`vidax.models.clip` (CLIP-L's
text tower)."""
