"""Experiment trackers: each step's run recorded where teams already look (MLflow)."""
