"""One run's summary.json (build.py), built from what metrics/recording/ wrote, and its sections' figures."""
