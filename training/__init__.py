"""Training: environments (sandbox pool), task builders, rewards and the RL trainer.

Imports agent and model; nothing outside training (but the `tachy` CLI's dispatch)
imports it.
"""
