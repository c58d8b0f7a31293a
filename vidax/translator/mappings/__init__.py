"""One mapping module per ``vidax.models`` package (an encoder's module holds every layout of
that encoder), plus ``common`` (what several share) and the alternate-layout modules that
have no model of their own (:data:`ALTERNATE_LAYOUTS`). Importing this package registers
every component (``vidax.registry``). No module here imports JAX: the models are named by
``"module:Class"`` strings, the configs come from the models' ``config`` modules.
"""

#: Mapping modules of another layout of models that live elsewhere (no ``vidax.models``
#: package of their own).
ALTERNATE_LAYOUTS = ("wan2_2_diffusers", "comfyui", "comfyui_hunyuan")

from vidax.translator.mappings import wan2_1  # noqa: E402, F401
from vidax.translator.mappings import wan2_2  # noqa: E402, F401
from vidax.translator.mappings import wan2_2_diffusers  # noqa: E402, F401
from vidax.translator.mappings import ltx_video  # noqa: E402, F401
from vidax.translator.mappings import t5  # noqa: E402, F401
from vidax.translator.mappings import cogvideox  # noqa: E402, F401
from vidax.translator.mappings import cosmos2_5  # noqa: E402, F401
from vidax.translator.mappings import hunyuan_video  # noqa: E402, F401
from vidax.translator.mappings import reason1  # noqa: E402, F401
from vidax.translator.mappings import ltx2_5  # noqa: E402, F401
from vidax.translator.mappings import ltx2_audio  # noqa: E402, F401
from vidax.translator.mappings import cosmos3  # noqa: E402, F401
from vidax.translator.mappings import hunyuan_video1_5  # noqa: E402, F401
from vidax.translator.mappings import llama  # noqa: E402, F401
from vidax.translator.mappings import clip  # noqa: E402, F401
from vidax.translator.mappings import siglip  # noqa: E402, F401
from vidax.translator.mappings import gemma  # noqa: E402, F401
from vidax.translator.mappings import comfyui  # noqa: E402, F401
from vidax.translator.mappings import comfyui_hunyuan  # noqa: E402, F401
