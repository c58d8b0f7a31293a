"""The Llama decoder as a text encoder: LLaVA-Llama-3-8B (HunyuanVideo 1.0) (``model``)."""
