"""DirectModelHandle over the real HF engine (tiny model): a turn's replies come from the ids fed,
and a chat with tools renders through the template's tools section."""

from __future__ import annotations

from rft.engines.models import ModelSpec
from rft.engines.rollout import ROLLOUT_ENGINES, RolloutEngineConfig, SamplingParams
from rft.tools.chat_templates import tool_chat_template_path
from rft.workflows.model_handle import DirectModelHandle


def test_direct_handle_generates_from_the_ids_it_is_fed() -> None:
    engine = ROLLOUT_ENGINES.get("hf")(RolloutEngineConfig(model=ModelSpec("tiny")))
    handle = DirectModelHandle(engine)
    ids = handle.chat_ids([{"role": "user", "content": "hi"}])
    replies = handle.generate(ids, SamplingParams(max_tokens=4, n=2, seed=1))
    assert len(replies) == 2
    for reply in replies:
        assert list(reply.prompt_ids) == ids
        assert len(reply.logprobs) == len(reply.response_ids) > 0
    assert handle.model_version == engine.model_version


def test_tools_reach_the_template() -> None:
    engine = ROLLOUT_ENGINES.get("hf")(RolloutEngineConfig(model=ModelSpec("tiny")))
    handle = DirectModelHandle(engine)
    template = tool_chat_template_path("smollm2_tools").read_text(encoding="utf-8")
    spec = {
        "type": "function",
        "function": {"name": "calculator", "description": "d", "parameters": {"type": "object"}},
    }
    chat = [{"role": "user", "content": "2+2?"}]
    plain = handle.chat_ids(chat, chat_template=template)
    offered = handle.chat_ids(chat, tools=[spec], chat_template=template)
    assert len(offered) > len(plain)
    assert "calculator" in handle.tokenizer.decode(offered)
