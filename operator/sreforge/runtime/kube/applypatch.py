"""`python -m sreforge.runtime.kube apply-patch TREE PATCH [--protected P ...]`: the entry
point of the init container that lays a Submission's patch over a copy of the image's source
(no image registry needed). A refusal's reason goes to the termination log."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from sreforge.runtime import ci
from sreforge.runtime.kube.config import TERMINATION_LOG


def main(argv: list[str] | None = None) -> int:
    """`apply-patch TREE PATCH`: the init container laying a patch over a source copy."""
    p = argparse.ArgumentParser(prog="python -m sreforge.runtime.kube")
    sub = p.add_subparsers(dest="cmd", required=True)
    ap = sub.add_parser("apply-patch")
    ap.add_argument("tree", type=Path)
    ap.add_argument("patch", type=Path)
    ap.add_argument("--protected", action="append", default=[])
    args = p.parse_args(argv)
    term = Path(os.environ.get("TERMINATION_LOG", TERMINATION_LOG))
    try:
        text = args.patch.read_text(encoding="utf-8", errors="replace")
        # defence in depth: the ConfigMap is in a namespace the agent may write to
        ci.vet_patch(text, args.protected)
        ci.apply_patch(args.tree, text)
    except (ci.PatchRejected, OSError) as exc:
        msg = str(exc).strip()[:4000]
        print(msg, file=sys.stderr)
        with contextlib.suppress(OSError):
            term.write_text(msg, encoding="utf-8")
        return 1
    return 0
