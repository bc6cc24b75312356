"""Unit tier: no test here starts a process (tests/conftest.py refuses it)."""
