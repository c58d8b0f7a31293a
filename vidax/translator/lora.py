"""LoRA files: read, recognised, and mapped onto a model's parameters by its family's mapper.

A LoRA file stores, per adapted module, factors whose product is a change to that module's
weight. vidax reads the file lazily (``vidax.translator.io``: safetensors or a zip ``.pt``;
no pickle code runs), groups its keys by module (:func:`read_lora`), and names the change
each module makes as a change to a *checkpoint key* -- ``<module>.weight`` (factors, LoHa,
LoKr, ``.diff``), ``<module>.bias`` (``.diff_b``). Those keys are then planned through the
family's own mapper (:func:`plan_lora`) exactly as the weights they change were, so a change
to a fused weight is split the way the weight is (HunyuanVideo's ``img_attn_qkv``,
``linear1``), renamed and laid out the same way. Every key of the file must land on a
parameter of the model with the parameter's shape, or the LoRA is refused before any of it
is applied, naming the keys.

Key forms read (each from its source):

* Suffixes per module -- ``lora_A.weight`` / ``lora_B.weight`` (PEFT; diffusers and most
  trainers), ``lora_down.weight`` / ``lora_up.weight`` (kohya, musubi-tuner, LightX2V),
  ``lora.down.weight`` / ``lora.up.weight``, ``alpha`` (a scalar: the product is scaled by
  ``alpha / rank``, rank the factors' inner size; no alpha: scale 1), ``diff`` (a full weight
  delta), ``diff_b`` (a bias delta), ``diff_m`` (a delta of the block's ``modulation``
  parameter, Wan: LightX2V's ``lightx2v/utils/lora_loader.py`` @ f8aee98, which diffusers
  0.42.1 drops), LoHa ``hada_w1_a`` ... ``hada_w2_b`` and LoKr
  ``lokr_w1`` / ``lokr_w1_a`` / ``lokr_w1_b`` / ``lokr_w2`` / ``lokr_w2_a`` / ``lokr_w2_b``
  (LyCORIS). ComfyUI's ``comfy/lora.py`` ``load_lora`` and ``comfy/weight_adapter/`` (the
  LoRA, LoHa, LoKr adapters) read the same suffixes with the same meaning; diffusers 0.42.1
  ``loaders/lora_conversion_utils.py`` ``_convert_non_diffusers_wan_lora_to_diffusers``
  (``alpha / rank``, ``diff_b`` as the up factor's bias).
* Prefixes -- ``diffusion_model.`` (the authors' module names: LightX2V, ComfyUI exports),
  ``model.diffusion_model.``, ``transformer.`` (diffusers), ``base_model.model.`` (PEFT
  saves), and the underscored ``lora_unet_`` form of kohya and musubi-tuner
  (``lora_unet_blocks_0_self_attn_q``: the module path with its dots turned to underscores),
  resolved against the module names the family's mapper and manifests know.
* PEFT's alpha in the header (``lora_adapter_metadata``: ``lora_alpha`` / ``r``, diffusers'
  ``save_lora_weights``).

Not read (refused, naming the keys, never dropped): Tucker ``lora_mid``, DoRA
``dora_scale``, LoHa/LoKr on convolutions, text-encoder LoRAs (``lora_te_``,
``text_encoder.``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from vidax.errors import VidaxError
from vidax.translator.mapping import Mapper, Target

#: (suffix, role), longest first where one suffix ends another
SUFFIXES = (
    (".lora_A.default.weight", "down"), (".lora_B.default.weight", "up"),
    (".lora_A.weight", "down"), (".lora_B.weight", "up"), (".lora_B.bias", "diff_b"),
    (".lora_down.weight", "down"), (".lora_up.weight", "up"),
    (".lora.down.weight", "down"), (".lora.up.weight", "up"),
    (".lora_mid.weight", "mid"), (".dora_scale", "dora_scale"),
    (".alpha", "alpha"), (".diff_b", "diff_b"), (".diff_m", "diff_m"), (".diff", "diff"),
    (".hada_w1_a", "hada_w1_a"), (".hada_w1_b", "hada_w1_b"),
    (".hada_w2_a", "hada_w2_a"), (".hada_w2_b", "hada_w2_b"),
    (".hada_t1", "hada_t1"), (".hada_t2", "hada_t2"),
    (".lokr_w1_a", "lokr_w1_a"), (".lokr_w1_b", "lokr_w1_b"), (".lokr_w1", "lokr_w1"),
    (".lokr_w2_a", "lokr_w2_a"), (".lokr_w2_b", "lokr_w2_b"), (".lokr_w2", "lokr_w2"),
    (".lokr_t2", "lokr_t2"),
)
PREFIXES = ("model.diffusion_model.", "diffusion_model.", "base_model.model.", "transformer.")
UNDERSCORED = ("lora_unet_", "lora_transformer_")
TEXT_ENCODER = ("lora_te_", "lora_te1_", "lora_te2_", "text_encoder.", "text_encoder_2.")
#: roles that are not read yet: refused with the reason
UNSUPPORTED = {"mid": "Tucker-decomposed convolution LoRA (lora_mid)",
               "dora_scale": "DoRA (dora_scale)", "hada_t1": "LoHa with Tucker factors",
               "hada_t2": "LoHa with Tucker factors", "lokr_t2": "LoKr with a Tucker factor"}


class LoraError(VidaxError):
    """A LoRA file that cannot be applied to the model (nothing was applied)."""


def _names(keys, n: int = 6) -> str:
    keys = sorted(keys)
    shown = ", ".join(keys[:n])
    return shown + (f" and {len(keys) - n} more" if len(keys) > n else "")


@dataclass
class LoraModule:
    """One adapted module: its name (prefix stripped) and its keys by role."""

    name: str
    keys: dict[str, str] = field(default_factory=dict)
    underscored: bool = False

    @property
    def kind(self) -> str:
        roles = set(self.keys)
        if {"down", "up"} <= roles:
            return "lora"
        if "hada_w1_a" in roles:
            return "loha"
        if roles & {"lokr_w1", "lokr_w1_a", "lokr_w2", "lokr_w2_a"}:
            return "lokr"
        return "diff" if roles & {"diff", "diff_b", "diff_m"} else "incomplete"


@dataclass
class LoraFile:
    """A LoRA file, read lazily: its tensors (``tensors``: key -> ``TensorRef``), modules and
    form."""

    path: str
    tensors: Mapping
    modules: dict[str, LoraModule]
    form: str                     # "peft" | "kohya" | "lycoris" | "diff" (+ "/mixed")
    prefix: str                   # the prefix its keys carried ("" none)
    metadata: dict = field(default_factory=dict)
    default_alpha: float | None = None    # PEFT's lora_alpha / r from the header
    default_rank: int | None = None

    def array(self, key: str) -> np.ndarray:
        ref = self.tensors[key]
        return np.asarray(ref.read_view() if hasattr(ref, "read_view") else ref)

    def rank(self, module: LoraModule) -> int | None:
        # LoKr: w2_b's rank where both factors are low-rank, as ComfyUI reads it
        # (comfy/weight_adapter/lokr.py; LyCORIS' functional.lokr takes w1's then)
        for role in ("down", "hada_w1_b", "lokr_w2_b", "lokr_w1_b"):
            if role in module.keys:
                return int(self.tensors[module.keys[role]].shape[0])
        return None

    def scale(self, module: LoraModule) -> float:
        """``alpha / rank`` (1 without an alpha, as ComfyUI and diffusers read it)."""
        rank = self.rank(module)
        if "alpha" in module.keys:
            alpha = float(np.asarray(self.array(module.keys["alpha"]), np.float64).reshape(-1)[0])
        elif self.default_alpha is not None:
            alpha, rank = self.default_alpha, self.default_rank or rank
        else:
            return 1.0
        return alpha / rank if rank else 1.0

    def ranks(self) -> list[int]:
        return sorted({r for m in self.modules.values() if (r := self.rank(m)) is not None})

    def alphas(self) -> list[float]:
        vals = {float(np.asarray(self.array(m.keys["alpha"]), np.float64).reshape(-1)[0])
                for m in self.modules.values() if "alpha" in m.keys}
        if self.default_alpha is not None:
            vals.add(float(self.default_alpha))
        return sorted(vals)

    # what each module changes, as checkpoint keys -------------------------------------
    def changes(self, module: LoraModule, name: str | None = None,
                bare: bool = False) -> dict[str, tuple[int, ...]]:
        """Checkpoint key -> the shape of the weight it changes, for this module (its name
        resolved to ``name``). ``bare``: its ``diff`` changes the tensor ``name`` itself (a free
        parameter such as Wan's ``head.modulation``; ComfyUI's key map takes such names
        whole), not ``name.weight``."""
        name = name or module.name
        shape = lambda role: tuple(self.tensors[module.keys[role]].shape)  # noqa: E731
        out: dict[str, tuple[int, ...]] = {}
        kind = module.kind
        if kind == "lora":
            up, down = shape("up"), shape("down")
            out[f"{name}.weight"] = (up[0], *down[1:])
        elif kind == "loha":
            out[f"{name}.weight"] = (shape("hada_w1_a")[0], *shape("hada_w1_b")[1:])
        elif kind == "lokr":
            w1 = (self._lokr_shape(module, "lokr_w1"))
            w2 = (self._lokr_shape(module, "lokr_w2"))
            out[f"{name}.weight"] = (w1[0] * w2[0], w1[1] * w2[1])
        if "diff" in module.keys:
            out[name if bare else f"{name}.weight"] = shape("diff")
        if "diff_b" in module.keys:
            out[f"{name}.bias"] = shape("diff_b")
        if "diff_m" in module.keys:      # Wan's free modulation parameter (LightX2V)
            out[f"{name}.modulation" if name else "modulation"] = shape("diff_m")
        return out

    def _lokr_shape(self, module: LoraModule, stem: str) -> tuple[int, int]:
        if stem in module.keys:
            s = self.tensors[module.keys[stem]].shape
            return (int(s[0]), int(math.prod(s[1:])))
        return (int(self.tensors[module.keys[f"{stem}_a"]].shape[0]),
                int(math.prod(self.tensors[module.keys[f"{stem}_b"]].shape[1:])))


def _role(key: str) -> tuple[str, str] | None:
    for suffix, role in SUFFIXES:
        if key.endswith(suffix):
            return key[: -len(suffix)], role
    return None


def _strip(stem: str) -> tuple[str, str, bool]:
    """(name, prefix, underscored) of a module stem."""
    for prefix in UNDERSCORED:
        if stem.startswith(prefix):
            return stem[len(prefix):], prefix, True
    for prefix in PREFIXES:
        if stem.startswith(prefix):
            return stem[len(prefix):], prefix, False
    return stem, "", False


def read_lora(path, tensors: Mapping | None = None) -> LoraFile:
    """A LoRA file's modules, grouped by the suffixes above. ``tensors``: an open
    ``Checkpoint`` (or a state dict) of ``path``; default: opened lazily here. Raises
    ``LoraError`` naming the keys for a key of no known form, a module missing a factor, a
    rank mismatch between factors, text-encoder keys, and the forms not read yet."""
    if tensors is not None:
        return _read(str(path), tensors)
    from vidax.translator.io import open_checkpoint

    tensors = open_checkpoint(path)
    try:
        return _read(str(path), tensors)
    except BaseException:
        tensors.close()
        raise


def _read(path: str, tensors: Mapping) -> LoraFile:
    modules: dict[str, LoraModule] = {}
    unknown, text, unsupported = [], [], {}
    prefixes: set[str] = set()
    for key in tensors:
        found = _role(key)
        if found is None:
            unknown.append(key)
            continue
        stem, role = found
        if stem.startswith(TEXT_ENCODER):
            text.append(key)
            continue
        if role in UNSUPPORTED:
            unsupported.setdefault(UNSUPPORTED[role], []).append(key)
            continue
        name, prefix, underscored = _strip(stem)
        prefixes.add(prefix)
        module = modules.setdefault(name, LoraModule(name, underscored=underscored))
        if role in module.keys:
            raise LoraError(f"{path}: {module.keys[role]} and {key} both give the {role} of "
                            f"module {name}")
        module.keys[role] = key
    problems = []
    if unknown:
        problems.append(f"{len(unknown)} key(s) of no LoRA form vidax knows "
                        f"({_names(unknown)}); the forms read are the suffixes "
                        f"{', '.join(sorted({s for s, _ in SUFFIXES}))}")
    if text:
        problems.append(f"text-encoder LoRA keys, which vidax does not apply ({_names(text)})")
    for what, keys in unsupported.items():
        problems.append(f"{what}, which vidax does not read yet ({_names(keys)})")
    if not modules and not problems:
        problems.append("no LoRA tensors at all")
    file = LoraFile(path, tensors, modules, "", "", dict(getattr(tensors, "metadata", {}) or {}))
    for module in modules.values():
        problems.extend(_module_problems(file, module))
    if problems:
        raise LoraError(f"{path} cannot be applied as a LoRA (nothing was applied): "
                        + "; ".join(problems) + ".")
    file.prefix = "/".join(sorted(p or "(none)" for p in prefixes))
    file.form = _form(modules.values())
    _peft_alpha(file)
    return file


def _module_problems(file: LoraFile, module: LoraModule) -> list[str]:
    keys, shapes = module.keys, {r: tuple(file.tensors[k].shape) for r, k in module.keys.items()}
    where = f"module {module.name} ({_names(keys.values(), 3)})"
    kind = module.kind
    if kind == "incomplete":
        return [f"{where} has no complete adapter: {'up' if 'down' in keys else 'down'} "
                f"factor missing" if keys.keys() & {"down", "up"}
                else f"{where} has only {', '.join(sorted(keys))}"]
    if kind == "lora":
        up, down = shapes["up"], shapes["down"]
        if len(up) < 2 or len(down) < 2 or up[1] != down[0] or any(s != 1 for s in up[2:]):
            return [f"{where}: rank mismatch -- up {list(up)} and down {list(down)} do not "
                    f"multiply (up [out, r], down [r, in, ...])"]
    if kind == "loha":
        need = {"hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b"}
        if not need <= keys.keys():
            return [f"{where}: LoHa needs {', '.join(sorted(need))}"]
        if (shapes["hada_w1_a"][1] != shapes["hada_w1_b"][0]
                or shapes["hada_w2_a"][1] != shapes["hada_w2_b"][0]
                or len(shapes["hada_w1_b"]) > 2):
            return [f"{where}: LoHa factors of mismatched ranks, or on a convolution"]
    if kind == "lokr":
        for stem in ("lokr_w1", "lokr_w2"):
            if stem not in keys and not {f"{stem}_a", f"{stem}_b"} <= keys.keys():
                return [f"{where}: LoKr needs {stem} or {stem}_a + {stem}_b"]
            if stem in keys and len(shapes[stem]) > 2:
                return [f"{where}: LoKr on a convolution, which vidax does not read yet"]
    if "alpha" in keys and math.prod(shapes["alpha"]) != 1:
        return [f"{where}: alpha {list(shapes['alpha'])} is not one value"]
    return []


def _form(modules) -> str:
    forms = set()
    for m in modules:
        if m.kind in ("loha", "lokr"):
            forms.add("lycoris")
        elif m.kind == "lora":
            forms.add("kohya" if m.underscored else
                      ("peft" if m.keys["down"].endswith("lora_A.weight") or
                       m.keys["down"].endswith("lora_A.default.weight") else "lora_down/up"))
        else:
            forms.add("diff")
    main = sorted(forms - {"diff"}) or ["diff"]
    return "+".join(main) + ("+diff" if "diff" in forms and main != ["diff"] else "")


def _peft_alpha(file: LoraFile) -> None:
    """PEFT's ``lora_alpha`` / ``r`` saved in the header by diffusers (one adapter)."""
    raw = file.metadata.get("lora_adapter_metadata")
    if not raw:
        return
    try:
        meta = json.loads(raw)
    except (TypeError, ValueError) as e:
        raise LoraError(f"{file.path}: the header's lora_adapter_metadata is not JSON ({e})") \
            from e
    meta = meta.get("transformer", meta) if isinstance(meta, dict) else {}
    if any(k.startswith("transformer.") for k in meta):    # diffusers' pipelines save it flat
        meta = {k.removeprefix("transformer."): v for k, v in meta.items()
                if k.startswith("transformer.")}          # (diffusers 0.42.1 lora_base.py)
    if meta.get("alpha_pattern") or meta.get("rank_pattern"):
        raise LoraError(f"{file.path}: per-module alpha_pattern / rank_pattern in "
                        f"lora_adapter_metadata are not read yet (nothing was applied)")
    if "lora_alpha" in meta:
        file.default_alpha = float(meta["lora_alpha"])
        file.default_rank = int(meta["r"]) if meta.get("r") else None


# ----------------------------------------------------------------------------- planning
@dataclass(frozen=True)
class _Probe:
    """A change's shape, for planning it like a stored tensor."""

    shape: tuple[int, ...]
    dtype: str = "float32"


@dataclass
class LoraPlan:
    """A LoRA file mapped onto one model: Flax path -> (target, the checkpoint keys' modules)."""

    file: LoraFile
    layout: str
    targets: dict[str, Target]
    module_of: dict[str, LoraModule]     # checkpoint key -> its module
    names: dict[str, str]                # module name as stored -> resolved name
    bare: set[str] = field(default_factory=set)   # modules whose diff is the tensor itself

    @property
    def num_tensors(self) -> int:
        return sum(len(m.keys) for m in self.file.modules.values())


def _segments(names) -> set[str]:
    return {seg for name in names for seg in name.split(".")}


def _dotted(name: str, vocab: set[str], limit: int = 32) -> list[str]:
    """The dotted names an underscored module name can stand for: each segment a name in
    ``vocab`` or a number (kohya's ``blocks_0_self_attn_q`` -> ``blocks.0.self_attn.q``)."""
    tokens = name.split("_")
    out: list[str] = []

    def walk(i: int, parts: list[str]) -> None:
        if len(out) >= limit:
            return
        if i == len(tokens):
            out.append(".".join(parts))
            return
        for j in range(len(tokens), i, -1):
            seg = "_".join(tokens[i:j])
            if seg in vocab or (j == i + 1 and seg.isdigit()):
                walk(j, [*parts, seg])

    walk(0, [])
    return out


def plan_lora(file: LoraFile, layouts: Mapping[str, Mapper], params: Mapping[str, tuple],
              *, vocab: set[str] = frozenset(), what: str = "the model") -> LoraPlan:
    """Map every change of ``file`` onto ``params`` (Flax path -> shape) through the first of
    ``layouts`` (layout name -> mapper) under which every change lands on a parameter of its
    shape; else ``LoraError`` with that layout's unplaced keys (the closest one's)."""
    best = None
    for layout, mapper in layouts.items():
        attempt = _try_layout(file, layout, mapper, params, vocab | _segments(params))
        if not attempt[1]:
            return attempt[0]
        # the closest layout: fewest problems, then the fewest keys it has no parameter for
        # (a shape mismatch under the right names says more than names of another layout)
        score = (len(attempt[1]), sum("does not have" in p for p in attempt[1]))
        if best is None or score < best[3]:
            best = (layout, attempt[1], attempt[2], score)
    layout, problems, total, _ = best
    raise LoraError(
        f"{file.path} does not fit {what} (nothing was applied): under its best layout "
        f"({layout}), {len(problems)} of {total} changed weight(s) find no parameter of their "
        f"shape -- " + "; ".join(problems[:6]) + (f"; and {len(problems) - 6} more"
                                                  if len(problems) > 6 else "")
        + ". A LoRA for another family, another size of this one, or a module this model "
          "does not have.")


def _try_layout(file: LoraFile, layout: str, mapper: Mapper, params: Mapping[str, tuple],
                vocab: set[str]):
    problems: list[str] = []
    names: dict[str, str] = {}
    bare: set[str] = set()
    probes: dict[str, _Probe] = {}
    module_of: dict[str, LoraModule] = {}
    for module in file.modules.values():
        name = module.name
        if module.underscored:
            name = _resolve(file, module, mapper, params, vocab)
            if name is None:
                problems.append(f"{module.name} (underscored) names no module of this layout")
                continue
        names[module.name] = name
        if module.kind == "diff" and "diff" in module.keys and not _lands(
                file, module, name, mapper, params) and _lands(file, module, name, mapper,
                                                                params, bare=True):
            bare.add(module.name)
        for key, shape in file.changes(module, name, module.name in bare).items():
            probes[key] = _Probe(shape)
            module_of[key] = module
    total = len(probes) + len(problems)
    try:
        plan = mapper.plan(probes)
    except VidaxError as e:
        return None, [*problems, str(e)], total
    def named(target) -> str:           # the changed keys and the file's keys behind them
        stored = dict.fromkeys(k for s in target.sources for k in module_of[s.key].keys.values())
        return f"{', '.join(s.key for s in target.sources)} ({', '.join(stored)})"

    for path, target in plan.targets.items():
        if path not in params:
            problems.append(f"{named(target)} -> {path}, which the model does not have")
        elif tuple(params[path]) != tuple(target.shape):
            problems.append(f"{named(target)} changes {path} {list(target.shape)}, the "
                            f"model's is {list(params[path])}")
    for key, reason in plan.ignored.items():
        problems.append(f"{key} changes a tensor this model does not load ({reason})")
    if problems:
        return None, problems, total
    return LoraPlan(file, layout, plan.targets, module_of, names, bare), [], total


def _resolve(file: LoraFile, module: LoraModule, mapper: Mapper, params, vocab) -> str | None:
    """The dotted name of an underscored module: the candidate whose change lands on a
    parameter of its shape."""
    for name in _dotted(module.name, vocab):
        if _lands(file, module, name, mapper, params) or _lands(file, module, name, mapper,
                                                                params, bare=True):
            return name
    return None


def _lands(file: LoraFile, module: LoraModule, name: str, mapper: Mapper, params,
           bare: bool = False) -> bool:
    """Whether every change of ``module`` (named ``name``) lands on a parameter of its shape."""
    try:
        plan = mapper.plan({k: _Probe(s) for k, s in file.changes(module, name, bare).items()})
    except VidaxError:
        return False
    return bool(plan.targets) and not plan.ignored and all(
        p in params and tuple(params[p]) == tuple(t.shape) for p, t in plan.targets.items())


# ----------------------------------------------------------------------------- identifying
def looks_like_lora(keys) -> bool:
    """Whether a file's keys are a LoRA's: every key ends in a LoRA suffix (a stray one is
    then named by :func:`read_lora`) and some are factors or deltas."""
    keys = list(keys)
    roles = [_role(k) for k in keys]
    return bool(keys) and all(r is not None for r in roles) and any(
        r[1] in ("down", "up", "diff", "hada_w1_a", "lokr_w1", "lokr_w1_a") for r in roles)


@dataclass(frozen=True)
class Fit:
    """How much of a LoRA lands on one released component's weights (by name and shape)."""

    manifest: object               # vidax.manifests.Manifest
    matched: int
    total: int

    @property
    def label(self) -> str:
        m = self.manifest
        return f"{m.family} {m.variant} {m.component} ({m.layout})"


def identify_lora(file: LoraFile) -> list[Fit]:
    """The released components whose weights the LoRA's changes fit best (each change's
    checkpoint key present with its shape), best first: every component tied at the best
    score (a LoRA for Wan's blocks fits the 14B T2V and I2V DiTs alike)."""
    from vidax import manifests

    changes = {}
    for module in file.modules.values():
        changes.update({(k, module.underscored): s for k, s in file.changes(module).items()})
    fits = []
    for m in manifests.all_manifests():
        names = {k: spec.shape for k, spec in m.tensors.items()}
        under = {k.replace(".", "_"): s for k, s in names.items()}
        matched = sum(1 for (k, underscored), shape in changes.items()
                      if (under.get(k.replace(".", "_")) if underscored else names.get(k))
                      == tuple(shape))
        if matched:
            fits.append(Fit(m, matched, len(changes)))
    if not fits:
        return []
    best = max(f.matched for f in fits)
    return sorted((f for f in fits if f.matched == best), key=lambda f: f.manifest.name)
