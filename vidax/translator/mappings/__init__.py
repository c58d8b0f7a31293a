"""One mapping module per family, mirroring ``vidax.models``. Importing this package
registers every family's components (``vidax.registry``)."""

from vidax.translator.mappings import wan2_1  # noqa: F401
from vidax.translator.mappings import wan2_2  # noqa: F401
from vidax.translator.mappings import wan2_2_diffusers  # noqa: F401
from vidax.translator.mappings import ltx_video  # noqa: F401
from vidax.translator.mappings import cogvideox  # noqa: F401
from vidax.translator.mappings import cosmos2_5  # noqa: F401
from vidax.translator.mappings import hunyuan_video  # noqa: F401
from vidax.translator.mappings import reason1  # noqa: F401
from vidax.translator.mappings import ltx2_5  # noqa: F401
from vidax.translator.mappings import cosmos3  # noqa: F401
from vidax.translator.mappings import hunyuan_video1_5  # noqa: F401
from vidax.translator.mappings import llama  # noqa: F401
from vidax.translator.mappings import byt5  # noqa: F401
from vidax.translator.mappings import siglip  # noqa: F401
from vidax.translator.mappings import gemma  # noqa: F401
