"""One mapping module per family, mirroring ``vidax.models``. Importing this package
registers every family's components (``vidax.registry``)."""

from vidax.translator.mappings import wan2_1  # noqa: F401
