"""Scores weight versions of examples/sft/multiplication_sft.yaml on the held-out rows (eval seeds,
never trained): the mean negative log-likelihood of the assistant's tokens (the SFT loss on data
it did not train on), and greedy turns: for every assistant turn, the model continues the
conversation before it and is right when it writes exactly the expected turn (the calculator
call, then the answer read off the calculator's reply).

    python examples/sft/heldout.py --config examples/sft/multiplication_sft.yaml --versions 0,12

Version 0 is the base model; others are read from the run's checkpoint store.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import torch

from rft.buffer.sft_rows import RenderContext, assistant_mask, conversation
from rft.catalog import load_config
from rft.config.schema import FormatConfig
from rft.consumers.run_plan import RunPlan
from rft.engines.chat_template import configured_chat_template
from rft.engines.models import load_model
from rft.engines.weights import load_weights_into, read_safetensors_dir


def score(
    model: Any, context: RenderContext, chats: list[list[dict[str, str]]]
) -> dict[str, float]:
    tok = context.tokenizer
    nll, tokens, right, turns = 0.0, 0, {"call": 0, "answer": 0}, {"call": 0, "answer": 0}
    for chat in chats:
        ids, mask = assistant_mask(chat, "heldout", context)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, :-1].float()
        logp = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
        trained = torch.tensor(mask[1:], dtype=torch.bool)
        nll -= float(logp[trained].sum())
        tokens += int(trained.sum())
        for i, message in enumerate(chat):
            if message["role"] != "assistant":
                continue
            kind = "call" if "<tool_call>" in message["content"] else "answer"
            prompt = tok.apply_chat_template(
                chat[:i],
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
                chat_template=context.chat_template,
            )
            expected = tok(message["content"])["input_ids"]
            with torch.no_grad():
                out = model.generate(
                    torch.tensor([list(prompt)]),
                    max_new_tokens=len(expected) + 4,
                    do_sample=False,
                    pad_token_id=tok.eos_token_id,
                )
            reply = tok.decode(out[0, len(prompt) :], skip_special_tokens=False)
            turns[kind] += 1
            right[kind] += reply.split("<|im_end|>")[0].strip() == message["content"].strip()
    return {
        "heldout_nll_per_token": nll / tokens,
        "calls_right": right["call"] / turns["call"],
        "answers_right": right["answer"] / turns["answer"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--versions", default="0", help="comma-separated (0: the base model)")
    parser.add_argument("--heldout", type=Path, default=Path("examples/sft/data/heldout.jsonl"))
    parser.add_argument("--limit", type=int, default=None, help="score the first N rows only")
    parser.add_argument("--override", action="append", default=[], help="KEY=VALUE, as rft's")
    args = parser.parse_args()
    cfg = load_config(args.config, args.override)
    plan = RunPlan(cfg)
    model, tok = load_model(plan.model_spec(dtype="float32"))
    model.eval()
    context = RenderContext(
        tok,
        cfg.model.max_prompt_tokens,
        cfg.model.max_response_tokens,
        configured_chat_template(cfg.model.custom_chat_template, cfg.model.chat_template_path),
    )
    fmt = FormatConfig(prompt_type="messages", messages_key="messages")
    rows = [json.loads(line) for line in args.heldout.read_text().splitlines() if line.strip()]
    rows = rows[: args.limit]
    chats = [conversation(row, f"{args.heldout}:{n}", fmt) for n, row in enumerate(rows)]
    base = {k: v.clone() for k, v in model.state_dict().items()}
    store = plan.checkpoint_store()
    for version in (int(v) for v in args.versions.split(",")):
        if version == 0:
            model.load_state_dict(base)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                local = store.download(version, Path(tmp) / "v", skip_prefixes=("trainer_state",))
                load_weights_into(model, read_safetensors_dir(local))
        print(json.dumps({"version": version, "rows": len(chats), **score(model, context, chats)}))


if __name__ == "__main__":
    main()
