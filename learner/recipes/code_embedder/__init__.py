"""The code embedder's recipe (``flywheel learn --recipe code-embedder``): a small bi-encoder
trained contrastively on (docstring sentence, function without its docstring) pairs mined from
the Python sources on this machine, the benchmark's held-out packages excluded (docs/index.md,
"The embedder"). One-shot: train, measure, publish and register a version.
"""
