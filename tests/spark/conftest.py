"""Spark tests use the session-wide ``spark`` fixture of tests/conftest.py."""
