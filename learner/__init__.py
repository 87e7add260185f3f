"""The continuous learner: lake → MDS windows → training → release check → model versions.

``engine/`` trains, ``data/`` holds the windows, ``continuous.py`` is the one loop, ``recipes/``
the ways of training a model (each a folder with its YAML)."""
