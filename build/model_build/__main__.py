import sys

from model_build.cli import main

sys.exit(main())
