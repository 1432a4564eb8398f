"""`python -m rllib_ners.study ...`: the same as `rllib-ners study ...`."""

import sys

from rllib_ners.study.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m rllib_ners.study"))
