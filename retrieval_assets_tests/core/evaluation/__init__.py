"""Fusion, evaluation metrics, the gate's statistics and the configuration learner."""
