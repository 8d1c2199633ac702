"""Run `llama_cpp.server` with loopback-only Host headers and without its permissive CORS.

`python -m llama_cpp.server` builds a FastAPI app with CORS `allow_origins=["*"]` plus `allow_credentials=True`
(Starlette then reflects any browser Origin, credentials allowed) and accepts any Host header, so a web page the
user visits could drive the local model through DNS rebinding. This launcher builds the same app with the same
argv (`llama_cpp.server.app.create_app`), removes the CORS middleware (a same-origin client needs none, so no
cross-origin page gets an `Access-Control-Allow-*` header), and answers 400 to any Host other than 127.0.0.1,
localhost or [::1] with the served port.

Starlette's TrustedHostMiddleware is not used: it drops the port before comparing (any port passes) and splits
`[::1]:8765` at its first colon, so it could neither check the port nor allow IPv6 loopback.

It also makes a request's `max_tokens` bound the whole reply (`bound_output`): llama-cpp-python's
`chatml-function-calling` handler, the one model=local serves, passes `max_tokens=None` to the completions it
chains for a reply (a plain message, each tool call's arguments, the check for one more call), so a small model
could write, or keep adding tool calls, until the context was full: minutes on a CPU, then a 400. And it makes
that handler show the model its tool results (`tool_turns`): its template dropped every `tool` message.

    python -m harness.backends.llama_launcher --model M.gguf --host 127.0.0.1 --port 8765 ...  # llama's own flags
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any, cast

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def allowed_hosts(port: int) -> list[str]:
    """Host header values a loopback client sends for this port (clients always add a non-default port)."""
    return [f"{host}:{port}" for host in LOOPBACK_HOSTS]


def host_allowed(host: str, port: int) -> bool:
    return host.strip().lower() in allowed_hosts(port)


class LoopbackHostMiddleware:
    """Pure ASGI: a request whose Host header is not a loopback name with our port gets a plain 400."""

    def __init__(self, app: ASGIApp, port: int) -> None:
        self.app, self.port = app, port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
            if not host_allowed(host, self.port):
                await self._reject(scope, receive, send)
                return
        await self.app(scope, receive, send)

    @staticmethod
    async def _reject(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = b"Invalid host header"
        await send({"type": "http.response.start", "status": 400,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def restrict(app: Any, port: int) -> Any:
    """Drop the app's CORS middleware and put the Host check outermost. Starlette builds its middleware stack on
    the first request, so editing `user_middleware` before serving is enough."""
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware

    app.user_middleware[:] = [m for m in app.user_middleware if m.cls is not CORSMiddleware]
    app.user_middleware.insert(0, Middleware(LoopbackHostMiddleware, port=port))
    app.middleware_stack = None
    return app


class OutputBudget:
    """The `llama` a chat handler is given: every completion it makes draws on the reply's one `max_tokens` (at
    least one token each, as 0 or None would mean "until the context is full"); anything else is the model's."""

    def __init__(self, llama: Any, max_tokens: int | None) -> None:
        self._llama = llama
        self.left = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llama, name)

    def create_completion(self, *args: Any, **kwargs: Any) -> Any:
        if self.left is None:  # the request set no limit: the handler's own choices stand
            return self._llama.create_completion(*args, **kwargs)
        asked = kwargs.get("max_tokens")
        limit = self.left if not isinstance(asked, int) or asked <= 0 else min(asked, self.left)
        kwargs["max_tokens"] = max(1, limit)
        result = self._llama.create_completion(*args, **kwargs)
        if isinstance(result, dict):  # a stream is bounded per completion only
            self.left -= int((result.get("usage") or {}).get("completion_tokens", kwargs["max_tokens"]))
        return result


def bounded(handler: Callable[..., Any]) -> Callable[..., Any]:
    """The chat handler, with the request's `max_tokens` bounding every completion it makes together."""

    def call(*, llama: Any, max_tokens: int | None = None, **kwargs: Any) -> Any:
        return handler(llama=OutputBudget(llama, max_tokens), max_tokens=max_tokens, **kwargs)

    return call


TOOL_TURNS = "chatml-function-calling"  # the format whose template drops tool results (`with_tool_turns`)


def tool_turns(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The messages as chatml-function-calling's template can show them. Its template renders system, user and
    assistant turns only (a `tool` message became an empty turn: the model never saw a tool result) and
    HTML-escapes every text (each `"` reached the model as `&#34;`). Each tool result becomes a user turn holding
    it in <tool_response> tags (as Qwen2.5's ChatML template shows tool results), and every text is passed as
    markup, which the template shows as it is."""
    from markupsafe import Markup

    out: list[dict[str, Any]] = []
    for message in messages:
        m = dict(message)
        content = m.get("content")
        if isinstance(content, list):  # text parts (model=local is text only)
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if m.get("role") == "tool":
            m = {"role": "user", "content": f"<tool_response>\n{content or ''}\n</tool_response>"}
        elif isinstance(content, str):
            m["content"] = content
        if isinstance(m.get("content"), str):
            m["content"] = Markup(m["content"])
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "function": {**c.get("function", {}),
                                                  "arguments": Markup(c.get("function", {}).get("arguments", ""))}}
                               for c in m["tool_calls"]]
        out.append(m)
    return out


def with_tool_turns(handler: Callable[..., Any]) -> Callable[..., Any]:
    def call(*, messages: Sequence[Message], **kwargs: Any) -> Any:
        return handler(messages=tool_turns(messages), **kwargs)

    return call


def bound_output(chat_format: str | None) -> None:
    """Re-register the named chat format's handler, bounded (and chatml-function-calling's with its tool results
    shown: `tool_turns`); a format the server builds itself (a multimodal handler, none here) or none at all (the
    model's own template) is left as it is."""
    from llama_cpp import llama_chat_format as formats

    if not chat_format:
        return
    registry = formats.LlamaChatCompletionHandlerRegistry()
    try:
        handler = registry.get_chat_completion_handler_by_name(chat_format)
    except formats.LlamaChatCompletionHandlerNotFoundException:
        return
    if chat_format == TOOL_TURNS:
        handler = with_tool_turns(handler)
    registry.register_chat_completion_handler(chat_format, bounded(handler), overwrite=True)


def build_app(argv: Sequence[str]) -> tuple[Any, str, int]:
    """The app `python -m llama_cpp.server` would build from the same argv, restricted; and where to bind it."""
    from llama_cpp.server.app import create_app
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    parser = argparse.ArgumentParser(prog="python -m harness.backends.llama_launcher")
    add_args_from_model(parser, Settings)
    args = parser.parse_args(list(argv))
    # parse_model_from_args is annotated as returning its argument's type, but returns an instance.
    server = cast(ServerSettings, parse_model_from_args(ServerSettings, args))
    model = cast(ModelSettings, parse_model_from_args(ModelSettings, args))
    bound_output(model.chat_format)
    os.environ.pop("CONFIG_FILE", None)  # create_app would let that file replace the argv's settings, host included
    app = create_app(server_settings=server, model_settings=[model])
    return restrict(app, server.port), server.host, server.port


def main(argv: Sequence[str] | None = None) -> None:
    import uvicorn

    app, host, port = build_app(sys.argv[1:] if argv is None else argv)
    # No HOST/PORT environment overrides (llama's own main has them): the bind address is the argv's alone.
    uvicorn.run(app, host=host, port=port)


if __name__ == "__main__":
    main()
