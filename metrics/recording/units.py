"""A knob's or a figure's unit is the end of its name (netemu/dilation.py, metrics/summary/isolation.py)."""
TIME_SUFFIXES = ("_s", "_ms", "_us", "_time", "_timeout")  # a time (seconds, ms, us; a wait, a timeout)
RATE_SUFFIXES = ("_mbit",)  # a link rate, Mbit/s
