"""The pytest plugin training.env.testrun loads into task test runs (by path, not by import)."""
