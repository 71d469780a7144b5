"""Integration tests of the trainer and witness agents (a package so its conftest does not shadow tests/conftest.py)."""
