"""Dataset rows rendered into what the trainer trains: prompt ids, response ids and a train mask.

The algorithms that train on a dataset (`sft`, `cpt`, `dpo`) name a renderer here by their preset's
`dataset` trait (the SFT_ROW_RENDERERS registry). A renderer turns one row into one or more
RenderedRows; a row it cannot use raises TasksetError naming the row's origin.

- `chat` (sft): a conversation, either a `messages` list (`format.prompt_type: messages`, its
  `messages_key`) or a prompt/response row (`prompt_key`, `response_key`, with `system_prompt` or
  `system_prompt_key`), rendered with the chat template. Only the assistant's tokens are trained.
  They are found through the template: one that marks them itself (`{% generation %}` blocks) is
  asked for its assistant mask (transformers' `return_assistant_tokens_mask`); any other is
  rendered turn by turn, and an assistant turn's tokens are those its rendering adds after the
  generation prompt of the turns before it (its text and end-of-turn tokens). The prompt is
  everything before the first assistant token; user and tool turns after it stay in the
  response with mask 0, as a multi-turn rollout's environment tokens do.
- `pair` (dpo): a preference pair, the prompt (`prompt_key` text, or the `messages_key` list
  with prompt_type messages) and two responses under `chosen_key` and `rejected_key`, each a
  text or a list of messages (the whole conversation, prompt included, is accepted too). Each
  side is rendered as a `chat` row; the two rows form one group (the entry's trait `grouped`),
  the chosen one with reward 1 and the rejected one with reward 0.
- `text` (cpt): the row's `text_key`, tokenized (the tokenizer's special tokens, then EOS), cut
  into windows of max_response_tokens + 1 tokens that overlap by one: a window's first token is
  its prompt, so every token but the text's first is trained exactly once.

Prompts longer than max_prompt_tokens keep their last tokens (a chat's response is cut at
max_response_tokens instead); RenderedRow.truncated says which rows lost tokens.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rft.config.binding import Issue
from rft.config.schema import FormatConfig
from rft.errors import TasksetError
from rft.registry import PartSpec, Registry


@dataclass(frozen=True)
class RenderContext:
    """What renderers need besides the row: the tokenizer, the template and the length limits."""

    tokenizer: Any
    max_prompt_tokens: int
    max_response_tokens: int
    chat_template: str | None = None  # None: the tokenizer's own


@dataclass(frozen=True)
class RenderedRow:
    """One trainable sequence: `mask` has one 0/1 per response id (1: the loss covers it).
    `reward` is what its event carries (a pair's chosen response 1, its rejected one 0)."""

    prompt_ids: list[int]
    response_ids: list[int]
    mask: list[int]
    truncated: bool = False
    reward: float = 0.0


Renderer = Callable[[Mapping[str, Any], str, FormatConfig, RenderContext], list[RenderedRow]]


@dataclass(frozen=True)
class RendererSpec(PartSpec):
    """`grouped`: the renderer makes several rows of one dataset row (a chosen and a rejected
    response), published as one group."""

    grouped: bool = False


SFT_ROW_RENDERERS: Registry[Renderer, RendererSpec] = Registry("dataset renderer", RendererSpec)


def conversation(
    payload: Mapping[str, Any], origin: str, fmt: FormatConfig
) -> list[dict[str, str]]:
    """The row as chat messages (role and content), ending with an assistant message."""
    if fmt.prompt_type == "messages":
        chat = payload.get(fmt.messages_key)
        if (
            not isinstance(chat, list)
            or not chat
            or not all(isinstance(m, Mapping) and isinstance(m.get("content"), str) for m in chat)
        ):
            raise TasksetError(f"{origin}: {fmt.messages_key!r} must be a list of messages")
        if chat[-1].get("role") != "assistant":
            raise TasksetError(f"{origin}: the last message must be the assistant's response")
        return [{"role": str(m["role"]), "content": str(m["content"])} for m in chat]
    question, answer = payload.get(fmt.prompt_key), payload.get(fmt.response_key)
    if not isinstance(question, str) or not question.strip():
        raise TasksetError(f"{origin}: prompt_key {fmt.prompt_key!r} missing or empty")
    if answer is None or not str(answer).strip():
        raise TasksetError(f"{origin}: response_key {fmt.response_key!r} missing or empty")
    system = payload.get(fmt.system_prompt_key) if fmt.system_prompt_key else fmt.system_prompt
    head = [{"role": "system", "content": str(system)}] if system else []
    return [
        *head,
        {"role": "user", "content": question},
        {"role": "assistant", "content": str(answer)},
    ]


_GENERATION_BLOCK = re.compile(r"\{%-?\s*generation\s*-?%\}")


def _template(context: RenderContext) -> str | None:
    return context.chat_template or getattr(context.tokenizer, "chat_template", None)


def _render(
    context: RenderContext, messages: list[dict[str, str]], generation_prompt: bool
) -> list[int]:
    ids = context.tokenizer.apply_chat_template(
        messages,
        add_generation_prompt=generation_prompt,
        tokenize=True,
        return_dict=False,
        chat_template=context.chat_template,
    )
    return [int(i) for i in ids]


def assistant_mask(
    messages: list[dict[str, str]], origin: str, context: RenderContext
) -> tuple[list[int], list[int]]:
    """(token ids of the whole conversation, 1 on the assistant's tokens) by the chat template."""
    template = _template(context)
    if template and _GENERATION_BLOCK.search(template):
        out = context.tokenizer.apply_chat_template(
            messages,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
            chat_template=context.chat_template,
        )
        return [int(i) for i in out["input_ids"]], [int(m) for m in out["assistant_masks"]]
    full = _render(context, messages, False)
    mask = [0] * len(full)
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        if i == 0:
            raise TasksetError(f"{origin}: the conversation starts with an assistant message")
        before = _render(context, messages[:i], True)
        through = _render(context, messages[: i + 1], False)
        if through[: len(before)] != before or full[: len(through)] != through:
            raise TasksetError(
                f"{origin}: the chat template renders earlier turns differently once later "
                f"turns follow (at message {i}), so the assistant's tokens cannot be located; "
                "use a template with {% generation %} blocks"
            )
        mask[len(before) : len(through)] = [1] * (len(through) - len(before))
    return full, mask


def rendered_conversation(
    messages: list[dict[str, str]], origin: str, context: RenderContext, reward: float = 0.0
) -> RenderedRow:
    """prompt = the tokens before the first assistant token; mask = the assistant's tokens."""
    ids, mask = assistant_mask(messages, origin, context)
    if 1 not in mask:
        raise TasksetError(f"{origin}: the assistant's turns render to no tokens")
    first = mask.index(1)
    prompt, response, kept = ids[:first], ids[first:], mask[first:]
    limit_p, limit_r = context.max_prompt_tokens, context.max_response_tokens
    truncated = len(prompt) > limit_p or len(response) > limit_r
    prompt, response, kept = prompt[-limit_p:], response[:limit_r], kept[:limit_r]
    return RenderedRow(prompt, response, kept, truncated, reward)


@SFT_ROW_RENDERERS.register("chat")
def render_chat(
    payload: Mapping[str, Any], origin: str, fmt: FormatConfig, context: RenderContext
) -> list[RenderedRow]:
    """One row: the conversation with its assistant tokens trained."""
    return [rendered_conversation(conversation(payload, origin, fmt), origin, context)]


def preference_prompt(
    payload: Mapping[str, Any], origin: str, fmt: FormatConfig
) -> list[dict[str, str]]:
    """The messages both responses of a pair answer: the `messages_key` list (prompt_type
    messages; None or absent when chosen and rejected are whole conversations), or the
    `prompt_key` text as a user message after the system prompt."""
    if fmt.prompt_type == "messages":
        chat = payload.get(fmt.messages_key)
        if chat is None:
            return []
        if not isinstance(chat, list) or not all(
            isinstance(m, Mapping) and isinstance(m.get("content"), str) for m in chat
        ):
            raise TasksetError(f"{origin}: {fmt.messages_key!r} must be a list of messages")
        return [{"role": str(m["role"]), "content": str(m["content"])} for m in chat]
    question = payload.get(fmt.prompt_key)
    if not isinstance(question, str) or not question.strip():
        raise TasksetError(f"{origin}: prompt_key {fmt.prompt_key!r} missing or empty")
    system = payload.get(fmt.system_prompt_key) if fmt.system_prompt_key else fmt.system_prompt
    head = [{"role": "system", "content": str(system)}] if system else []
    return [*head, {"role": "user", "content": question}]


def preference_reply(
    payload: Mapping[str, Any], key: str, prompt: list[dict[str, str]], origin: str
) -> list[dict[str, str]]:
    """The conversation of one side of a pair: `prompt` and the `key` column, a text (the
    assistant's reply) or a list of messages (the reply's turns, or the whole conversation when
    it starts with the prompt's messages)."""
    value = payload.get(key)
    where = f"{origin}: {key!r}"
    if isinstance(value, str):
        if not value.strip():
            raise TasksetError(f"{where} is empty")
        return [*prompt, {"role": "assistant", "content": value}]
    if not isinstance(value, list) or not value:
        raise TasksetError(f"{where} missing or empty (a text or a list of messages)")
    if not all(isinstance(m, Mapping) and isinstance(m.get("content"), str) for m in value):
        raise TasksetError(f"{where} must be a list of messages with text content")
    turns = [{"role": str(m["role"]), "content": str(m["content"])} for m in value]
    if turns[: len(prompt)] == prompt:
        turns = turns[len(prompt) :]
    if not prompt and turns[0]["role"] == "assistant":
        raise TasksetError(f"{where}: there is no prompt before the assistant's reply")
    if not any(t["role"] == "assistant" and t["content"].strip() for t in turns):
        raise TasksetError(f"{where} has no non-empty assistant message")
    return [*prompt, *turns]


@SFT_ROW_RENDERERS.register("pair", grouped=True)
def render_pair(
    payload: Mapping[str, Any], origin: str, fmt: FormatConfig, context: RenderContext
) -> list[RenderedRow]:
    """A preference pair: the chosen response (reward 1) and the rejected one (reward 0), each
    with the prompt before it and its assistant tokens trained; both must share the prompt."""
    prompt = preference_prompt(payload, origin, fmt)
    chosen = preference_reply(payload, fmt.chosen_key, prompt, origin)
    rejected = preference_reply(payload, fmt.rejected_key, prompt, origin)
    if chosen == rejected:
        raise TasksetError(f"{origin}: the chosen and the rejected response are the same")
    rows = [
        rendered_conversation(chosen, f"{origin} ({fmt.chosen_key})", context, reward=1.0),
        rendered_conversation(rejected, f"{origin} ({fmt.rejected_key})", context, reward=0.0),
    ]
    if rows[0].prompt_ids != rows[1].prompt_ids:
        raise TasksetError(
            f"{origin}: {fmt.chosen_key!r} and {fmt.rejected_key!r} do not answer the same "
            "prompt (their tokens before the first assistant token differ)"
        )
    return rows


@SFT_ROW_RENDERERS.register("text")
def render_text(
    payload: Mapping[str, Any], origin: str, fmt: FormatConfig, context: RenderContext
) -> list[RenderedRow]:
    """Windows of max_response_tokens + 1 tokens overlapping by one (see the module docstring)."""
    text = payload.get(fmt.text_key)
    if not isinstance(text, str) or not text.strip():
        raise TasksetError(f"{origin}: text_key {fmt.text_key!r} missing or empty")
    tok = context.tokenizer
    ids = [int(i) for i in tok(text)["input_ids"]]
    if tok.eos_token_id is not None and (not ids or ids[-1] != tok.eos_token_id):
        ids.append(int(tok.eos_token_id))
    if len(ids) < 2:
        raise TasksetError(f"{origin}: the text is a single token; there is nothing to predict")
    width = context.max_response_tokens
    return [
        RenderedRow(
            [ids[start]],
            ids[start + 1 : start + 1 + width],
            [1] * len(ids[start + 1 : start + 1 + width]),
        )
        for start in range(0, len(ids) - 1, width)
    ]


def dataset_issues(
    name: str, spec: object, cfg: Any, algorithm: Any, trains_offline: bool
) -> list[Issue]:
    """ALGORITHM_TYPES' rule: an algorithm that trains on a dataset (its preset's `dataset`, a
    renderer here) reads it from a file experience buffer and runs no explorer; a file
    experience buffer needs such an algorithm. Offline (`rft train --from-topic`), the topic is
    the input and no file is needed; mode bench trains nothing and needs none either."""
    buf = cfg.buffer.trainer_input.experience_buffer
    where = "buffer.trainer_input.experience_buffer"
    if algorithm.dataset is None:
        if buf.storage_type != "file":
            return []
        return [
            Issue(
                f"{where}.storage_type",
                f"file: algorithm {name!r} trains on rollouts, not on a dataset "
                "(a dataset file is trained by algorithm_type sft, cpt or dpo)",
            )
        ]
    issues = []
    needs_file = not trains_offline and cfg.mode != "bench"
    if needs_file and (buf.storage_type != "file" or not buf.path):
        issues.append(
            Issue(
                f"{where}.storage_type",
                f"algorithm {name!r} trains on a dataset: set storage_type file and `path` "
                f"to a dataset file or directory (got storage_type {buf.storage_type!r})",
            )
        )
    if cfg.mode not in ("train", "bench"):
        issues.append(
            Issue(
                "mode",
                f"{cfg.mode!r}: algorithm {name!r} trains on a published dataset with no "
                "explorer; use mode train (`rft run` publishes the dataset, then trains)",
            )
        )
    return issues
