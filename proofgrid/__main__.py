import sys

from proofgrid.cli import main

sys.exit(main())
