import sys

from k8s_deploy.cli import main

sys.exit(main())
