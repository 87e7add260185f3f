"""The training engine every recipe shares: the Trainer, its checkpoints, loaders and helpers.

Recipe-agnostic: it knows windows of samples and a ``TrainingTask``, never which model or which
rows. Import from the modules (``learner.engine.trainer`` …); this package re-exports nothing.
"""
