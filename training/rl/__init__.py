"""RL on Ray (`tachy train rl`), in slime / verl's roles: controller (`RLRun`: drives the
others), buffer (`RolloutBuffer`: groups of rollouts launched, collected, taken), trainer
(`RLTrainer`: the update) with loss (the clipped objective) and routing_replay (the
sampler's experts in the training forward), inference (actors sampling token in, token
out, through token_policy), rollout_worker (the agent executor in sandboxes), config
(`RLConfig`).
"""
