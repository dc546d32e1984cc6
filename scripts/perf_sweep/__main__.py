import sys

from perf_sweep.cli import main

sys.exit(main())
