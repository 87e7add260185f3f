"""The embedder's encode contract: shape, unit rows, determinism, batching, save → load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from codeindex.embedding.embedder import MANIFEST_FILE, load_embedder
from codeindex.embedding.errors import EmbeddingError
from policies.agent_lm import save_checkpoint
from tests.codeindex.embedding.tiny import CORPUS, tiny_embedder

TEXTS = [*CORPUS[:5], "x", "def f():\n    return 1\n" * 20]  # lengths differ a lot


def test_encode_gives_unit_float32_rows_in_input_order() -> None:
    embedder = tiny_embedder()
    vectors = embedder.encode(TEXTS, batch_size=3)
    assert vectors.shape == (len(TEXTS), 32) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert embedder.encode([], batch_size=3).shape == (0, 32)
    # row i is text i's vector whatever the batch it was sorted into
    np.testing.assert_allclose(embedder.encode([TEXTS[2]])[0], vectors[2], atol=1e-5)


def test_encode_is_deterministic_and_batching_equals_one_by_one() -> None:
    embedder = tiny_embedder()
    batched = embedder.encode(TEXTS, batch_size=64)
    assert np.array_equal(batched, embedder.encode(TEXTS, batch_size=64))
    one_by_one = np.stack([embedder.encode([text])[0] for text in TEXTS])
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5)
    assert not np.allclose(batched[0], batched[1])  # different texts, different vectors


def test_long_texts_are_truncated_to_max_tokens() -> None:
    embedder = tiny_embedder()
    assert max(len(ids) for ids in embedder.tokenize(TEXTS)) == 24
    head = "def f():\n    return 1\n" * 20
    np.testing.assert_allclose(
        embedder.encode([head]), embedder.encode([head + "more words at the end"]), atol=1e-6
    )


def test_encode_refuses_a_batch_size_below_one() -> None:
    with pytest.raises(EmbeddingError, match="batch_size"):
        tiny_embedder().encode(TEXTS, batch_size=0)


@pytest.mark.parametrize(("half", "tolerance"), [(False, 1e-6), (True, 2e-2)])
def test_save_then_load_gives_the_same_vectors(
    tmp_path: Path, half: bool, tolerance: float
) -> None:
    embedder = tiny_embedder()
    embedder.save(tmp_path, half=half)
    assert {"config.json", "model.safetensors", "tokenizer.json", MANIFEST_FILE} <= {
        p.name for p in tmp_path.iterdir()
    }
    loaded = load_embedder(tmp_path, device="cpu")
    assert (loaded.name, loaded.version, loaded.dim) == ("tiny", "1", 32)
    np.testing.assert_allclose(loaded.encode(TEXTS), embedder.encode(TEXTS), atol=tolerance)


def test_a_foreign_checkpoint_loads_without_a_manifest(tmp_path: Path) -> None:
    """Any local HF encoder with a tokenizer: named after its folder, versioned by its weights."""
    embedder = tiny_embedder()
    folder = tmp_path / "my-minilm"
    save_checkpoint(embedder.model, embedder.tokenizer, folder)  # type: ignore[arg-type]
    loaded = load_embedder(folder, device="cpu")
    assert loaded.name == "my-minilm" and loaded.version.startswith("local-")
    assert loaded.dim == 32
    np.testing.assert_allclose(loaded.encode(TEXTS[:3]), embedder.encode(TEXTS[:3]), atol=1e-5)


def test_a_folder_without_a_checkpoint_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingError, match=r"no config\.json"):
        load_embedder(tmp_path)
