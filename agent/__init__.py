"""The agent: the executor both the editor and the trainer run, its tools, the
workspace and sandbox they act through, and the policies that write its turns.
Imports nothing of tachy but `index` (tests/test_layering.py)."""
