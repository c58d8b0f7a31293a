"""Gemma 3 as a text encoder (LTX-2.x) (``model``)."""
