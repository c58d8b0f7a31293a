"""Regenerate the packaged manifests (vidax/data/manifests/) from ../shared/manifests.

Each ``<family>/<variant>__<component>.json`` is validated and stored byte for byte as
``<family>/<variant>__<component>.json.gz`` (gzip without a timestamp, so an unchanged manifest
rewrites to identical bytes and a regeneration's diff names only what changed). Packaged files
without a source are removed.

    python scripts/sync_manifests.py            # regenerate
    python scripts/sync_manifests.py --check    # exit 1 if the packaged copy is out of date
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vidax.errors import VidaxError  # noqa: E402
from vidax.manifests import DERIVED_FAMILIES, load_manifest  # noqa: E402

DEFAULT_SOURCE = ROOT.parent / "shared" / "manifests"
TARGET = ROOT / "vidax" / "data" / "manifests"
SUFFIX = ".json.gz"


def planned(source: Path) -> dict[Path, bytes]:
    """Packaged path -> its gzip bytes, for every manifest under ``source``."""
    out = {}
    for path in sorted(source.glob("*/*.json")):
        manifest = load_manifest(path)
        expected = f"{manifest.family}/{manifest.variant}__{manifest.component}.json"
        if path.relative_to(source).as_posix() != expected:
            raise VidaxError(f"{path}: holds {manifest.name}, so it should be named {expected}")
        target = TARGET / path.parent.name / (path.stem + SUFFIX)
        out[target] = gzip.compress(path.read_bytes(), compresslevel=9, mtime=0)
    if not out:
        raise VidaxError(f"{source}: no manifests found (expected <family>/<name>.json)")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE,
                        help=f"the shared manifests folder (default {DEFAULT_SOURCE})")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if the packaged copy is out of date")
    args = parser.parse_args(argv)
    try:
        wanted = planned(args.source)
    except VidaxError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    # the families vidax derives itself (scripts/derive_comfyui_manifests.py) are not synced
    present = {p for p in TARGET.glob(f"*/*{SUFFIX}") if p.parent.name not in DERIVED_FAMILIES}
    stale = sorted(present - wanted.keys())
    changed = sorted(p for p, data in wanted.items()
                     if not p.is_file() or p.read_bytes() != data)
    if args.check:
        for p in changed + stale:
            print(f"out of date: {p.relative_to(ROOT)}")
        return 1 if changed or stale else 0
    for p in changed:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(wanted[p])
    for p in stale:
        p.unlink()
    for folder in TARGET.iterdir():
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    size = sum(len(data) for data in wanted.values())
    print(f"{len(wanted)} manifests, {size / 1e6:.2f} MB packaged: "
          f"{len(changed)} written, {len(stale)} removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
