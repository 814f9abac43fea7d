"""The pytest plugin training.testrun loads into task test runs (by path, not by import)."""
