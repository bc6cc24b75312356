"""What runs while a run runs: the run directory's layout, the peers' step logs and resource samplers, the
launcher's machine sampler (metrics/recording/). Imports nothing above it."""
