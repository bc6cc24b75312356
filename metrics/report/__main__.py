import sys

from metrics.report import main

sys.exit(main())
