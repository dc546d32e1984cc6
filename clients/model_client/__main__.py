import sys

from model_client.cli import main

sys.exit(main())
