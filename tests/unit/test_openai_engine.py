"""The `openai` rollout engine's pure parts: the request it sends, how it reads answers (and
refuses ones that lack what training needs), and its config checks at load. The engine against a
real server is tests/integration/test_openai_engine.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rft.catalog import load_config
from rft.engines.openai_client import answer_version, completion_body, read_completion
from rft.engines.rollout import ROLLOUT_ENGINES
from rft.errors import ConfigError, EngineError
from tests.unit.config_samples import MINIMAL

SERVER = "explorer.rollout_model.base_url=http://127.0.0.1:1/v1"
RETURNS = "explorer.rollout_model.engine_args.returns_token_ids=true"


def _choice(index: int, prompt: list[int], ids: list[int], lps: list[float]) -> dict[str, Any]:
    return {
        "index": index,
        "text": "".join(chr(97 + i % 26) for i in ids),
        "finish_reason": "length",
        "prompt_token_ids": prompt,
        "token_ids": ids,
        "logprobs": {"token_logprobs": lps, "tokens": [str(i) for i in ids]},
    }


def test_the_body_asks_for_token_ids_and_logprobs_and_carries_every_setting() -> None:
    settings = {"max_tokens": 7, "n": 3, "temperature": 0.7, "top_p": 0.9, "seed": 11}
    body = completion_body("m", [5, 6, 7], settings | {"stop": ("\n",)})
    assert body["prompt"] == [5, 6, 7]
    assert body["return_token_ids"] is True and body["logprobs"] == 0
    assert (body["max_tokens"], body["n"], body["seed"], body["stop"]) == (7, 3, 11, ["\n"])
    assert (body["temperature"], body["top_p"]) == (0.7, 0.9)
    assert "top_k" not in body and "repetition_penalty" not in body  # off: not sent
    shaped = completion_body("m", [1], settings | {"top_k": 5, "stop_token_ids": (2, 3)})
    assert shaped["top_k"] == 5 and shaped["stop_token_ids"] == [2, 3]  # set: sent, never dropped


def test_an_answer_is_read_choice_by_choice_in_index_order() -> None:
    body = {
        "choices": [_choice(1, [1, 2], [9], [-0.5]), _choice(0, [1, 2], [3, 4], [-1.0, -2.0])],
        "model_version": 4,
    }
    answer = read_completion(body, {}, "here")
    assert [r.response_ids for r in answer.replies] == [[3, 4], [9]]
    assert [r.logprobs for r in answer.replies] == [[-1.0, -2.0], [-0.5]]
    assert answer.replies[0].prompt_ids == [1, 2]
    assert answer.version == 4


def test_the_version_is_read_from_body_fingerprint_or_header() -> None:
    assert answer_version({"model_version": 3, "system_fingerprint": "rft-v9"}, {}) == 3
    assert answer_version({"system_fingerprint": "rft-v12"}, {}) == 12
    assert answer_version({"system_fingerprint": "fp_abc"}, {"X-RFT-Model-Version": "5"}) == 5
    assert answer_version({"system_fingerprint": "fp_abc"}, {"content-type": "json"}) is None


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"token_ids": None}, "token_ids: missing"),
        ({"prompt_token_ids": None}, "prompt_token_ids: missing"),
        ({"logprobs": None}, "no token logprobs"),
        ({"logprobs": {"token_logprobs": [-1.0]}}, "1 logprobs for 2 generated tokens"),
    ],
)
def test_an_answer_without_what_training_needs_is_refused(
    change: dict[str, Any], says: str
) -> None:
    choice = _choice(0, [1, 2], [3, 4], [-1.0, -2.0]) | change
    with pytest.raises(EngineError, match=f"srv/completions: choice 0: .*{says}"):
        read_completion({"choices": [choice]}, {}, "srv/completions")
    with pytest.raises(EngineError, match="no choices"):
        read_completion({"choices": []}, {}, "srv/completions")


def _load(tmp_path: Path, *overrides: str) -> Any:
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL, encoding="utf-8")
    return load_config(path, ["explorer.rollout_model.engine_type=openai", *overrides])


def test_the_engine_loads_with_a_server_that_returns_token_ids(tmp_path: Path) -> None:
    cfg = _load(tmp_path, SERVER, RETURNS, "explorer.rollout_model.api_key=sk-x")
    assert cfg.explorer.rollout_model.base_url == "http://127.0.0.1:1/v1"
    assert "sk-x" not in cfg.to_yaml()  # a secret is left out of printed configs
    assert ROLLOUT_ENGINES.spec("openai").loads_weights is False
    assert ROLLOUT_ENGINES.spec("hf").loads_weights is True


def test_the_engine_is_refused_without_token_ids_a_server_or_in_serve_mode(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, SERVER)
    assert "`explorer.rollout_model.engine_args.returns_token_ids`" in str(info.value)
    assert "OpenAIClient.chat" in str(info.value)
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, RETURNS)
    assert "`explorer.rollout_model.base_url`" in str(info.value)
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, SERVER, RETURNS, "mode=serve")
    assert "cannot serve in mode serve" in str(info.value)


def test_server_keys_are_refused_by_an_engine_that_calls_no_server(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, [SERVER, "explorer.rollout_model.api_key=k"])
    assert "`explorer.rollout_model.base_url`" in str(info.value)
    assert "`explorer.rollout_model.api_key`" in str(info.value)
    assert "is not read by engine 'hf'" in str(info.value)


def test_rfts_server_reads_the_extra_settings_the_engine_sends() -> None:
    from rft.serve.api_error import ApiError
    from rft.serve.requests import ServeLimits
    from rft.serve.requests import read_completion as read_request

    limits = ServeLimits("m", max_completion_tokens=8, max_n=4)
    settings = {"max_tokens": 8, "top_k": 5, "min_tokens": 2, "repetition_penalty": 1.2}
    body = completion_body("m", [1, 2], settings | {"stop_token_ids": (7,)})
    params = read_request(body, limits).params
    assert (params.top_k, params.min_tokens, params.repetition_penalty) == (5, 2, 1.2)
    assert params.stop_token_ids == (7,)
    with pytest.raises(ApiError, match="min_tokens must be an integer in"):
        read_request(completion_body("m", [1], {"max_tokens": 2, "min_tokens": 3}), limits)


def test_without_the_openai_package_the_config_names_its_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rft.registry import Requirement

    real = Requirement.missing
    monkeypatch.setattr(Requirement, "missing", lambda self: self.package == "openai" or real(self))
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, SERVER, RETURNS)
    assert "needs the openai package" in str(info.value)
    assert "pip install 'rft[openai]'" in str(info.value)
