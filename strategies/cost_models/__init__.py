"""Each strategy's cost model, one module per strategy (its bytes per link, link floor and step time): configuration
only, no runtime. The strategy's config names its model (strategy.cost_model); metrics/projection/models.py imports it."""
