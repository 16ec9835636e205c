"""The SmolLM2 chat template with tools: SmolLM2's own text without tools, specs and calls with them.

Rendered with jinja2 set up as transformers sets it up (trim_blocks, lstrip_blocks, a `tojson` that
keeps non-ASCII), compared with the template SmolLM2's tokenizer ships, and once through the real
tokenizer to show the two renderings agree.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jinja2.sandbox import ImmutableSandboxedEnvironment

from rft.tools import TOOL_CHAT_TEMPLATES, tool_chat_template, tool_specs
from rft.tools.call_parsers import parse_hermes
from rft.tools.calls import ToolCall

TEMPLATE = tool_chat_template("smollm2_tools")


def render(template: str, messages, tools=None, add_generation_prompt=False) -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda value, **_: json.dumps(value, ensure_ascii=False)
    return env.from_string(template).render(
        messages=messages, tools=tools, add_generation_prompt=add_generation_prompt
    )


text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="<>"), max_size=40)
chat = st.lists(
    st.tuples(st.sampled_from(["user", "assistant"]), text).map(
        lambda p: {"role": p[0], "content": p[1]}
    ),
    min_size=1,
    max_size=5,
)


@pytest.fixture(scope="module")
def tokenizer():
    """SmolLM2's tokenizer: from a converted cache directory when there is one, else the GGUF."""
    models = pytest.importorskip("rft.engines.models")
    from transformers import AutoTokenizer

    cached = sorted(Path(models.cache_root()).glob("smollm2-*/complete"))
    if cached:
        return AutoTokenizer.from_pretrained(str(cached[0].parent), local_files_only=True)
    try:
        gguf = models.smollm2_gguf_path()
    except Exception as exc:  # the package is optional; say why the real-tokenizer check is skipped
        pytest.skip(f"no SmolLM2 tokenizer here: {exc}")
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


@given(messages=chat, system=st.none() | text, generation=st.booleans())
def test_without_tools_it_renders_as_smollm2s_own_template(tokenizer, messages, system, generation):
    if system is not None:
        messages = [{"role": "system", "content": system}, *messages]
    own = render(tokenizer.chat_template, messages, None, generation)
    assert render(TEMPLATE, messages, None, generation) == own


def test_tools_are_offered_in_the_system_turn():
    specs = tool_specs(["calculator", "python"])
    out = render(TEMPLATE, [{"role": "user", "content": "hi"}], specs, True)
    system = out.split("<|im_end|>")[0]
    listed = system.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert [json.loads(line) for line in listed] == specs
    assert out.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["calculator", "python"]),
            st.dictionaries(st.sampled_from(["expression", "code"]), text, max_size=2),
            st.booleans(),
        ),
        min_size=1,
        max_size=3,
    ),
    text,
)
def test_assistant_calls_render_as_blocks_the_hermes_parser_reads_back(calls, content):
    tool_calls = [
        {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args) if as_text else args},
        }
        for i, (name, args, as_text) in enumerate(calls)
    ]
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": content, "tool_calls": tool_calls},
    ]
    out = render(TEMPLATE, messages, tool_specs(["calculator"]))
    reply = out.split("<|im_start|>assistant\n")[1].removesuffix("<|im_end|>\n")
    parsed = parse_hermes(reply)
    assert parsed.content == content.strip()
    assert all(isinstance(c, ToolCall) for c in parsed.calls)
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == [
        (name, args) for name, args, _ in calls
    ]


def test_consecutive_tool_results_share_one_user_turn():
    messages = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "calculator", "arguments": {"expression": "1"}},
                },
                {
                    "type": "function",
                    "function": {"name": "calculator", "arguments": {"expression": "2"}},
                },
            ],
        },
        {"role": "tool", "content": "1"},
        {"role": "tool", "content": "2"},
        {"role": "assistant", "content": "done"},
        {"role": "tool", "content": "3"},
    ]
    out = render(TEMPLATE, messages)
    turns = out.split("<|im_start|>")[1:]
    assert [t.split("\n", 1)[0] for t in turns] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert (
        turns[3]
        == "user\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response><|im_end|>\n"
    )
    assert turns[2].startswith("assistant\n<tool_call>\n")  # no blank line before the first call
    assert turns[5] == "user\n<tool_response>\n3\n</tool_response><|im_end|>\n"


def test_the_smollm2_tokenizer_renders_the_same_text_and_tokenizes_the_markers(tokenizer):
    messages = [
        {"role": "system", "content": "Use tools. Ünïcode stays."},
        {"role": "user", "content": "What is 4821 * 937?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "calculator", "arguments": {"expression": "4821 * 937"}},
                },
            ],
        },
        {"role": "tool", "content": "4517277"},
    ]
    specs = tool_specs(["calculator"])
    by_tokenizer = tokenizer.apply_chat_template(
        messages, tools=specs, chat_template=TEMPLATE, tokenize=False, add_generation_prompt=True
    )
    assert by_tokenizer == render(TEMPLATE, messages, specs, True)
    ids = tokenizer.apply_chat_template(
        messages, tools=specs, chat_template=TEMPLATE, tokenize=True, add_generation_prompt=True
    )
    if hasattr(ids, "keys"):  # newer transformers return a BatchEncoding
        ids = ids["input_ids"]
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert list(ids).count(im_start) == 5  # system, user, assistant, tool results, generation
    assert TOOL_CHAT_TEMPLATES.names() == ["smollm2_tools"]
