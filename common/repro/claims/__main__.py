"""``python -m common.repro.claims``: see :mod:`common.repro.claims`."""

import sys

from common.repro.claims import main

sys.exit(main())
