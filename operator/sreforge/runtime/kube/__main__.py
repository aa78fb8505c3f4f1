"""`python -m sreforge.runtime.kube apply-patch ...` (see sreforge.runtime.kube.applypatch)."""

import sys

from sreforge.runtime.kube.applypatch import main

sys.exit(main())
