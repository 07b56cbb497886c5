"""python -m lib.experiments: the command line of the experiment registry (`lib.book.cli`)."""
import sys

from lib.book.cli import main

sys.exit(main())
