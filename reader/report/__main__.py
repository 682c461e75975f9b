"""python -m reader.report DATA_DIR [--compare OTHER_DIR] [--out PATH]."""

import sys

from reader.report.build import main

# Guarded: a tool that imports every module of the package (the clean-install check)
# must not run the command.
if __name__ == "__main__":
    sys.exit(main())
