import sys

from autograde.cli import main

sys.exit(main())
