"""The ``vidax`` command (DESIGN.md §4). Errors are one paragraph and a non-zero exit;
``--debug`` shows the traceback."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

from vidax.errors import VidaxError


def _console():
    from rich.console import Console

    return Console(highlight=False)


def cmd_models(args) -> int:
    from rich.table import Table

    from vidax import registry

    table = Table(title="vidax models")
    for col in ("model_type", "component", "layout", "variants", "mapper", "files"):
        table.add_column(col)
    for s in registry.specs():
        table.add_row(s.model_type, s.component, s.layout, ", ".join([*s.variants, "tiny"]),
                      s.mapper.split(":")[0], ", ".join(s.files))
    con = _console()
    con.print(table)
    al = Table(title="aliases: the same architecture released under another name")
    for col in ("family", "variant", "component", "layout", "implemented by"):
        al.add_column(col)
    for (fam, var, comp, lay), a in registry.aliases().items():
        al.add_row(fam, var, comp, lay, f"{a.model_type} {a.variant} {a.component} ({a.layout})")
    con.print(al)
    return 0


def cmd_inspect(args) -> int:
    from vidax import manifests
    from vidax.translator.io import open_checkpoint

    with open_checkpoint(args.path) as ckpt:
        tensors = {k: (tuple(v.shape), str(v.dtype)) for k, v in ckpt.items()}
        nbytes = sum(v.nbytes for v in ckpt.values())
        info = {"path": str(args.path), "format": ckpt.format, "files": list(ckpt.files),
                "metadata": dict(ckpt.metadata), "num_tensors": len(tensors),
                "num_params": sum(_numel(s) for s, _ in tensors.values()), "bytes": nbytes}
    dtypes: dict[str, int] = {}
    for _, dt in tensors.values():
        dtypes[dt] = dtypes.get(dt, 0) + 1
    info["dtypes"] = dtypes
    found = manifests.identify(tensors, path=str(args.path))
    if args.json:
        info["tensors"] = {k: {"shape": list(s), "dtype": d} for k, (s, d) in tensors.items()}
        info["identification"] = found.to_json()
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
    con.print(found.summary())
    return 0


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
    if args.manifest:
        from vidax import registry
        from vidax.manifests import load_manifest

        manifest = load_manifest(args.manifest)
        spec, variant = registry.resolve(manifest.family, manifest.variant, manifest.component,
                                         manifest.layout)
        spec.make_config(variant)
        from vidax import loading

        return _print_report(loading.verify_manifest(manifest))
    if not (args.model_type and args.checkpoint and args.component):
        raise VidaxError("vidax verify needs either --manifest FILE, or MODEL_TYPE with "
                         "--component and --checkpoint (and --variant)")
    from vidax import loading

    return _print_report(loading.verify_checkpoint(
        args.model_type, args.component, args.checkpoint, variant=args.variant,
        layout=args.layout))


def cmd_generate(args) -> int:
    import inspect
    import time
    import warnings
    from pathlib import Path

    from vidax import pipelines

    con = _console()
    start = time.perf_counter()
    family = pipelines.family(args.model_type)
    out = Path(args.out)
    if out.suffix.lower() != ".mp4":
        raise VidaxError(f"--out {out}: the output must be an .mp4 file")
    if not out.parent.is_dir():
        raise VidaxError(f"--out {out}: the folder {out.parent} does not exist")
    with warnings.catch_warnings():
        # Warnings (a truncated prompt, ...) as one line each, in the run's output.
        warnings.simplefilter("always", UserWarning)
        warnings.showwarning = lambda message, *_, **__: con.print(
            f"[yellow]warning:[/] {message}", markup=True, soft_wrap=True)
        # Everything the user typed is checked before a single weight is read.
        folder_options = {}
        if args.text_encoder is not None:
            # Only a family whose text encoder is a separate download takes the folder.
            if "text_encoder_dir" not in inspect.signature(family.inspect_folder).parameters:
                raise VidaxError(f"--text-encoder: a {args.model_type} release folder holds its "
                                 "own text encoder; the option is for releases whose text "
                                 "encoder is a separate download (cosmos2_5: "
                                 "Cosmos-Reason1-7B)")
            folder_options["text_encoder_dir"] = args.text_encoder
        release = family.inspect_folder(args.checkpoint_dir, variant=args.variant,
                                        **folder_options)
        request = family.make_request(
            release.task, release.variant, args.prompt, negative_prompt=args.negative_prompt,
            image=args.image, last_image=args.last_image, frames=args.frames, size=args.size,
            steps=args.steps, guidance_scale=args.guidance_scale, shift=args.shift,
            sample_solver=args.sample_solver, seed=args.seed, noise=args.noise, fps=args.fps)
        mesh = None
        if args.mesh:
            from vidax import sharding

            mesh = sharding.make_mesh(args.mesh)
            con.print(f"mesh: {dict(mesh.shape)} over {mesh.devices.size} "
                      f"{mesh.devices.flat[0].platform} device(s)")
        pipe = family.Pipeline.from_release(release, mesh=mesh, precision=args.precision,
                                            console=con)
        frames = pipe(request=request)
    path = pipe.write(frames, out, fps=request.fps)
    f, h, w = frames.shape[:3]
    con.print(f"wrote {path.resolve()}: {f} frames, {w}x{h}, {request.fps:g} fps, "
              f"{path.stat().st_size / 2**20:.2f} MiB, in {time.perf_counter() - start:.1f} s",
              soft_wrap=True)
    return 0


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

    demo.run(out=args.out, cache_dir=args.cache_dir, console=_console())
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vidax",
        description="Open video diffusion models in JAX, from the authors' checkpoints.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("models", help="the registry: model types, variants, components, layouts")
    s.set_defaults(func=cmd_models)

    s = sub.add_parser("inspect",
                       help="what a checkpoint file or folder holds, and which release it is")
    s.add_argument("path")
    s.add_argument("--json", action="store_true")
    s.add_argument("--all", action="store_true", help="list every tensor")
    s.set_defaults(func=cmd_inspect)

    s = sub.add_parser("verify", help="match a checkpoint (or a manifest) 1:1 against the model")
    s.add_argument("model_type", nargs="?")
    s.add_argument("--manifest", help="a manifest JSON (names, shapes, dtypes of a release)")
    s.add_argument("--variant")
    s.add_argument("--component")
    s.add_argument("--layout", default=None, help="key layout (default: the authors' own)")
    s.add_argument("--checkpoint")
    s.set_defaults(func=cmd_verify)

    from vidax.pipelines import PIPELINES, PRECISIONS

    s = sub.add_parser("generate", help="a video from a release folder laid out as its authors "
                                        "publish it")
    s.add_argument("model_type", choices=sorted(PIPELINES))
    s.add_argument("--checkpoint-dir", required=True, help="the release folder")
    s.add_argument("--variant", help="the release (default: read from the folder's files)")
    s.add_argument("--prompt", required=True)
    s.add_argument("--negative-prompt", help="default: the authors' negative prompt")
    s.add_argument("--image", help="image-to-video (Cosmos: image2world, resized to --size): "
                                   "the first frame")
    s.add_argument("--last-image", help="Wan2.1 flf2v: the last frame")
    s.add_argument("--frames", type=int,
                   help="frame count (default: the release's; Wan 4n+1, LTX-Video 8n+1)")
    s.add_argument("--size", help="WIDTHxHEIGHT (default: the release's; Wan2.1 multiples of 16, "
                                  "Wan2.2 TI2V and LTX-Video 32); with --image on Wan, the "
                                  "area, the image sets the aspect ratio")
    s.add_argument("--steps", type=int, help="sampling steps (default: the release's)")
    s.add_argument("--guidance-scale", type=float,
                   help="classifier-free guidance (default: the release's)")
    s.add_argument("--shift", type=float, help="noise schedule shift (default: the release's)")
    s.add_argument("--sample-solver", choices=["unipc", "dpm++"],
                   help="Wan: the sampler (default unipc)")
    s.add_argument("--seed", type=int, default=0, help="seed of JAX's noise (default 0)")
    s.add_argument("--noise", help="initial noise, a .npy file: [C, T, h, w] as the authors "
                                   "draw it, or [T, h, w, C] (h, w: the latent size)")
    s.add_argument("--fps", type=float,
                   help="frames per second of the mp4 (default: the release's; LTX-Video's "
                        "DiT also reads it)")
    s.add_argument("--text-encoder", metavar="DIR",
                   help="Cosmos-Predict2.5: the Cosmos-Reason1-7B folder (weights, config.json, "
                        "tokenizer.json), a separate download (default: the "
                        "VIDAX_COSMOS_TEXT_ENCODER environment variable, else "
                        "Cosmos-Reason1-7B/ in the release folder); other families refuse it")
    s.add_argument("--precision", choices=PRECISIONS, default="bf16",
                   help="bf16: the authors' mixed precision (default); fp32: all float32")
    s.add_argument("--mesh", default=None,
                   help="a device mesh, e.g. dp=2,fsdp=4,sp=1,tp=1 (default: one device); "
                        "see docs/hardware_and_sharding.md")
    s.add_argument("--out", required=True, help="the .mp4 to write")
    s.set_defaults(func=cmd_generate)

    s = sub.add_parser("convert", help="translate a checkpoint once into a Flax-layout folder "
                                       "that later loads skip translating")
    s.add_argument("model_type")
    s.add_argument("--component", required=True)
    s.add_argument("--checkpoint", required=True, help="the authors' file (or sharded index)")
    s.add_argument("--out", required=True, help="the folder to write (atomically)")
    s.add_argument("--variant", help="the release (default: identified from the tensors)")
    s.add_argument("--layout", default=None, help="key layout (default: the authors' own)")
    s.add_argument("--dtype", default=None, help="cast every parameter (default: as stored)")
    s.add_argument("--overwrite", action="store_true", help="replace an existing folder")
    s.set_defaults(func=cmd_convert)

    s = sub.add_parser("demo", help="tiny random-weight checkpoints in the authors' layout, "
                                    "loaded and run through vidax")
    s.add_argument("--out", default=None, help="the mp4 to write (default: in the cache folder)")
    s.add_argument("--cache-dir", default=None, help="where the tiny checkpoints are written")
    s.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
    except Exception as e:  # a bug: still one paragraph, the traceback on request
        if args.debug:
            raise
        print(_paragraph(f"internal error ({type(e).__name__}): {e}. Run again with --debug "
                         "for the traceback, and please report it."), file=sys.stderr)
        return 2


def _paragraph(text: str) -> str:
    return textwrap.fill(" ".join(text.split()), width=100)


if __name__ == "__main__":
    sys.exit(main())
