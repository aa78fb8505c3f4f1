"""A scripted stand-in for an agent that records everything it was handed, then fixes.

`inventory_agent.py FIX.patch`: prints, on one line starting "sreforge-inventory: ", a
JSON record of every path under SREFORGE_WORKSPACE (recursively, symlinks not followed)
with its text, the brief it was given and its SREFORGE_* environment (stdout goes to the
run's logs/agent.log: inside its sandbox it can write nowhere else), then behaves as
tests/agents/patch_agent.py (applies FIX.patch to the workspace, writes rca.txt). It is
not an AI: it lets the tests check that nothing harness-internal (root cause, decoys,
fixes) reaches what an agent can read.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import patch_agent


def inventory(workspace: Path) -> dict[str, str]:
    """Every file and directory under `workspace` (relative path -> text, "" for dirs)."""
    seen: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(workspace):
        base = Path(dirpath)
        for name in dirnames:
            seen[str((base / name).relative_to(workspace)) + "/"] = ""
        for name in filenames:
            path = base / name
            seen[str(path.relative_to(workspace))] = path.read_bytes().decode("utf-8", "replace")
    return seen


def main() -> int:
    fix = sys.argv[1]
    workspace = Path(os.environ["SREFORGE_WORKSPACE"])
    record = {
        "workspace": inventory(workspace),
        "brief": Path(os.environ["SREFORGE_BRIEF"]).read_text(encoding="utf-8"),
        "env": {k: v for k, v in os.environ.items() if k.startswith("SREFORGE_")},
    }
    print("sreforge-inventory: " + json.dumps(record), flush=True)
    sys.argv = [sys.argv[0], fix]
    return patch_agent.main()


if __name__ == "__main__":
    sys.exit(main())
