"""Units by name: a config knob's or a recorded figure's unit is the end of its name. One rule for the config
(netemu/dilation.py scales the knobs by it) and for the figures (metrics/summary/isolation.py converts a dilated
run's figures back by it)."""
TIME_SUFFIXES = ("_s", "_ms", "_us", "_time", "_timeout")  # a time (seconds, ms, us; a wait, a timeout)
RATE_SUFFIXES = ("_mbit",)  # a link rate, Mbit/s
