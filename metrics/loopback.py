"""What a run on this machine's loopback can tell, in one sentence: the run's first line says it (netemu/auto.py),
and so does the report's verdict (metrics/report/links.py)."""

ONLY_COMPUTE_DIFFERS = "on loopback strategies differ only by their compute share"
