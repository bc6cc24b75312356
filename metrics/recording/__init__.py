"""What runs while a run runs: the run directory's layout, the peers' step logs and samplers, the machine sampler."""
