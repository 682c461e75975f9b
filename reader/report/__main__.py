"""python -m reader.report DATA_DIR [--compare OTHER_DIR] [--out PATH]."""

import sys

from reader.report.build import main

sys.exit(main())
