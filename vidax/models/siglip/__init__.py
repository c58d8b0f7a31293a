"""SigLIP: the vision tower HunyuanVideo-1.5 I2V conditions on (``model``)."""
