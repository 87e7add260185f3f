"""The codebase index's client: walk, chunk, obfuscate, hash and sync a workspace (docs/index.md).

Light: stdlib and httpx only, so the SDK install (no torch, no numpy) can sync and search.
"""
