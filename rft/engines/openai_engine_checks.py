"""The `openai` rollout engine's load-time check, apart from the engine so that checking a config
imports no `openai` (the entry's `requires` says when it is missing, with its install command)."""

from __future__ import annotations

from typing import Any

from rft.config.binding import Issue

BASE_URL_KEY = "explorer.rollout_model.base_url"
RETURNS_IDS_KEY = "explorer.rollout_model.engine_args.returns_token_ids"


def server_issues(cfg: Any, at: str = "", section: Any = None) -> list[Issue]:
    """The entry's load-time check: a server to call, declared to return what training needs,
    and a mode that does not serve the run's own weights."""
    rollout = cfg.explorer.rollout_model
    issues = []
    if not rollout.base_url:
        issues.append(
            Issue(BASE_URL_KEY, "is required by engine_type openai (e.g. http://host:8000/v1)")
        )
    if rollout.engine_args.get("returns_token_ids") is not True:
        issues.append(
            Issue(
                RETURNS_IDS_KEY,
                "must be true for engine_type openai: experiences need the token ids and "
                "logprobs of every reply, and the server must return them (rft's serve endpoint "
                "does); a server that returns only text can serve judges and user simulators "
                "(rft.engines.openai_client.OpenAIClient.chat), not rollouts",
            )
        )
    if cfg.mode == "serve":
        issues.append(
            Issue(
                "explorer.rollout_model.engine_type",
                "openai cannot serve in mode serve: serve mode answers with the run's own "
                "weights, which this engine cannot load",
            )
        )
    return issues
