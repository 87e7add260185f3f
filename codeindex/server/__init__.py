"""The codebase index server (`flywheel index serve`, docs/index.md): per workspace a Merkle tree
of hashes and a vector index of its chunks, a shared embedding cache keyed by chunk hash, and
the event log (`index.files`, `index.embeddings`) that a new replica rebuilds them from. It
never keeps a chunk's text. Needs the `platform` extra (numpy, usearch); the embedder is
injected (`embedder.ChunkEmbedder`).
"""
