"""The agent's network tools, opt-in (`benchmark.network`): OpenClaw's `web_search` and `web_fetch`, and the
`generate_image` tool PinchBench's task_image_gen asks for. Off by default; tests reach only 127.0.0.1.

- `web_search{query, count, country, search_lang, ui_lang, freshness}`: OpenClaw's schema and its default provider,
  the Brave Search API (GET <base_url>?q=&count=, header X-Subscription-Token; results {title, url, description,
  published, siteName}) — openclaw src/agents/tools/web-search.ts; docs/tools/web.md.
- `web_fetch{url, extractMode: markdown|text, maxChars}`: a plain HTTP(S) GET (no JavaScript) with a body-size cap, a
  timeout for the whole fetch (not per read) and at most `max_redirects` redirects, each hop re-checked; HTML
  becomes coarse markdown or text the way OpenClaw's own fallback renderer does it (title, links, headings, list
  items, block breaks; script/style dropped) — openclaw src/agents/tools/web-fetch.ts, web-fetch-utils.ts. Hosts
  that resolve to a private, loopback, link-local or reserved address are refused (OpenClaw's SSRF guard);
  `allow_loopback` (tests) lets 127.0.0.1 in.
- `generate_image{prompt, path}`: the name and arguments task_image_gen's check reads; the picture comes from an
  OpenAI-compatible `/v1/images/generations` endpoint (openai client) and is written into the workspace as PNG.
  (OpenClaw's own built-in is `image_generate{prompt, filename, ...}`; upstream's task names `generate_image`.)
Simplified against OpenClaw: no Readability main-content pass, no hidden-element sanitising, no Firecrawl
fallback, no 15-minute result cache, and results are not wrapped in OpenClaw's untrusted-content markers.
"""

from __future__ import annotations

import base64
import io
import ipaddress
import json
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from harness.errors import InputError, one_line
from harness.types import ToolSpec

DEFAULT_SEARCH_COUNT, MAX_SEARCH_COUNT = 5, 10  # web-search.ts
DEFAULT_USER_AGENT = ("Mozilla/5.0 (Macintosh; Intel Mac OS X 14_7_2) AppleWebKit/537.36 (KHTML, like Gecko) "
                      "Chrome/122.0.0.0 Safari/537.36")  # web-fetch.ts DEFAULT_FETCH_USER_AGENT
MIN_MAX_CHARS = 100  # web-fetch.ts: maxChars minimum
ERROR_MAX_CHARS = 4000  # web-fetch.ts DEFAULT_ERROR_MAX_CHARS
API_MAX_BYTES = 8 * 2**20  # a search API answer at most (read as a fetch is: whole within its timeout)
IMAGE_MAX_BYTES = 32 * 2**20  # a generated image downloaded at most


def _spec(name: str, description: str, props: dict[str, Any], required: list[str]) -> ToolSpec:
    return ToolSpec(name, description, {"type": "object", "properties": props, "required": required})


_S = {"type": "string"}
# OpenClaw's schemas and descriptions (web-search.ts Brave description, web-fetch.ts WebFetchSchema).
WEB_SPECS = {
    "web_search": _spec(
        "web_search", "Search the web using Brave Search API. Supports region-specific and localized search via "
        "country and language parameters. Returns titles, URLs, and snippets for fast research.",
        {"query": {**_S, "description": "Search query string."},
         "count": {"type": "number", "description": "Number of results to return (1-10).", "minimum": 1,
                   "maximum": MAX_SEARCH_COUNT},
         "country": {**_S, "description": "2-letter country code for region-specific results (e.g., 'DE', 'US', "
                     "'ALL'). Default: 'US'."},
         "search_lang": {**_S, "description": "ISO language code for search results (e.g., 'de', 'en', 'fr')."},
         "ui_lang": {**_S, "description": "ISO language code for UI elements."},
         "freshness": {**_S, "description": "Filter results by discovery time: 'pd' (past 24h), 'pw' (past week), "
                       "'pm' (past month), 'py' (past year), or date range 'YYYY-MM-DDtoYYYY-MM-DD'."}},
        ["query"]),
    "web_fetch": _spec(
        "web_fetch", "Fetch and extract readable content from a URL (HTML → markdown/text). Use for lightweight page "
        "access without browser automation.",
        {"url": {**_S, "description": "HTTP or HTTPS URL to fetch."},
         "extractMode": {**_S, "enum": ["markdown", "text"], "default": "markdown",
                         "description": 'Extraction mode ("markdown" or "text").'},
         "maxChars": {"type": "number", "minimum": MIN_MAX_CHARS,
                      "description": "Maximum characters to return (truncates when exceeded)."}},
        ["url"]),
    "generate_image": _spec(
        "generate_image", "Generate an image from a text prompt and save it in the workspace (PNG).",
        {"prompt": {**_S, "description": "Image prompt."},
         "path": {**_S, "description": "Where to save the image, relative to the workspace (default image.png)."}},
        ["prompt"]),
}
NEED_TOOLS = {"web_search": "web_search", "web_fetch": "web_fetch", "image_generation": "generate_image"}


class WebError(Exception):
    """A refusal or failure the agent sees as the tool's error (one line)."""


# ---- settings --------------------------------------------------------------------------------------------------
@dataclass
class SearchSettings:
    provider: str = "brave"  # OpenClaw's default provider; the only one implemented here
    base_url: str = "https://api.search.brave.com/res/v1/web/search"
    api_key_env: str = "BRAVE_API_KEY"
    max_results: int = DEFAULT_SEARCH_COUNT
    timeout_s: float = 30.0


@dataclass
class FetchSettings:
    max_chars: int = 50_000  # web-fetch.ts DEFAULT_FETCH_MAX_CHARS
    max_chars_cap: int = 50_000
    max_response_bytes: int = 2_000_000  # DEFAULT_FETCH_MAX_RESPONSE_BYTES
    max_redirects: int = 3  # DEFAULT_FETCH_MAX_REDIRECTS
    timeout_s: float = 30.0
    user_agent: str = DEFAULT_USER_AGENT


@dataclass
class ImageSettings:
    base_url: str | None = None  # an OpenAI-compatible API root (…/v1); None: generate_image stays unavailable
    model: str = "gpt-image-1"
    api_key_env: str | None = "OPENAI_API_KEY"  # None: a local server that needs no key
    size: str = "1024x1024"
    response_format: str | None = None  # "b64_json" for dall-e-style servers that default to URLs
    timeout_s: float = 120.0


@dataclass
class NetworkSettings:
    """`benchmark.network`. `enabled` turns the live tools on; `exec` also gives `exec` the network, for the tasks
    that need it (requirement exec_network); `web_tools_for: all` offers web_search/web_fetch to every task as
    OpenClaw does (default: only to tasks whose requirements name them)."""

    enabled: bool = False
    exec: bool = False
    web_tools_for: str = "needs"
    allow_loopback: bool = False  # tests: web_fetch may reach 127.0.0.1 (never other private addresses)
    search: SearchSettings = field(default_factory=SearchSettings)
    fetch: FetchSettings = field(default_factory=FetchSettings)
    images: ImageSettings = field(default_factory=ImageSettings)

    def provides(self, need: str) -> bool:
        """Whether this run gives a task `need` (requirements.NEEDS); mocks and the skill registry: never here."""
        if not self.enabled:
            return False
        return {"web_search": True, "web_fetch": True, "exec_network": self.exec,
                "image_generation": self.images.base_url is not None}.get(need, False)


def as_network(value: Any) -> NetworkSettings:
    """`benchmark.network` from config (a mapping; Hydra passes a DictConfig); a bad key or value is one line."""
    if isinstance(value, NetworkSettings):
        return value
    raw = _mapping(value or {}, "benchmark.network")
    nested = {"search": SearchSettings, "fetch": FetchSettings, "images": ImageSettings}
    kwargs = {k: _build(cls, _mapping(raw[k], f"benchmark.network.{k}"), f"benchmark.network.{k}")
              for k, cls in nested.items() if raw.get(k) is not None}
    settings = _build(NetworkSettings, {**{k: v for k, v in raw.items() if k not in nested}, **kwargs},
                      "benchmark.network")
    if settings.web_tools_for not in ("needs", "all"):
        raise InputError(f"benchmark.network.web_tools_for: {settings.web_tools_for!r} is not one of needs, all")
    if settings.search.provider != "brave":
        raise InputError(f"benchmark.network.search.provider: {settings.search.provider!r} is not supported "
                         "(brave: OpenClaw's default; any Brave-compatible endpoint via base_url)")
    if settings.enabled:
        _require_env(settings.search.api_key_env, "benchmark.network.search.api_key_env")
        if settings.images.base_url is not None and settings.images.api_key_env:
            _require_env(settings.images.api_key_env, "benchmark.network.images.api_key_env")
    return settings


def _mapping(value: Any, where: str) -> dict[str, Any]:
    try:
        return {str(k): v for k, v in dict(value).items()}
    except (TypeError, ValueError):
        raise InputError(f"{where}: expected a mapping, got {value!r}") from None


def _build(cls: Any, raw: dict[str, Any], where: str) -> Any:
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(known)})")
    return cls(**raw)


def _require_env(name: str, where: str) -> None:
    if not os.environ.get(name):
        raise InputError(f"{where}: the environment variable {name} is not set (benchmark.network.enabled=true)")


# ---- the tools -------------------------------------------------------------------------------------------------
class WebTools:
    """Executes the live network tools for one workspace; `resolve` maps a workspace path to a host path."""

    def __init__(self, settings: NetworkSettings, resolve: Callable[[str], Path]) -> None:
        self.settings, self.resolve = settings, resolve
        self.handlers: dict[str, Callable[[dict[str, Any]], str]] = {
            "web_search": self.web_search, "web_fetch": self.web_fetch, "generate_image": self.generate_image}

    def web_search(self, args: dict[str, Any]) -> str:
        cfg = self.settings.search
        query = _string(args, "query", required=True)
        key = os.environ.get(cfg.api_key_env, "")
        if not key:  # web-search.ts missingSearchKeyPayload: a JSON answer, not a tool error
            return _json({"error": "missing_brave_api_key",
                          "message": f"web_search needs a Brave Search API key: set {cfg.api_key_env}."})
        count = _count(args.get("count"), cfg.max_results)
        params = {"q": query, "count": str(count)}
        for name in ("country", "search_lang", "ui_lang", "freshness"):
            if value := _string(args, name):
                params[name] = value
        start = time.monotonic()
        status, body = bounded_get(cfg.base_url, cfg.timeout_s, "Brave Search API request", params=params,
                                   headers={"Accept": "application/json", "X-Subscription-Token": key})
        if status >= 400:
            raise WebError(f"Brave Search API error ({status}): "
                           f"{body.decode('utf-8', errors='replace')[:ERROR_MAX_CHARS]}")
        try:
            results = (json.loads(body).get("web") or {}).get("results") or []
        except (ValueError, AttributeError, RecursionError):
            raise WebError("Brave Search API returned a response that is not JSON") from None
        mapped = [_search_result(r) for r in results if isinstance(r, dict)]
        return _json({"query": query, "provider": "brave", "count": len(mapped),
                      "tookMs": int((time.monotonic() - start) * 1000), "results": mapped})

    def web_fetch(self, args: dict[str, Any]) -> str:
        cfg = self.settings.fetch
        url = _string(args, "url", required=True)
        mode = "text" if _string(args, "extractMode") == "text" else "markdown"
        max_chars = _max_chars(args.get("maxChars"), cfg.max_chars, cfg.max_chars_cap)
        start = time.monotonic()
        status, final_url, content_type, body, cut = fetch(url, cfg, self.settings.allow_loopback)
        if status >= 400:
            detail = html_to_text(body) if "html" in content_type else body
            raise WebError(f"Web fetch failed ({status}): {detail.strip()[:ERROR_MAX_CHARS]}")
        text, title, extractor = extract(body, content_type, mode)
        truncated = len(text) > max_chars
        text = text[:max_chars]
        return _json({"url": url, "finalUrl": final_url, "status": status,
                      "contentType": content_type.split(";")[0].strip() or "application/octet-stream",
                      "title": title, "extractMode": mode, "extractor": extractor, "truncated": truncated,
                      "length": len(text), "fetchedAt": datetime.now(UTC).isoformat(),
                      "tookMs": int((time.monotonic() - start) * 1000), "text": text,
                      "warning": f"Response body truncated after {cfg.max_response_bytes} bytes." if cut else None})

    def generate_image(self, args: dict[str, Any]) -> str:
        cfg = self.settings.images
        prompt = _string(args, "prompt", required=True)
        rel = _string(args, "path") or "image.png"
        host = self.resolve(rel)
        if cfg.base_url is None:
            raise WebError("image generation is not configured (benchmark.network.images.base_url)")
        png = _png(_image_bytes(cfg, prompt))
        host.parent.mkdir(parents=True, exist_ok=True)
        host.write_bytes(png)
        return f"Generated image saved to {rel} ({len(png)} bytes, model {cfg.model}) from the prompt: {prompt}"


def _search_result(entry: dict[str, Any]) -> dict[str, Any]:
    url = str(entry.get("url") or "")
    out = {"title": str(entry.get("title") or ""), "url": url, "description": str(entry.get("description") or ""),
           "published": entry.get("age") or None, "siteName": urlsplit(url).hostname or None}
    return {k: v for k, v in out.items() if v is not None}


def _image_bytes(cfg: ImageSettings, prompt: str) -> bytes:
    import openai

    key = os.environ.get(cfg.api_key_env, "") if cfg.api_key_env else "not-needed"
    client = openai.OpenAI(base_url=cfg.base_url, api_key=key or "not-needed", timeout=cfg.timeout_s,
                           max_retries=0)
    extra = {"response_format": cfg.response_format} if cfg.response_format else None
    try:
        result = client.images.generate(model=cfg.model, prompt=prompt, size=cfg.size, n=1, extra_body=extra)
    except openai.OpenAIError as exc:
        raise WebError(f"image generation failed: {one_line(exc)}") from None
    item = result.data[0] if result.data else None
    if item is not None and item.b64_json:
        return base64.b64decode(item.b64_json)
    if item is not None and item.url:
        status, body = bounded_get(item.url, cfg.timeout_s, "image download", cap=IMAGE_MAX_BYTES)
        if status >= 400:
            raise WebError(f"image download failed ({status})")
        return body
    raise WebError("image generation returned no image")


def _png(data: bytes) -> bytes:
    """PNG as it came, else converted with Pillow (a matplotlib dependency); not an image is a tool error."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return data
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            out = io.BytesIO()
            img.save(out, format="PNG")
            return out.getvalue()
    except (UnidentifiedImageError, OSError):
        raise WebError("image generation returned data that is not an image") from None


# ---- HTTP GET with the SSRF guard ------------------------------------------------------------------------------
def fetch(url: str, cfg: FetchSettings, allow_loopback: bool) -> tuple[int, str, str, str, bool]:
    """(status, final url, content type, body text, body cut at the cap), following at most `max_redirects`
    redirects, each target checked. Environment proxies are not used: the guard must see the real destination."""
    current = url
    deadline = time.monotonic() + cfg.timeout_s  # the whole fetch, as OpenClaw's abort signal: httpx's timeout is
    # per read, so a server dripping a byte a second would hold the episode for good
    with httpx.Client(follow_redirects=False, trust_env=False, timeout=cfg.timeout_s) as client:
        for _ in range(cfg.max_redirects + 1):
            check_url(current, allow_loopback)
            headers = {"Accept": "text/markdown, text/html;q=0.9, */*;q=0.1", "User-Agent": cfg.user_agent,
                       "Accept-Language": "en-US,en;q=0.9"}
            try:
                with client.stream("GET", current, headers=headers) as res:
                    if res.is_redirect and "location" in res.headers:
                        current = urljoin(current, res.headers["location"])
                        continue
                    body, cut = _read_capped(res, cfg.max_response_bytes, deadline, cfg.timeout_s)
                    text = body.decode(res.encoding or "utf-8", errors="replace")
                    return res.status_code, current, res.headers.get("content-type", ""), text, cut
            except httpx.HTTPError as exc:
                raise WebError(f"Web fetch failed: {one_line(exc)}") from None
    raise WebError(f"Web fetch failed: more than {cfg.max_redirects} redirects")


def _read_capped(res: httpx.Response, cap: int, deadline: float, timeout_s: float,
                 what: str = "Web fetch") -> tuple[bytes, bool]:
    buf = bytearray()
    for chunk in res.iter_bytes():
        buf += chunk
        if len(buf) > cap:
            return bytes(buf[:cap]), True
        if time.monotonic() > deadline:
            raise WebError(f"{what} failed: no whole response within {timeout_s:g} s")
    return bytes(buf), False


def bounded_get(url: str, timeout_s: float, what: str, cap: int = API_MAX_BYTES, **options: Any) -> tuple[int, bytes]:
    """(status, body) of a GET read within timeout_s in all and at most `cap` bytes, as `fetch` reads a page:
    httpx's timeout is per read, so the search API or an image host dripping a byte a second held the episode."""
    deadline = time.monotonic() + timeout_s
    try:
        with httpx.Client(timeout=timeout_s) as client, client.stream("GET", url, **options) as res:
            body, cut = _read_capped(res, cap, deadline, timeout_s, what)
            if cut:
                raise WebError(f"{what} failed: the response passed {cap:,} bytes")
            return res.status_code, body
    except httpx.HTTPError as exc:
        raise WebError(f"{what} failed: {one_line(exc)}") from None


def check_url(url: str, allow_loopback: bool = False) -> None:
    """Refuse anything but http(s) to a public address (loopback too when `allow_loopback`)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise WebError("Invalid URL: must be http or https")
    host = parts.hostname
    if not host:
        raise WebError("Invalid URL: no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, ValueError) as exc:
        raise WebError(f"Web fetch failed: cannot resolve {host} ({one_line(exc)})") from None
    for info in infos:
        ip = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
            ip = ip.ipv4_mapped
        if ip.is_global or (allow_loopback and ip.is_loopback):
            continue
        raise WebError(f"Blocked: {host} resolves to a private or internal address ({ip})")


# ---- extraction (web-fetch.ts / web-fetch-utils.ts behaviour) --------------------------------------------------
def extract(body: str, content_type: str, mode: str) -> tuple[str, str | None, str]:
    """(text, title, extractor) for a response body as web_fetch returns it."""
    ctype = content_type.lower()
    if "text/markdown" in ctype:
        return (markdown_to_text(body) if mode == "text" else body), None, "cf-markdown"
    if "text/html" in ctype:
        text, title = html_to_markdown(body)
        if mode == "text":
            text = markdown_to_text(text) or (title or "")
        if not text:
            raise WebError("Web fetch extraction failed: no readable content.")
        return text, title, "basic"
    if "application/json" in ctype:
        try:
            return json.dumps(json.loads(body), indent=2, ensure_ascii=False), None, "json"
        except ValueError:
            return body, None, "raw"
    return body, None, "raw"


_BLOCK_BREAK = {"p", "div", "section", "article", "header", "footer", "table", "tr", "ul", "ol"}
_RAW_TEXT = {"script", "style", "noscript"}


class _Renderer(HTMLParser):
    """Coarse HTML -> markdown: a stack of contexts (title, anchor, heading, list item) closed into their parent."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[dict[str, Any]] = [{"kind": "root", "parts": []}]
        self.title: str | None = None
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _RAW_TEXT:
            self.skip += 1
        elif tag in ("br", "hr"):
            self._text("\n")
        elif tag == "title":
            self.stack.append({"kind": "title", "parts": []})
        elif tag == "a":
            self.stack.append({"kind": "anchor", "href": dict(attrs).get("href"), "parts": []})
        elif re.fullmatch(r"h[1-6]", tag):
            self.stack.append({"kind": "heading", "level": int(tag[1]), "parts": []})
        elif tag == "li":
            self.stack.append({"kind": "list-item", "parts": []})

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("br", "hr"):
            self._text("\n")

    def handle_endtag(self, tag: str) -> None:
        kinds = {"title": "title", "a": "anchor", "li": "list-item"}
        if tag in _RAW_TEXT:
            self.skip = max(0, self.skip - 1)
        elif tag in kinds or re.fullmatch(r"h[1-6]", tag):
            self._close(kinds.get(tag, "heading"))
        elif tag in _BLOCK_BREAK:
            self._text("\n")

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self._text(data.replace("\xa0", " "))

    def _text(self, value: str) -> None:
        self.stack[-1]["parts"].append(value)

    def _close(self, kind: str) -> None:
        if len(self.stack) < 2 or self.stack[-1]["kind"] != kind:
            return
        ctx = self.stack.pop()
        label = normalize_whitespace("".join(ctx["parts"]))
        parent = self.stack[-1]["parts"]
        if kind == "title":
            self.title = self.title or label or None
        elif not label:
            return
        elif kind == "anchor":
            parent.append(f"[{label}]({ctx['href']})" if ctx.get("href") else label)
        elif kind == "heading":
            parent.append(f"\n{'#' * ctx['level']} {label}\n")
        else:
            parent.append(f"\n- {label}")

    def result(self) -> tuple[str, str | None]:
        while len(self.stack) > 1:
            self._close(self.stack[-1]["kind"])
        return normalize_whitespace("".join(self.stack[0]["parts"])), self.title


def html_to_markdown(html: str) -> tuple[str, str | None]:
    renderer = _Renderer()
    renderer.feed(html)
    renderer.close()
    return renderer.result()


def html_to_text(html: str) -> str:
    text, title = html_to_markdown(html)
    return markdown_to_text(f"{title}\n{text}" if title else text)


def normalize_whitespace(value: str) -> str:
    value = value.replace("\r", "")
    value = re.sub(r"[ \t]+\n", "\n", value)
    value = re.sub(r"\n{3,}", "\n\n", value)
    return re.sub(r"[ \t]{2,}", " ", value).strip()


def markdown_to_text(markdown: str) -> str:
    text = re.sub(r"!\[[^\]]*]\([^)]+\)", "", markdown)
    text = re.sub(r"\[([^\]]+)]\([^)]+\)", r"\1", text)
    text = re.sub(r"```[^\n]*\n?(.*?)```", r"\1", text, flags=re.DOTALL)
    text = re.sub(r"`([^`]+)`", r"\1", text)
    text = re.sub(r"^#{1,6}\s+", "", text, flags=re.MULTILINE)
    text = re.sub(r"^\s*[-*+]\s+", "", text, flags=re.MULTILINE)
    text = re.sub(r"^\s*\d+\.\s+", "", text, flags=re.MULTILINE)
    return normalize_whitespace(text)


# ---- argument helpers ------------------------------------------------------------------------------------------
def _string(args: dict[str, Any], key: str, required: bool = False) -> str:
    value = args.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise WebError(f"missing required parameter '{key}'")
        return ""
    if not isinstance(value, str):
        raise WebError(f"parameter '{key}' must be a string")
    return value.strip()


def _number(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WebError(f"parameter '{name}' must be a number")
    return float(value)


def _count(value: Any, default: int) -> int:
    n = _number(value, "count")
    return max(1, min(MAX_SEARCH_COUNT, int(n if n is not None else default)))  # web-search.ts resolveSearchCount


def _max_chars(value: Any, default: int, cap: int) -> int:
    n = _number(value, "maxChars")
    return min(max(MIN_MAX_CHARS, int(n if n is not None else default)), cap)  # web-fetch.ts resolveMaxChars


def _json(payload: dict[str, Any]) -> str:
    return json.dumps(payload, indent=2, ensure_ascii=False)
