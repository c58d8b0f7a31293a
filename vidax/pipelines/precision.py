"""The precision policies of ``vidax generate --precision``: compute dtypes per component."""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp

from vidax.errors import VidaxError


@dataclass(frozen=True)
class Precision:
    """Compute dtypes per component, and the matmul precision of float32 work."""

    name: str
    dit_compute: object
    text_encoder: object
    image_encoder: object
    vae: object
    matmul: str | None  # None: JAX's default (bf16 operands are bf16 either way)


PRECISIONS = {
    "bf16": Precision("bf16", jnp.bfloat16, jnp.bfloat16, jnp.float32, jnp.float32, None),
    "fp32": Precision("fp32", jnp.float32, jnp.float32, jnp.float32, jnp.float32, "highest"),
}


def precision_policy(name: str) -> Precision:
    if name not in PRECISIONS:
        raise VidaxError(f"precision must be one of {', '.join(PRECISIONS)}, got {name!r}")
    return PRECISIONS[name]


def component_dtype(policy: Precision, component: str):
    """The dtype a component's weights are loaded in: the policy's compute dtype of it (a
    family whose DiT keeps float32 weights under bf16 compute overrides
    :meth:`PipelineBase.param_dtype`)."""
    return {"dit": policy.dit_compute, "vae": policy.vae, "text_encoder": policy.text_encoder,
            "encoder": policy.text_encoder,  # T5's registered component
            "image_encoder": policy.image_encoder}[component]
