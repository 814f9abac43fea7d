"""Benchmarks: `python -m bench.NAME --json` prints one JSON document whose `summary`
object holds the headline figures (ratios against an anchor measured in the same run).
Commands and results are recorded in bench/RESULTS.md."""
