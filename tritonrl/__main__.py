"""``python -m tritonrl ...``: the command line (`tritonrl.cli`), as the ``tritonrl`` script."""

import sys

from tritonrl.cli import main

sys.exit(main())
