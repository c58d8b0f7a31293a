"""CLIP: the ViT-H/14 vision tower (Wan2.1 I2V / FLF2V) and the CLIP-L text tower
(HunyuanVideo 1.0) (``model``)."""
