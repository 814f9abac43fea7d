"""Environments: sandboxed checkouts of a task set's repositories to run the agent in.
snapshot (copy-on-write checkouts), pool (`EnvPool`: hands them out and resets them),
testrun (a task's tests through the agent's sandbox, per-test outcomes, with the pytest
plugin in pytest_plugin/), reward (the score of a run), episode (one agent run in an
environment, scored) and actor (the pool as a Ray actor).
"""
