"""Evaluation: a policy's solve rate on a task set (`tachy eval`), through the
environment server and the unchanged executor. run (the attempts and their results
file), stats (pass@k and bootstrap intervals), cli (the command line).
"""
