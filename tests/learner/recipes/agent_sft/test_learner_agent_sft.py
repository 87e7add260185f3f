"""Token windows, the LM objective and the agent's warm-up recipe on a tiny model."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from learner.data.token_windows import TokenSampleSpec, pack_sequences, write_token_window
from learner.engine.causal_lm import CausalLMTask, attention_mask, next_token_logprobs
from learner.engine.trainer import TrainerConfig
from learner.errors import LearnerError
from learner.eval_suite import EvalConfig
from learner.recipes.agent_sft.recipe import (
    AgentSFTConfig,
    CorpusConfig,
    run_sft,
)
from policies.agent_lm import AgentModelConfig, load_checkpoint


def test_pack_marks_the_completion_as_target_and_keeps_the_end() -> None:
    rows = pack_sequences([[1, 2, 3], [4, 5, 6, 7, 8]], [[9, 2], [10, 2]], seq_len=6, pad_id=0)
    assert rows.input_ids.tolist() == [[1, 2, 3, 9, 2, 0], [5, 6, 7, 8, 10, 2]]
    assert rows.target.tolist() == [[0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 1, 1]]
    assert rows.lengths.tolist() == [5, 6] and rows.trained_tokens == 4
    with pytest.raises(LearnerError, match="seq_len"):
        pack_sequences([[1]], [[1] * 6], seq_len=6, pad_id=0)


def test_a_token_window_is_written_whole_and_reads_back(tmp_path: Path) -> None:
    from streaming import StreamingDataset

    rows = pack_sequences([[1, 2]] * 5, [[3, 4]] * 5, seq_len=8, pad_id=0)
    window = write_token_window(tmp_path / "w", rows, TokenSampleSpec(8, rows_per_sample=2))
    samples = list(StreamingDataset(local=str(window), batch_size=1, shuffle=False))
    assert [int(s["n_rows"]) for s in samples] == [2, 2, 1]
    assert samples[2]["target"][1].sum() == 0  # the padding row trains nothing
    with pytest.raises(LearnerError, match="immutable"):
        write_token_window(tmp_path / "w", rows, TokenSampleSpec(8, rows_per_sample=2))


def test_the_lm_loss_counts_target_tokens_only() -> None:
    class Uniform(torch.nn.Module):
        def forward(self, input_ids, attention_mask):  # type: ignore[no-untyped-def]
            logits = torch.zeros(*input_ids.shape, 10, requires_grad=True)
            return type("Out", (), {"logits": logits})()

    rows = pack_sequences([[1, 2], [3]], [[4, 5], [6]], seq_len=5, pad_id=0)
    batch = {k: torch.from_numpy(np.asarray(getattr(rows, k))) for k in
             ("input_ids", "target", "lengths")}  # fmt: skip
    total, count = CausalLMTask().loss(Uniform(), batch)
    assert int(count) == 3
    assert float(total.detach()) == pytest.approx(3 * np.log(10))


def test_rows_run_in_length_buckets_score_as_one_padded_pass() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2,
                                         intermediate_size=48))  # fmt: skip
    lengths = torch.tensor([0, 1, 12, 5, 9, 3, 12])  # a padding row and a one-token row too
    ids = torch.randint(1, 40, (7, 12)) * attention_mask(lengths, 12)
    temperature = torch.tensor([1.0, 1.0, 0.4, 1.0, 0.7, 1.0, 1.0])
    scored = attention_mask(lengths - 1, 11).bool()  # positions that predict a real token

    def scores_and_grads(buckets: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        logprobs = next_token_logprobs(model, ids, lengths, temperature, buckets=buckets)
        logprobs[scored].sum().backward()
        return logprobs.detach(), [p.grad.clone() for p in model.parameters()]

    whole, whole_grads = scores_and_grads(1)
    bucketed, bucket_grads = scores_and_grads(3)
    assert torch.allclose(bucketed[scored], whole[scored], atol=1e-5)
    for a, b in zip(bucket_grads, whole_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_warm_up_learns_and_saves_an_hf_checkpoint(tmp_path: Path) -> None:
    config = AgentSFTConfig(
        model=AgentModelConfig(hidden_size=64, layers=2, heads=4, kv_heads=2,
                               intermediate_size=128, vocab_size=400),
        corpus=CorpusConfig(tasks=400, seq_len=112, rows_per_sample=8),
        train=TrainerConfig(batch_size=4, duration="40ba", checkpoint_interval="20ba",
                            lr=3e-3, device="cpu"),
        eval=EvalConfig(tasks=20, max_new_tokens=16, extra_tasks=10),
    )  # fmt: skip
    lines: list[str] = []
    result = run_sft(config, tmp_path / "run", log=lines.append)
    assert result.version is None  # no registry given
    assert result.trained.fit is not None
    assert result.trained.fit.losses[-1] < result.trained.fit.losses[0] / 2
    assert result.trained.fit.progress.tokens > 0
    assert len(result.eval.passed) == 20 and 0.0 <= result.eval.pass_at_1 <= 1.0
    assert result.extra is not None and len(result.extra.passed) == 10
    assert any("on 10 of seen programs" in line for line in lines)  # beside the eval set
    _, tokenizer = load_checkpoint(result.checkpoint)
    assert len(tokenizer) <= 400
    again = run_sft(dataclasses.replace(config), tmp_path / "run", log=lambda _: None)
    assert again.trained.fit is not None
    assert again.trained.fit.resumed_from == 40  # a second run resumes: nothing trained twice
