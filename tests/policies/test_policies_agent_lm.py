"""The agent LM: tokenizer round trip, dense+GQA and MoE configs build, train, generate, and
checkpoints in the Hugging Face layout."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from policies.agent_lm import (
    AgentModelConfig,
    build_model,
    kv_cache_bytes_per_token,
    load_checkpoint,
    parameter_count,
    save_checkpoint,
    train_tokenizer,
)
from policies.agent_sampling import SamplingParams, sample
from policies.errors import PolicyError

CORPUS = [f"# f({i!r}) == {i * 2!r}\ndef f(x):\n    return twice(x)\n" for i in range(200)]
TINY = {"hidden_size": 32, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate_size": 64,
        "vocab_size": 300, "experts": 4, "expert_intermediate_size": 16}  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    return train_tokenizer(CORPUS, 300)


def test_tokenizer_round_trips_any_text(tokenizer) -> None:  # type: ignore[no-untyped-def]
    for text in (CORPUS[3], "déjà vu ✓ \t\n", "x" * 50):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
    assert len(tokenizer) <= 300
    assert {tokenizer.pad_token_id, tokenizer.eos_token_id} <= set(range(3))


@pytest.mark.parametrize("architecture", ["llama", "qwen3_moe"])
def test_each_architecture_builds_trains_one_step_and_generates(
    tokenizer,
    architecture: str,  # type: ignore[no-untyped-def]
) -> None:
    config = AgentModelConfig(architecture=architecture, **TINY)  # type: ignore[arg-type]
    torch.manual_seed(0)
    model = build_model(config, tokenizer)
    assert type(model).__name__ == ("LlamaForCausalLM" if architecture == "llama"
                                    else "Qwen3MoeForCausalLM")  # fmt: skip
    assert model.config.num_key_value_heads == 2 < model.config.num_attention_heads
    batch = tokenizer(CORPUS[:4], padding=True, return_tensors="pt")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(2):
        loss = model(**batch, labels=batch["input_ids"]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[1] < losses[0]
    model.eval()
    groups = sample(model, tokenizer, ["# f(1) == 2\n"], 3, SamplingParams(max_new_tokens=5))
    assert len(groups[0]) == 3 and all(0 < len(c.token_ids) <= 5 for c in groups[0])


def test_checkpoints_use_the_hf_layout_and_load_back(tokenizer, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model = build_model(AgentModelConfig(**TINY), tokenizer)  # type: ignore[arg-type]
    save_checkpoint(model, tokenizer, tmp_path / "ck")
    names = {p.name for p in (tmp_path / "ck").iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    loaded, loaded_tokenizer = load_checkpoint(tmp_path / "ck")
    assert parameter_count(loaded) == parameter_count(model)
    ids = torch.tensor([[5, 6, 7]])
    model.eval()
    assert torch.allclose(loaded(ids).logits, model(ids).logits, atol=1e-6)
    assert loaded_tokenizer.decode(loaded_tokenizer("abc")["input_ids"]) == "abc"
    with pytest.raises(PolicyError, match=r"config\.json"):
        load_checkpoint(tmp_path)


def test_config_errors_name_the_fix() -> None:
    with pytest.raises(PolicyError, match="kv_heads"):
        AgentModelConfig(heads=4, kv_heads=3)
    with pytest.raises(PolicyError, match="architecture"):
        AgentModelConfig(architecture="gpt")  # type: ignore[arg-type]


def test_kv_cache_bytes_shrink_by_heads_over_kv_heads() -> None:
    mha = kv_cache_bytes_per_token(AgentModelConfig(heads=4, kv_heads=4))
    gqa = kv_cache_bytes_per_token(AgentModelConfig(heads=4, kv_heads=2))
    mqa = kv_cache_bytes_per_token(AgentModelConfig(heads=4, kv_heads=1))
    assert mha == 2 * gqa == 4 * mqa


def test_checkpoints_loaded_and_built_from_many_threads_at_once_all_tie_their_embeddings(
    tokenizer,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    # transformers patches process-global state while it builds a model; unserialised, two
    # threads loading at once left tying off for good (the tied lm_head stayed on meta)
    save_checkpoint(build_model(AgentModelConfig(**TINY), tokenizer), tokenizer, tmp_path / "ck")  # type: ignore[arg-type]
    built: list[torch.nn.Module] = []
    errors: list[BaseException] = []

    def build(load: bool) -> None:
        try:
            built.append(load_checkpoint(tmp_path / "ck")[0] if load
                         else build_model(AgentModelConfig(**TINY), tokenizer))  # type: ignore[arg-type]  # fmt: skip
        except BaseException as exc:
            errors.append(exc)

    for _ in range(4):
        threads = [threading.Thread(target=build, args=(i != 2,)) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    built.append(load_checkpoint(tmp_path / "ck")[0])  # and the process is left sound
    assert errors == []
    assert len(built) == 13
    for model in built:
        head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
        assert head.weight.data_ptr() == embedding.weight.data_ptr()
