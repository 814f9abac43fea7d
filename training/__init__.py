"""Training: task sets built from real projects, sandboxed environments to run the agent
in, and the trainers of our own model, one subpackage per role:

- `training.tasks`: the task format, the builders (PyPI projects, synthetic repositories,
  AST mutation, instructions), the scripted expert and its demonstrations, `tachy tasks`;
- `training.env`: the sandbox pool over snapshots, test runs and their outcomes,
  rewards, one scored agent run (an episode), the pool as a Ray actor;
- `training.sft`: pretraining and supervised fine-tuning (data, the trainer, what it
  shares with RL: optimizer, data order, checkpoints);
- `training.rl`: the RL controller, its rollout buffer, the trainer and its loss,
  routing replay, inference actors and rollout workers;
- `training.cli`: `tachy train` (pretrain, sft, rl, plot).

Imports agent and model; nothing outside training (but the `tachy` CLI's dispatch)
imports it.
"""
