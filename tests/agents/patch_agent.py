"""A scripted stand-in for an agent: edits the workspace it is given, writes an RCA.

Used by the integration tests to drive `sreforge run --agent`: it reads the brief from
SREFORGE_BRIEF, applies the patch named on its command line to SREFORGE_WORKSPACE with
`git apply`, and writes rca.txt. It is not an AI; it proves the agent hand-off path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def main() -> int:
    workspace = Path(os.environ["SREFORGE_WORKSPACE"])
    brief = Path(os.environ["SREFORGE_BRIEF"]).read_text(encoding="utf-8")
    assert os.environ["SREFORGE_ALERT"] in brief
    patch = Path(sys.argv[1]).read_bytes()
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(workspace.parent)}
    subprocess.run(["git", "apply", "-p1", "-"], input=patch, cwd=workspace, env=env, check=True)
    (workspace / "rca.txt").write_text(
        "The product cache was removed; every request runs the unindexed review query.\n",
        encoding="utf-8",
    )
    print("agent: patch applied, rca written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
