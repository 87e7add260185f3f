"""Training data every recipe shares: MDS windows on disk, their manifest, token windows, replay.

Recipe-agnostic: which rows go into a window is a recipe's; how a window is named, written,
recorded, recovered and mixed is here. Import from the modules; this package re-exports nothing.
"""
