"""Rule sets several families share. A family's mapper concatenates them with its own
rules (a mapper's ``rules`` is a plain tuple)."""

from vidax.translator.mapping import Ignore

#: TransformerEngine keeps serialized FP8 metadata next to its weights (Cosmos, LTX-2.x).
TRANSFORMER_ENGINE_EXTRA_STATE = (
    Ignore(r".*\._extra_state", "TransformerEngine FP8 metadata, not a weight"),
)
