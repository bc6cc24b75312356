"""Projection: predicted step time, throughput and time-to-target on other links and peer counts, from measured runs
(`python -m metrics.projection RUN_DIR ...`); each cost model sits beside its strategy (strategies/cost_models/)."""
