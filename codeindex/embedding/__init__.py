"""The code embedder: a small bi-encoder (BPE tokenizer + transformer encoder, mean pooled, L2
normalised) that maps code chunks and natural-language queries into one vector space.

``embedder.py`` loads it (the shipped artifact, a registry version, or any local HF sentence
embedding checkpoint) and encodes texts; ``model.py`` defines it from a config; ``tokenizer.py``
trains its tokenizer. The lexical (BM25) side's tokenisation is ``codeindex/terms.py``
(stdlib, so the client uses it without torch). The training recipe is
``learner/recipes/code_embedder/`` (docs/index.md, "The embedder").
"""
