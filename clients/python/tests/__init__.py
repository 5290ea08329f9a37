"""Tests of the Python client; `python -m tests` runs them (see __main__.py)."""
