"""The Qwen2.5-VL language model as a text encoder: Cosmos-Reason1-7B (Cosmos-Predict2.5) and
Qwen2.5-VL-7B-Instruct (HunyuanVideo-1.5) (``model``)."""
