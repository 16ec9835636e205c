"""`sample_strategy: mix` with `buffer.trainer_input.auxiliary_buffers`: demonstrations from a
dataset file (the taskset readers: `path` to JSONL / Parquet / a dataset directory with `split`
and `subset_name`; `storage_type` file) rendered with the chat template, a share of every batch,
marked as expert rows, read in order across epochs and resumed from the saved position."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from rft.buffer.batch_metrics import batch_metrics
from rft.buffer.expert_source import EXPERT_SOURCES, ExpertContext, open_expert_sources
from rft.buffer.group_sampler import SamplerSetup
from rft.buffer.sample_strategy import build_sampler
from rft.buffer.sampler import SamplerCounters
from rft.catalog import load_config
from rft.config.schema import AuxiliaryBufferConfig, FormatConfig
from rft.engines.models import build_byte_tokenizer
from rft.errors import ConfigError, TasksetError
from tests.unit.config_samples import MINIMAL
from tests.unit.experience_log import GroupSpec, write_log

ROWS = [{"question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(5)]


@pytest.fixture(scope="module")
def context() -> ExpertContext:
    return ExpertContext(build_byte_tokenizer(), max_prompt_tokens=200, max_response_tokens=50)


def jsonl(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "sft.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def plain_format() -> FormatConfig:
    return FormatConfig(prompt_key="question", response_key="answer")


def test_rows_render_with_the_chat_template(tmp_path: Path, context: ExpertContext) -> None:
    buffer = AuxiliaryBufferConfig(
        path=str(jsonl(tmp_path, ROWS)), name="sft", format=plain_format()
    )
    source = EXPERT_SOURCES.get("file")(buffer, context)
    first = source.take(1)
    assert first is not None
    exp = first[0]
    tok = context.tokenizer
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": ROWS[0]["question"]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert tok.decode(exp.prompt_ids) == prompt
    # the response is the assistant turn as the template closes it
    assert tok.decode(exp.response_ids).startswith("0<|im_end|>")
    assert exp.group_size == 1 and exp.explorer_id == "auxiliary:sft"


def test_messages_rows_use_the_last_assistant_turn(tmp_path: Path, context: ExpertContext) -> None:
    chat = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
    ]
    buffer = AuxiliaryBufferConfig(
        path=str(jsonl(tmp_path, [{"messages": chat}])),
        name="chat",
        format=FormatConfig(prompt_type="messages", messages_key="messages"),
    )
    (exp,) = EXPERT_SOURCES.get("file")(buffer, context).take(1) or []
    text = context.tokenizer.decode(exp.prompt_ids)
    assert "Be brief." in text and "2+2?" in text and "4" not in text.split("2+2?")[1]
    assert context.tokenizer.decode(exp.response_ids).startswith("4<|im_end|>")
    bad = AuxiliaryBufferConfig(
        path=str(jsonl(tmp_path, [{"messages": chat[:2]}])),
        name="bad",
        format=FormatConfig(prompt_type="messages", messages_key="messages"),
    )
    with pytest.raises(TasksetError, match="sft.jsonl:1: the last message must be the assistant"):
        EXPERT_SOURCES.get("file")(bad, context)


def test_parquet_dataset_directory_with_subset_and_split(
    tmp_path: Path, context: ExpertContext
) -> None:
    root = tmp_path / "ds"
    (root / "main").mkdir(parents=True)
    table = pa.Table.from_pylist(ROWS[:3])
    pq.write_table(table, root / "main" / "train-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist(ROWS[3:]), root / "main" / "test-00000-of-00001.parquet")
    buffer = AuxiliaryBufferConfig(
        path=str(root), name="ds", subset_name="main", split="test", format=plain_format()
    )
    got = EXPERT_SOURCES.get("file")(buffer, context).take(2) or []
    answers = [context.tokenizer.decode(e.response_ids).split("<|im_end|>")[0] for e in got]
    assert answers == [ROWS[3]["answer"], ROWS[4]["answer"]]


def mix_sampler(tmp_path: Path, context: ExpertContext, ratio: float = 0.25, batch: int = 8):
    buffers = {
        "sft_dataset": AuxiliaryBufferConfig(
            path=str(jsonl(tmp_path, ROWS)), name="sft_dataset", format=plain_format()
        )
    }
    sources = open_expert_sources(buffers, context)
    return build_sampler(
        "mix",
        {"expert_data_ratio": ratio},
        SamplerSetup(train_batch_size=batch, expert_sources=sources),
    )


def test_a_share_of_every_batch_is_demonstrations(tmp_path: Path, context: ExpertContext) -> None:
    sampler = mix_sampler(tmp_path, context, ratio=0.25, batch=8)  # ceil(0.25 * 8) = 2 expert rows
    log = write_log([GroupSpec(3, 0, (0.0, 1.0, 1.0)) for _ in range(6)])
    batches = []
    for item in log:
        sampler.add(item)
        while (b := sampler.take_batch(1)) is not None:
            batches.append(b)
    assert len(batches) == 3
    for b in batches:
        experts = [r for r in b.rows if r.expert]
        assert len(experts) == 2 and all(r.source is None for r in experts)
        assert len(b.learner_rows) == 6  # two whole groups of three
    ids = [r.exp.experience_id for b in batches for r in b.rows if r.expert]
    # file order, and the sixth row starts the second epoch
    assert ids == [
        f"sft_dataset:{e}:{i}" for e, i in [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (1, 0)]
    ]
    values = batch_metrics(batches[0], SamplerCounters())
    assert values["mix_ratio"] == 0.25 and values["expert_rows"] == 2.0
    assert sampler.counters.expert_rows == 6 and sampler.counters.learner_rows == 18


def test_the_position_in_the_auxiliary_buffer_is_restored(
    tmp_path: Path, context: ExpertContext
) -> None:
    first = mix_sampler(tmp_path, context, ratio=0.5, batch=4)
    for item in write_log([GroupSpec(2, 0, (0.0, 1.0))]):
        first.add(item)
    batch = first.take_batch(0)
    assert batch is not None
    saved = json.loads(json.dumps(first.state()))
    second = mix_sampler(tmp_path, context, ratio=0.5, batch=4)
    second.restore(saved)
    for item in write_log([GroupSpec(2, 0, (0.0, 1.0))]):
        second.add(item)
    again = second.take_batch(1)
    assert again is not None
    assert [r.exp.experience_id for r in again.rows if r.expert] == [
        "sft_dataset:0:2",
        "sft_dataset:0:3",
    ]
    assert second.counters.expert_rows == 4


def test_mix_needs_its_named_buffer_and_a_ratio_in_range(
    tmp_path: Path, context: ExpertContext
) -> None:
    with pytest.raises(ConfigError, match="'other' is not an entry"):
        build_sampler("mix", {"sft_dataset_name": "other"}, SamplerSetup(4))
    with pytest.raises(ConfigError, match="expert_data_ratio"):
        mix_sampler(tmp_path, context, ratio=1.5)
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL)
    cfg = load_config(
        path,
        [
            "algorithm.sample_strategy=mix",
            "algorithm.sample_strategy_args={expert_data_ratio: 0.25}",
            f"buffer.trainer_input.auxiliary_buffers={{sft_dataset: {{path: {jsonl(tmp_path, ROWS)}}}}}",
        ],
    )
    aux = cfg.buffer.trainer_input.auxiliary_buffers["sft_dataset"]
    assert aux.name == "sft_dataset" and aux.storage_type == "file"


def test_the_trainer_builds_mix_from_its_config(tmp_path: Path) -> None:
    from contextlib import ExitStack

    from rft.buffer.mix_sampler import MixSampler
    from rft.consumers.trainer.trainer import Trainer

    path = tmp_path / "run.yaml"
    data = yaml.safe_load(MINIMAL)
    data["algorithm"] |= {
        "sample_strategy": "mix",
        "sample_strategy_args": {"expert_data_ratio": 0.25, "filter_groups": True},
    }
    data["buffer"]["trainer_input"] = {
        "auxiliary_buffers": {
            "sft_dataset": {
                "path": str(jsonl(tmp_path, ROWS)),
                "format": {"prompt_key": "question", "response_key": "answer"},
            }
        }
    }
    path.write_text(yaml.safe_dump(data))
    cfg = load_config(path)
    with ExitStack() as stack:
        sampler = Trainer(cfg)._sampler(build_byte_tokenizer(), stack)
    assert isinstance(sampler, MixSampler) and sampler.filter_groups
    assert (sampler.expert_per_batch, sampler.learner_per_batch) == (2, 6)  # batch 4 x 2 rollouts
