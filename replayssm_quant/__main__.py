"""``python -m replayssm_quant`` = the ``replayssm-quant`` console script."""

import sys

from .cli import main

sys.exit(main())
