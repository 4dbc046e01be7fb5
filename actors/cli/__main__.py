"""``python -m actors.cli``: the ``trio-recall`` console script."""

import sys

from . import main

sys.exit(main())
