"""``python -m opsim``: the ``opsim`` command line."""
import sys

from opsim.cli import main

sys.exit(main())
