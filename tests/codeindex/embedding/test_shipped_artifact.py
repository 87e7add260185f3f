"""The embedder shipped in codeindex/embedding/artifact/ loads without training and ranks a
query's own function above unrelated ones."""

from __future__ import annotations

import numpy as np

from codeindex.embedding.embedder import ARTIFACT_DIR, load_default_embedder

FUNCTIONS = {
    "Read a JSON file and return its contents.": (
        "def read_json(path):\n    with open(path) as f:\n        return json.load(f)"
    ),
    "Compute the SHA-256 hex digest of a file.": (
        "def file_sha256(path):\n    digest = hashlib.sha256()\n"
        "    digest.update(Path(path).read_bytes())\n    return digest.hexdigest()"
    ),
    "Send an HTTP GET request and return the response body.": (
        "def fetch(url, timeout=10):\n    response = requests.get(url, timeout=timeout)\n"
        "    response.raise_for_status()\n    return response.text"
    ),
    "Sort the users by their age.": (
        "def sort_users_by_age(users):\n    return sorted(users, key=lambda u: u.age)"
    ),
    "Create the directory and its parents if missing.": (
        "def ensure_dir(path):\n    os.makedirs(path, exist_ok=True)\n    return path"
    ),
}


def test_the_shipped_embedder_loads_and_describes_itself() -> None:
    embedder = load_default_embedder(device="cpu")
    assert (ARTIFACT_DIR / "embedder.json").is_file()
    assert embedder.name == "code-embedder" and embedder.version
    assert embedder.dim == embedder.encode(["x"]).shape[1]
    assert embedder.manifest.metrics["heldout_dense_mrr@10"] > 0.1


def test_the_shipped_embedder_ranks_each_query_s_function_first() -> None:
    embedder = load_default_embedder(device="cpu")
    queries = list(FUNCTIONS)
    codes = embedder.encode(list(FUNCTIONS.values()))
    scores = embedder.encode(queries) @ codes.T
    assert list(np.argmax(scores, axis=1)) == list(range(len(queries)))
