"""Dataset rows rendered for `sft` and `cpt` (rft.buffer.sft_rows) and published as experiences
(rft.producers.dataset_publisher), with the SFT loss under a mask against a float64 reference.

The chat masks are checked two independent ways: by decoding the trained tokens back to the
assistant's text, and by a template that marks the assistant's tokens itself (transformers'
assistant mask), which must agree with the turn-by-turn rendering."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rft.algorithms.aggregation import LOSS_AGG_MODES
from rft.algorithms.policy_losses import POLICY_LOSS_FN
from rft.buffer.sft_rows import SFT_ROW_RENDERERS, RenderContext, assistant_mask, conversation
from rft.config.schema import ExperienceBufferConfig, FormatConfig
from rft.engines.models import build_byte_tokenizer
from rft.errors import TasksetError
from rft.producers.dataset_publisher import dataset_events, render_dataset

CHAT = [
    {"role": "system", "content": "Use the calculator."},
    {"role": "user", "content": "What is 12 * 34?"},
    {"role": "assistant", "content": "CALL 12*34"},
    {"role": "tool", "content": "408"},
    {"role": "assistant", "content": "Answer: 408"},
]
MESSAGES = FormatConfig(prompt_type="messages", messages_key="messages")


@pytest.fixture(scope="module")
def context() -> RenderContext:
    return RenderContext(build_byte_tokenizer(), max_prompt_tokens=400, max_response_tokens=200)


def segments(tok, ids: list[int], mask: list[int]) -> list[tuple[int, str]]:
    """Runs of equal mask value, decoded."""
    out: list[tuple[int, list[int]]] = []
    for i, m in zip(ids, mask, strict=True):
        if not out or out[-1][0] != m:
            out.append((m, []))
        out[-1][1].append(i)
    return [(m, tok.decode(run)) for m, run in out]


def test_chat_rows_train_only_the_assistant_turns(context: RenderContext) -> None:
    [row] = SFT_ROW_RENDERERS.get("chat")({"messages": CHAT}, "r:1", MESSAGES, context)
    tok = context.tokenizer
    trained = [text for m, text in segments(tok, row.response_ids, row.mask) if m]
    untrained = [text for m, text in segments(tok, row.response_ids, row.mask) if not m]
    # each assistant turn's text and its end-of-turn, nothing of the other roles
    assert [t.split("<|im_end|>")[0] for t in trained] == ["CALL 12*34", "Answer: 408"]
    assert all("408" not in t or t.startswith("Answer") for t in trained)
    assert len(untrained) == 1 and "408" in untrained[0] and "tool" in untrained[0]
    # the prompt is all before the first assistant token: system, user, generation prompt
    prompt = tok.decode(row.prompt_ids)
    assert "Use the calculator." in prompt and "What is 12 * 34?" in prompt
    assert "CALL" not in prompt and prompt.rstrip().endswith("assistant")
    # prompt + response is the whole rendered conversation
    whole = tok.apply_chat_template(CHAT, tokenize=True, return_dict=False)
    assert row.prompt_ids + row.response_ids == [int(i) for i in whole]
    assert not row.truncated


def test_prompt_response_rows_are_a_three_turn_chat(context: RenderContext) -> None:
    fmt = FormatConfig(prompt_key="q", response_key="a", system_prompt="Be brief.")
    [row] = SFT_ROW_RENDERERS.get("chat")({"q": "2+2?", "a": "4"}, "r:2", fmt, context)
    same = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
    ]
    [ref] = SFT_ROW_RENDERERS.get("chat")({"messages": same}, "r:2", MESSAGES, context)
    assert (row.prompt_ids, row.response_ids, row.mask) == (
        ref.prompt_ids,
        ref.response_ids,
        ref.mask,
    )
    assert all(row.mask)  # a single assistant turn: the whole response is trained


# ChatML whose assistant turns are wrapped in {% generation %}: the template marks them itself
GENERATION_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}<|im_start|>assistant\n"
    "{% generation %}{{ m['content'] }}<|im_end|>\n{% endgeneration %}"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_template_with_generation_blocks_agrees_with_turn_by_turn_rendering(
    context: RenderContext,
) -> None:
    marked = RenderContext(context.tokenizer, 400, 200, chat_template=GENERATION_TEMPLATE)
    ids, mask = assistant_mask(CHAT, "r:3", marked)
    # the same template without the markers goes the turn-by-turn way
    plain = GENERATION_TEMPLATE.replace("{% generation %}", "").replace("{% endgeneration %}", "")
    ids2, mask2 = assistant_mask(CHAT, "r:3", RenderContext(context.tokenizer, 400, 200, plain))
    assert ids == ids2 and mask == mask2 and sum(mask) > 0


def test_a_template_that_rewrites_earlier_turns_is_refused_by_row(
    context: RenderContext,
) -> None:
    # earlier assistant turns are dropped once a later one follows (as reasoning templates do)
    rewriting = (
        "{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}"
        "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    bad = RenderContext(context.tokenizer, 400, 200, chat_template=rewriting)
    with pytest.raises(TasksetError, match=r"r:4: the chat template renders earlier turns"):
        assistant_mask(CHAT, "r:4", bad)


@pytest.mark.parametrize(
    ("payload", "fmt", "message"),
    [
        ({"messages": CHAT[:-1]}, MESSAGES, "r:5: the last message must be the assistant's"),
        ({"messages": "hi"}, MESSAGES, "r:5: 'messages' must be a list of messages"),
        ({"q": "x"}, FormatConfig(prompt_key="q", response_key="a"), "r:5: response_key 'a'"),
    ],
)
def test_unusable_rows_name_their_origin(
    payload: dict, fmt: FormatConfig, message: str, context: RenderContext
) -> None:
    with pytest.raises(TasksetError, match=message):
        SFT_ROW_RENDERERS.get("chat")(payload, "r:5", fmt, context)


def test_long_chats_keep_the_prompt_tail_and_the_response_head(context: RenderContext) -> None:
    short = RenderContext(context.tokenizer, max_prompt_tokens=10, max_response_tokens=6)
    [row] = SFT_ROW_RENDERERS.get("chat")({"messages": CHAT}, "r:6", MESSAGES, short)
    [full] = SFT_ROW_RENDERERS.get("chat")({"messages": CHAT}, "r:6", MESSAGES, context)
    assert row.truncated
    assert row.prompt_ids == full.prompt_ids[-10:]
    assert (row.response_ids, row.mask) == (full.response_ids[:6], full.mask[:6])


def test_text_rows_train_every_token_but_the_first_once(context: RenderContext) -> None:
    small = RenderContext(context.tokenizer, max_prompt_tokens=4, max_response_tokens=7)
    text = "The quick brown fox jumps over the lazy dog."
    windows = SFT_ROW_RENDERERS.get("text")(
        {"body": text}, "r:7", FormatConfig(text_key="body"), small
    )
    tok = context.tokenizer
    ids = [int(i) for i in tok(text)["input_ids"]] + [tok.eos_token_id]
    assert len(windows) == -(-(len(ids) - 1) // 7)
    assert [i for w in windows for i in w.response_ids] == ids[1:]
    for k, w in enumerate(windows):
        assert w.prompt_ids == [ids[7 * k]] and all(w.mask) and len(w.response_ids) <= 7
    with pytest.raises(TasksetError, match="r:8: text_key 'body' missing"):
        SFT_ROW_RENDERERS.get("text")({"text": text}, "r:8", FormatConfig(text_key="body"), small)


def test_conversation_keeps_role_and_content_only() -> None:
    chat = [{"role": "user", "content": "a", "name": "x"}, {"role": "assistant", "content": "b"}]
    assert conversation({"messages": chat}, "r:9", MESSAGES) == [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
    ]


def test_published_events_cover_each_epoch_once_in_a_seeded_shuffle(
    tmp_path: Path, context: RenderContext
) -> None:
    path = tmp_path / "chats.jsonl"
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"{i}?"},
                {"role": "assistant", "content": str(i)},
            ]
        }
        for i in range(6)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    buffer = ExperienceBufferConfig(name="ds", storage_type="file", path=str(path), format=MESSAGES)
    dataset = render_dataset(buffer, "chat", context)
    events = dataset_events(dataset, epochs=2, seed=3)
    assert len(events) == 12
    for epoch in range(2):
        ids = [e.experience_id for e in events[6 * epoch : 6 * epoch + 6]]
        assert sorted(ids) == [f"ds:{epoch}:{i}" for i in range(6)]
    assert [e.experience_id.split(":")[2] for e in events[:6]] != [
        e.experience_id.split(":")[2] for e in events[6:]
    ]
    for e in events:
        index = int(e.experience_id.split(":")[2])
        row = dataset.rows[index][0]
        assert list(e.response_ids) == row.response_ids and list(e.action_mask) == row.mask
        assert e.group_size == 1 and e.group_id == e.experience_id and e.reward == 0.0
    again = dataset_events(dataset, epochs=2, seed=3)  # reproducible
    assert [e.experience_id for e in again] == [e.experience_id for e in events]


def test_a_bad_row_publishes_nothing(tmp_path: Path, context: RenderContext) -> None:
    path = tmp_path / "chats.jsonl"
    path.write_text(
        json.dumps({"messages": CHAT}) + "\n" + json.dumps({"messages": CHAT[:2]}) + "\n"
    )
    buffer = ExperienceBufferConfig(name="ds", storage_type="file", path=str(path), format=MESSAGES)
    with pytest.raises(TasksetError, match=r"1 unusable row\(s\).*nothing published"):
        render_dataset(buffer, "chat", context)
    kept = render_dataset(buffer, "chat", context, on_bad_rows="skip-and-report")
    assert len(kept.rows) == 1 and len(kept.bad_rows) == 1


@pytest.mark.parametrize("mode", sorted(LOSS_AGG_MODES.names()))
def test_sft_loss_under_a_mask_matches_a_float64_reference(mode: str) -> None:
    rng = np.random.default_rng(7)
    lp = -rng.random((4, 6)) * 3
    mask = (rng.random((4, 6)) > 0.4).astype(np.int64)
    mask[2] = 0  # a row with nothing to train
    logprob = torch.tensor(lp, dtype=torch.float64, requires_grad=True)
    loss, _ = POLICY_LOSS_FN.get("sft")(logprob, None, None, torch.tensor(mask), mode)
    rows = [r for r in range(4) if mask[r].sum() > 0]
    if mode == "token-mean":
        want = sum(-lp[r, t] for r in range(4) for t in range(6) if mask[r, t]) / mask.sum()
    else:
        per_row = {
            "seq-mean-token-sum": lambda r: sum(-lp[r, t] for t in range(6) if mask[r, t]),
            "seq-mean-token-mean": lambda r: (
                sum(-lp[r, t] for t in range(6) if mask[r, t]) / mask[r].sum()
            ),
            "seq-mean-token-sum-norm": lambda r: sum(-lp[r, t] for t in range(6) if mask[r, t]) / 6,
        }[mode]
        want = sum(per_row(r) for r in rows) / len(rows)
    assert loss.item() == pytest.approx(want, rel=1e-12)
    loss.backward()
    assert logprob.grad is not None
    assert torch.all(logprob.grad[torch.tensor(mask) == 0] == 0)  # masked tokens get no gradient
