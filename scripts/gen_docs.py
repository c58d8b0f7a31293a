"""Regenerate the tables in docs/ that come from the code (the registry, the layouts).

    python scripts/gen_docs.py          # rewrite them
    python scripts/gen_docs.py --check  # exit 1 if a doc is stale (tests run this)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vidax import registry  # noqa: E402
from vidax.translator import converter  # noqa: E402


def registry_table() -> str:
    rows = ["| model_type | component | layout | variants | mapper | files |",
            "|---|---|---|---|---|---|"]
    for s in registry.specs():
        rows.append(f"| `{s.model_type}` | {s.component} | {s.layout} | "
                    f"{', '.join(s.variants)} | `{s.mapper.split(':')[0]}` | "
                    f"{', '.join(f'`{f}`' for f in s.files)} |")
    rows += ["", "| released as (family, variant, component, layout) | implemented by |",
             "|---|---|"]
    for (fam, var, comp, lay), a in registry.aliases().items():
        rows.append(f"| {fam} {var} {comp} ({lay}) | {a.model_type} {a.variant} {a.component} "
                    f"({a.layout}) |")
    return "\n".join(rows)


def layouts_table() -> str:
    rows = ["| layout | what it does |", "|---|---|"]
    rows += [f"| `{k}` | {v} |" for k, v in converter.LAYOUTS.items()]
    return "\n".join(rows)


SECTIONS = {"registry": registry_table, "layouts": layouts_table}


def render(text: str) -> str:
    for name, fn in SECTIONS.items():
        text = re.sub(rf"(<!-- generated:{name} -->).*?(<!-- /generated:{name} -->)",
                      lambda m, fn=fn: f"{m.group(1)}\n{fn()}\n{m.group(2)}", text, flags=re.S)
    return text


def main() -> int:
    stale = []
    for doc in (ROOT / "docs").rglob("*.md"):
        text = doc.read_text()
        new = render(text)
        if new != text:
            stale.append(doc)
            if "--check" not in sys.argv:
                doc.write_text(new)
    if "--check" in sys.argv and stale:
        print("stale generated sections in: " + ", ".join(str(s) for s in stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
