import sys

from tritonrl.toolkit.cli import main

sys.exit(main())
