import sys

from metrics.projection.project import main

sys.exit(main())
