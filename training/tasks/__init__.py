"""Task sets: the task format (taskset), the builders that make tasks from real projects
(build, pypi, synthetic, mutate, instruction), the scripted expert that solves them and
the demonstrations it writes (expert, demos), and the `tachy tasks` CLI (cli).

Importing the package (and `training.tasks.cli`) stays cheap: builders load on use.
"""
