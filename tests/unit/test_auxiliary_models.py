"""`explorer.auxiliary_models`: checked when the config loads, built on first use, frozen, reached
by name from workflows and handed to the reward functions that ask one; and the `llm_judge`
reward's score parsing and fallbacks (the judge against a real server: the integration test
tests/integration/test_auxiliary_judge.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from rft.catalog import load_config
from rft.config.loader import ConfigValidationError, ConfigWarning
from rft.consumers.run_plan import RunPlan
from rft.engines.auxiliary_chat import EngineChat, engine_chat_model
from rft.engines.auxiliary_models import AuxiliaryModels
from rft.engines.models import ModelSpec
from rft.engines.rollout import RolloutEngineConfig, SamplingParams, create_rollout_engine
from rft.errors import ConfigError, EngineError
from rft.events.models import Task
from rft.rewards import REWARD_FUNCTIONS, RewardInputError
from rft.rewards.llm_judge import DEFAULT_RUBRIC, judge_messages, llm_judge, parse_score
from rft.workflows import WORKFLOWS
from rft.workflows.math_workflow import MathWorkflow
from rft.workflows.runner import run_workflows
from tests.unit.config_samples import MINIMAL

AUX = "explorer.auxiliary_models"
TASKSET = "buffer.explorer_input.taskset"


def _load(tmp_path: Path, extra: str = "", overrides: Sequence[str] = ()) -> Any:
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL + extra, encoding="utf-8")
    return load_config(path, list(overrides))


def _problems(tmp_path: Path, extra: str, overrides: Sequence[str] = ()) -> dict[str, str]:
    with pytest.raises(ConfigValidationError) as info:
        _load(tmp_path, extra, overrides)
    return {p.path: str(p) for p in info.value.problems}


# -- config ---------------------------------------------------------------------------------


def test_auxiliary_models_load_named_by_position_unless_named(tmp_path: Path) -> None:
    cfg = _load(
        tmp_path,
        "explorer:\n  auxiliary_models:\n"
        "    - {engine_type: openai, base_url: 'http://127.0.0.1:9/v1', name: judge}\n"
        "    - {model_path: tiny}\n",
    )
    assert [a.name for a in cfg.explorer.auxiliary_models] == ["judge", "1"]
    roster = RunPlan(cfg).auxiliary_models()
    assert roster.names == ["judge", "1"]
    assert roster[1] is roster["1"] and roster[0] is roster["judge"]
    assert not any(m.built for m in roster)  # none is built until its first call
    judge_spec = roster["judge"].spec
    assert judge_spec.engine.options["base_url"] == "http://127.0.0.1:9/v1"
    assert judge_spec.where == f"{AUX}[0]"


def test_an_unknown_auxiliary_engine_type_is_refused_with_a_hint(tmp_path: Path) -> None:
    problems = _problems(tmp_path, "explorer:\n  auxiliary_models:\n    - {engine_type: opnai}\n")
    assert list(problems) == [f"{AUX}[0].engine_type"]
    assert "did you mean 'openai'?" in problems[f"{AUX}[0].engine_type"]


def test_an_openai_auxiliary_model_without_base_url_is_refused(tmp_path: Path) -> None:
    problems = _problems(tmp_path, "explorer:\n  auxiliary_models:\n    - {engine_type: openai}\n")
    assert list(problems) == [f"{AUX}[0].base_url"]
    assert "is required by engine_type openai" in problems[f"{AUX}[0].base_url"]


def test_duplicate_auxiliary_model_names_are_refused(tmp_path: Path) -> None:
    problems = _problems(
        tmp_path,
        "explorer:\n  auxiliary_models:\n    - {name: judge}\n    - {name: sim}\n"
        "    - {name: judge}\n",
    )
    assert list(problems) == [f"{AUX}[2].name"]
    assert f"'judge' is taken by {AUX}[0]" in problems[f"{AUX}[2].name"]


def test_settings_an_auxiliary_engine_does_not_read_are_refused(tmp_path: Path) -> None:
    problems = _problems(
        tmp_path,
        "explorer:\n  auxiliary_models:\n"
        "    - {name: a, base_url: 'http://x/v1', engine_args: {model: m}}\n"
        "    - {name: b, engine_type: openai, base_url: 'http://x/v1', model_path: tiny,"
        " engine_args: {returns_token_ids: true}}\n"
        "    - {name: c, engine_type: replay}\n",
    )
    assert set(problems) == {
        f"{AUX}[0].base_url",
        f"{AUX}[0].engine_args.model",
        f"{AUX}[1].model_path",
        f"{AUX}[1].engine_args.returns_token_ids",
        f"{AUX}[2].engine_type",
    }
    assert "cannot serve an auxiliary model" in problems[f"{AUX}[2].engine_type"]


def test_trinity_keys_of_an_auxiliary_model_are_warned_about(tmp_path: Path) -> None:
    with pytest.warns(ConfigWarning, match=rf"`{AUX}\[0\].engine_num` is accepted but ignored"):
        _load(tmp_path, "explorer:\n  auxiliary_models:\n    - {engine_num: 2}\n")


def test_a_judge_reward_must_name_a_configured_auxiliary_model(tmp_path: Path) -> None:
    judged = [f"{TASKSET}.default_reward_fn_type=llm_judge"]
    problems = _problems(tmp_path, "", judged)
    assert list(problems) == [f"{TASKSET}.reward_fn_args.judge_model"]
    assert "asks the auxiliary model 'judge'" in problems[f"{TASKSET}.reward_fn_args.judge_model"]
    aux = "explorer:\n  auxiliary_models:\n    - {name: grader}\n"
    problems = _problems(tmp_path, aux, judged)
    assert "(names: 'grader')" in problems[f"{TASKSET}.reward_fn_args.judge_model"]
    cfg = _load(tmp_path, aux, [*judged, f"{TASKSET}.reward_fn_args.judge_model=grader"])
    assert cfg.buffer.explorer_input.taskset.reward_fn_args == {"judge_model": "grader"}
    # the model is the caller's to pass: a config cannot set it, nor a bad score range
    problems = _problems(
        tmp_path,
        aux,
        [
            *judged,
            f"{TASKSET}.reward_fn_args.judge_model=grader",
            f"{TASKSET}.reward_fn_args.auxiliary_model=x",
            f"{TASKSET}.reward_fn_args.max_score=0",
        ],
    )
    assert set(problems) == {
        f"{TASKSET}.reward_fn_args.auxiliary_model",
        f"{TASKSET}.reward_fn_args.max_score",
    }


# -- the roster on a real engine -------------------------------------------------------------


def _tiny_roster(name: str = "judge") -> AuxiliaryModels:
    from rft.engines.auxiliary_models import AuxiliarySpec

    spec = AuxiliarySpec(
        name=name,
        engine_type="hf",
        where=f"{AUX}[0]",
        engine=RolloutEngineConfig(model=ModelSpec("tiny", seed=3)),
    )
    return AuxiliaryModels.of([spec])


def test_an_auxiliary_model_is_built_on_its_first_call_and_counts_its_calls() -> None:
    roster = _tiny_roster()
    model = roster["judge"]
    assert not model.built
    chat = [{"role": "user", "content": "Say something."}]
    first = model.chat(chat, max_tokens=4, temperature=0.0)
    assert model.built
    assert model.chat(chat, max_tokens=4, temperature=0.0) == first  # greedy: the same answer
    with pytest.raises(EngineError, match="auxiliary model 'judge': no .*within"):
        model.chat(chat, max_tokens=4, timeout_s=1e-9)
    assert roster.metrics() == {"auxiliary_judge_calls": 3.0, "auxiliary_judge_failed_calls": 1.0}
    assert roster.metrics() == {"auxiliary_judge_calls": 0.0, "auxiliary_judge_failed_calls": 0.0}
    with pytest.raises(ConfigError, match=r"no auxiliary model named 'sim' .*'judge'"):
        roster.get("sim")


def test_an_engine_chat_answers_what_its_engine_generates_for_the_rendered_chat() -> None:
    engine = create_rollout_engine("hf", RolloutEngineConfig(model=ModelSpec("tiny", seed=3)))
    chat = [{"role": "user", "content": "Hello"}]
    (reply,) = engine.generate(
        [engine.chat_prompt_ids(chat)], SamplingParams(temperature=0.0, max_tokens=5)
    )[0]
    text = EngineChat(engine).chat(chat, max_tokens=5, temperature=0.0, timeout_s=None)
    assert text == reply.text
    assert engine.model_version == 0  # nothing loads a version into it


def test_an_engine_auxiliary_model_is_built_with_its_dtype_and_chat_template(
    tmp_path: Path,
) -> None:
    template = (
        "{% for m in messages %}{{ m['content'] }}{% endfor %}"
        "{% if enable_thinking %} think{% endif %}"
    )
    cfg = _load(tmp_path, "explorer:\n  auxiliary_models:\n    - {name: teacher}\n")
    aux = cfg.explorer.auxiliary_models[0]
    aux.dtype, aux.chat_template, aux.enable_thinking = "bfloat16", template, True
    spec = RunPlan(cfg).auxiliary_models()["teacher"].spec
    assert spec.engine.model.name_or_path == "tiny"  # model.model_path: a frozen copy
    assert spec.engine.model.dtype == "bfloat16"
    chat = engine_chat_model(spec)
    assert isinstance(chat, EngineChat)
    assert next(chat.engine.model.parameters()).dtype == torch.bfloat16
    ids = chat.engine.chat_prompt_ids([{"role": "user", "content": "hi"}])
    assert ids == chat.engine.tokenizer.encode("hi think", add_special_tokens=False)


@WORKFLOWS.register("auxiliary_echo_test", replace=True)
class _AsksTheSimulator(MathWorkflow):
    """A workflow that asks an auxiliary model (a user simulator) by name for its info."""

    def trajectories(self, task: Task, prefix: str, replies: Sequence[Any]) -> list[Any]:
        said = self.auxiliary_models["sim"].chat(
            [{"role": "user", "content": replies[0].text or "hi"}], max_tokens=3
        )
        out = super().trajectories(task, prefix, replies)
        return [t.scored(t.reward, {**t.info, "simulator_said": said}) for t in out]


def _task(workflow: str, reward: str, reward_args: Mapping[str, Any] | None = None) -> Task:
    import json

    fmt = {"prompt_key": "question", "response_key": "answer"}
    if reward_args:
        fmt["reward_fn_args"] = json.dumps(dict(reward_args))
    return Task(
        task_id="t0",
        taskset="train",
        epoch=0,
        index=0,
        payload={"question": "What is 1 + 2?", "answer": 3},
        format=fmt,
        workflow=workflow,
        reward_fn=reward,
        rollout_args={},
        repeat_times=2,
        is_eval=False,
        created_at=0,
    )


def test_a_workflow_reaches_an_auxiliary_model_by_name() -> None:
    engine = create_rollout_engine("hf", RolloutEngineConfig(model=ModelSpec("tiny")))
    roster = _tiny_roster("sim")
    params = SamplingParams(temperature=0.0, max_tokens=4)
    (result,) = run_workflows([_task("auxiliary_echo_test", "math_reward")], engine, params, roster)
    said = roster["sim"].chat(
        [{"role": "user", "content": result.trajectories[0].response_text or "hi"}], max_tokens=3
    )
    assert [t.info["simulator_said"] for t in result.trajectories] == [said, said]
    # without the explorer's roster the workflow has none, and says which name it looked for
    with pytest.raises(ConfigError, match="no auxiliary model named 'sim'"):
        run_workflows([_task("auxiliary_echo_test", "math_reward")], engine, params)


def test_a_judge_reward_is_handed_the_model_it_names_and_reports_its_fallbacks() -> None:
    engine = create_rollout_engine("hf", RolloutEngineConfig(model=ModelSpec("tiny")))
    roster = _tiny_roster("grader")
    args = {"judge_model": "grader", "fallback_reward": -1.0, "max_tokens": 6}
    params = SamplingParams(temperature=0.0, max_tokens=4)
    (result,) = run_workflows([_task("math_workflow", "llm_judge", args)], engine, params, roster)
    for t in result.trajectories:
        # what the judge answered for this response decides the reward, as parse_score reads it
        verdict = roster["grader"].chat(
            judge_messages(
                DEFAULT_RUBRIC,
                "What is 1 + 2?",
                t.response_text,
                "3",
                0.0,
                10.0,
            ),
            max_tokens=6,
        )
        assert t.info["judge_reply"] == verdict
        score = parse_score(verdict, 0.0, 10.0)
        assert t.reward == (-1.0 if score is None else score / 10.0)
        assert t.metrics == {
            "judge_fallback": float(score is None),
            "judge_parse_failure": float(score is None),
            "judge_call_failure": 0.0,
        }


# -- llm_judge -----------------------------------------------------------------------------


class _Judge:
    """A judge that answers with a fixed reply, or fails as an engine does."""

    name = "judge"

    def __init__(self, reply: str | Exception) -> None:
        self.reply = reply
        self.asked: list[Sequence[Mapping[str, Any]]] = []

    def chat(self, messages: Sequence[Mapping[str, Any]], **_: Any) -> str:
        self.asked.append(messages)
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("Score: 7", 7.0),
        ("score is 8/10", 8.0),
        ("The SCORE = 2.5 because ...", 2.5),
        ("I'd say 6.", 6.0),
        ("Score: 11", None),  # out of range
        ("It is between 3 and 4", None),  # two bare numbers: ambiguous
        ("excellent!", None),
        ("", None),
        ("Score: -1", None),
        ("v2 of the answer", None),  # a digit inside a word is no score
    ],
)
def test_parse_score(reply: str, score: float | None) -> None:
    assert parse_score(reply, 0.0, 10.0) == score


def test_a_parsed_verdict_is_scaled_to_the_range() -> None:
    judge = _Judge("Score: 3")
    reward, info = llm_judge(
        "4", {"question": "2+2?", "answer": 4}, auxiliary_model=judge, answer_key="answer",
        min_score=1, max_score=5,
    )  # fmt: skip
    assert reward == (3 - 1) / (5 - 1)
    assert info["judge_score"] == 3.0 and info["judge_fallback"] == 0.0
    prompt = judge.asked[0][-1]["content"]
    assert "Question:\n2+2?" in prompt and "Reference answer:\n4" in prompt
    assert prompt.endswith("`Score: <n>`, n a number from 1 to 5.")


@pytest.mark.parametrize(
    ("reply", "parse_failure", "call_failure"),
    [
        ("no idea", 1.0, 0.0),
        ("Score: 99", 1.0, 0.0),
        (EngineError("http://judge/v1/chat/completions: no answer within the call's timeout"), 0.0, 1.0),
        (EngineError("http://judge/v1/chat/completions: the server answered 500: boom"), 0.0, 1.0),
    ],
)  # fmt: skip
def test_a_bad_verdict_or_a_failed_call_gives_the_fallback_reward(
    reply: str | Exception, parse_failure: float, call_failure: float
) -> None:
    reward, info = llm_judge(
        "x", {"question": "q"}, auxiliary_model=_Judge(reply), fallback_reward=-0.5
    )
    assert reward == -0.5
    assert info["judge_fallback"] == 1.0
    assert info["judge_parse_failure"] == parse_failure
    assert info["judge_call_failure"] == call_failure
    if isinstance(reply, Exception):
        assert str(reply) in str(info["judge_error"])


def test_a_row_without_its_question_is_the_tasks_error_not_a_fallback() -> None:
    with pytest.raises(RewardInputError, match="no key 'prompt'"):
        llm_judge("x", {"question": "q"}, auxiliary_model=_Judge("Score: 1"), question_key="prompt")
    reward, _ = llm_judge("x", {}, auxiliary_model=_Judge("Score: 10"), question_key=None)
    assert reward == 1.0


def test_the_judge_entry_declares_what_it_asks_and_reports() -> None:
    assert REWARD_FUNCTIONS.spec("llm_judge").asks_model == "judge_model"
    assert "judge_fallback" in REWARD_FUNCTIONS.spec("llm_judge").info_metrics


@REWARD_FUNCTIONS.register("asks_a_model_test", replace=True, asks_model="grader")
def _reply_length_by_model(
    response_text: str,
    task_payload: dict[str, Any],
    *,
    auxiliary_model: Any,
    grader: str = "0",
    answer_key: str = "answer",
) -> tuple[float, dict[str, float | str]]:
    said = auxiliary_model.chat([{"role": "user", "content": response_text or "-"}], max_tokens=3)
    return float(len(said)), {"asked": auxiliary_model.name}


def test_a_registered_reward_that_declares_asks_model_is_handed_its_model() -> None:
    engine = create_rollout_engine("hf", RolloutEngineConfig(model=ModelSpec("tiny")))
    roster = _tiny_roster("0")  # named by position, the reward's default
    params = SamplingParams(temperature=0.0, max_tokens=4)
    (result,) = run_workflows([_task("math_workflow", "asks_a_model_test")], engine, params, roster)
    for t in result.trajectories:
        said = roster["0"].chat([{"role": "user", "content": t.response_text or "-"}], max_tokens=3)
        assert t.reward == len(said) and t.info["asked"] == "0"


def test_rescore_refuses_a_reward_that_asks_a_model() -> None:
    from rft.consumers.replay.rescore import Rescorer

    with pytest.raises(ConfigError, match="llm_judge asks an auxiliary model"):
        Rescorer("llm_judge")
