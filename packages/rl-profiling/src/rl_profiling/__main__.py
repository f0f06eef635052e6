"""``python -m rl_profiling summary TRACE.json``: the same as the ``rl-profile`` command."""

from __future__ import annotations

import sys

from rl_profiling._cli import main

if __name__ == "__main__":
    sys.exit(main())
