"""Benchmark scripts, and the load generator the end-to-end tests share with them (load.py).

A package so that tests import the generator by name; the scripts still run as files
(`.venv/bin/python benchmarks/NAME.py`). Benchmarks import the installer and the gateway, never
tests (pyproject.toml's import contracts).
"""
