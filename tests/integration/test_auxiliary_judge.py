"""An explorer step whose rewards come from a judge: `explorer.auxiliary_models` names a judge of
`engine_type: openai` (the real `openai` client) whose `base_url` is a real rft serve endpoint
process on the real stack, and the taskset's reward is `llm_judge`. Every rollout's judge call is
on the server's calls topic; each experience's reward is the server's answer as `parse_score`
reads it (or the fallback), and the step's metrics count the calls and the fallbacks. The judge
is frozen: the explorer loads no weights into it, and it answers whatever the policy's version."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from rft.config.connections import StackSettings
from rft.consumers.run_plan import RunPlan
from rft.events.models import Metric, ServeCall
from rft.rewards.llm_judge import parse_score
from tests.integration.test_replay_engine_rerun import ROWS, experiences, explore
from tests.integration.test_rft_loop import read_all
from tests.integration.test_serve import KEY, events_of, make_server

pytestmark = pytest.mark.integration

FALLBACK = -1.0


@pytest.mark.parametrize(
    "judge_model",
    [
        # a random tiny judge: its replies hold no score, so every reward is the fallback
        "tiny",
        # SmolLM2-135M-Instruct: some replies hold a score, which becomes the reward (seen: 2
        # of 6 parsed, rewards 0.7 and 0.3, the rest fell back)
        pytest.param("smollm2", marks=pytest.mark.slow),
    ],
)
def test_an_explorer_step_is_scored_by_a_judge_behind_a_serve_endpoint(
    stack: StackSettings, unique: str, tmp_path: Path, judge_model: str
) -> None:
    srv = make_server(tmp_path, stack, unique, api_key=KEY)
    served = yaml.safe_load(srv.config.read_text())
    served["model"]["model_path"] = judge_model
    srv.config.write_text(yaml.safe_dump(served))
    srv.start()
    try:
        name = unique + "-judged"
        taskset = "buffer.explorer_input.taskset"
        cfg = explore(
            stack,
            tmp_path,
            name,
            sections={
                "explorer": {
                    "auxiliary_models": [
                        {"name": "judge", "engine_type": "openai", "base_url": srv.url,
                         "api_key": KEY},
                    ]
                },
                taskset: {
                    "default_reward_fn_type": "llm_judge",
                    "reward_fn_args": {"fallback_reward": FALLBACK, "max_tokens": 8},
                },
            },
        )  # fmt: skip
    finally:
        srv.stop()

    exps = experiences(cfg, name + "-read")
    assert len(exps) == len(ROWS) * 2
    judged = [
        c
        for c in events_of(srv, "serve-calls", unique, ServeCall)
        if c.endpoint == "chat.completions"
    ]
    assert len(judged) == len(exps), "one judge call per rollout"
    for exp in exps:
        # the calls that judged this response: their chat holds it, with the reference answer
        asked = [
            c.request["messages"][-1]["content"]
            for c in judged
            if f"Response:\n{exp.response_text}\n\nReply with"
            in c.request["messages"][-1]["content"]
        ]
        assert asked, f"no judge call for {exp.response_text!r}"
        assert all("Reference answer:\n" in text for text in asked)
        verdicts = {
            c.choices[0].text
            for c in judged
            if f"Response:\n{exp.response_text}\n\nReply with"
            in c.request["messages"][-1]["content"]
        }
        assert verdicts == {exp.info["judge_reply"]}  # a greedy judge: one verdict per chat
        score = parse_score(str(exp.info["judge_reply"]), 0.0, 10.0)
        assert exp.reward == pytest.approx(FALLBACK if score is None else score / 10.0)
        assert float(exp.info["judge_fallback"]) == float(score is None)

    fallbacks = sum(float(e.info["judge_fallback"]) for e in exps) / len(exps)
    topic = RunPlan(cfg).topics.metrics
    steps = [
        m.values
        for m in read_all(cfg, topic, f"{unique}-metrics-{time.time_ns()}")
        if isinstance(m, Metric) and "auxiliary_judge_calls" in m.values
    ]
    assert len(steps) == 1
    assert steps[0]["auxiliary_judge_calls"] == len(exps)
    assert steps[0]["auxiliary_judge_failed_calls"] == 0.0
    assert steps[0]["judge_fallback_mean"] == pytest.approx(fallbacks)
