"""Supervised training (`tachy train pretrain`, `tachy train sft`): data (corpus and
demonstrations to token rows with loss masks), trainer (`Trainer`, `TrainConfig`), and
common (the optimizer, data order, checkpoint and metrics files the RL trainer shares).
"""
