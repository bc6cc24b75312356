"""Per-peer step log, resource sampler, run summary and comparison report."""
