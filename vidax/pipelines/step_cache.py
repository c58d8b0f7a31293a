"""Faster sampling as options of a generation: step caching (``step_cache=`` /
``--step-cache``: the user's choice parsed, bound to the model's published calibration in
``vidax/data/step_cache.json`` -- MagCache's magnitude ratios and TeaCache's polynomials, each
with its source), cheaper guidance (:class:`Guidance`: ``guidance=`` / ``--guidance-window``,
``--cfg-zero-star``), and what a sampling loop did (:class:`SamplingReport`). The caches'
mechanism, traced inside the jitted step, is :mod:`vidax.nn.step_cache`; docs/step_cache.md
says how to choose.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from importlib import resources
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from vidax.errors import VidaxError
from vidax.nn.step_cache import KINDS, StepCache


@dataclasses.dataclass(frozen=True)
class Guidance:
    """Cheaper classifier-free guidance, as diffusers' guiders define it: CFG only on the
    steps ``int(start * steps) <= i < int(stop * steps)`` (``ClassifierFreeGuidance``'s
    ``start`` / ``stop``; the other steps run the DiT once, on the prompt alone), and
    CFG-Zero* (``ClassifierFreeZeroStarGuidance``: the unconditional prediction scaled by
    ``<cond, uncond> / |uncond|^2`` per sample, and a zero velocity on the first
    ``zero_init_steps`` steps)."""

    start: float = 0.0
    stop: float = 1.0
    zero_star: bool = False
    zero_init_steps: int = 0

    def __post_init__(self):
        if not 0.0 <= self.start <= self.stop <= 1.0:
            raise VidaxError(f"the guidance window must satisfy 0 <= start <= stop <= 1, got "
                             f"start {self.start:g}, stop {self.stop:g}")
        if self.zero_init_steps < 0 or (self.zero_init_steps and not self.zero_star):
            raise VidaxError("zero_init_steps counts CFG-Zero*'s zeroed first steps: a "
                             "non-negative count, with zero_star=True")

    def guided(self, index: int, steps: int) -> bool:
        return int(self.start * steps) <= index < int(self.stop * steps)


def guided_inputs(family, inputs: dict, guidance: Guidance | None, index: int,
                  steps: int) -> dict:
    """Step ``index``'s inputs under ``guidance``: outside its window no ``guidance_scale``
    and the ``family``'s paired inputs (``PAIRED_INPUTS``) cut to the prompt's row
    (``PROMPT_ROW``), so its DiT runs on the prompt alone; CFG-Zero*'s flag of a zeroed
    step."""
    if guidance is None or inputs.get("guidance_scale") is None:
        return inputs
    if not guidance.guided(index, steps):
        row = family.PROMPT_ROW
        inputs = {**inputs, "guidance_scale": None,
                  **{k: inputs[k][row:row + 1] for k in family.PAIRED_INPUTS
                     if inputs.get(k) is not None}}
    if guidance.zero_star:
        inputs = {**inputs, "zero_star": jnp.bool_(index < guidance.zero_init_steps)}
    return inputs


def zero_star(cond, uncond):
    """CFG-Zero*'s unconditional prediction: scaled by ``<cond, uncond> / (|uncond|^2 +
    1e-8)`` per sample (diffusers' ``cfg_zero_star_scale``)."""
    c, u = cond.reshape(cond.shape[0], -1), uncond.reshape(uncond.shape[0], -1)
    alpha = (c * u).sum(-1) / ((u * u).sum(-1) + 1e-8)
    return uncond * alpha.reshape(alpha.shape + (1,) * (uncond.ndim - 1))


def zero_init(flow, inputs: dict):
    """CFG-Zero*'s zero velocity on its first steps (``inputs["zero_star"]``)."""
    if "zero_star" not in inputs:
        return flow
    return jnp.where(inputs["zero_star"], jnp.zeros_like(flow), flow)


_FIELDS = {f.name for f in dataclasses.fields(StepCache)} - {"kind", "steps"}


@functools.cache
def published() -> dict:
    """The published calibrations (``vidax/data/step_cache.json``)."""
    return json.loads(resources.files("vidax").joinpath("data/step_cache.json").read_text())


def parse(spec, **settings) -> StepCache | None:
    """A :class:`StepCache` from ``spec``: None or ``"none"`` (no cache), a kind (``"first-
    block"``, ``"magcache"``, ``"taylorseer"``, ``"teacache"``) with ``settings`` (the
    :class:`StepCache` fields: ``threshold``, ``mag_ratios`` -- numbers, rows of them or a
    JSON file --, ``calibrate``, ...), or a :class:`StepCache` as it is. Settings left out
    are filled at :func:`bind`."""
    if spec is None or spec == "none":
        if settings:
            raise VidaxError(f"step-cache settings {sorted(settings)} given without a cache "
                             f"kind: name one of {', '.join(KINDS)}")
        return None
    if isinstance(spec, StepCache):
        return dataclasses.replace(spec, **settings) if settings else spec
    if spec not in KINDS:
        raise VidaxError(f"step_cache must be none or one of {', '.join(KINDS)}, got {spec!r}")
    unknown = sorted(set(settings) - _FIELDS)
    if unknown:
        raise VidaxError(f"unknown step-cache setting(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(_FIELDS))}")
    if settings.get("mag_ratios") is not None:
        settings["mag_ratios"] = _ratio_rows(settings["mag_ratios"])
    if settings.get("coefficients") is not None:
        settings["coefficients"] = tuple(float(c) for c in settings["coefficients"])
    for name, least in _COUNTS.items():
        value = settings.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < least):
            raise VidaxError(f"step-cache setting {name} must be a whole number >= {least}, "
                             f"got {value!r}")
    ratio = settings.get("retention_ratio")
    if ratio is not None and not 0 <= ratio <= 1:
        raise VidaxError(f"step-cache setting retention_ratio must be in [0, 1], got {ratio}")
    return StepCache(kind=spec, **settings)


#: The whole-number settings and their least values.
_COUNTS = {"max_skip_steps": 0, "interval": 1, "warmup_steps": 0, "cooldown_step": 0,
           "order": 0, "compute_first": 0, "compute_last": 0}


def from_options(kind: str, threshold: float | None = None, settings=(),
                 calibrate: bool = False) -> StepCache | None:
    """:func:`parse` from the command line's words: ``--step-cache KIND``,
    ``--step-cache-threshold``, ``--step-cache-set KEY=VALUE`` (each), and
    ``--step-cache-calibrate`` (MagCache only)."""
    given = {}
    for item in settings:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise VidaxError(f"--step-cache-set {item!r}: give KEY=VALUE")
        given[key] = value if key == "mag_ratios" else _number(key, value)
    if threshold is not None:
        given["threshold"] = threshold
    if calibrate:
        if kind != "magcache":
            raise VidaxError("--step-cache-calibrate measures MagCache's ratios: pass "
                             "--step-cache magcache with it")
        given["calibrate"] = True
    return parse(kind, **given)


def _number(key: str, value: str):
    try:
        return int(value) if value.strip().lstrip("-").isdigit() else float(value)
    except ValueError:
        raise VidaxError(f"--step-cache-set {key}={value}: not a number") from None


def guidance_from_options(window: str | None, zeroed: int | None) -> Guidance | None:
    """``--guidance-window START:STOP`` and ``--cfg-zero-star [N]`` as a :class:`Guidance`
    (None: neither given)."""
    if window is None and zeroed is None:
        return None
    start, stop = 0.0, 1.0
    if window is not None:
        try:
            start, stop = (float(v) for v in window.split(":"))
        except ValueError:
            raise VidaxError(f"--guidance-window {window!r}: give START:STOP, two fractions "
                             "of the run, e.g. 0:0.8") from None
    return Guidance(start, stop, zero_star=zeroed is not None, zero_init_steps=zeroed or 0)


def write_calibration(pipe, path: Path) -> Path:
    """MagCache's measured ratios of ``pipe``'s last generation (per sampling loop, per CFG
    row) as JSON, atomically; ``mag_ratios`` is the last loop's, what ``mag_ratios=FILE``
    reads."""
    from vidax.demo.common import write_json

    loops = [r.mag_ratios() for r in pipe.sampling_reports]
    write_json(path, {"mag_ratios": loops[-1], "loops": loops, "model": pipe.describe(),
                      "steps": len(loops[-1][0])})
    return path


def _ratio_rows(ratios) -> tuple[tuple[float, ...], ...]:
    """Magnitude ratios as rows: a list of numbers (one list for every CFG row), a list of
    lists, or a JSON file of either (what ``--step-cache-calibrate`` writes)."""
    if isinstance(ratios, (str, Path)):
        try:
            ratios = json.loads(Path(ratios).read_text())
        except (OSError, ValueError) as e:
            raise VidaxError(f"mag_ratios {ratios}: not a readable JSON list ({e})") from None
        ratios = ratios.get("mag_ratios", ratios) if isinstance(ratios, dict) else ratios
    rows = ratios if ratios and isinstance(ratios[0], (list, tuple)) else [ratios]
    try:
        rows = tuple(tuple(float(v) for v in row) for row in rows)
    except (TypeError, ValueError):
        raise VidaxError("mag_ratios must be a list of numbers or of lists of numbers") from None
    if not rows or not all(rows) or not np.isfinite(np.concatenate(rows)).all():
        raise VidaxError("mag_ratios must be non-empty lists of finite numbers")
    return rows


def model_key(pipe) -> str:
    """The key of ``pipe``'s model in the published table: ``<model_type>/<variant>`` (a
    family whose authors calibrate per size or task adds ``@...``:
    ``PipelineBase.step_cache_key``)."""
    return f"{type(pipe).__module__.rsplit('.', 1)[-1]}/{pipe.variant}"


def bind(pipe, cache: StepCache | None, steps: int, request=None) -> StepCache | None:
    """``cache`` completed for a run of ``steps`` steps of ``pipe``'s model: MagCache's ratios
    and TeaCache's polynomial from the published table (with the settings its authors run
    it at, where the user gave none), the rest at :data:`vidax.nn.step_cache.DEFAULTS`; a
    model with no published calibration is one clear error saying what to do."""
    if cache is None:
        return None
    key = pipe.step_cache_key(request)
    if cache.kind == "magcache" and cache.mag_ratios is None and not cache.calibrate:
        table = published()["magcache"].get(key)
        if table is None:
            raise VidaxError(
                f"MagCache: no published magnitude ratios for {key}. Calibrate them once with "
                "--step-cache magcache --step-cache-calibrate RATIOS.json (step_cache="
                "StepCache('magcache', calibrate=True) in Python; nothing is skipped), then run "
                "with --step-cache-set mag_ratios=RATIOS.json; or use first-block or taylorseer")
        cache = _fill(cache, table, mag_ratios=_ratio_rows(table["ratios"]))
    if cache.kind == "teacache" and cache.coefficients is None:
        table = published()["teacache"].get(key)
        if table is None:
            known = ", ".join(sorted(published()["teacache"]))
            raise VidaxError(
                f"TeaCache: its authors publish no rescaling polynomial for {key} (they do for "
                f"{known}); use first-block, magcache or taylorseer")
        cache = _fill(cache, table, coefficients=tuple(table["coefficients"]))
    return cache.for_steps(steps)


def _fill(cache: StepCache, table: dict, **data) -> StepCache:
    """``cache`` with ``data`` and, where it leaves them None, the table's settings."""
    unset = {k: v for k, v in table.items()
             if k in _FIELDS and k not in data and getattr(cache, k) is None}
    return dataclasses.replace(cache, **unset, **data)


def describe(cache: StepCache) -> str:
    if cache.kind == "taylorseer":
        return (f"taylorseer (every {cache.interval} steps after {cache.warmup_steps}, "
                f"order {cache.order})")
    if cache.kind == "magcache" and cache.calibrate:
        return "magcache calibration (nothing skipped)"
    extra = f", at most {cache.max_skip_steps} in a row" if cache.kind == "magcache" else ""
    return f"{cache.kind} (threshold {cache.threshold:g}{extra})"


class SamplingReport:
    """What one sampling loop did: per step its seconds and, with a step cache, which batch
    rows of each DiT call ran the blocks (``computed [steps, calls, rows]``) and MagCache's
    calibration measurements (``measured``, same shape)."""

    def __init__(self, cache: StepCache | None, steps: int):
        self.cache, self.steps = cache, steps
        self.seconds: list[float] = []
        self.alone = 0
        self._computed: list[np.ndarray] = []
        self._measured: list[np.ndarray] = []

    def step(self, seconds: float, cached: dict | None, alone: bool = False) -> None:
        """One step's record; ``alone``: its DiT ran on the prompt alone (outside the
        guidance window)."""
        self.seconds.append(seconds)
        self.alone += alone
        if cached is not None:
            self._computed.append(np.stack([np.asarray(c) for c in cached["computed"]]))
            self._measured.append(np.stack([np.asarray(m) for m in cached["measured"]]))

    @property
    def computed(self) -> np.ndarray:
        """``[steps, calls, rows]`` bool (all True without a cache). A step with fewer rows
        than the widest (LTX-Video's STG steps, Wan's steps outside the guidance window) is
        padded with whether its call ran the blocks."""
        if self.cache is None:
            return np.ones((len(self.seconds), 1, 1), bool)
        calls = max(c.shape[0] for c in self._computed)
        rows = max(c.shape[1] for c in self._computed)
        out = np.zeros((len(self._computed), calls, rows), bool)
        for i, c in enumerate(self._computed):
            out[i, :c.shape[0]] = c.any(-1, keepdims=True)
            out[i, :c.shape[0], :c.shape[1]] = c
        return out

    @property
    def evaluations(self) -> int:
        """Steps' DiT calls that ran their blocks (one per call that ran)."""
        return int(sum(c.any(-1).sum() for c in self._computed)) if self.cache is not None \
            else len(self.seconds)

    @property
    def skipped(self) -> int:
        return int(sum((~c.any(-1)).sum() for c in self._computed))

    def mag_ratios(self) -> list[list[float]]:
        """MagCache calibration: per batch row of the first DiT call, the measured ratio of
        each step (diffusers' ``calibration_ratios``)."""
        if len({m.shape for m in self._measured}) != 1:
            raise VidaxError("MagCache calibration needs the same DiT batch on every step "
                             "(this run changed it: a guidance window, LTX-Video's STG steps)")
        return np.stack(self._measured)[:, 0].T.astype(np.float64).round(5).tolist()

    def summary(self) -> str:
        total = sum(self.seconds)
        per = total / max(len(self.seconds), 1)
        after = (f", {np.mean(self.seconds[1:]):.3f} s/step after the first (compile included "
                 f"in it: {self.seconds[0]:.1f} s)" if len(self.seconds) > 1 else "")
        made = f"DiT evaluations: {self.evaluations} made, {self.skipped} skipped"
        if self.alone:
            made += f" ({self.alone} steps on the prompt alone, outside the guidance window)"
        if self.cache is not None:
            made += f" by {describe(self.cache)}"
            if len({c.shape for c in self._computed}) == 1:
                rows = np.stack(self._computed).sum((0, 1))
                made += "; per batch row computed: " + "/".join(str(int(r)) for r in rows)
        return f"{made}; sampling {total:.1f} s, {per:.3f} s/step{after}"
