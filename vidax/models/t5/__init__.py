"""T5 encoders: T5-v1.1-XXL (LTX-Video, CogVideoX), UMT5-XXL (Wan), byT5 (HunyuanVideo-1.5)
(``model``)."""
