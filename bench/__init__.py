"""Benchmarks: each is `python -m bench.<name>`; `make bench` (`python -m bench.all`) runs all."""
