"""docs/memory.md's tables: what each released model needs on one accelerator, per offload mode.

For every released (not tiny) variant of every family, a :class:`vidax.pipelines.base.Release`
is built without any file -- each weight file's config from its registered spec's
``make_config(variant)``, as the family's ``inspect_folder`` would find it in a complete
release folder -- and its default request (the release's size, frames and steps) is estimated
by :func:`vidax.pipelines.memory.estimate` for a GPU (cuDNN flash attention) at the ``bf16``
precision policy, for each ``offload`` mode with and without ``quantize="fp8"``. No weight is
read: the parameter counts come from the abstract trees.

    python scripts/memory_table.py            # the tables on stdout
    python scripts/memory_table.py --write    # into docs/memory.md, between the markers
    python scripts/memory_table.py --check    # exit 1 if docs/memory.md is stale

About half a minute on a CPU, most of it building the abstract trees of some forty networks
(tests/test_memory_table.py regenerates a sample of the rows; its slow test, all of them).

Only what the estimate reads is filled in: configs that a release folder carries as files and
the estimate never reads (Cosmos3's scheduler, CogVideoX's scheduler_config.json, LTX-Video's
scheduler settings, which take their defaults here) are left out or defaulted.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "memory.md"
BEGIN, END = "<!-- memory-table:begin -->", "<!-- memory-table:end -->"
#: The cards the fits column names, compared in GiB (``size * 2**30`` bytes): roughly what
#: such cards report (an "80 GB" H100 about 79.6 GiB, a "141 GB" H200 about 140 GiB).
CARDS = (16, 24, 48, 80, 141)
MODES = ("none", "model", "block")
QUANTIZE = (None, "fp8")
PRECISION = "bf16"
PROMPT = "a prompt"
#: What the estimate plans for: an accelerator as large as the largest card (the peak does not
#: depend on it; the fits column compares the peak with each card).
DEVICE = (CARDS[-1] * 2**30, f"{CARDS[-1]} GiB GPU", "gpu")
FOLDER = Path("(no files)")


# ----------------------------------------------------------------------------- the releases
@dataclass(frozen=True)
class Row:
    """One release in the table: ``family`` (the module under vidax.pipelines), ``variant``,
    the pipeline's extra ``options``, ``extra`` release parts (LTX's upsamplers)."""

    label: str
    family: str
    variant: str
    options: dict = field(default_factory=dict)
    extra: tuple = ()
    note: str = ""


ROWS = (
    Row("Wan2.1 T2V-1.3B", "wan2_1", "t2v-1.3b"),
    Row("Wan2.1 T2V-14B", "wan2_1", "t2v-14b"),
    Row("Wan2.2 TI2V-5B", "wan2_2", "ti2v-5b"),
    Row("Wan2.2 T2V-A14B, experts resident", "wan2_2", "t2v-a14b",
        {"expert_policy": "resident"}, note="both experts on the device under `none`"),
    Row("Wan2.2 T2V-A14B, experts swapped", "wan2_2", "t2v-a14b", {"expert_policy": "swap"},
        note="one expert on the device at a time, what `auto` picks where both do not fit"),
    Row("Cosmos-Predict2.5 2B", "cosmos2_5", "predict-2b-post-trained"),
    Row("Cosmos-Predict2.5 14B", "cosmos2_5", "predict-14b-post-trained"),
    Row("Cosmos3 Edge", "cosmos3", "edge"),
    Row("Cosmos3 Nano", "cosmos3", "nano"),
    Row("LTX-Video 0.9.8 2B distilled", "ltx_video", "0.9.8-2b-distilled", extra=("upsampler",),
        note="multi-scale, with the spatial upscaler"),
    Row("LTX-Video 0.9.8 13B dev", "ltx_video", "0.9.8-13b-dev", extra=("upsampler",),
        note="multi-scale, with the spatial upscaler"),
    Row("LTX-2.3 22B dev", "ltx2_5", "2.3-22b-dev", note="one stage"),
    Row("LTX-2.3 22B distilled", "ltx2_5", "2.3-22b-distilled", extra=("upsampler",),
        note="two stages, with the spatial upsampler"),
    Row("HunyuanVideo 720p", "hunyuan_video", "t2v-720p"),
    Row("HunyuanVideo-1.5 480p t2v", "hunyuan_video1_5", "480p_t2v"),
    Row("HunyuanVideo-1.5 720p t2v", "hunyuan_video1_5", "720p_t2v"),
    Row("CogVideoX-2B", "cogvideox", "2b"),
    Row("CogVideoX-5B", "cogvideox", "5b"),
    Row("CogVideoX1.5-5B", "cogvideox", "1.5-5b"),
)


def _module(family: str):
    import importlib

    return importlib.import_module(f"vidax.pipelines.{family}")


def _wan2_1(m, row):
    from vidax import registry

    task = row.variant.split("-")[0]
    specs = {c: registry.get(m.MODEL_TYPE, c) for c in m.COMPONENTS[task]}
    configs = {c: spec.make_config(row.variant) for c, spec in specs.items()}
    return m.Release(FOLDER, task, row.variant, m.defaults_for(row.variant, task), configs, {},
                     specs)


def _wan2_2(m, row):
    task = m._VARIANT_TASK[row.variant]
    dits = m.EXPERTS if task != "ti2v" else ("dit",)
    specs = {key: m._spec(task, "dit")[0] for key in dits}
    specs.update({c: m._spec(task, c)[0] for c in ("vae", "text_encoder")})
    configs = {c: m._spec(task, c)[0].make_config(m._spec(task, c)[1])
               for c in ("dit", "vae", "text_encoder")}
    configs.update({key: configs["dit"] for key in dits})
    return m.Release(FOLDER, task, row.variant, m.defaults_for(row.variant, task), configs, {},
                     specs)


def _cosmos2_5(m, row):
    """The authors' layout: ``base/post-trained/*_ema_bf16.pt``, ``tokenizer.pth`` (the
    Wan2.1 VAE), Cosmos-Reason1-7B."""
    from vidax import registry

    vae = registry.get("wan2_1", "vae")
    specs = {"dit": registry.get(m.MODEL_TYPE, "dit", "original"),
             "vae": dataclasses.replace(vae, files=("tokenizer.pth",)),
             "text_encoder": registry.get("reason1", "text_encoder", "transformers")}
    configs = {"dit": specs["dit"].make_config(row.variant),
               "vae": specs["vae"].make_config("t2v-1.3b"),
               "text_encoder": specs["text_encoder"].make_config("reason1-7b")}
    return m.Release(FOLDER, m.RELEASE_TASK, row.variant, m.defaults_for(row.variant), configs,
                     {}, specs)


def _cosmos3(m, row):
    """diffusers' layout: ``transformer/``, ``vae/`` (the Wan2.2 VAE); no text encoder."""
    from vidax import registry

    specs = {"dit": registry.get(m.MODEL_TYPE, "dit", "diffusers"),
             "vae": registry.get("wan2_2", "vae", "diffusers")}
    configs = {"dit": specs["dit"].make_config(row.variant),
               "vae": specs["vae"].make_config("ti2v-5b")}
    return m.Release(FOLDER, m.RELEASE_TASK, row.variant, m.defaults_for(row.variant), configs,
                     {}, specs)


def _ltx_video(m, row):
    """The release file (DiT + VAE), T5-XXL, and the spatial upscaler (multi-scale)."""
    from vidax import registry
    from vidax.schedulers.rectified_flow import RectifiedFlowScheduler

    specs = {"dit": registry.get(m.MODEL_TYPE, "dit"), "vae": registry.get(m.MODEL_TYPE, "vae"),
             "text_encoder": registry.get("t5", "encoder", layout="transformers")}
    specs.update({k: registry.get(m.MODEL_TYPE, k) for k in row.extra})
    configs = {k: spec.make_config("t5-v1_1-xxl" if k == "text_encoder" else row.variant)
               for k, spec in specs.items()}
    return m.Release(FOLDER, m.RELEASE_TASK, row.variant, m.defaults_for(row.variant), configs,
                     {}, specs, scheduler=RectifiedFlowScheduler())


def _ltx2_5(m, row):
    """2.0 / 2.3's single file (DiT, video and audio VAEs, vocoder, text projection), the Gemma
    3 folder, the x2 spatial upsampler where ``row.extra`` names it."""
    from vidax import registry

    version = row.variant.split("-")[0]
    keys = ("dit", "vae", "audio_vae", "vocoder", "text_projection")
    specs = {k: registry.get(m.MODEL_TYPE, k) for k in keys}
    specs["text_encoder"] = registry.get("gemma", "text_encoder", layout="transformers")
    configs = {k: specs[k].make_config(row.variant) for k in keys}
    gemma = "gemma-3-12b-it-qat-q4_0-unquantized"
    configs["text_encoder"] = text = specs["text_encoder"].make_config(gemma)
    configs["text_projection"] = dataclasses.replace(   # as inspect_folder's _projection_config
        configs["text_projection"], embedding_dim=text.hidden_size,
        num_layers=text.num_hidden_layers + 1)
    if "upsampler" in row.extra:
        specs["upsampler"] = registry.get(m.MODEL_TYPE, "upsampler")
        configs["upsampler"] = specs["upsampler"].make_config(f"{version}-spatial-x2-1.0")
    return m.Release(FOLDER, "t2av", row.variant, m.defaults_for(row.variant,
                                                                 "upsampler" in specs),
                     configs, {}, specs, version=version)


def _hunyuan_video(m, row):
    from vidax import registry

    variants = {"text_encoder": "llava-llama-3-8b-v1_1",
                "text_encoder_2": "clip-vit-large-patch14"}
    specs = {key: registry.get(model_type, "text_encoder" if key.startswith("text") else key,
                               layout) for key, (model_type, layout, _) in m.COMPONENTS.items()}
    configs = {k: spec.make_config(variants.get(k, row.variant)) for k, spec in specs.items()}
    return m.Release(FOLDER, m.TASKS[0], row.variant, m.defaults_for(row.variant), configs, {},
                     specs)


def _hunyuan_video1_5(m, row):
    from vidax import registry

    specs = {"dit": registry.get(m.MODEL_TYPE, "dit", "original"),
             "vae": registry.get(m.MODEL_TYPE, "vae", "original"),
             "text_encoder": registry.get("reason1", "text_encoder", "transformers"),
             "byt5": registry.get("t5", "encoder", "t5stack")}
    variants = {"dit": row.variant, "vae": "base", "text_encoder": "qwen2.5-vl-7b-instruct",
                "byt5": "glyph-sdxl-v2"}
    configs = {k: spec.make_config(variants[k]) for k, spec in specs.items()}
    task = "i2v" if "_i2v" in row.variant else "t2v"
    return m.Release(FOLDER, task, row.variant, m.defaults_for(row.variant), configs, {}, specs)


def _cogvideox(m, row):
    from vidax import registry

    specs = {"dit": registry.get(m.MODEL_TYPE, "dit", layout="diffusers"),
             "vae": registry.get(m.MODEL_TYPE, "vae", layout="diffusers"),
             "text_encoder": registry.get("t5", "encoder", layout="transformers")}
    configs = {k: spec.make_config("t5-v1_1-xxl" if k == "text_encoder" else row.variant)
               for k, spec in specs.items()}
    return m.Release(FOLDER, m.task_of(row.variant), row.variant, m.DEFAULTS[row.variant],
                     configs, {}, specs)


_GLUE = {"wan2_1": _wan2_1, "wan2_2": _wan2_2, "cosmos2_5": _cosmos2_5, "cosmos3": _cosmos3,
         "ltx_video": _ltx_video, "ltx2_5": _ltx2_5, "hunyuan_video": _hunyuan_video,
         "hunyuan_video1_5": _hunyuan_video1_5, "cogvideox": _cogvideox}


def release(row: Row):
    """The release of ``row`` as its family's ``inspect_folder`` would find it, without files."""
    return _GLUE[row.family](_module(row.family), row)


# ----------------------------------------------------------------------------- the numbers
@dataclass
class Result:
    """One release's estimates: ``request`` (the default one), ``estimates[(mode, quantize)]``."""

    row: Row
    release: object
    request: object
    estimates: dict

    @property
    def base(self):
        return self.estimates[("none", None)]


def estimate(row: Row, mode: str = "none", quantize: str | None = None, rel=None,
             request=None):
    """:func:`vidax.pipelines.memory.estimate` of ``row``'s default request at ``bf16`` for
    :data:`DEVICE`, under ``offload=mode`` and ``quantize``."""
    from vidax.pipelines import memory

    rel = rel if rel is not None else release(row)
    pipe = _module(row.family).Pipeline(rel, precision=PRECISION, offload=mode,
                                         quantize=quantize, **row.options)
    request = request if request is not None else pipe.request(PROMPT)
    return memory.estimate(pipe, pipe.resolve(request), device=DEVICE), request


def results(rows=ROWS) -> list[Result]:
    out = []
    for row in rows:
        rel = release(row)
        estimates, request = {}, None
        for mode in MODES:
            for quantize in QUANTIZE:
                estimates[(mode, quantize)], request = estimate(row, mode, quantize, rel,
                                                                request)
        out.append(Result(row, rel, request, estimates))
    return out


# ----------------------------------------------------------------------------- Markdown
def gib(n: int) -> str:
    return f"{n / 2**30:.1f}"


def fits(peak: int) -> str:
    """The smallest of :data:`CARDS` the peak fits in (``peak <= size * 2**30``; so every
    larger one too), as ``48+``; ``none`` where not even the largest."""
    card = next((c for c in CARDS if peak <= c * 2**30), None)
    return f"{card}+" if card is not None else "none"


def _request_text(request) -> str:
    width, height = request.size
    return f"{width}x{height}, {request.frames} frames, {request.steps} steps"


def _encoders(result: Result) -> list[str]:
    specs = result.release.specs
    return [k for k, spec in specs.items() if "encoder" in spec.component
            or k in ("text_projection", "byt5")]


def _weights_text(result: Result) -> str:
    """Each weight file's GiB, the DiT's (each expert's) with its dtype."""
    e, specs = result.base, result.release.specs
    return ", ".join(f"{k} {gib(n)}" + (f" ({e.dtypes[k]})" if specs[k].component == "dit"
                                         else "") for k, n in e.weights.items())


def markdown(found: list[Result]) -> str:
    """The three tables (weights and activations; the peak per mode; the prompt phase)."""
    columns = [f"`{m}`" + (f" + `{q}`" if q else "") for m in MODES for q in QUANTIZE]
    lines = ["### Weights and activations", "",
             f"GiB, at `--precision {PRECISION}`, for each release's default request. "
             "Weights: each weight file on the device (the release's key for it; a DiT's "
             "dtype in brackets). Activations: one DiT step and the VAE decode, on a GPU "
             "(cuDNN flash attention).", "",
             "| Release | Default request | Weights | DiT step | VAE decode |",
             "|---|---|---|---:|---:|"]
    for r in found:
        e = r.base
        phases = [gib(e.phases[p].bytes) if p in e.phases else "–"
                  for p in ("DiT step", "VAE decode")]
        label = r.row.label + (f" — {r.row.note}" if r.row.note else "")
        lines.append(f"| {label} | {_request_text(r.request)} | {_weights_text(r)} | "
                     f"{phases[0]} | {phases[1]} |")
    lines += ["", "### The peak per offload mode", "",
              "GiB at the peak, then the smallest of the "
              + ", ".join(str(c) for c in CARDS) + f" GiB cards it fits (`{CARDS[2]}+`: peak ≤ "
              f"{CARDS[2]} x 2^30 bytes, and so every larger card; `none`: not even the "
              "largest), its nominal size: what a card reports is a little less, and the "
              "estimate leaves out the runtime's own (the introduction). `+ fp8`: with "
              "`--quantize fp8` (`int8` holds the same bytes).", "",
              "| Release | " + " | ".join(columns) + " |",
              "|---|" + "---:|" * len(columns)]
    for r in found:
        cells = [f"{gib(e.peak)} ({fits(e.peak)})" for e in
                 (r.estimates[(m, q)] for m in MODES for q in QUANTIZE)]
        lines.append(f"| {r.row.label} | " + " | ".join(cells) + " |")
    lines += ["", "### The prompt phase", "",
              "The text encoders (and image encoders, text projections) run first, while the "
              "prompt is encoded. Under `--offload model|block` every weight file but the "
              "DiT's is on the device together for that phase "
              "(`vidax.pipelines.offload.phase_weights`), then dropped before sampling; "
              "under `none` they stay, counted in the weights above. GiB.", "",
              "| Release | Encoders | Prompt phase on the device |", "|---|---|---:|"]
    for r in found:
        e, model = r.base, r.estimates[("model", None)]
        enc = ", ".join(f"{k} {gib(e.weights[k])} ({e.dtypes[k]})" for k in _encoders(r)) \
            or "none (the DiT reads the prompt's token ids)"
        lines.append(f"| {r.row.label} | {enc} | {gib(model.on_device['prompt'])} |")
    return "\n".join(lines) + "\n"


def render(doc: str, table: str) -> str:
    """``doc`` with ``table`` between the markers."""
    head, sep, rest = doc.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"{DOC}: the markers {BEGIN} / {END} are missing")
    return f"{head}{BEGIN}\n{table}{END}{tail}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="write docs/memory.md")
    group.add_argument("--check", action="store_true",
                       help="exit 1 if docs/memory.md is not what --write would write")
    args = parser.parse_args(argv)
    table = markdown(results())
    if not (args.write or args.check):
        sys.stdout.write(table)
        return 0
    doc = DOC.read_text(encoding="utf-8")
    new = render(doc, table)
    if args.check:
        if new != doc:
            print(f"{DOC} is stale: run python scripts/memory_table.py --write", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
