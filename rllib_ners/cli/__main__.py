"""`python -m rllib_ners.cli ARGS`: the same as `rllib-ners ARGS`."""

import sys

from rllib_ners.cli import main

if __name__ == "__main__":
    sys.exit(main())
