"""Reading tool calls from replies (hermes) and answering every call, good or bad, without raising."""

from __future__ import annotations

import json
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rft.errors import ConfigError
from rft.tools import (
    OUTCOMES,
    TOOL_CALL_PARSERS,
    MalformedCall,
    ToolCall,
    ToolExecutor,
    make_tool,
)
from rft.tools.call_parsers import parse_hermes

names = st.from_regex(r"[a-z][a-z_]{0,11}", fullmatch=True)
scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=10)
argument_dicts = st.dictionaries(st.text(max_size=6), scalars, max_size=3)
plain_text = st.text(max_size=30).filter(
    lambda t: "<tool_call>" not in t and "</tool_call>" not in t
)


@given(st.lists(st.one_of(plain_text, st.tuples(names, argument_dicts)), max_size=6))
def test_calls_come_back_in_order_with_the_text_around_them_as_content(pieces):
    reply = ""
    expected_calls = []
    expected_text = ""
    for piece in pieces:
        if isinstance(piece, tuple):
            name, arguments = piece
            block = json.dumps({"name": name, "arguments": arguments})
            reply += f"<tool_call>\n{block}\n</tool_call>"
            expected_calls.append((name, arguments))
        else:
            reply += piece
            expected_text += piece
    parsed = TOOL_CALL_PARSERS.get("hermes")(reply)
    assert parsed.content == expected_text.strip()
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == expected_calls
    assert len({c.call_id for c in parsed.calls}) == len(parsed.calls)


def test_malformed_blocks_are_reported_not_dropped():
    reply = (
        "Start <tool_call>{not json}</tool_call> a "
        '<tool_call>["calculator"]</tool_call> b '
        '<tool_call>{"arguments": {}}</tool_call> c '
        '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call> end '
        '<tool_call>{"name": "calculator"'
    )
    parsed = parse_hermes(reply)
    kinds = [type(c).__name__ for c in parsed.calls]
    assert kinds == ["MalformedCall", "MalformedCall", "MalformedCall", "ToolCall", "MalformedCall"]
    bad = [c for c in parsed.calls if isinstance(c, MalformedCall)]
    assert "not valid JSON" in bad[0].reason
    assert "one JSON object, not array" in bad[1].reason
    assert 'no "name"' in bad[2].reason
    assert "never closed" in bad[3].reason
    assert bad[3].text == '<tool_call>{"name": "calculator"'
    assert parsed.content == "Start  a  b  c  end"


def test_arguments_given_as_json_text_are_kept_as_text():
    call = parse_hermes('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>').calls[
        0
    ]
    assert isinstance(call, ToolCall)
    assert json.loads(call.arguments) == {"a": 1}
    assert call.openai_form()["function"]["arguments"] == {"a": 1}


# --- the executor --------------------------------------------------------------------------------

release = threading.Event()


def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(reason)


def stall() -> str:
    """Waits until the test releases it."""
    release.wait(60)
    return "late"


def flood(size: int) -> str:
    """Returns `size` characters."""
    return "x" * size


def quit_process() -> str:
    """Calls sys.exit."""
    raise SystemExit(3)


def opaque() -> object:
    """Returns something that is not JSON."""
    return object()


@pytest.fixture
def executor():
    release.clear()
    tools = [
        make_tool(fn.__name__, fn) for fn in (add, explode, stall, flood, quit_process, opaque)
    ]
    yield ToolExecutor(tools, timeout_s=0.5, max_result_chars=1000)
    release.set()


def call(name: str, arguments: str) -> ToolCall:
    return ToolCall(name, arguments, "call_7")


def test_a_good_call_returns_the_value_as_json_text(executor):
    result = executor.execute(call("add", '{"a": 2, "b": 40}'))
    assert (result.outcome, result.content) == ("ok", json.dumps(42))
    assert result.message() == {
        "role": "tool",
        "name": "add",
        "tool_call_id": "call_7",
        "content": "42",
    }


def test_each_bad_call_becomes_a_message_and_an_outcome(executor):
    results = {
        "malformed": executor.execute(MalformedCall("<tool_call>{x}", "the block is bad", "c")),
        "unknown": executor.execute(call("addd", '{"a": 1}')),
        "unknown_far": executor.execute(call("weather", "{}")),
        "bad_json": executor.execute(call("add", '{"a": 1,')),
        "not_object": executor.execute(call("add", "[1, 2]")),
        "missing": executor.execute(call("add", '{"b": 1}')),
        "wrong_type": executor.execute(call("add", '{"a": "one"}')),
        "extra": executor.execute(call("add", '{"a": 1, "c": 2}')),
        "raises": executor.execute(call("explode", '{"reason": "boom"}')),
        "exits": executor.execute(call("quit_process", "{}")),
        "hangs": executor.execute(call("stall", "{}")),
        "floods": executor.execute(call("flood", '{"size": 5000000}')),
        "opaque": executor.execute(call("opaque", "{}")),
    }
    outcome = {key: r.outcome for key, r in results.items()}
    assert outcome == {
        "malformed": "malformed_call",
        "unknown": "unknown_tool",
        "unknown_far": "unknown_tool",
        "bad_json": "invalid_arguments",
        "not_object": "invalid_arguments",
        "missing": "invalid_arguments",
        "wrong_type": "invalid_arguments",
        "extra": "invalid_arguments",
        "raises": "tool_error",
        "exits": "tool_error",
        "hangs": "timeout",
        "floods": "truncated",
        "opaque": "tool_error",
    }
    text = {key: r.content for key, r in results.items()}
    assert "the block is bad" in text["malformed"]
    assert "did you mean 'add'?" in text["unknown"]
    assert "did you mean" not in text["unknown_far"]
    assert (
        "Available tools: add, explode, flood, opaque, quit_process, stall." in text["unknown_far"]
    )
    assert "not valid JSON" in text["bad_json"]
    assert "must be a JSON object, not array" in text["not_object"]
    assert "missing the required property 'a'" in text["missing"]
    assert 'arguments.a must be integer, got string "one"' in text["wrong_type"]
    assert "unexpected property 'c'" in text["extra"]
    assert "ValueError: boom" in text["raises"]
    assert "SystemExit: 3" in text["exits"]
    assert "did not finish within 0.5 s" in text["hangs"]
    assert text["floods"].startswith("x" * 1000 + "\n")
    assert text["floods"].endswith(
        f"[tool output truncated: {5000000 - 1000} more characters not shown]"
    )
    assert "neither text nor JSON" in text["opaque"]
    for result in results.values():
        assert result.outcome in OUTCOMES
        assert result.content.startswith("Error: ") or result.outcome == "truncated"


@given(
    st.text(max_size=200) | st.builds(lambda s: f"<tool_call>{s}</tool_call>", st.text(max_size=60))
)
def test_no_reply_text_makes_the_executor_raise(reply):
    executor = ToolExecutor([make_tool("add", add)], timeout_s=5)
    for parsed_call in parse_hermes(reply).calls:
        assert executor.execute(parsed_call).outcome in OUTCOMES


def test_offering_refuses_unknown_tools_naming_the_key():
    with pytest.raises(
        ConfigError, match=r"unknown taskset\.tools 'calculater'; did you mean 'calculator'"
    ):
        ToolExecutor.offering(["calculater"], key="taskset.tools")


def test_the_docs_list_of_bad_calls_is_what_the_executor_answers():
    """docs/tool-calls.md is rendered from the catalogue run through the real parser and
    executor; every kind of bad input is answered with an error message and a non-ok outcome."""
    from pathlib import Path

    from rft.tools import bad_calls

    page = bad_calls.render()
    root = Path(__file__).resolve().parents[2]
    committed = (root / bad_calls.PAGE_PATH).read_text(encoding="utf-8")
    assert committed == page, (
        f"{bad_calls.PAGE_PATH} is stale: run `python -m rft.tools.bad_calls > "
        f"{bad_calls.PAGE_PATH}`"
    )
    seen = bad_calls.outcomes()
    assert len(seen) == len(bad_calls.CASES)
    (good, *bad) = seen
    assert [r.outcome for r in good[1]] == ["ok"]
    for case, results in bad:
        assert len(results) == 1, case.what
        (result,) = results
        assert result.outcome in OUTCOMES and result.outcome != "ok", case.what
        assert result.content.startswith("Error: ") or result.outcome == "truncated", case.what
    assert {r.outcome for _, results in bad for r in results} == set(OUTCOMES) - {"ok"}
