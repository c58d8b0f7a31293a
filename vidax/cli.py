"""The ``vidax`` command: ``models``, ``inspect``, ``verify``, ``generate``, ``convert``,
``demo``. README.md ("Use") shows each; docs/loading_weights.md explains what ``inspect``,
``verify`` and ``convert`` check, docs/hardware_and_sharding.md the ``--mesh`` option and
docs/models/<model_type>.md each family's ``generate`` defaults.

Errors are one paragraph and a non-zero exit; ``--debug``, before or after the subcommand,
shows the traceback. A mistyped model type, component, variant or layout names the closest
registered ones (:func:`vidax.registry.suggest`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from pathlib import Path

from vidax.errors import VidaxError


def _console():
    from rich.console import Console

    return Console(highlight=False)


def cmd_models(args) -> int:
    from vidax import registry

    if args.json:
        print(json.dumps(_models_json(), indent=1))
        return 0
    con = _console()
    if args.wide:
        _models_table(con)
    else:
        _models_compact(con, registry.specs(), registry.aliases())
    return 0


def _models_json() -> dict:
    from vidax import registry
    from vidax.manifests import all_manifests
    from vidax.pipelines import PIPELINES

    return {
        "models": [{"model_type": s.model_type, "component": s.component, "layout": s.layout,
                    "variants": list(s.variants), "mapper": s.mapper, "files": list(s.files),
                    "description": s.description} for s in registry.specs()],
        "tiny": "every component also takes the variant 'tiny' (a small config for tests)",
        "aliases": [{"family": fam, "variant": var, "component": comp, "layout": lay,
                     "implemented_by": {"model_type": a.model_type, "variant": a.variant,
                                        "component": a.component, "layout": a.layout}}
                    for (fam, var, comp, lay), a in registry.aliases().items()],
        "pipelines": list(PIPELINES),
        "manifests": [m.name for m in all_manifests()],
    }


def _models_table(con) -> None:
    """The registry as one wide table (``vidax models --wide``)."""
    from rich.table import Table

    from vidax import registry

    # overflow="fold": in a terminal narrower than the table, cells wrap; none is cut
    table = Table(title="vidax models")
    for col in ("model_type", "component", "layout", "variants", "mapper", "files"):
        table.add_column(col, overflow="fold")
    for s in registry.specs():
        table.add_row(s.model_type, s.component, s.layout, ", ".join([*s.variants, "tiny"]),
                      s.mapper.split(":")[0], ", ".join(s.files))
    con.print(table)
    al = Table(title="aliases: the same architecture released under another name")
    for col in ("family", "variant", "component", "layout", "implemented by"):
        al.add_column(col, overflow="fold")
    for (fam, var, comp, lay), a in registry.aliases().items():
        al.add_row(fam, var, comp, lay, f"{a.model_type} {a.variant} {a.component} ({a.layout})")
    con.print(al)


def _models_compact(con, specs, aliases) -> None:
    """The registry grouped by model type, wrapped to the console's width without cutting a
    name: per model type its variants, then each component with its layouts (and the
    variants of a layout where they are not all of the model type's)."""
    from vidax.pipelines import PIPELINES

    width = max(con.width, 40)

    def say(text: str, indent: str = "", style: str | None = None) -> None:
        for line in textwrap.wrap(text, width=width, initial_indent=indent,
                                  subsequent_indent=indent + "    ", break_long_words=False,
                                  break_on_hyphens=False):
            con.print(line, style=style, markup=False, highlight=False, soft_wrap=True)

    types: dict[str, list] = {}
    for s in specs:
        types.setdefault(s.model_type, []).append(s)
    say(f"vidax models: {len(types)} model types, {len(specs)} components. Every component "
        "also takes the variant 'tiny'. --wide: one table with mappers and file names; "
        "--json: everything, with the packaged manifests.")
    for model_type, own in types.items():
        con.print()
        head = model_type + (f"  (vidax generate {model_type})" if model_type in PIPELINES
                             else "")
        say(head, style="bold")
        union = list(dict.fromkeys(v for s in own for v in s.variants))
        say("variants: " + ", ".join(union), "  ")
        groups: dict[tuple, list[str]] = {}  # (component, variants) -> layouts
        for s in own:
            groups.setdefault((s.component, tuple(s.variants)), []).append(s.layout)
        every = [f"{c} ({', '.join(layouts)})" for (c, variants), layouts in groups.items()
                 if list(variants) == union]
        if every:
            say("components (layouts): " + ", ".join(every), "  ")
        for (c, variants), layouts in groups.items():
            if list(variants) != union:
                say(f"{c} ({', '.join(layouts)}), only for: {', '.join(variants)}", "  ")
    merged: dict[tuple, list[str]] = {}
    for (fam, var, comp, lay), a in aliases.items():
        merged.setdefault((fam, var, comp, a.model_type, a.variant, a.component), []).append(lay)
    con.print()
    say("aliases: components a release names that are registered under another model type",
        style="bold")
    for (fam, var, comp, model_type, variant, component), layouts in merged.items():
        say(f"{fam} {var} {comp} ({', '.join(layouts)}) = {model_type} {variant} {component}",
            "  ")


def cmd_inspect(args) -> int:
    from vidax import manifests
    from vidax.translator.io import open_checkpoint

    with open_checkpoint(args.path) as ckpt:
        tensors = {k: (tuple(v.shape), str(v.dtype)) for k, v in ckpt.items()}
        nbytes = sum(v.nbytes for v in ckpt.values())
        info = {"path": str(args.path), "format": ckpt.format, "files": list(ckpt.files),
                "metadata": dict(ckpt.metadata), "num_tensors": len(tensors),
                "num_params": sum(_numel(s) for s, _ in tensors.values()), "bytes": nbytes}
        quantization, weights = _quantization(ckpt, str(args.path))
    dtypes: dict[str, int] = {}
    for _, dt in tensors.values():
        dtypes[dt] = dtypes.get(dt, 0) + 1
    info["dtypes"] = dtypes
    found = manifests.identify(tensors, path=str(args.path))
    # A quantized or repackaged copy is identified by its weights alone (its scales, markers
    # and container prefix aside), where its own keys match no release as they are.
    copy = None
    if set(weights) != set(tensors) and found.kind not in ("exact", "dtype"):
        copy = manifests.identify(weights, path=str(args.path))
        copy = copy if copy.kind in ("exact", "dtype") else None
    info["quantization"] = quantization
    lora = _lora_info(str(args.path), tensors) if found.kind not in ("exact", "dtype") else None
    if lora is not None:
        info["lora"] = lora
    if args.json:
        info["tensors"] = {k: {"shape": list(s), "dtype": d} for k, (s, d) in tensors.items()}
        info["identification"] = found.to_json()
        if copy is not None:
            info["identification_of_weights"] = copy.to_json()
        print(json.dumps(info, indent=1))
        return 0
    con = _console()
    con.print(f"[bold]{info['path']}[/]: {info['format']}, {len(info['files'])} file(s), "
              f"{info['num_tensors']} tensors, {info['num_params']:,} parameters, "
              f"{nbytes / 2**30:.2f} GiB; dtypes: "
              + ", ".join(f"{d} x{n}" for d, n in sorted(dtypes.items())))
    if info["metadata"]:
        con.print("metadata: " + ", ".join(sorted(info["metadata"])))
    names = sorted(tensors)
    shown = names if args.all else names[:10]
    for k in shown:
        s, d = tensors[k]
        con.print(f"  {k} {list(s)} {d}")
    if len(shown) < len(names):
        con.print(f"  ... {len(names) - len(shown)} more (--all lists them)")
    con.print(f"quantization: {quantization['description']}", markup=False)
    if lora is not None:
        con.print(lora["description"], markup=False)
    elif copy is not None:
        con.print("its weights (scales, markers and container prefix aside):", markup=False)
        con.print(copy.summary(), markup=False)
    else:
        con.print(found.summary(), markup=False)
    return 0


def _lora_info(path: str, tensors) -> dict | None:
    """What ``vidax inspect`` says of a LoRA file (None: not one): its form, prefix, ranks,
    alphas, and the released components its changes fit (``vidax.translator.lora``)."""
    from vidax.translator import lora

    if not lora.looks_like_lora(tensors):
        return None
    try:
        file = lora.read_lora(path)
    except lora.LoraError as e:
        return {"form": "unreadable", "description": f"LoRA: {e}"}
    fits = lora.identify_lora(file)
    ranks, alphas = file.ranks(), file.alphas()
    where = ("; fits " + ", ".join(f.label for f in fits[:6])
             + (f" and {len(fits) - 6} more" if len(fits) > 6 else "")
             + f" ({fits[0].matched} of {fits[0].total} changed weights by name and shape)"
             if fits else "; its module names match no release vidax knows")
    text = (f"LoRA: {file.form}, prefix {file.prefix}, {len(file.modules)} modules, rank "
            f"{'/'.join(map(str, ranks)) or '-'}, alpha "
            f"{'/'.join(f'{a:g}' for a in alphas) or 'none (scale 1)'}{where}")
    return {"form": file.form, "prefix": file.prefix, "modules": len(file.modules),
            "ranks": ranks, "alphas": alphas,
            "fits": [{"release": f.manifest.release, "component": f.manifest.component,
                      "layout": f.manifest.layout, "matched": f.matched, "total": f.total}
                     for f in fits], "description": text}


def _quantization(ckpt, path: str) -> tuple[dict, dict]:
    """``({"form", "types", "description"}, weights)`` of an open checkpoint: its quantized
    form (``vidax.translator.quant``; a form vidax does not read is named, not raised) and its
    tensors as ``(shape, dtype)`` without the quantization's own."""
    from vidax.errors import CheckpointError
    from vidax.translator import quant

    view = quant.unwrapped(ckpt)
    try:
        found = quant.detect(view, ckpt.metadata, source=path)
    except CheckpointError as e:
        return {"form": "unsupported", "types": {}, "description": e.problem}, {}
    weights = {k: (tuple(v.shape), str(v.dtype))
               for k, v in quant.weights_only(view, found).items()}
    return {"form": found.form, "types": found.types, "description": found.describe()}, weights


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _print_report(report) -> int:
    con = _console()
    for line in report.lines(limit=None if report.ok else 50):
        con.print(line, markup=False)
    return 0 if report.ok else 1


def cmd_verify(args) -> int:
    # Names, layout and config resolve without JAX (the manifest, the registry, the config
    # modules), so a wrong name fails at once; building the abstract model (vidax.loading)
    # brings JAX in.
    if args.list_manifests:
        from vidax.manifests import all_manifests

        for m in all_manifests():
            print(m.name)
        return 0
    if args.manifest:
        from vidax import registry

        manifest = _manifest(args.manifest)
        spec, variant = registry.resolve(manifest.family, manifest.variant, manifest.component,
                                         manifest.layout)
        spec.make_config(variant)
        from vidax import loading

        return _print_report(loading.verify_manifest(manifest))
    if not (args.model_type and args.checkpoint and args.component):
        raise VidaxError("vidax verify needs either --manifest FILE_OR_NAME (vidax verify "
                         "--list-manifests lists the packaged ones), or MODEL_TYPE with "
                         "--component and --checkpoint (and --variant)")
    from vidax import loading

    return _print_report(loading.verify_checkpoint(
        args.model_type, args.component, args.checkpoint, variant=args.variant,
        layout=args.layout))


def _manifest(value: str):
    """``--manifest``: a manifest file, else the name of a packaged one
    (``wan2_1/t2v-14b__dit``, as ``vidax verify --list-manifests`` prints them)."""
    from vidax import manifests

    path = Path(value)
    if path.is_file():
        return manifests.load_manifest(path)
    names = [m.name for m in manifests.all_manifests()]
    name = value.removesuffix(".gz").removesuffix(".json")
    if name in names and not path.exists():
        return manifests.get_manifest(name)
    if path.exists():
        raise VidaxError(f"--manifest {value}: not a file (a manifest JSON, or the name of a "
                         "packaged manifest)")
    from vidax.registry import did_you_mean

    raise VidaxError(f"--manifest {value!r}: there is no such file, nor a packaged manifest of "
                     f"that name{did_you_mean(name, names)}; the {len(names)} packaged ones "
                     f"are named <family>/<variant>__<component>, e.g. {_EXAMPLE_MANIFEST} "
                     "(vidax verify --list-manifests lists them)")


_EXAMPLE_MANIFEST = "wan2_1/t2v-14b__dit"


def cmd_generate(args) -> int:
    import dataclasses
    import inspect
    import time
    import warnings

    from vidax import pipelines
    from vidax.pipelines import offload
    from vidax.pipelines.inputs import check_out

    con = _console()
    start = time.perf_counter()
    family = pipelines.family(args.model_type)
    out = Path(args.out)
    check_out(out)
    mesh = None
    if args.mesh:
        from vidax import sharding

        mesh = sharding.make_mesh(args.mesh)
        con.print(f"mesh: {dict(mesh.shape)} over {mesh.devices.size} "
                  f"{mesh.devices.flat[0].platform} device(s)")
    with warnings.catch_warnings():
        # Warnings (a truncated prompt, ...) as one line each, in the run's output.
        warnings.simplefilter("always", UserWarning)
        warnings.showwarning = lambda message, *_, **__: con.print(
            f"[yellow]warning:[/] {message}", markup=True, soft_wrap=True)
        # Everything the user typed is checked before a single weight is read.
        from vidax.pipelines import overrides

        # Components from elsewhere (--dit FILE, --dit high=FILE, ...), checked to exist
        # and to be that component before anything loads (vidax.pipelines.overrides).
        components = {o: overrides.parse_cli(family, o, getattr(args, o))
                      for o in overrides.OPTIONS}
        from vidax import lora as _lora

        loras = _lora.as_specs(args.lora or [])
        if args.video is not None and "video" not in inspect.signature(
                family.make_request).parameters:
            raise VidaxError(f"--video: {args.model_type} takes no input clip (cosmos2_5's "
                             "and cosmos3's video2world do)")
        folder_options = {}
        if args.distilled_lora is not None:   # the release's, seen by make_request too
            if "distilled_lora" not in inspect.signature(family.inspect_folder).parameters:
                raise VidaxError(f"--distilled-lora: {args.model_type} has no dev two-stage "
                                 "pipeline (ltx2_5 has)")
            folder_options["distilled_lora"] = args.distilled_lora
        release = overrides.inspect(family, args.checkpoint_dir, variant=args.variant,
                                    components=components, model_type=args.model_type,
                                    **folder_options)
        accepts = inspect.signature(family.make_request).parameters
        extra = {"release": release} if "release" in accepts else {}
        if args.no_audio or args.audio_out:
            if "audio" not in accepts:
                raise VidaxError(f"--no-audio / --audio-out: {args.model_type} makes no sound "
                                 "(ltx2_5 does)")
            if args.no_audio and args.audio_out:
                raise VidaxError("--audio-out writes the sound --no-audio leaves out; pass one")
            extra["audio"] = not args.no_audio
        if args.audio_out:
            check_out(Path(args.audio_out), ".wav")
        if args.video is not None:
            extra["video"] = args.video
        if args.distill is not None:
            if "distill" not in accepts:
                raise VidaxError(f"--distill: {args.model_type} has no step-distillation "
                                 "preset (wan2_1 and wan2_2 have lightx2v)")
            extra["distill"] = args.distill
        if args.true_cfg_scale is not None:
            if "true_cfg_scale" not in accepts:
                raise VidaxError(f"--true-cfg-scale: {args.model_type} has no true CFG beside "
                                 "its guidance (hunyuan_video does); use --guidance-scale")
            extra["true_cfg_scale"] = args.true_cfg_scale
        cache = _step_cache(args)
        request = family.make_request(
            release.task, release.variant, args.prompt, negative_prompt=args.negative_prompt,
            image=args.image, last_image=args.last_image, frames=args.frames, size=args.size,
            steps=args.steps, guidance_scale=args.guidance_scale, shift=args.shift,
            sample_solver=args.sample_solver, seed=args.seed, noise=args.noise, fps=args.fps,
            **extra)
        if cache is not None:
            request = dataclasses.replace(request, step_cache=cache)
        guidance = _guidance(args)
        if guidance is not None:
            request = dataclasses.replace(request, guidance=guidance)
            family.Pipeline.check_guidance(request)
        # The request against the release, and whether it fits the devices, before a weight
        # is read (an estimate: --skip-memory-check, for a user who knows better, still runs
        # the request's checks and only skips the refusal).
        check = not args.skip_memory_check
        budget = (None if args.max_device_memory is None
                  else offload.parse_bytes(args.max_device_memory))
        planned = family.Pipeline.check_memory(
            release, request, mesh=mesh, precision=args.precision, enforce=check,
            quantized=args.quantized, offload=args.offload, max_device_memory=budget,
            quantize=args.quantize)
        if args.offload == "auto" and planned.offload != "none":
            con.print(f"offload: {planned.offload} (the weights do not fit the devices "
                      f"otherwise; --offload none to refuse instead)", soft_wrap=True)
        pipe = family.Pipeline.from_release(release, mesh=mesh, precision=args.precision,
                                            console=con, quantized=args.quantized,
                                            loras=loras, lora_mode=args.lora_mode,
                                            offload=planned.offload, max_device_memory=budget,
                                            quantize=args.quantize)
        frames = pipe(request=request, memory_check=check)
        if args.step_cache_calibrate:
            from vidax.pipelines import step_cache

            path = step_cache.write_calibration(pipe, Path(args.step_cache_calibrate))
            con.print(f"wrote {path.resolve()}: MagCache's magnitude ratios of this run (pass "
                      f"--step-cache-set mag_ratios={path})", soft_wrap=True)
    path = pipe.write(frames, out, fps=request.fps)
    f, h, w = frames.shape[:3]
    audio = getattr(pipe, "audio", None)
    sound = ("" if audio is None else f", {audio.shape[0]}-channel AAC at {pipe.sample_rate} "
             f"Hz ({audio.shape[1] / pipe.sample_rate:.2f} s)")
    con.print(f"wrote {path.resolve()}: {f} frames, {w}x{h}, {request.fps:g} fps{sound}, "
              f"{path.stat().st_size / 2**20:.2f} MiB, in {time.perf_counter() - start:.1f} s",
              soft_wrap=True)
    if args.audio_out:
        wav = pipe.write_audio(args.audio_out)
        con.print(f"wrote {wav.resolve()}: the sound as 16-bit PCM", soft_wrap=True)
    return 0


def _step_cache(args):
    """``--step-cache`` and its settings as a policy (None: no cache), checked before loading."""
    from vidax.pipelines import step_cache
    from vidax.pipelines.inputs import check_out

    if args.step_cache_calibrate:
        check_out(Path(args.step_cache_calibrate), ".json")
    return step_cache.from_options(args.step_cache, args.step_cache_threshold,
                                   args.step_cache_set, bool(args.step_cache_calibrate))


def _guidance(args):
    """``--guidance-window`` / ``--cfg-zero-star`` as a ``Guidance`` (None: neither)."""
    from vidax.pipelines import step_cache

    return step_cache.guidance_from_options(args.guidance_window, args.cfg_zero_star)


def cmd_convert(args) -> int:
    import time

    from rich.progress import Progress

    from vidax import convert
    from vidax.translator.io import converted

    con = _console()
    start = time.perf_counter()
    with Progress(console=con, transient=True) as bar:
        task = bar.add_task("translating", total=None)
        out = convert.convert(
            args.model_type, args.component, args.checkpoint, args.out, variant=args.variant,
            layout=args.layout, dtype=args.dtype, overwrite=args.overwrite,
            progress=lambda done, total, name: bar.update(task, completed=done, total=total))
    info = converted.read_info(out)
    size = (out / converted.WEIGHTS).stat().st_size
    con.print(f"wrote {out}: {info['model_type']} {info['component']} in the Flax layout "
              f"({info['verification']}; {size / 2**20:.1f} MiB) in "
              f"{time.perf_counter() - start:.1f} s; vidax.load of this folder skips "
              f"translation", markup=False, soft_wrap=True)
    return 0


def cmd_demo(args) -> int:
    from vidax import demo

    demo.run(args.model_type, out=args.out, cache_dir=args.cache_dir, console=_console())
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with a mistyped command line reported like every other user error: one
    paragraph, ``error: ...``, exit 1 (not the usage text and exit 2, which here means an
    internal error)."""

    def error(self, message):
        print(_paragraph(f"error: {self.prog}: {message} ({self.prog} --help lists the "
                         "options)"), file=sys.stderr)
        sys.exit(1)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="vidax",
        description="Open video diffusion models in JAX, from the authors' checkpoints.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    # --debug after the subcommand too: SUPPRESS leaves the top-level value alone unless given
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks")
    sub = p.add_subparsers(dest="command", required=True)

    def add(name, **kwargs):
        return sub.add_parser(name, parents=[common], **kwargs)

    s = add("models", help="the registry: model types, variants, components, layouts")
    out = s.add_mutually_exclusive_group()
    out.add_argument("--wide", action="store_true",
                     help="one table with mappers and file names (needs a wide terminal)")
    out.add_argument("--json", action="store_true",
                     help="everything, machine-readable (with aliases, pipelines, manifests)")
    s.set_defaults(func=cmd_models)

    s = add("inspect",
                       help="what a checkpoint file or folder holds, and which release it is")
    s.add_argument("path")
    s.add_argument("--json", action="store_true")
    s.add_argument("--all", action="store_true", help="list every tensor")
    s.set_defaults(func=cmd_inspect)

    s = add("verify", help="match a checkpoint (or a manifest) 1:1 against the model")
    s.add_argument("model_type", nargs="?")
    s.add_argument("--manifest", metavar="FILE_OR_NAME",
                   help="a manifest JSON (names, shapes, dtypes of a release), or the name of "
                        "a packaged one, e.g. wan2_1/t2v-14b__dit")
    s.add_argument("--list-manifests", action="store_true",
                   help="print the names of the packaged manifests")
    s.add_argument("--variant")
    s.add_argument("--component")
    s.add_argument("--layout", default=None, help="key layout (default: the authors' own)")
    s.add_argument("--checkpoint")
    s.set_defaults(func=cmd_verify)

    from vidax.pipelines import PIPELINES, PRECISIONS

    s = add("generate", help="a video from a release folder laid out as its authors publish it "
                             "(or a diffusers folder; components from elsewhere: --dit, --vae, "
                             "--text-encoder, --image-encoder; docs/generating.md)")
    s.add_argument("model_type", metavar="MODEL_TYPE", type=_pipeline_type,
                   help=f"one of: {', '.join(PIPELINES)}")
    s.add_argument("--checkpoint-dir", required=True, help="the release folder")
    s.add_argument("--variant", help="the release (default: read from the folder's files)")
    s.add_argument("--prompt", required=True)
    s.add_argument("--negative-prompt", help="default: the authors' negative prompt")
    s.add_argument("--image", help="image-to-video (Cosmos: image2world, resized to --size): "
                                   "the first frame")
    s.add_argument("--last-image", help="Wan2.1 flf2v: the last frame")
    s.add_argument("--video", help="Cosmos-Predict2.5 and Cosmos3: video2world's input clip, a "
                                   "video file (its conditioning frames resized to --size)")
    s.add_argument("--frames", type=int,
                   help="frame count (default: the release's; Wan 4n+1, LTX-Video 8n+1)")
    s.add_argument("--size", help="WIDTHxHEIGHT (default: the release's; Wan2.1 multiples of 16, "
                                  "Wan2.2 TI2V and LTX-Video 32); with --image on Wan, the "
                                  "area, the image sets the aspect ratio")
    s.add_argument("--steps", type=int, help="sampling steps (default: the release's)")
    s.add_argument("--guidance-scale", type=float,
                   help="classifier-free guidance (default: the release's)")
    s.add_argument("--true-cfg-scale", type=float,
                   help="HunyuanVideo 1.0: true classifier-free guidance with the negative "
                        "prompt beside the embedded --guidance-scale (default 1: off)")
    s.add_argument("--shift", type=float, help="noise schedule shift (default: the release's)")
    s.add_argument("--sample-solver", choices=["unipc", "dpm++", "lightx2v"],
                   help="Wan: the sampler (default unipc; lightx2v: LightX2V's "
                        "step-distillation Euler, as --distill lightx2v sets it)")
    s.add_argument("--seed", type=int, default=0, help="seed of JAX's noise (default 0)")
    s.add_argument("--noise", help="initial noise, a .npy file: [C, T, h, w] as the authors "
                                   "draw it, or [T, h, w, C] (h, w: the latent size)")
    s.add_argument("--fps", type=float,
                   help="frames per second of the mp4 (default: the release's; LTX-Video's "
                        "DiT also reads it)")
    s.add_argument("--dit", metavar="FILE", action="append",
                   help="the DiT from a single file (any of the key layouts vidax reads), in "
                        "place of the release folder's; Wan2.2 A14B: --dit high=FILE --dit "
                        "low=FILE (either or both); LTX: the release file (DiT, VAE, ...)")
    s.add_argument("--vae", metavar="FILE", action="append",
                   help="the VAE from a single file, in place of the folder's")
    s.add_argument("--text-encoder", metavar="PATH", action="append",
                   help="the text encoder from a single file or its folder (a folder also "
                        "gives the settings and tokenizer the release keeps beside it); "
                        "HunyuanVideo: llm=PATH, clip=PATH; HunyuanVideo-1.5: llm=PATH, "
                        "byt5=PATH. Cosmos-Predict2.5: a folder is the Cosmos-Reason1-7B "
                        "folder (weights, config.json, tokenizer.json; default: the "
                        "VIDAX_COSMOS_TEXT_ENCODER environment variable, else "
                        "Cosmos-Reason1-7B/ in the release folder)")
    s.add_argument("--image-encoder", metavar="FILE", action="append",
                   help="the image encoder (Wan2.1 i2v/flf2v CLIP, HunyuanVideo-1.5 i2v "
                        "SigLIP) from a single file, in place of the folder's")
    s.add_argument("--precision", type=_precision, default="bf16",
                   help=f"{' or '.join(PRECISIONS)} (or bfloat16, float32, ...): bf16, the "
                        "authors' mixed precision (default); fp32: all float32")
    s.add_argument("--quantized", choices=("keep", "dequantize"), default=None,
                   help="a quantized component file (fp8, ComfyUI's scaled fp8, GGUF): keep "
                        "its weights quantized on the device (fp8, and GGUF's Q8_0 as int8 + "
                        "scales) or dequantize them at load; default: keep fp8, dequantize "
                        "GGUF (docs/loading_weights.md)")
    s.add_argument("--quantize", choices=("fp8", "int8"), default=None,
                   help="quantize the DiT's Linear weights at load (per output channel), so "
                        "a bf16/fp32 release holds about half the memory; compute stays in "
                        "the --precision dtype (docs/memory.md)")
    s.add_argument("--offload", choices=("auto", "none", "model", "block"), default="auto",
                   help="where the weights live between uses (docs/memory.md): none (all on "
                        "the devices), model (host memory, each component on the devices for "
                        "its phase), block (model, and the DiT's blocks streamed in a block "
                        "ahead of their use); auto (default): the first that fits")
    s.add_argument("--max-device-memory", metavar="SIZE", default=None,
                   help="plan to at most SIZE of device memory (e.g. 24GiB, 80GB): the "
                        "memory check and --offload auto use it instead of what the devices "
                        "report")
    s.add_argument("--lora", metavar="FILE[:STRENGTH][@high|@low]", action="append",
                   help="a LoRA for the DiT (repeatable; strength default 1; @high / @low: "
                        "the Wan2.2 A14B expert it is for); every format vidax reads and how "
                        "it is checked: docs/lora.md")
    s.add_argument("--distill", choices=("lightx2v",), default=None,
                   help="Wan: the step-distillation LoRAs' sampling (LightX2V's: 4 steps of "
                        "their Euler, shift 5, guidance 1 -- one DiT pass per step); options "
                        "given explicitly win")
    s.add_argument("--distilled-lora", metavar="FILE[:STRENGTH]", default=None,
                   help="LTX-2 dev: the distilled LoRA of the two-stage pipeline's stage 2 "
                        "(strength default 1; default: the release folder's "
                        "ltx-2*-distilled-lora*.safetensors)")
    s.add_argument("--lora-mode", choices=("merge", "live"), default="merge",
                   help="merge the LoRAs into the weights at load (default), or keep them "
                        "live (unmerged adapters)")
    s.add_argument("--guidance-window", metavar="START:STOP", default=None,
                   help="classifier-free guidance only on the steps from START to STOP "
                        "(fractions of the run, as diffusers' guiders; e.g. 0:0.8), the others "
                        "one DiT pass on the prompt alone (not LTX-Video, LTX-2: their own "
                        "guidance)")
    s.add_argument("--cfg-zero-star", metavar="ZEROED_STEPS", type=int, nargs="?", const=0,
                   default=None,
                   help="CFG-Zero* (the unconditional prediction rescaled per sample; "
                        "optionally the first ZEROED_STEPS steps at zero velocity)")
    s.add_argument("--step-cache", choices=("none", "first-block", "magcache", "taylorseer",
                                            "teacache"), default="none",
                   help="skip DiT block work on steps where it changes little (docs/"
                        "step_cache.md): first-block (diffusers' First Block Cache), magcache "
                        "(the model's published magnitude ratios), taylorseer (Taylor-"
                        "extrapolated steps), teacache (the authors' per-model polynomial); "
                        "default none")
    s.add_argument("--step-cache-threshold", type=float, default=None,
                   help="the cache's threshold (first-block, magcache, teacache; higher: "
                        "more skipped; default: the published or diffusers' one)")
    s.add_argument("--step-cache-set", metavar="KEY=VALUE", action="append", default=[],
                   help="another setting of the cache (repeatable): max_skip_steps, "
                        "retention_ratio, mag_ratios=FILE.json, interval, warmup_steps, "
                        "cooldown_step, order, compute_first, compute_last")
    s.add_argument("--step-cache-calibrate", metavar="FILE.json", default=None,
                   help="MagCache: measure the model's magnitude ratios on this run (nothing "
                        "skipped) and write them to FILE.json, for --step-cache-set "
                        "mag_ratios=FILE.json")
    s.add_argument("--skip-memory-check", action="store_true",
                   help="load and run even when the request's memory estimate exceeds what "
                        "the devices have")
    s.add_argument("--mesh", default=None,
                   help="a device mesh, e.g. dp=2,fsdp=4,sp=1,tp=1 (default: one device); "
                        "see docs/hardware_and_sharding.md")
    s.add_argument("--out", required=True, help="the .mp4 to write")
    s.add_argument("--audio-out", metavar="FILE.wav",
                   help="LTX-2: also write the sound as a 16-bit WAV file")
    s.add_argument("--no-audio", action="store_true",
                   help="LTX-2: a video-only mp4 (the audio stream is sampled, not decoded)")
    s.set_defaults(func=cmd_generate)

    s = add("convert", help="translate a checkpoint once into a Flax-layout folder that later "
                            "loads skip translating")
    s.add_argument("model_type")
    s.add_argument("--component", required=True)
    s.add_argument("--checkpoint", required=True, help="the authors' file (or sharded index)")
    s.add_argument("--out", required=True, help="the folder to write (atomically)")
    s.add_argument("--variant", help="the release (default: identified from the tensors)")
    s.add_argument("--layout", default=None, help="key layout (default: the authors' own)")
    s.add_argument("--dtype", default=None, type=_dtype,
                   help="cast every parameter: bf16, fp16, fp32 (or bfloat16, float16, ...; "
                        "default: as stored)")
    s.add_argument("--overwrite", action="store_true",
                   help="replace a folder an earlier vidax convert wrote (anything else at "
                        "--out is refused and left as it is)")
    s.set_defaults(func=cmd_convert)

    s = add("demo", help="tiny random-weight checkpoints in the authors' layout, loaded and run "
                         "through vidax")
    from vidax.demo import DEMOS

    s.add_argument("model_type", metavar="MODEL_TYPE", nargs="?", default="wan2_1",
                   type=_demo_type,
                   help=f"the family (default wan2_1): one of {', '.join(DEMOS)} "
                        "(ltx2_5: LTX-2.3's single file; ltx2_5-2.5: LTX-2.5's split files)")
    s.add_argument("--out", default=None, help="the mp4 to write (default: in the cache folder)")
    s.add_argument("--cache-dir", default=None,
                   help="the parent folder of the tiny release (default: ~/.cache/vidax/demo; "
                        "the release goes in a subfolder named after it)")
    s.set_defaults(func=cmd_demo)
    return p


def _pipeline_type(value: str) -> str:
    """A model type with a pipeline (``generate``, ``demo``), or the closest ones."""
    from vidax.pipelines import PIPELINES
    from vidax.registry import did_you_mean

    if value not in PIPELINES:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a model type with a pipeline{did_you_mean(value, PIPELINES)}; "
            f"the model types with one: {', '.join(PIPELINES)}")
    return value


def _demo_type(value: str) -> str:
    """A demo (``vidax.demo.DEMOS``: the model types with a pipeline, and LTX-2.5's split
    release ``ltx2_5-2.5``), or the closest ones."""
    from vidax.demo import DEMOS
    from vidax.registry import did_you_mean

    if value not in DEMOS:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a demo{did_you_mean(value, DEMOS)}; the demos: "
            f"{', '.join(DEMOS)}")
    return value


def _precision(value: str) -> str:
    from vidax import dtypes
    from vidax.pipelines import PRECISIONS

    try:
        return dtypes.canonical(value, what="--precision", allowed=PRECISIONS)
    except VidaxError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _dtype(value: str) -> str:
    from vidax import dtypes

    try:
        return dtypes.canonical(value, what="--dtype")
    except VidaxError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help, or a command line argparse refused (printed)
        return e.code if isinstance(e.code, int) else 1
    try:
        return args.func(args)
    except VidaxError as e:
        if args.debug:
            raise
        print(_paragraph(f"error: {e}"), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``vidax models | head``): stop quietly. Python's signal module
        # documentation, "Note on SIGPIPE": point stdout at devnull so the interpreter's
        # final flush does not fail again.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return 1
    except Exception as e:  # a bug: still one paragraph, the traceback on request
        if args.debug:
            raise
        print(_paragraph(f"internal error ({type(e).__name__}): {e}. Run again with --debug "
                         "for the traceback, and please report it."), file=sys.stderr)
        return 2


def _paragraph(text: str) -> str:
    # Paths and names stay whole (copyable): no break inside a word or at its hyphens.
    return textwrap.fill(" ".join(text.split()), width=100, break_long_words=False,
                         break_on_hyphens=False)


if __name__ == "__main__":
    sys.exit(main())
