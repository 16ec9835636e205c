"""The HTTP face of serve mode: a FastAPI app over a `ServeCore`.

Routes: `POST /v1/chat/completions`, `POST /v1/completions`, `GET /v1/models`, and
`POST /v1/feedback` (also `/feedback`, Trinity-RFT's name) with `{"session_id", "reward"}` and
optionally `"task_id"`. Every route checks the API key first (`Authorization: Bearer <key>`, 401
otherwise), then the body's size (413 past `explorer.serve.max_body_bytes`, read no further),
then its JSON. Every refusal and failure is an OpenAI-style error body (rft.serve.api_error); an
unexpected exception is logged here and the caller gets a 500 body without its traceback.

Sessions are named by headers, `X-Session-Id` and `X-Task-Id` (or `metadata.session_id` /
`metadata.task_id` in the body; the header wins): an agent written against the `openai` client
sets them once (`default_headers`) and every framework's calls carry them unchanged, where `user`
means an end user to OpenAI and `metadata` is not accepted by every client version. Answers carry
`X-Session-Id` and `X-RFT-Model-Version` headers.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from rft.consumers.serve.core import Answered, ServeCore
from rft.serve import replies
from rft.serve.api_error import ApiError, bad_request
from rft.serve.requests import CompletionRequest, read_chat, read_completion

log = logging.getLogger(__name__)

SESSION_HEADER = "X-Session-Id"
TASK_HEADER = "X-Task-Id"
VERSION_HEADER = "X-RFT-Model-Version"


def build_app(core: ServeCore, api_key: str | None, max_body_bytes: int) -> FastAPI:
    app = FastAPI(title="rft serve", docs_url=None, redoc_url=None, openapi_url=None)
    decode = core.batcher.decode

    def guard(request: Request) -> None:
        if api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip(), api_key):
            raise ApiError(
                401,
                "Incorrect or missing API key: send 'Authorization: Bearer <key>'",
                code="invalid_api_key",
            )

    async def body_of(request: Request) -> Any:
        guard(request)
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_body_bytes:
            raise _too_large(int(declared), max_body_bytes)
        data = bytearray()
        async for part in request.stream():
            data += part
            if len(data) > max_body_bytes:
                raise _too_large(len(data), max_body_bytes)
        try:
            return json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise bad_request(f"the request body is not valid JSON: {exc}") from exc

    def answered(request: Request, read: CompletionRequest) -> Answered:
        return core.answer(
            read, request.headers.get(SESSION_HEADER), request.headers.get(TASK_HEADER)
        )

    def headers(done: Answered) -> dict[str, str]:
        return {SESSION_HEADER: done.session_id, VERSION_HEADER: str(done.answer.version)}

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Response:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        status = exc.status_code
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return JSONResponse(ApiError(status, message).body(), status_code=status)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.exception("serve: %s %s failed", request.method, request.url.path)
        error = ApiError(
            500, f"the server failed on this request ({type(exc).__name__}); see its log"
        )
        return JSONResponse(error.body(), status_code=500)

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        guard(request)
        name = core.settings.limits.model_name
        return JSONResponse(replies.model_list(name, core.started, core.version))

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        read = read_chat(await body_of(request), core.settings.limits)
        done = await run_in_threadpool(answered, request, read)
        if read.stream:
            chunks = replies.chat_chunks(
                done.answer, done.choices, read.logprobs, read.include_usage, decode
            )
            return _stream(chunks, headers(done))
        body = replies.chat_completion(
            done.answer, done.choices, read.logprobs, decode, read.return_token_ids
        )
        return JSONResponse(body, headers=headers(done))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        read = read_completion(await body_of(request), core.settings.limits)
        done = await run_in_threadpool(answered, request, read)
        if read.stream:
            chunks = replies.completion_chunks(
                done.answer, done.choices, read.include_usage, decode
            )
            return _stream(chunks, headers(done))
        body = replies.text_completion(
            done.answer, done.choices, read.logprobs, decode, read.return_token_ids
        )
        return JSONResponse(body, headers=headers(done))

    async def feedback(request: Request) -> Response:
        body = await body_of(request)
        if not isinstance(body, dict):
            raise bad_request("the feedback body must be a JSON object")
        session_id = body.get("session_id") or request.headers.get(SESSION_HEADER)
        if not isinstance(session_id, str) or not session_id:
            raise bad_request("session_id is required (a string)", "session_id")
        reward = body.get("reward")
        if isinstance(reward, bool) or not isinstance(reward, int | float) or reward != reward:
            raise bad_request("reward is required (a finite number)", "reward")
        if abs(float(reward)) == float("inf"):
            raise bad_request("reward is required (a finite number)", "reward")
        task_id = body.get("task_id") or request.headers.get(TASK_HEADER)
        if task_id is not None and not isinstance(task_id, str):
            raise bad_request("task_id must be a string", "task_id")
        train = body.get("train", True)
        if not isinstance(train, bool):
            raise bad_request("train must be true or false", "train")
        unknown = sorted(set(body) - {"session_id", "reward", "task_id", "train"})
        if unknown:
            raise bad_request(f"unknown field(s) {unknown}", unknown[0], "unsupported_parameter")
        result = await run_in_threadpool(core.feedback, session_id, float(reward), task_id, train)
        return JSONResponse(result)

    app.add_api_route("/v1/feedback", feedback, methods=["POST"])
    app.add_api_route("/feedback", feedback, methods=["POST"])
    return app


def _too_large(size: int, limit: int) -> ApiError:
    return ApiError(
        413,
        f"the request body is {size}+ bytes, over this server's limit of {limit} "
        "(explorer.serve.max_body_bytes)",
        code="request_too_large",
    )


def _stream(chunks: Iterator[dict[str, Any]], headers: dict[str, str]) -> Response:
    def events() -> Iterator[bytes]:
        for chunk in chunks:
            yield replies.sse(chunk)
        yield replies.sse("[DONE]")

    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)
