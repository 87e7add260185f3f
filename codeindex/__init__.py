"""The codebase index: a Merkle tree of hashes for sync, chunk embeddings, no code at rest."""
