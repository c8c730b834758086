"""``python -m ddp_helpers.perf``: the benchmark command (:mod:`ddp_helpers.perf.cli`)."""

import sys

from ddp_helpers.perf.cli import main

sys.exit(main())
