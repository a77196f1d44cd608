"""``python -m mlsys_repro.common.repro.claims``: see :mod:`mlsys_repro.common.repro.claims`."""

import sys

from mlsys_repro.common.repro.claims import main

sys.exit(main())
