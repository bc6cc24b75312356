"""Projection: predicted step time, throughput and time-to-target on other links and peer counts, from measured runs.

    python -m metrics.projection RUN_DIR [RUN_DIR ...] [--peers ...] [--link ...]

cost.py: what a cost model receives (Cost) and the base of every strategy's cost model (CostModel); the models
themselves sit beside their strategies (strategies/cost_models/<name>.py), a run's config names its model
(strategy.cost_model) and models.py imports it; project.py: a run's
parameters, the projection and the command line.
"""
