"""Device meshes, partition rules, and the shardings of parameters and activations.

One mesh, four named axes, always in this order (outermost first; the innermost axes get the
devices with the fastest links between them, which the chattiest axes need):

====== ====================================================================================
``dp``   data parallel: the batch (the CFG pair, several prompts) split; parameters
         replicated.
``fsdp`` fully sharded data parallel: every large parameter split over its largest divisible
         dimension; the batch is split over it too. Where the batch splits over fsdp, XLA
         all-gathers each weight just in time; where it does not (a CFG pair of 2 on
         ``dp=2,fsdp=4``), XLA keeps the weights split and all-reduces partial products.
``sp``   sequence parallel: the video tokens split; self-attention runs Ulysses-style
         (all-to-all from sequence- to head-sharded and back; :mod:`vidax.nn.attention`).
``tp``   tensor parallel (Megatron): attention q/k/v and FFN fc1 split by output columns, o
         and fc2 by input rows, so one block needs one all-reduce per sublayer.
====== ====================================================================================

Axis types: **Auto**, deliberately. jax 0.10's ``jax.make_mesh`` defaults to Explicit axes,
where every array's sharding is part of its type and each op must be able to infer its
output's sharding; vidax's model code is plain array code (a reshape of sequence-sharded
tokens into heads, a softmax over a sharded axis, ...) and under Explicit axes such ops raise
sharding type errors instead of communicating. With Auto axes the parameters' and inputs'
placements (from the rules below) are the only annotations, XLA's partitioner propagates them
through the model and inserts the collectives, and the one place that needs a fixed layout --
Ulysses attention -- says so itself with a ``shard_map`` (which constrains its inputs to its
``in_specs`` under Auto axes).

Partition rules are data: per model class an ordered table of
``(path regex, spec)`` pairs over the Flax parameter paths (``blocks.3.self_attn.q.kernel``),
where a spec names the mesh axis of each dimension (only ``"tp"`` in the built-in tables).
Then, for every parameter: tensors smaller than ``min_shard_bytes`` are replicated (their
all-gather would cost more latency than their memory is worth); the first matching rule's
axes are kept where they divide the dimension (a dimension they do not divide is replicated
and logged, never an error); FSDP then takes the largest remaining dimension the ``fsdp``
size divides (none divisible: replicated on ``fsdp``, logged).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from math import prod

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from vidax.errors import VidaxError

log = logging.getLogger("vidax.sharding")

#: The mesh axes, outermost first.
AXES = ("dp", "fsdp", "sp", "tp")
#: The axes the batch is split over (FSDP ranks each take their own samples, as in ZeRO-3).
BATCH_AXES = ("dp", "fsdp")
SEQUENCE_AXIS = "sp"
TENSOR_AXIS = "tp"
FSDP_AXIS = "fsdp"


# ------------------------------------------------------------------------------------- meshes
def parse_mesh_spec(spec: str | Mapping[str, int] | None, num_devices: int) -> dict[str, int]:
    """``"dp=2,fsdp=4"`` (or a dict) -> a size for every axis of :data:`AXES`.

    Axes not named are 1, except ``fsdp``, which takes whatever devices the named axes leave
    (so ``None`` or ``""`` is ``fsdp=num_devices``: parameters sharded, batch split where it
    divides -- a layout that runs every model). One axis may be ``-1``: it takes the rest.
    The sizes must multiply to ``num_devices``. A malformed item, an axis named twice, an
    unknown axis or a size below 1 (other than the one ``-1``) is a ``VidaxError`` naming
    the item and the axes.
    """
    axes = f"the axes are {', '.join(AXES)}, e.g. 'dp=2,fsdp=4'"
    if isinstance(spec, Mapping):
        items = [(str(k), v, f"{k}={v}") for k, v in spec.items()]
    elif spec is None or isinstance(spec, str):
        items = []
        for item in "".join((spec or "").split()).split(","):
            if item:
                name, sep, value = item.partition("=")
                items.append((name, value if sep else None, item))
    else:
        raise VidaxError(f"mesh spec {spec!r}: expected a string such as 'dp=2,fsdp=4' or a "
                         f"dict of axis sizes; {axes}")
    given: dict[str, int] = {}
    for name, value, item in items:
        if not name:
            size = None
        elif isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value):
            size = int(value)
        elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            size = int(value)
        else:
            size = None
        if size is None:
            raise VidaxError(f"mesh spec {spec!r}: {item!r} is not AXIS=SIZE with a whole "
                             f"number SIZE; {axes}")
        if name not in AXES:
            from vidax.registry import did_you_mean

            raise VidaxError(f"mesh spec {spec!r}: unknown axis {name}"
                             f"{did_you_mean(name, AXES)}; {axes}")
        if name in given:
            raise VidaxError(f"mesh spec {spec!r}: the axis {name} is named twice; name each "
                             f"axis once ({axes})")
        if size == 0 or size < -1:
            raise VidaxError(f"mesh spec {spec!r}: {item!r}: a size must be a positive number "
                             f"of devices (or -1 on one axis: the devices the others leave); "
                             f"{axes}")
        given[name] = size
    fill = [a for a, n in given.items() if n == -1]
    if len(fill) > 1:
        raise VidaxError(f"mesh spec {spec!r}: only one axis may be -1 (the devices the "
                         f"others leave), not {', '.join(fill)}")
    if not fill and FSDP_AXIS not in given:
        fill = [FSDP_AXIS]
    fixed = prod(n for a, n in given.items() if a not in fill)
    sizes = {a: given.get(a, 1) for a in AXES}
    if fill:
        if num_devices % fixed:
            raise VidaxError(f"mesh spec {spec!r}: the named axes use {fixed} devices, which "
                             f"does not divide the {num_devices} available")
        sizes[fill[0]] = num_devices // fixed
    if prod(sizes.values()) != num_devices:
        raise VidaxError(f"mesh spec {spec!r} uses {prod(sizes.values())} devices "
                         f"({format_mesh_spec(sizes)}); {num_devices} are available: the "
                         "sizes must multiply to the device count")
    return sizes


def format_mesh_spec(sizes: Mapping[str, int]) -> str:
    return ",".join(f"{a}={sizes.get(a, 1)}" for a in AXES)


def make_mesh(spec: str | Mapping[str, int] | None = None, *,
              devices: Iterable | None = None) -> Mesh:
    """A mesh over ``devices`` (default: every device of every process) from a spec string
    such as ``"dp=2,fsdp=4,sp=1,tp=1"`` (see :func:`parse_mesh_spec`), with Auto axis types.

    ``jax.make_mesh`` lays devices out by the physical topology (ICI rings on TPU, NVLink
    islands on GPU), which is why the chatty ``sp``/``tp`` axes are innermost in
    :data:`AXES`.
    """
    devices = list(jax.devices() if devices is None else devices)
    sizes = parse_mesh_spec(spec, len(devices))
    return jax.make_mesh(tuple(sizes[a] for a in AXES), AXES,
                         axis_types=(AxisType.Auto,) * len(AXES), devices=devices)


def use_mesh(mesh: Mesh | None):
    """Make ``mesh`` the context mesh: ``with vidax.sharding.use_mesh(mesh): ...`` around
    a model call turns on what depends on the mesh at trace time (sequence-parallel
    attention when ``sp > 1``). It is ``jax.set_mesh``."""
    return jax.set_mesh(mesh)


def axis_size(mesh, name: str) -> int:
    """The size of a mesh axis, 1 when the mesh (a ``Mesh`` or ``AbstractMesh``) lacks it."""
    if mesh is None or getattr(mesh, "empty", False):
        return 1
    return dict(mesh.shape).get(name, 1)


# ----------------------------------------------------------------------------- partition rules
@dataclass(frozen=True)
class PartitionRules:
    """How a component's parameters are laid out on a mesh.

    ``rules``: ordered ``(regex, spec)`` pairs; the first whose regex fully matches a Flax
    parameter path gives that parameter's per-dimension axes (``None`` = not split by a rule;
    a spec shorter than the rank leaves the trailing dimensions free).
    ``min_shard_bytes``: parameters smaller than this are replicated.
    ``fsdp``: shard the largest free divisible dimension over the ``fsdp`` axis.
    """

    name: str
    rules: tuple[tuple[str, tuple[str | None, ...]], ...] = ()
    min_shard_bytes: int = 64 * 1024
    fsdp: bool = True
    _compiled: tuple = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self):
        compiled = []
        for pattern, spec in self.rules:
            bad = [a for a in spec if a is not None and a not in AXES]
            if bad:
                raise VidaxError(f"partition rules {self.name}: {pattern!r} names unknown "
                                 f"axes {bad}")
            compiled.append((re.compile(pattern), tuple(spec)))
        object.__setattr__(self, "_compiled", tuple(compiled))

    def match(self, path: str) -> tuple[str, tuple[str | None, ...]] | None:
        for regex, spec in self._compiled:
            if regex.fullmatch(path):
                return regex.pattern, spec
        return None


# Megatron-style TP for a transformer: q/k/v (and fc1, the gate) split by output columns,
# o and fc2 by input rows; biases and the q/k norms of column-split layers follow the
# columns. Kernels are [in, out] (vidax.nn.layers.Linear).
_COL, _ROW, _VEC = (None, TENSOR_AXIS), (TENSOR_AXIS, None), (TENSOR_AXIS,)

#: vidax.models.wan2_1.dit.WanDiT: every Wan2.1 and Wan2.2 DiT, in either key layout.
WAN_DIT = PartitionRules(
    name="wan_dit",
    rules=(
        (r"blocks\.\d+\.(self_attn|cross_attn)\.(q|k|v|k_img|v_img)\.kernel", _COL),
        (r"blocks\.\d+\.(self_attn|cross_attn)\.(q|k|v|k_img|v_img)\.bias", _VEC),
        # Wan's q/k RMSNorm spans all heads: its scale splits with the columns (the mean of
        # squares then needs one small all-reduce over tp).
        (r"blocks\.\d+\.(self_attn|cross_attn)\.(norm_q|norm_k|norm_k_img)\.scale", _VEC),
        (r"blocks\.\d+\.(self_attn|cross_attn)\.o\.kernel", _ROW),
        (r"blocks\.\d+\.ffn\.fc1\.kernel", _COL),
        (r"blocks\.\d+\.ffn\.fc1\.bias", _VEC),
        (r"blocks\.\d+\.ffn\.fc2\.kernel", _ROW),
    ),
)

#: vidax.models.t5.T5Encoder: UMT5 and T5 v1.1 (gated FFN: gate and fc1 both column-split).
T5_ENCODER = PartitionRules(
    name="t5_encoder",
    rules=(
        (r"blocks\.\d+\.attn\.(q|k|v)\.kernel", _COL),
        (r"blocks\.\d+\.attn\.o\.kernel", _ROW),
        (r"blocks\.\d+\.ffn\.(gate|fc1)\.kernel", _COL),
        (r"blocks\.\d+\.ffn\.fc2\.kernel", _ROW),
        # The relative-position bias table [buckets, heads] follows the head split.
        (r"(blocks\.\d+\.)?pos_embedding\.embedding\.embedding", (None, TENSOR_AXIS)),
    ),
)

#: For components without a table: FSDP over the largest divisible dimension only.
#: vidax.models.ltx_video.dit.LTXVideoDiT: LTX-Video 0.9.8 (2B, 13B). Its q/k RMSNorms span
#: all heads, like Wan's, so their scales follow the columns.
LTX_VIDEO_DIT = PartitionRules(
    name="ltx_video_dit",
    rules=(
        (r"transformer_blocks\.\d+\.attn[12]\.(to_q|to_k|to_v)\.kernel", _COL),
        (r"transformer_blocks\.\d+\.attn[12]\.(to_q|to_k|to_v)\.bias", _VEC),
        (r"transformer_blocks\.\d+\.attn[12]\.(q_norm|k_norm)\.scale", _VEC),
        (r"transformer_blocks\.\d+\.attn[12]\.to_out\.kernel", _ROW),
        (r"transformer_blocks\.\d+\.ff\.proj_in\.kernel", _COL),
        (r"transformer_blocks\.\d+\.ff\.proj_in\.bias", _VEC),
        (r"transformer_blocks\.\d+\.ff\.proj_out\.kernel", _ROW),
    ),
)

#: vidax.models.cosmos2_5.CosmosDiT: Cosmos-Predict2.5 (2B, 14B), either key layout. Its q/k
#: RMSNorms are per head ([head_dim]): every tp shard holds whole heads and the whole scale,
#: so they stay replicated (small, below min_shard_bytes). The Reason1 projection
#: ``crossattn_proj`` ([100352, 1024]) is left to FSDP: splitting its columns would only make
#: the column-split k/v projections gather them again.
COSMOS2_5_DIT = PartitionRules(
    name="cosmos2_5_dit",
    rules=(
        (r"blocks\.\d+\.(self_attn|cross_attn)\.(q_proj|k_proj|v_proj)\.kernel", _COL),
        (r"blocks\.\d+\.(self_attn|cross_attn)\.output_proj\.kernel", _ROW),
        (r"blocks\.\d+\.mlp\.layer1\.kernel", _COL),
        (r"blocks\.\d+\.mlp\.layer2\.kernel", _ROW),
    ),
)

#: vidax.models.cogvideox.dit.CogVideoXDiT: CogVideoX / CogVideoX1.5. q/k/v by columns (whole
#: heads: 2b has 30 heads, the 5B models 48, so tp must divide those), the output and the
#: shared FFN's second Linear by rows; the per-head q/k LayerNorms ([head_dim]) stay whole.
COGVIDEOX_DIT = PartitionRules(
    name="cogvideox_dit",
    rules=(
        (r"transformer_blocks\.\d+\.attn1\.(to_q|to_k|to_v)\.kernel", _COL),
        (r"transformer_blocks\.\d+\.attn1\.(to_q|to_k|to_v)\.bias", _VEC),
        (r"transformer_blocks\.\d+\.attn1\.to_out\.kernel", _ROW),
        (r"transformer_blocks\.\d+\.ff\.proj_in\.kernel", _COL),
        (r"transformer_blocks\.\d+\.ff\.proj_in\.bias", _VEC),
        (r"transformer_blocks\.\d+\.ff\.proj_out\.kernel", _ROW),
    ),
)

#: vidax.models.reason1.Reason1TextModel: the Qwen2.5-VL language model (Cosmos-Reason1-7B,
#: HunyuanVideo-1.5's text encoder); also vidax.models.llama.LlamaModel (HunyuanVideo 1.0's
#: LLaVA-Llama-3-8B) and vidax.models.gemma.GemmaModel (LTX-2's Gemma 3), whose parameters
#: have the same names. Grouped-query attention: tp must
#: divide the key/value heads (4 and 8) for k/v to split by whole heads.
REASON1 = PartitionRules(
    name="reason1",
    rules=(
        (r"layers\.\d+\.self_attn\.(q_proj|k_proj|v_proj)\.kernel", _COL),
        (r"layers\.\d+\.self_attn\.(q_proj|k_proj|v_proj)\.bias", _VEC),
        (r"layers\.\d+\.self_attn\.o_proj\.kernel", _ROW),
        (r"layers\.\d+\.mlp\.(gate_proj|up_proj)\.kernel", _COL),
        (r"layers\.\d+\.mlp\.down_proj\.kernel", _ROW),
    ),
)

#: vidax.models.cosmos3.Cosmos3DiT: Cosmos3 Nano / Edge, both pathways (the prompt's
#: ``to_*`` / ``mlp`` and the video's ``add_*`` / ``mlp_moe_gen``) split alike; tp must divide
#: the 8 key/value heads. The per-head q/k norms stay whole.
COSMOS3_DIT = PartitionRules(
    name="cosmos3_dit",
    rules=(
        (r"layers\.\d+\.self_attn\.(to_q|to_k|to_v|add_q_proj|add_k_proj|add_v_proj)\.kernel",
         _COL),
        (r"layers\.\d+\.self_attn\.(to_out|to_add_out)\.kernel", _ROW),
        (r"layers\.\d+\.(mlp|mlp_moe_gen)\.(gate_proj|up_proj)\.kernel", _COL),
        (r"layers\.\d+\.(mlp|mlp_moe_gen)\.down_proj\.kernel", _ROW),
    ),
)

#: vidax.models.hunyuan_video.dit.HunyuanVideoDiT: HunyuanVideo 1.0 (the fused qkv and
#: linear1 are split into q/k/v(/mlp) by the mapper, so each splits by whole heads here). The
#: single blocks' ``linear2`` reads [attention | MLP] concatenated: left to FSDP. The per-head
#: q/k norms stay whole.
HUNYUAN_VIDEO_DIT = PartitionRules(
    name="hunyuan_video_dit",
    rules=(
        (r"double_blocks\.\d+\.(img|txt)_attn_(q|k|v)\.kernel", _COL),
        (r"double_blocks\.\d+\.(img|txt)_attn_(q|k|v)\.bias", _VEC),
        (r"double_blocks\.\d+\.(img|txt)_attn_proj\.kernel", _ROW),
        (r"double_blocks\.\d+\.(img|txt)_mlp\.fc1\.kernel", _COL),
        (r"double_blocks\.\d+\.(img|txt)_mlp\.fc1\.bias", _VEC),
        (r"double_blocks\.\d+\.(img|txt)_mlp\.fc2\.kernel", _ROW),
        (r"single_blocks\.\d+\.linear1_(q|k|v|mlp)\.kernel", _COL),
        (r"single_blocks\.\d+\.linear1_(q|k|v|mlp)\.bias", _VEC),
        (r"txt_in\.individual_token_refiner\.blocks\.\d+\.self_attn_(q|k|v)\.kernel", _COL),
        (r"txt_in\.individual_token_refiner\.blocks\.\d+\.self_attn_(q|k|v)\.bias", _VEC),
        (r"txt_in\.individual_token_refiner\.blocks\.\d+\.self_attn_proj\.kernel", _ROW),
        (r"txt_in\.individual_token_refiner\.blocks\.\d+\.mlp\.fc1\.kernel", _COL),
        (r"txt_in\.individual_token_refiner\.blocks\.\d+\.mlp\.fc1\.bias", _VEC),
        (r"txt_in\.individual_token_refiner\.blocks\.\d+\.mlp\.fc2\.kernel", _ROW),
    ),
)

#: vidax.models.ltx2_5.dit.LTX2DiT: LTX-2.x (19B, 2.3/2.5 22B), both streams, the audio<->video
#: cross-attentions and the two text connectors. Every attention's q/k RMSNorm spans its inner
#: dim (as LTX-Video's): the scales follow the columns; the 2.3+ per-head gate logits too.
_LTX2_ATTN = (r"(transformer_blocks\.\d+\.(attn1|attn2|audio_attn1|audio_attn2|"
              r"audio_to_video_attn|video_to_audio_attn)|"
              r"(video|audio)_embeddings_connector\.transformer_1d_blocks\.\d+\.attn1)")
_LTX2_FF = (r"(transformer_blocks\.\d+\.(ff|audio_ff)|"
            r"(video|audio)_embeddings_connector\.transformer_1d_blocks\.\d+\.ff)")
LTX2_DIT = PartitionRules(
    name="ltx2_dit",
    rules=(
        (_LTX2_ATTN + r"\.(to_q|to_k|to_v|to_gate_logits)\.kernel", _COL),
        (_LTX2_ATTN + r"\.(to_q|to_k|to_v|to_gate_logits)\.bias", _VEC),
        (_LTX2_ATTN + r"\.(q_norm|k_norm)\.scale", _VEC),
        (_LTX2_ATTN + r"\.to_out\.kernel", _ROW),
        (_LTX2_FF + r"\.proj_in\.kernel", _COL),
        (_LTX2_FF + r"\.proj_in\.bias", _VEC),
        (_LTX2_FF + r"\.proj_out\.kernel", _ROW),
    ),
)

DEFAULT = PartitionRules(name="default")

# Keyed by the model class ("module:Class", as the registry names it): the rules speak of
# that class's parameter paths, whichever family, release or key layout loads it (the Wan DiT
# serves wan2_1 and wan2_2 in the authors' and diffusers' layouts; T5Encoder serves UMT5 and
# T5 v1.1).
_RULES: dict[str, PartitionRules] = {
    "vidax.models.wan2_1.dit:WanDiT": WAN_DIT,
    "vidax.models.t5.model:T5Encoder": T5_ENCODER,
    "vidax.models.ltx_video.dit:LTXVideoDiT": LTX_VIDEO_DIT,
    "vidax.models.cosmos2_5.dit:CosmosDiT": COSMOS2_5_DIT,
    "vidax.models.cogvideox.dit:CogVideoXDiT": COGVIDEOX_DIT,
    "vidax.models.reason1.model:Reason1TextModel": REASON1,
    "vidax.models.llama.model:LlamaModel": REASON1,
    # Gemma: the same names; its per-head q/k norms stay whole
    "vidax.models.gemma.model:GemmaModel": REASON1,
    # Gemma 4 (LTX-2.5): the same names; a full layer's single 512-wide K/V head splits over tp
    # inside the head (correct, with XLA's collectives)
    "vidax.models.gemma.gemma4:Gemma4Model": REASON1,
    "vidax.models.cosmos3.dit:Cosmos3DiT": COSMOS3_DIT,
    "vidax.models.hunyuan_video.dit:HunyuanVideoDiT": HUNYUAN_VIDEO_DIT,
    # HunyuanVideo-1.5: the same double blocks and token refiner (paths and all), no single blocks
    "vidax.models.hunyuan_video1_5.dit:HunyuanVideo15DiT": HUNYUAN_VIDEO_DIT,
    "vidax.models.ltx2_5.dit:LTX2DiT": LTX2_DIT,
}


def _model_key(model: str | type) -> str:
    return model if isinstance(model, str) else f"{model.__module__}:{model.__qualname__}"


def register_rules(model: str | type, rules: PartitionRules) -> None:
    """Give a model class (or its ``"module:Class"`` name) its partition rules."""
    _RULES[_model_key(model)] = rules


def rules_for(model: str | type) -> PartitionRules:
    """The rules of a model class (``DEFAULT``, FSDP only, for a class without a table)."""
    return _RULES.get(_model_key(model), DEFAULT)


def partition_spec(path: str, shape: tuple[int, ...], nbytes: int, rules: PartitionRules,
                   mesh) -> tuple[P, list[str]]:
    """The PartitionSpec of one parameter, and notes on what could not be split as asked."""
    notes: list[str] = []
    dims: list[str | None] = [None] * len(shape)
    if nbytes < rules.min_shard_bytes or not shape:
        return P(), notes
    hit = rules.match(path)
    if hit is not None:
        pattern, spec = hit
        if len(spec) > len(shape):
            raise VidaxError(f"partition rules {rules.name}: {pattern!r} gives {len(spec)} axes "
                             f"for {path} of rank {len(shape)}")
        for d, axis in enumerate(spec):
            n = axis_size(mesh, axis) if axis else 1
            if n == 1:
                continue
            if shape[d] % n:
                notes.append(f"rule {pattern!r}: {axis}={n} does not divide dim {d} "
                             f"({shape[d]}) -> replicated on {axis}")
            else:
                dims[d] = axis
    n = axis_size(mesh, FSDP_AXIS)
    if rules.fsdp and n > 1 and FSDP_AXIS not in dims:
        free = [d for d in range(len(shape)) if dims[d] is None and shape[d] % n == 0]
        if free:
            dims[max(free, key=lambda d: (shape[d], -d))] = FSDP_AXIS
        else:
            notes.append(f"fsdp={n} divides no free dim of {list(shape)} -> replicated on fsdp")
    while dims and dims[-1] is None:
        dims.pop()
    return P(*dims), notes


def param_shardings(abstract: Mapping[str, object], mesh: Mesh,
                    rules: PartitionRules) -> dict[str, NamedSharding]:
    """``path -> NamedSharding`` for every parameter of an abstract tree (``path -> object
    with shape and dtype``). What could not be split as the rules ask is logged, grouped."""
    out: dict[str, NamedSharding] = {}
    notes: Counter[str] = Counter()
    for path, leaf in abstract.items():
        shape = tuple(leaf.shape)
        nbytes = prod(shape) * np.dtype(leaf.dtype).itemsize
        spec, why = partition_spec(path, shape, nbytes, rules, mesh)
        notes.update(why)
        out[path] = NamedSharding(mesh, spec)
    for note, count in sorted(notes.items()):
        # A rule the mesh cannot honour is worth a warning (the user asked for that axis);
        # an odd small shape that FSDP cannot split is routine.
        level = logging.WARNING if note.startswith("rule") else logging.INFO
        log.log(level, "%s: %s (%d parameter%s)", rules.name, note, count, "s" * (count > 1))
    return out


# --------------------------------------------------------------------------------- activations
def batch_axes(mesh, batch: int) -> tuple[str, ...]:
    """The batch axes (of :data:`BATCH_AXES`, size > 1) that split ``batch`` evenly: both if
    their product divides it, else the larger one that does, else none (replicated)."""
    live = tuple(a for a in BATCH_AXES if axis_size(mesh, a) > 1)
    singles = sorted(((a,) for a in live), key=lambda c: -axis_size(mesh, c[0]))
    for combo in ([live] if len(live) > 1 else []) + singles:
        if batch % prod(axis_size(mesh, a) for a in combo) == 0:
            return combo
    return ()


def data_sharding(mesh: Mesh, shape: tuple[int, ...]) -> NamedSharding:
    """Where a model input with a leading batch dimension goes: the batch split over the
    batch axes that divide it, the rest replicated (XLA splits tokens over ``sp`` where
    attention asks for it)."""
    axes = batch_axes(mesh, shape[0]) if shape else ()
    return NamedSharding(mesh, P(axes) if axes else P())


def shard_batch(x, mesh: Mesh) -> jax.Array:
    """Place a host array (latents, text embeddings, timesteps) by :func:`data_sharding`."""
    x = np.asarray(x) if not isinstance(x, jax.Array) else x
    return jax.device_put(x, data_sharding(mesh, tuple(x.shape)))


def sequence_parallel_problem(sp: int, *, num_heads: int | None, num_tokens: int,
                              what: str = "self-attention") -> str | None:
    """Why Ulysses cannot split an attention over ``sp`` (None: it can). It needs the heads
    and the tokens to split evenly; vidax rejects rather than pads (padded tokens would need
    a key mask in every attention and waste compute: choose sp or the video size instead).
    ``num_heads=None``: only the tokens are split (cross-attention's queries)."""
    if sp <= 1:
        return None
    problems = []
    if num_heads is not None and num_heads % sp:
        divisors = [d for d in range(1, num_heads + 1) if num_heads % d == 0]
        problems.append(f"the head count {num_heads} is not divisible by sp={sp} (sp must "
                        f"divide {num_heads}: one of {', '.join(map(str, divisors))})")
    if num_tokens % sp:
        problems.append(f"the token count {num_tokens} is not divisible by sp={sp} (change "
                        f"the frame count or size so that the latent tokens divide, or "
                        f"pick an sp that divides {num_tokens})")
    if not problems:
        return None
    return (f"sequence parallelism cannot split this {what}: " + "; and ".join(problems)
            + ". vidax does not pad tokens or heads.")


def constrain_batch(x: jax.Array) -> jax.Array:
    """Inside a jitted function traced under a context mesh (:func:`use_mesh`): ``x`` split
    over the batch axes that divide its leading dimension -- e.g. the [cond, uncond] pair a
    sampling step builds from one latent, so that ``dp=2`` runs one half on each side.
    Unchanged without a context mesh or when no batch axis divides it."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or not x.ndim:
        return x
    axes = batch_axes(mesh, x.shape[0])
    return jax.lax.with_sharding_constraint(x, P(axes)) if axes else x


def check_sequence_parallel(sp: int, *, num_heads: int | None, num_tokens: int,
                            what: str = "self-attention") -> None:
    """:func:`sequence_parallel_problem` as a ``VidaxError``."""
    problem = sequence_parallel_problem(sp, num_heads=num_heads, num_tokens=num_tokens,
                                        what=what)
    if problem:
        raise VidaxError(problem)


# ------------------------------------------------------------------------------------ reports
def bytes_per_device(tree) -> dict[object, int]:
    """Bytes of the addressable shards of every array in ``tree``, per device."""
    out: dict[object, int] = {}
    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, jax.Array):
            for shard in leaf.addressable_shards:
                out[shard.device] = out.get(shard.device, 0) + shard.data.nbytes
    return out
