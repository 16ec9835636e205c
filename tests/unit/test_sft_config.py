"""`algorithm_type: sft` / `cpt` configs: the dataset is `buffer.trainer_input.experience_buffer`
with storage_type file (Trinity-RFT's place for it), the run is mode train, and what does not fit
is refused at load naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rft.algorithms.presets import resolve_algorithm
from rft.catalog import load_config
from rft.errors import ConfigError


def sft_config(tmp_path: Path, **changes: object) -> Path:
    raw: dict = {
        "project": "p",
        "name": "n",
        "mode": "train",
        "algorithm": {"algorithm_type": "sft"},
        "model": {"model_path": "tiny"},
        "buffer": {
            "train_batch_size": 4,
            "trainer_input": {
                "experience_buffer": {
                    "name": "chats",
                    "storage_type": "file",
                    "path": str(tmp_path / "chats.jsonl"),
                    "split": "train",
                    "format": {"prompt_type": "messages", "messages_key": "conversation"},
                }
            },
        },
    }
    for dotted, value in changes.items():
        *head, last = dotted.split("__")
        node = raw
        for part in head:
            node = node[part]
        node[last] = value
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_trinity_style_sft_config_loads_with_its_dataset_format(tmp_path: Path) -> None:
    cfg = load_config(sft_config(tmp_path))
    buf = cfg.buffer.trainer_input.experience_buffer
    assert (buf.storage_type, buf.format.prompt_type, buf.format.messages_key) == (
        "file",
        "messages",
        "conversation",
    )
    assert buf.topic is None  # published onto the run's own experience topic
    spec = resolve_algorithm(cfg.algorithm)
    assert (spec.dataset, spec.policy_loss_fn, spec.advantage_fn) == ("chat", "sft", None)
    assert resolve_algorithm({"algorithm_type": "cpt"}).dataset == "text"


def test_cpt_reads_its_text_key(tmp_path: Path) -> None:
    path = sft_config(
        tmp_path,
        algorithm__algorithm_type="cpt",
        buffer__trainer_input__experience_buffer__format={"text_key": "body"},
    )
    cfg = load_config(path)
    assert cfg.buffer.trainer_input.experience_buffer.format.text_key == "body"


def test_sft_without_a_dataset_file_is_refused(tmp_path: Path) -> None:
    path = sft_config(tmp_path, buffer__trainer_input__experience_buffer={"storage_type": "kafka"})
    with pytest.raises(ConfigError, match=r"experience_buffer.storage_type.*trains on a dataset"):
        load_config(path)


def test_a_dataset_file_for_a_rollout_algorithm_is_refused(tmp_path: Path) -> None:
    path = sft_config(tmp_path, algorithm__algorithm_type="raft")
    with pytest.raises(
        ConfigError, match=r"storage_type` file: algorithm 'raft' trains on rollouts"
    ):
        load_config(path)


def test_sft_with_an_explorer_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"`mode` 'both': algorithm 'sft' trains on a published"):
        load_config(
            sft_config(
                tmp_path,
                mode="both",
                buffer__explorer_input={
                    "default_workflow_type": "math_workflow",
                    "taskset": {"name": "t", "storage_type": "generator", "path": "arithmetic"},
                },
            )
        )


def test_a_dataset_directory_is_read_at_its_subset_name_and_split(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rft.buffer.sft_rows import RenderContext
    from rft.engines.models import build_byte_tokenizer
    from rft.producers.dataset_publisher import render_dataset

    rows = [{"text": f"row {i}"} for i in range(5)]
    (tmp_path / "ds" / "main").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows[:3]), tmp_path / "ds/main/train-00000.parquet")
    pq.write_table(pa.Table.from_pylist(rows[3:]), tmp_path / "ds/main/test-00000.parquet")
    path = sft_config(
        tmp_path,
        algorithm__algorithm_type="cpt",
        buffer__trainer_input__experience_buffer={
            "name": "ds",
            "storage_type": "file",
            "path": str(tmp_path / "ds"),
            "subset_name": "main",
            "split": "test",
        },
    )
    buffer = load_config(path).buffer.trainer_input.experience_buffer
    tok = build_byte_tokenizer()
    dataset = render_dataset(buffer, "text", RenderContext(tok, 8, 64))
    texts = [tok.decode(r[0].prompt_ids + r[0].response_ids) for r in dataset.rows]
    assert [t.replace(tok.eos_token, "") for t in texts] == ["row 3", "row 4"]


def test_sft_on_several_trainer_ranks_loads_with_a_sharded_engine(tmp_path: Path) -> None:
    cfg = load_config(sft_config(tmp_path, trainer={"trainer_type": "fsdp2", "world_size": 2}))
    assert (cfg.trainer.engine_name, cfg.trainer.world_size) == ("fsdp2", 2)


def test_the_example_loads_and_its_episodes_train_the_call_and_the_answer() -> None:
    import importlib.util

    from rft.buffer.sft_rows import SFT_ROW_RENDERERS, RenderContext
    from rft.engines.models import build_byte_tokenizer
    from rft.environments.multiplication import Multiplication
    from tests.unit.test_sft_rows import segments

    root = Path(__file__).resolve().parents[2] / "examples" / "sft"
    cfg = load_config(root / "multiplication_sft.yaml")
    buf = cfg.buffer.trainer_input.experience_buffer
    assert (cfg.mode, cfg.algorithm.algorithm_type, buf.storage_type) == ("train", "sft", "file")
    spec = importlib.util.spec_from_file_location("make_sft_dataset", root / "make_dataset.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    row = module.episode(Multiplication(), 7)
    tok = build_byte_tokenizer()
    [rendered] = SFT_ROW_RENDERERS.get("chat")(row, "ex", buf.format, RenderContext(tok, 512, 512))
    trained = [
        text.split("<|im_end|>")[0]
        for m, text in segments(tok, rendered.response_ids, rendered.mask)
        if m
    ]
    assistant = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
    assert trained == assistant and "<tool_call>" in assistant[0]
    assert assistant[1] == f"Answer: {int(row['messages'][3]['content'])}"
