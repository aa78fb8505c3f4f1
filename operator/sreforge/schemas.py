"""`python -m sreforge.schemas [--check]`: write the published JSON Schemas of the typed
outputs (schemas/*.json) from their models, or check that the files are current."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sreforge.api import record

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = {ROOT / "schemas" / "run-record.v1.json": record.json_schema_text}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sreforge.schemas", description=__doc__)
    ap.add_argument("--check", action="store_true", help="exit 1 if a file is not current")
    args = ap.parse_args(argv)
    stale = []
    for path, text in SCHEMAS.items():
        want = text()
        if path.exists() and path.read_text(encoding="utf-8") == want:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(want, encoding="utf-8")
    for path in stale:
        print(f"{'stale' if args.check else 'wrote'} {path.relative_to(ROOT)}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
