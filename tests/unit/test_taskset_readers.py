"""Taskset readers: JSONL, Parquet, Hugging Face dataset dirs, format keys and bad rows."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rft.catalog import load_config
from rft.config.schema import FormatConfig, TasksetConfig
from rft.errors import ConfigError, TasksetError
from rft.producers.taskset_reader import BadTasksetError, load_taskset
from rft.rewards import REWARD_FUNCTIONS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasksets"
QA = FormatConfig(prompt_key="question", response_key="answer")


def taskset(path: Path | str, **kwargs: object) -> TasksetConfig:
    kwargs.setdefault("format", QA)
    return TasksetConfig(name="t", path=str(path), **kwargs)  # type: ignore[arg-type]


def rows_of(n: int, offset: int = 0) -> list[dict]:
    return [{"question": f"What is {i} + 1?", "answer": i + 1} for i in range(offset, offset + n)]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_jsonl_rows_keep_origin(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", rows_of(3))
    loaded = load_taskset(taskset(path))
    assert [r.payload["answer"] for r in loaded.rows] == [1, 2, 3]
    assert [r.origin for r in loaded.rows] == [f"{path}:1", f"{path}:2", f"{path}:3"]
    assert [r.index for r in loaded.rows] == [0, 1, 2]
    assert loaded.format["prompt_key"] == "question"
    assert loaded.workflow == "math_workflow" and loaded.reward_fn == "math_reward"


def test_sample_malformed_file_fails_naming_every_bad_line() -> None:
    path = EXAMPLES / "arithmetic_malformed.jsonl"
    with pytest.raises(BadTasksetError) as err:
        load_taskset(taskset(path))
    origins = [bad.origin for bad in err.value.bad_rows]
    assert origins == [f"{path}:{n}" for n in (2, 3, 4, 7, 8)]
    message = str(err.value)
    assert "nothing published" in message
    for n in (2, 3, 4, 7, 8):
        assert f"{path}:{n}:" in message
    reasons = {bad.origin.rsplit(":", 1)[1]: bad.reason for bad in err.value.bad_rows}
    assert "bad JSON" in reasons["2"]
    assert "expected a JSON object, got list" in reasons["3"]
    assert "'question'" in reasons["4"]
    assert "NaN" in reasons["8"]


def test_skip_and_report_keeps_good_rows_and_lists_bad() -> None:
    path = EXAMPLES / "arithmetic_malformed.jsonl"
    loaded = load_taskset(taskset(path), on_bad_rows="skip-and-report")
    assert [r.payload["answer"] for r in loaded.rows] == [5, 9, 49]
    assert [r.origin for r in loaded.rows] == [f"{path}:{n}" for n in (1, 6, 9)]
    assert len(loaded.bad_rows) == 5
    # indices count bad rows too, so fixing a line never renumbers the others
    assert [r.index for r in loaded.rows] == [0, 4, 7]


def test_unknown_policy_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="on_bad_rows"):
        load_taskset(taskset(write_jsonl(tmp_path / "a.jsonl", rows_of(1))), on_bad_rows="drop")


@given(
    n_good=st.integers(1, 30),
    bad_lines=st.lists(
        st.sampled_from(['{"question": "x"', "[1, 2]", '"text"', '{"answer": 3}', "{,}", "nul"]),
        min_size=1,
        max_size=8,
    ),
    data=st.data(),
)
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_bad_lines_at_random_positions_are_all_named(
    tmp_path: Path, n_good: int, bad_lines: list[str], data: st.DataObject
) -> None:
    lines = [json.dumps(r) for r in rows_of(n_good)]
    for bad in bad_lines:
        lines.insert(data.draw(st.integers(0, len(lines))), bad)
    path = tmp_path / "fuzz.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected_bad = [f"{path}:{i + 1}" for i, line in enumerate(lines) if line in bad_lines]

    with pytest.raises(BadTasksetError) as err:
        load_taskset(taskset(path))
    assert [b.origin for b in err.value.bad_rows] == expected_bad

    loaded = load_taskset(taskset(path), on_bad_rows="skip-and-report")
    assert len(loaded.rows) == n_good
    assert [b.origin for b in loaded.bad_rows] == expected_bad


def test_not_utf8_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bin.jsonl"
    path.write_bytes(b'{"question": "ok", "answer": 1}\n{"question": "\xff"}\n')
    with pytest.raises(BadTasksetError, match=r"bin.jsonl:2: not UTF-8"):
        load_taskset(taskset(path))


def test_missing_and_unsupported_paths(tmp_path: Path) -> None:
    with pytest.raises(TasksetError, match="does not exist"):
        load_taskset(taskset(tmp_path / "nope.jsonl"))
    csv = tmp_path / "a.csv"
    csv.write_text("q,a\n")
    with pytest.raises(TasksetError, match="unsupported taskset file type '.csv'"):
        load_taskset(taskset(csv))


def test_empty_taskset_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    with pytest.raises(TasksetError, match="no usable rows"):
        load_taskset(taskset(path))


def test_parquet_rows_and_bad_values(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    table = pa.table(
        {
            "question": ["What is 1 + 1?", None, "What is 2 + 2?"],
            "answer": [2.0, 3.0, float("nan")],
            "meta": [{"k": 1}, {"k": 2}, {"k": 3}],
        }
    )
    pq.write_table(table, path, row_group_size=2)
    with pytest.raises(BadTasksetError) as err:
        load_taskset(taskset(path))
    assert [(b.origin, "NaN" in b.reason or "nan" in b.reason) for b in err.value.bad_rows] == [
        (f"{path}:row=1", False),
        (f"{path}:row=2", True),
    ]
    loaded = load_taskset(taskset(path), on_bad_rows="skip-and-report")
    assert loaded.rows[0].payload == {"question": "What is 1 + 1?", "answer": 2.0, "meta": {"k": 1}}
    assert loaded.rows[0].origin == f"{path}:row=0"


def _save_to_disk(split_dir: Path, shards: list[list[dict]], split: str | None) -> None:
    """The layout `datasets.Dataset.save_to_disk` writes: Arrow IPC stream shards + state.json."""
    split_dir.mkdir(parents=True)
    files = []
    for i, rows in enumerate(shards):
        name = f"data-{i:05d}-of-{len(shards):05d}.arrow"
        table = pa.Table.from_pylist(rows)
        with (
            pa.OSFile(str(split_dir / name), "wb") as sink,
            pa.ipc.new_stream(sink, table.schema) as writer,
        ):
            writer.write_table(table)
        files.append({"filename": name})
    (split_dir / "state.json").write_text(json.dumps({"_data_files": files, "_split": split}))
    (split_dir / "dataset_info.json").write_text(json.dumps({"features": {}}))


def test_hf_save_to_disk_dataset_dict_with_split(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    _save_to_disk(root / "train", [rows_of(3), rows_of(2, offset=3)], "train")
    _save_to_disk(root / "test", [rows_of(1, offset=100)], "test")
    (root / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))

    train = load_taskset(taskset(root))
    assert [r.payload["answer"] for r in train.rows] == [1, 2, 3, 4, 5]
    assert [r.index for r in train.rows] == [0, 1, 2, 3, 4]
    assert train.rows[3].origin == f"{root}/train/data-00001-of-00002.arrow:row=0"
    test = load_taskset(taskset(root, split="test"))
    assert [r.payload["answer"] for r in test.rows] == [101]
    with pytest.raises(TasksetError, match="split 'validation' not found"):
        load_taskset(taskset(root, split="validation"))


def test_hf_single_saved_dataset(tmp_path: Path) -> None:
    _save_to_disk(tmp_path / "one", [rows_of(2)], None)
    assert len(load_taskset(taskset(tmp_path / "one", split="anything")).rows) == 2


def test_hf_hub_parquet_layout_with_subset_and_split(tmp_path: Path) -> None:
    root = tmp_path / "hub"
    (root / "main").mkdir(parents=True)
    (root / "socratic" / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows_of(2)), root / "main" / "train-00000-of-00001.parquet")
    pq.write_table(
        pa.Table.from_pylist(rows_of(1, 50)), root / "main" / "test-00000-of-00001.parquet"
    )
    for shard in range(2):
        pq.write_table(
            pa.Table.from_pylist(rows_of(2, 10 * shard)),
            root / "socratic" / "data" / f"train-0000{shard}-of-00002.parquet",
        )
    assert len(load_taskset(taskset(root, subset_name="main")).rows) == 2
    assert [
        r.payload["answer"]
        for r in load_taskset(taskset(root, subset_name="main", split="test")).rows
    ] == [51]
    socratic = load_taskset(taskset(root, subset_name="socratic"))
    assert [r.payload["answer"] for r in socratic.rows] == [1, 2, 11, 12]
    assert [r.index for r in socratic.rows] == [0, 1, 2, 3]
    with pytest.raises(TasksetError, match=r"subset_name 'other' not found.*'main', 'socratic'"):
        load_taskset(taskset(root, subset_name="other"))
    with pytest.raises(TasksetError, match=r"split 'train' not found.*Subsets found"):
        load_taskset(taskset(root))


def test_system_prompt_key_and_messages_are_validated(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "chat.jsonl",
        [
            {"chat": [{"role": "user", "content": "hi"}], "answer": 1},
            {"chat": "hi", "answer": 1},
        ],
    )
    fmt = FormatConfig(prompt_type="messages", messages_key="chat", response_key="answer")
    loaded = load_taskset(taskset(path, format=fmt), on_bad_rows="skip-and-report")
    assert len(loaded.rows) == 1
    assert loaded.bad_rows[0].origin == f"{path}:2"

    path = write_jsonl(tmp_path / "sys.jsonl", [{"question": "q", "answer": 1, "sys": 5}])
    fmt = FormatConfig(prompt_key="question", response_key="answer", system_prompt_key="sys")
    with pytest.raises(BadTasksetError, match="system_prompt_key 'sys'"):
        load_taskset(taskset(path, format=fmt))


def test_generator_taskset_uses_its_default_columns() -> None:
    cfg = TasksetConfig(
        name="arith",
        path="arithmetic",
        storage_type="generator",
        generator_args={"num_tasks": 5, "seed": 3},
        reward_fn_args={"correct_reward": 2.0},
    )
    loaded = load_taskset(cfg)
    assert len(loaded.rows) == 5
    assert loaded.format["prompt_key"] == "question"
    assert loaded.format["response_key"] == "answer"
    assert json.loads(loaded.format["reward_fn_args"]) == {"correct_reward": 2.0}
    countdown = load_taskset(TasksetConfig(name="cd", path="countdown", storage_type="generator"))
    assert countdown.workflow == "countdown_workflow"
    assert countdown.reward_fn == "countdown_reward"
    assert countdown.format["response_key"] == "target"


def test_generator_bad_args_and_unknown_names() -> None:
    with pytest.raises(ConfigError, match="generator_args"):
        load_taskset(
            TasksetConfig(
                name="g", path="arithmetic", storage_type="generator", generator_args={"digitz": 2}
            )
        )
    with pytest.raises(ConfigError, match="did you mean 'countdown'"):
        load_taskset(TasksetConfig(name="g", path="countdwn", storage_type="generator"))
    with pytest.raises(ConfigError, match="unknown reward_fn"):
        load_taskset(
            TasksetConfig(
                name="g", path="arithmetic", storage_type="generator", default_reward_fn_type="nope"
            )
        )


# -- dataset repo folders: subsets, splits as Parquet / JSONL / JSON files ---------------------

GSM8K_ROWS = [
    {
        "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as "
        "many clips in May. How many clips did Natalia sell altogether in April and May?",
        "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
        "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
    },
    {
        "question": "A shop sells 1,200 pens a week for 3 weeks and loses 5.5 of them. How many "
        "are left, to the nearest tenth?",
        "answer": "1,200 * 3 = <<1200*3=3600>>3,600 pens.\n3,600 - 5.5 = 3594.5\n#### 3,594.5",
    },
    {
        "question": "The temperature was 4 degrees and fell by 9. What is it now?",
        "answer": "4 - 9 = <<4-9=-5>>-5\n#### -5",
    },
]
GSM8K_FORMAT = FormatConfig(prompt_key="question", response_key="answer")


def gsm8k_folder(root: Path) -> Path:
    """A local copy shaped like the `openai/gsm8k` dataset repo: two subsets of Parquet splits."""
    for subset in ("main", "socratic"):
        (root / subset).mkdir(parents=True)
        pq.write_table(
            pa.Table.from_pylist(GSM8K_ROWS), root / subset / "train-00000-of-00001.parquet"
        )
        pq.write_table(
            pa.Table.from_pylist(GSM8K_ROWS[:1]), root / subset / "test-00000-of-00001.parquet"
        )
    (root / "README.md").write_text("---\nconfigs: [main, socratic]\n---\n")
    return root


def test_gsm8k_shaped_folder_reads_by_subset_and_split(tmp_path: Path) -> None:
    root = gsm8k_folder(tmp_path / "gsm8k")
    train = load_taskset(taskset(root, subset_name="main", format=GSM8K_FORMAT))
    assert [r.payload for r in train.rows] == GSM8K_ROWS
    assert train.rows[0].origin == f"{root}/main/train-00000-of-00001.parquet:row=0"
    test = load_taskset(taskset(root, subset_name="socratic", split="test", format=GSM8K_FORMAT))
    assert [r.payload for r in test.rows] == GSM8K_ROWS[:1]


def test_gsm8k_final_answers_are_scored_by_math_reward(tmp_path: Path) -> None:
    loaded = load_taskset(taskset(gsm8k_folder(tmp_path / "g"), subset_name="main"))
    assert loaded.reward_fn == "math_reward"
    math_reward = REWARD_FUNCTIONS.get(loaded.reward_fn)
    replies = ["So she sold 72 clips.\nAnswer: 72", "Answer: 3594.5", "It is -5 degrees."]
    wrong = ["Answer: 24", "Answer: 3600", "It is 5 degrees."]
    for row, right, bad in zip(loaded.rows, replies, wrong, strict=True):
        assert math_reward(right, row.payload, answer_key="answer")[0] == 1.0, row.payload
        score, info = math_reward(bad, row.payload, answer_key="answer")
        assert score == 0.0, info
    # the reference value is the number after "####", commas and signs included
    expected = [math_reward("", r.payload, answer_key="answer")[1]["expected"] for r in loaded.rows]
    assert expected == ["72", "3594.5", "-5"]


def test_missing_subset_and_split_errors_list_what_is_there(tmp_path: Path) -> None:
    root = gsm8k_folder(tmp_path / "gsm8k")
    with pytest.raises(TasksetError) as err:
        load_taskset(taskset(root, subset_name="mian"))
    message = str(err.value)
    assert "subset_name 'mian' not found" in message
    assert "Subsets found (set subset_name): 'main', 'socratic'" in message
    assert "main: test, train; socratic: test, train" in message

    with pytest.raises(TasksetError) as err:
        load_taskset(taskset(root))  # no subset_name: the top folder holds no split files
    assert "split 'train' not found" in str(err.value)
    assert "'main', 'socratic'" in str(err.value)

    with pytest.raises(TasksetError) as err:
        load_taskset(taskset(root, subset_name="main", split="validation"))
    message = str(err.value)
    assert "split 'validation' not found" in message
    assert "Splits found: 'test', 'train'." in message
    assert "Subsets found" not in message


def test_flat_folder_of_jsonl_and_json_split_files(tmp_path: Path) -> None:
    root = tmp_path / "flat"
    root.mkdir()
    write_jsonl(root / "train.jsonl", rows_of(3))
    (root / "test.json").write_text(json.dumps(rows_of(2, offset=10), indent=2))
    (root / "validation.json").write_text("".join(json.dumps(r) + "\n" for r in rows_of(1, 20)))

    train = load_taskset(taskset(root))  # no split: train
    assert [r.payload["answer"] for r in train.rows] == [1, 2, 3]
    assert train.rows[2].origin == f"{root / 'train.jsonl'}:3"
    test = load_taskset(taskset(root, split="test"))
    assert [r.payload["answer"] for r in test.rows] == [11, 12]
    # an indented array: each row is named by the line its object starts on
    assert [r.origin for r in test.rows] == [f"{root / 'test.json'}:{n}" for n in (2, 6)]
    validation = load_taskset(taskset(root, split="validation"))
    assert [r.payload["answer"] for r in validation.rows] == [21]

    with pytest.raises(TasksetError, match="Splits found: 'test', 'train', 'validation'"):
        load_taskset(taskset(root, split="dev"))
    with pytest.raises(TasksetError, match=r"subset_name 'main' not found.*Splits found"):
        load_taskset(taskset(root, subset_name="main"))


def test_sharded_jsonl_under_data_keeps_counting_across_shards(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "data").mkdir(parents=True)
    write_jsonl(root / "data" / "train-00000-of-00002.jsonl", rows_of(2))
    write_jsonl(root / "data" / "train-00001-of-00002.jsonl", rows_of(2, offset=2))
    loaded = load_taskset(taskset(root))
    assert [r.payload["answer"] for r in loaded.rows] == [1, 2, 3, 4]
    assert [r.index for r in loaded.rows] == [0, 1, 2, 3]
    assert loaded.rows[2].origin == f"{root}/data/train-00001-of-00002.jsonl:1"


def test_split_folders_of_shards_are_splits_not_subsets(tmp_path: Path) -> None:
    root = tmp_path / "converted"
    for split, n in (("train", 3), ("test", 1)):
        (root / "default" / split).mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(rows_of(n)), root / "default" / split / "0000.parquet")
    assert len(load_taskset(taskset(root, subset_name="default")).rows) == 3
    with pytest.raises(TasksetError) as err:
        load_taskset(taskset(root))
    assert "Subsets found (set subset_name): 'default' (their splits: default: test, train)" in str(
        err.value
    )


def test_json_file_bad_rows_and_shapes(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    path.write_text('[\n{"question": "q", "answer": 1},\n[1],\n{"question": "q", "answer": NaN}\n]')
    with pytest.raises(BadTasksetError) as err:
        load_taskset(taskset(path))
    assert [(b.origin, b.reason[:20]) for b in err.value.bad_rows] == [
        (f"{path}:3", "expected a JSON obje"),
        (f"{path}:4", "column 'answer' hold"),
    ]
    broken = tmp_path / "broken.json"
    broken.write_text('[\n{"question": "q", "answer": 1},\n{"question": \n]')
    with pytest.raises(TasksetError, match=r"broken.json:4:1: bad JSON in the array"):
        load_taskset(taskset(broken))
    one_object = tmp_path / "object.json"
    one_object.write_text(json.dumps({"question": ["a", "b"], "answer": [1, 2]}, indent=2))
    with pytest.raises(TasksetError, match="single JSON value .* not rows"):
        load_taskset(taskset(one_object))


def test_parquet_is_preferred_and_the_other_copy_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "both"
    root.mkdir()
    pq.write_table(pa.Table.from_pylist(rows_of(2)), root / "train.parquet")
    write_jsonl(root / "train.jsonl", rows_of(5))
    with caplog.at_level("WARNING"):
        loaded = load_taskset(taskset(root))
    assert len(loaded.rows) == 2
    assert "train.jsonl" in caplog.text and "not read" in caplog.text


def test_trinity_config_without_split_reads_train(tmp_path: Path) -> None:
    root = gsm8k_folder(tmp_path / "gsm8k")
    config = tmp_path / "run.yaml"
    config.write_text(
        "project: p\nname: n\nmodel: {model_path: tiny}\nalgorithm: {repeat_times: 2}\n"
        "buffer:\n  batch_size: 2\n"
        "  explorer_input:\n    default_workflow_type: math_workflow\n"
        "    taskset:\n      name: gsm8k\n      storage_type: file\n"
        f"      path: {root}\n      subset_name: main\n"
        "      format: {prompt_key: question, response_key: answer}\n"
    )
    cfg = load_config(config)
    assert cfg.buffer.explorer_input.taskset is not None
    assert cfg.buffer.explorer_input.taskset.split == "train"
    assert len(load_taskset(cfg.buffer.explorer_input.taskset).rows) == len(GSM8K_ROWS)
