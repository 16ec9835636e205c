"""`serve(cfg)`: the process of `mode: serve`. It builds the explorer's rollout engine (the run's
model and chat template), loads the newest announced weight version when
`continue_from_checkpoint` is on, rebuilds the open sessions from the calls topic, and serves the
app (rft.consumers.serve.app) with uvicorn on `explorer.serve.host:port` until interrupted. A
thread dead-letters sessions past their TTL.

While it serves, a thread follows the weights topic and loads each newer verified version between
the batcher's engine calls (`RequestBatcher.between_waves`), as sync_style fully_async does; each
answer names the version that produced it.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import threading

from rft.config import RftConfig
from rft.consumers.explorer.weight_follower import WeightFollower
from rft.consumers.run_plan import RunPlan
from rft.consumers.serve.app import build_app
from rft.consumers.serve.core import ServeCore, ServeSettings
from rft.consumers.serve.session_log import SessionLog
from rft.contact.first_contact import require_kafka
from rft.engines.chat_template import check_chat_template, configured_chat_template
from rft.engines.request_batcher import RequestBatcher
from rft.engines.rollout import RolloutEngine, create_rollout_engine
from rft.errors import ConfigError
from rft.serve.requests import ServeLimits
from rft.tools.call_parsers import TOOL_CALL_PARSERS

log = logging.getLogger(__name__)

API_KEY_ENV = "RFT_SERVE_API_KEY"
WEIGHT_POLL_S = 1.0


def calls_topic(plan: RunPlan) -> str:
    """The run's topic of served calls and session ends."""
    return f"{plan.run_id}.serve-calls"


def api_key_of(cfg: RftConfig) -> str | None:
    """`explorer.serve.api_key`, else $RFT_SERVE_API_KEY; ConfigError when neither is set and
    the server would listen beyond this machine."""
    serve = cfg.explorer.serve
    key = serve.api_key or os.environ.get(API_KEY_ENV) or None
    if key is None and not _loopback(serve.host):
        raise ConfigError(
            f"explorer.serve.host: {serve.host!r} is reachable from other machines, and no API "
            f"key is set (explorer.serve.api_key or ${API_KEY_ENV})"
        )
    return key


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def settings_of(cfg: RftConfig, plan: RunPlan, server_id: str) -> ServeSettings:
    serve, model = cfg.explorer.serve, cfg.model
    assert model.max_model_len is not None  # filled when the config is loaded
    parse = TOOL_CALL_PARSERS.get(cfg.explorer.rollout_model.tool_call_parser)  # checked at load
    return ServeSettings(
        limits=ServeLimits(
            model_name=serve.model_name,
            max_completion_tokens=serve.max_completion_tokens or model.max_response_tokens,
            max_n=serve.max_n,
        ),
        max_prompt_tokens=model.max_prompt_tokens,
        max_model_len=model.max_model_len,
        max_sessions=serve.max_sessions,
        session_ttl_s=serve.session_ttl_s,
        concatenated=serve.concatenated,
        group_size=cfg.algorithm.repeat_times,
        server_id=server_id,
        explorer_group=f"{plan.run_id}.serve.{cfg.explorer.name}",
        parse=parse,
    )


def _engine(cfg: RftConfig, plan: RunPlan) -> RolloutEngine:
    engine = create_rollout_engine(
        cfg.explorer.rollout_model.engine_type, plan.rollout_engine_config()
    )
    model = cfg.model
    template = configured_chat_template(model.custom_chat_template, model.chat_template_path)
    if template is not None:
        key = (
            "model.chat_template_path" if model.chat_template_path else "model.custom_chat_template"
        )
        check_chat_template(engine, template, key)
    engine.set_chat_template(template, enable_thinking=cfg.explorer.rollout_model.enable_thinking)
    return engine


def _follower(cfg: RftConfig, plan: RunPlan, server_id: str) -> WeightFollower:
    return WeightFollower(
        cfg.stack.kafka,
        plan.topics.weights,
        f"{plan.run_id}.weights.{server_id}",
        plan.checkpoint_store(),
        consumer_config=plan.consumer_config,
        explorer_id=server_id,
        dead_letter_topic=plan.topics.dead_letter,
    )


def _follow_weights(
    follower: WeightFollower, batcher: RequestBatcher, stop: threading.Event
) -> None:
    """Load each newer announced version between the batcher's engine calls."""
    engine = batcher.engine
    while not stop.is_set():
        try:
            latest = follower.poll(timeout_s=1.0)
            if (
                latest is not None
                and latest.version > engine.model_version
                and latest.version not in follower.refused
            ):
                batcher.between_waves(lambda: follower.load_newest(engine))
        except Exception:  # noqa: BLE001 - the follower logs and tries again next round
            log.exception("serve: following weight versions failed; tried again")
            stop.wait(WEIGHT_POLL_S)


def serve(cfg: RftConfig) -> int:
    import uvicorn

    plan = RunPlan(cfg)
    settings = cfg.explorer.serve
    key = api_key_of(cfg)
    require_kafka(cfg.stack.kafka)
    topic = calls_topic(plan)
    plan.ensure_topics(topic, plan.explorer_experience_topic)
    server_id = f"{socket.gethostname()}-{os.getpid()}"
    core_settings = settings_of(cfg, plan, server_id)
    engine = _engine(cfg, plan)
    log.warning(
        "mode serve loads each announced weight version between engine calls, as "
        "synchronizer.sync_style fully_async does; the config's sync_style (%r), sync_interval "
        "and sync_offset are not applied",
        cfg.synchronizer.sync_style,
    )
    follower = _follower(cfg, plan, server_id)
    follower.poll(timeout_s=1.0)
    if cfg.continue_from_checkpoint:
        follower.load_newest(engine)
    session_log = SessionLog(
        cfg.stack.kafka,
        calls_topic=topic,
        experience_topic=plan.explorer_experience_topic,
        dead_letter_topic=plan.topics.dead_letter,
        transactional_id=f"{core_settings.explorer_group}.server",
    )
    stop = threading.Event()
    batcher = RequestBatcher(engine, max_batch_size=cfg.explorer.runner_per_model)
    with follower, batcher, session_log:
        core = ServeCore(batcher, session_log, core_settings)
        open_sessions = core.rebuild(session_log.read_back())
        threads = [
            threading.Thread(target=_sweep, args=(core, stop), name="rft-serve-ttl", daemon=True),
            threading.Thread(
                target=_follow_weights,
                args=(follower, batcher, stop),
                name="rft-serve-weights",
                daemon=True,
            ),
        ]
        for thread in threads:
            thread.start()
        app = build_app(core, key, settings.max_body_bytes)
        print(
            f"rft serve: {settings.model_name} (weight version {core.version}) at "
            f"http://{settings.host}:{settings.port}/v1; {open_sessions} open session(s) "
            f"rebuilt from {topic}",
            flush=True,
        )
        config = uvicorn.Config(
            app, host=settings.host, port=settings.port, log_level="warning", access_log=False
        )
        try:
            uvicorn.Server(config).run()
        finally:
            stop.set()
            for thread in threads:
                thread.join()
    return 0


def _sweep(core: ServeCore, stop: threading.Event) -> None:
    every = min(5.0, core.settings.session_ttl_s / 4)
    while not stop.wait(every):
        try:
            core.expire_due()
        except Exception:  # noqa: BLE001 - the sweeper logs and tries again next round
            log.exception("serve: expiring sessions failed; tried again")
