"""`python -m tmalang ...` is `tmalangc ...`."""

import sys

from .cli import main

sys.exit(main())
