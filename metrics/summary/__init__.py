"""One run's summary.json, built from what metrics/recording/ wrote (metrics/summary/build.py): its figures,
link bounds, time-to-target, the link's, network's, isolation's and machine's sections."""
