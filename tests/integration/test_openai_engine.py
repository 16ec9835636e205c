"""`engine_type: openai` against rft's own serve endpoint, on the real stack: a real server
process (as tests/integration/test_serve.py starts it) that has loaded weight version 1, and an
explorer of another run whose rollout engine calls it. The explorer loads no weights and waits for
none; its experiences carry exactly the token ids and logprobs the server recorded on its calls
topic, and the version the server said answered (1, while the explorer itself holds nothing). The
same client serves a judge's chat call, and a refused call comes back as an EngineError."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from rft.config.connections import StackSettings
from rft.engines.models import ModelSpec
from rft.engines.openai_client import OpenAIClient
from rft.engines.rollout import RolloutEngineConfig, create_rollout_engine
from rft.errors import EngineError
from rft.events.models import ServeCall
from rft.events.topics import TopicNames
from rft.storage.checkpoint_store import CheckpointStore
from rft.storage.object_store import S3ObjectStore
from tests.integration.test_replay_engine_rerun import ROWS, experiences, explore
from tests.integration.test_serve import KEY, MODEL, Server, events_of, make_server
from tests.integration.test_weight_follower import announce, perturbed_checkpoint

pytestmark = pytest.mark.integration


def _serve_version_1(srv: Server, stack: StackSettings, run: str, tmp_path: Path) -> None:
    """Announce weight version 1 on the server's run and wait until the server answers with it."""
    engine = create_rollout_engine("hf", RolloutEngineConfig(model=ModelSpec("tiny")))
    store = CheckpointStore(S3ObjectStore(stack.object_store, bucket="rft-it"), "rft-it", run)
    store.write(1, 1, perturbed_checkpoint(engine, tmp_path / "v1", 0.01))
    announce(stack, TopicNames.for_run("rft-it", run).weights, store, 1)
    deadline = time.monotonic() + 120
    version = 0
    while version != 1 and time.monotonic() < deadline:
        time.sleep(1)
        version = srv.client("probe").models.list().data[0].model_extra["model_version"]
    assert version == 1, "the announced version was not loaded"


def test_an_explorer_on_engine_openai_writes_what_the_server_answered(
    stack: StackSettings, unique: str, tmp_path: Path
) -> None:
    srv = make_server(tmp_path, stack, unique, api_key=KEY, max_n=4)
    srv.start()
    try:
        _serve_version_1(srv, stack, unique, tmp_path)
        name = unique + "-client"
        cfg = explore(
            stack,
            tmp_path,
            name,
            engine_type="openai",
            base_url=srv.url,
            api_key=KEY,
            engine_args={"returns_token_ids": True},
        )

        judge = OpenAIClient(srv.url, KEY)
        verdict = judge.chat(MODEL, [{"role": "user", "content": "Is 3 right?"}], max_tokens=3)
        with pytest.raises(EngineError, match=r"/completions: the server answered 401"):
            OpenAIClient(srv.url, "sk-wrong", max_retries=0).completion(
                {"model": MODEL, "prompt": [1, 2], "max_tokens": 1}
            )
    finally:
        srv.stop()

    exps = experiences(cfg, name + "-read")
    assert len(exps) == len(ROWS) * 2
    calls = events_of(srv, "serve-calls", unique, ServeCall)
    recorded = {
        (tuple(c.prompt_ids.tolist()), tuple(ch.response_ids.tolist())): (c, ch)
        for c in calls
        if c.endpoint == "completions"
        for ch in c.choices
    }
    for exp in exps:
        call, choice = recorded[(tuple(exp.prompt_ids.tolist()), tuple(exp.response_ids.tolist()))]
        # the ids and logprobs the experience carries are the ones the server fed and sampled
        assert np.array_equal(exp.logprobs, choice.logprobs)
        assert exp.response_text == choice.text
        # the version is the one the server said answered; the explorer loaded nothing
        assert exp.model_version == call.model_version == 1
    # one call per task (its 2 rollouts as n=2), each answered by version 1
    completions = [c for c in calls if c.endpoint == "completions"]
    assert len(completions) == len(ROWS) and all(len(c.choices) == 2 for c in completions)
    (chat,) = [c for c in calls if c.endpoint == "chat.completions" and c.session_id != "probe"]
    assert verdict == chat.choices[0].text
