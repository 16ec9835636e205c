"""Preference pairs (`algorithm_type: dpo`) rendered from dataset rows (rft.buffer.sft_rows'
`pair`) and published as groups of two experiences (rft.producers.dataset_publisher): the
chosen response with reward 1, the rejected one with reward 0, one shared prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rft.buffer.sft_rows import SFT_ROW_RENDERERS, RenderContext
from rft.catalog import load_config
from rft.config.schema import ExperienceBufferConfig, FormatConfig
from rft.engines.models import build_byte_tokenizer
from rft.errors import ConfigError, TasksetError
from rft.producers.dataset_publisher import dataset_events, render_dataset

PLAIN = FormatConfig(prompt_key="question", chosen_key="good", rejected_key="bad")
MESSAGES = FormatConfig(prompt_type="messages", messages_key="messages")


@pytest.fixture(scope="module")
def context() -> RenderContext:
    return RenderContext(build_byte_tokenizer(), max_prompt_tokens=400, max_response_tokens=200)


def trained_text(context: RenderContext, ids: list[int], mask: list[int]) -> str:
    return context.tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])


def test_a_prompt_response_pair_renders_two_rows_with_one_prompt(context: RenderContext) -> None:
    row = {"question": "What is 2 + 3?", "good": "5", "bad": "6"}
    chosen, rejected = SFT_ROW_RENDERERS.get("pair")(row, "p.jsonl:1", PLAIN, context)
    assert chosen.prompt_ids == rejected.prompt_ids
    assert "What is 2 + 3?" in context.tokenizer.decode(chosen.prompt_ids)
    assert trained_text(context, chosen.response_ids, chosen.mask).startswith("5")
    assert trained_text(context, rejected.response_ids, rejected.mask).startswith("6")
    assert (chosen.reward, rejected.reward) == (1.0, 0.0)


def test_messages_pairs_accept_reply_turns_or_whole_conversations(
    context: RenderContext,
) -> None:
    prompt = [{"role": "user", "content": "Say hi"}]
    replies = {
        "messages": prompt,
        "chosen": [{"role": "assistant", "content": "Hi!"}],
        "rejected": [{"role": "assistant", "content": "No."}],
    }
    whole = {
        "chosen": [*prompt, {"role": "assistant", "content": "Hi!"}],
        "rejected": [*prompt, {"role": "assistant", "content": "No."}],
    }
    render = SFT_ROW_RENDERERS.get("pair")
    assert render(replies, "a:1", MESSAGES, context) == render(whole, "a:2", MESSAGES, context)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"question": "q", "good": "a"}, "p.jsonl:7: 'bad' missing or empty"),
        ({"question": "q", "good": "  ", "bad": "b"}, "p.jsonl:7: 'good' is empty"),
        ({"good": "a", "bad": "b"}, "p.jsonl:7: prompt_key 'question' missing"),
        ({"question": "q", "good": "a", "bad": "a"}, "are the same"),
        (
            {"question": "q", "good": [{"role": "assistant", "content": ""}], "bad": "b"},
            "no non-empty assistant message",
        ),
    ],
)
def test_bad_pairs_are_refused_naming_the_row_and_key(
    context: RenderContext, row: dict, message: str
) -> None:
    with pytest.raises(TasksetError, match=message):
        SFT_ROW_RENDERERS.get("pair")(row, "p.jsonl:7", PLAIN, context)


def test_a_published_pair_is_one_group_of_two_in_the_same_partition_key(
    context: RenderContext, tmp_path: Path
) -> None:
    data = tmp_path / "pairs.jsonl"
    rows = [{"question": f"What is {i} + 1?", "good": str(i + 1), "bad": str(i)} for i in range(3)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    buffer = ExperienceBufferConfig(name="prefs", storage_type="file", path=str(data), format=PLAIN)
    dataset = render_dataset(buffer, "pair", context)
    assert dataset.grouped and dataset.sequences == 6
    events = dataset_events(dataset, epochs=2, seed=3)
    assert len(events) == 12
    for chosen, rejected in zip(events[::2], events[1::2], strict=True):
        assert chosen.group_id == rejected.group_id
        assert (chosen.group_size, rejected.group_size) == (2, 2)
        assert chosen.experience_id == f"{chosen.group_id}.0"
        assert rejected.experience_id == f"{chosen.group_id}.1"
        assert (chosen.reward, rejected.reward) == (1.0, 0.0)
    assert len({e.group_id for e in events}) == 6  # 3 pairs x 2 epochs


def test_a_bad_pair_row_publishes_nothing_and_names_its_line(
    context: RenderContext, tmp_path: Path
) -> None:
    data = tmp_path / "pairs.jsonl"
    good = {"question": "q", "good": "a", "bad": "b"}
    data.write_text(json.dumps(good) + "\n" + json.dumps({"question": "q", "good": "a"}) + "\n")
    buffer = ExperienceBufferConfig(name="prefs", storage_type="file", path=str(data), format=PLAIN)
    with pytest.raises(TasksetError, match=r"pairs.jsonl.*2.*'bad' missing"):
        render_dataset(buffer, "pair", context)


def dpo_config(tmp_path: Path, **trainer: object) -> Path:
    raw = {
        "project": "p",
        "name": "n",
        "mode": "train",
        "algorithm": {"algorithm_type": "dpo"},
        "model": {"model_path": "tiny"},
        "buffer": {
            "train_batch_size": trainer.pop("train_batch_size", 4),
            "trainer_input": {
                "experience_buffer": {
                    "name": "prefs",
                    "storage_type": "file",
                    "path": str(tmp_path / "prefs.jsonl"),
                    "format": {"chosen_key": "yes", "rejected_key": "no"},
                }
            },
        },
        "trainer": {"micro_batch_size": 2, **trainer},
    }
    path = tmp_path / "dpo.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_dpo_config_loads_with_its_pair_keys(tmp_path: Path) -> None:
    cfg = load_config(dpo_config(tmp_path))
    fmt = cfg.buffer.trainer_input.experience_buffer.format
    assert (fmt.chosen_key, fmt.rejected_key) == ("yes", "no")


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"micro_batch_size": 3}, "trainer.micro_batch_size.*even"),
        ({"train_batch_size": 5}, "buffer.train_batch_size.*even"),
    ],
)
def test_a_batch_that_would_split_a_pair_is_refused_at_load(
    tmp_path: Path, changes: dict, key: str
) -> None:
    with pytest.raises(ConfigError, match=key):
        load_config(dpo_config(tmp_path, **changes))


def test_sides_answering_different_prompts_are_refused(context: RenderContext) -> None:
    row = {
        "chosen": [{"role": "user", "content": "A?"}, {"role": "assistant", "content": "a"}],
        "rejected": [{"role": "user", "content": "B?"}, {"role": "assistant", "content": "b"}],
    }
    with pytest.raises(TasksetError, match="x:3: 'chosen' and 'rejected' do not answer the same"):
        SFT_ROW_RENDERERS.get("pair")(row, "x:3", MESSAGES, context)
