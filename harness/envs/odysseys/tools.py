"""The agent's browser tools: the Environment half of an Odysseys episode, over one `Browser`.

Every tool answers with the page after the action (URL, title, tabs, scroll position and the page as text with
numbered elements), capped at `observation_cap` characters; `find` lists the matching lines first. A bad element
number, a bad argument, a page that does not load in time or one hung by its own script (its tab closed) is a tool
error the agent sees; a crashed or hung browser raises `BrowserCrashed` out of execute() (an infrastructure failure
for the orchestrator). Each call also saves a screenshot of the viewport (`step_NNN.png`) for judges that take
images, and records the URL, whether the observation was truncated, and which requests the replay archive could
not answer.

**Observation modes** (`browser.observation`). `aria` (the default): the page as text, as above. `both`: the same
text and tools, and the viewport's screenshot as an image part of the tool result. `screenshot`: the screenshot
with only the URL, title, tabs and scroll position as text, as upstream's computer-use agent works from
screenshots (SOURCE.md); element numbers are not shown, so the element tools give way to click_at(x, y),
type_text and press_key (viewport pixels, as a computer-use agent acts). The image is the judge's step screenshot.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.envs.odysseys.browser import SCROLL_DIRECTIONS, ActionError, Browser, Observation, TabClosed
from harness.envs.odysseys.layout import URL_CHARS
from harness.text import shortened
from harness.types import ImagePart, ToolCall, ToolSpec

MAX_FIND_LINES = 20
ECHO_CHARS = 200  # of a typed text echoed in the result (1 MB typed: the page itself was cut from the result)
FIND_LINE_CHARS = 2_000  # of each page line `find` shows (a page of one 1 MB line)


def _spec(name: str, description: str, props: dict[str, Any] | None = None, required: tuple[str, ...] = ()
          ) -> ToolSpec:
    return ToolSpec(name, description, {"type": "object", "properties": props or {}, "required": list(required)})


_ELEMENT = {"type": "integer", "description": "The element's number, shown in brackets on the page, e.g. 3 for [3]"}
_URL = {"type": "string", "description": "The URL to open, e.g. https://example.com/page"}
_TAB = {"type": "integer", "description": "The tab's number, as listed under Tabs (0 is the first)"}
TOOL_SPECS = (
    _spec("goto", "Open a URL in the current tab.", {"url": _URL}, ("url",)),
    _spec("go_back", "Go back to the previous page in the current tab."),
    _spec("tab_open", "Open a new tab, at a URL if given, and switch to it.", {"url": _URL}),
    _spec("tab_switch", "Switch to another open tab.", {"index": _TAB}, ("index",)),
    _spec("tab_close", "Close a tab.", {"index": _TAB}, ("index",)),
    _spec("click", "Click an element of the page (a link, button, checkbox, ...).", {"element": _ELEMENT},
          ("element",)),
    _spec("type", "Replace the text in a text field with `text`; with submit=true, press Enter afterwards.",
          {"element": _ELEMENT, "text": {"type": "string", "description": "The text to enter"},
           "submit": {"type": "boolean", "description": "Press Enter after typing (default false)"}},
          ("element", "text")),
    _spec("select", "Choose an option of a drop-down list, by its label or value.",
          {"element": _ELEMENT, "value": {"type": "string", "description": "The option's label or value"}},
          ("element", "value")),
    _spec("scroll", "Scroll the page (the page text always shows the whole page; scrolling moves the screenshot).",
          {"direction": {"type": "string", "enum": list(SCROLL_DIRECTIONS)}}, ("direction",)),
    _spec("find", "Find text on the page: lists the page lines that contain it (with their element numbers) and "
          "scrolls to the first match. Useful when the page was truncated.",
          {"text": {"type": "string", "description": "The text to look for (case-insensitive)"}}, ("text",)),
    _spec("read_page", "Show the current page again, with fresh element numbers."),
)
_PIXEL = {"type": "integer", "description": "Pixels from the screenshot's {} edge"}
SCREEN_TOOL_SPECS = (  # browser.observation=screenshot: actions by screen position instead of element number
    *(t for t in TOOL_SPECS if t.name in ("goto", "go_back", "tab_open", "tab_switch", "tab_close")),
    _spec("click_at", "Click at a point of the screenshot (pixels from its top-left corner).",
          {"x": {**_PIXEL, "description": _PIXEL["description"].format("left")},
           "y": {**_PIXEL, "description": _PIXEL["description"].format("top")}}, ("x", "y")),
    _spec("type_text", "Type text into the field that has the keyboard focus (click_at it first); with "
          "submit=true, press Enter afterwards.",
          {"text": {"type": "string", "description": "The text to type"},
           "submit": {"type": "boolean", "description": "Press Enter after typing (default false)"}}, ("text",)),
    _spec("press_key", "Press a key or chord: Enter, Tab, Escape, Backspace, ArrowDown, PageDown, Control+A, ...",
          {"key": {"type": "string", "description": "The key, in Playwright's key names"}}, ("key",)),
    _spec("scroll", "Scroll the page.", {"direction": {"type": "string", "enum": list(SCROLL_DIRECTIONS)}},
          ("direction",)),
    _spec("find", "Find text on the page and scroll to its first match; says how many places contain it.",
          {"text": {"type": "string", "description": "The text to look for (case-insensitive)"}}, ("text",)),
    _spec("read_page", "Take a fresh screenshot of the current page."),
)


def tool_specs(mode: str) -> list[ToolSpec]:
    """The tools the agent is offered under browser.observation=`mode`."""
    return list(SCREEN_TOOL_SPECS if mode == "screenshot" else TOOL_SPECS)


class ArgumentError(ValueError):
    """A tool argument that is missing or of the wrong kind."""


@dataclass(frozen=True)
class BrowserResult:
    """One tool call's result. `observation_chars` is the answer's length before the cap; `archive_misses` the
    page (document) URLs the replay archive could not answer during the call; `screenshot_note` why there is no
    screenshot when there is none."""

    content: str
    is_error: bool = False
    url: str = ""
    screenshot_file: str | None = None
    truncated: bool = False
    observation_chars: int = 0
    observation_cap: int = 0
    archive_misses: tuple[str, ...] = ()
    step: int = 0
    screenshot_note: str = ""
    images: tuple[ImagePart, ...] = ()  # the screenshot shown to the agent (browser.observation=screenshot|both)
    tabs: str = ""  # the open tabs after the call (Observation.tabs_line; "" after an error: not observed)

    def record(self) -> dict[str, Any]:
        """Everything but the content (and the images' bytes), for a transcript line."""
        return {"step": self.step, "url": self.url, "screenshot_file": self.screenshot_file,
                "truncated": self.truncated, "observation_chars": self.observation_chars,
                "observation_cap": self.observation_cap, "archive_misses": list(self.archive_misses),
                **({"screenshot_note": self.screenshot_note} if self.screenshot_note else {}),
                **({"images_shown": len(self.images)} if self.images else {})}


class BrowserTools:
    """`tools()` and `execute(call)` over one Browser. Screenshots go to `screenshots_dir` (None: none taken)."""

    def __init__(self, browser: Browser, screenshots_dir: str | Path | None, *,
                 observation_cap: int | None = None, observation: str | None = None) -> None:
        self.browser = browser
        self.screenshots_dir = Path(screenshots_dir) if screenshots_dir is not None else None
        self.cap = observation_cap or browser.config.observation_cap
        self.mode = observation or browser.config.observation
        self.step = 0  # calls so far; names the screenshot of each
        handlers: dict[str, Callable[[dict[str, Any]], tuple[str, Observation]]] = {
            "goto": self._goto, "go_back": self._go_back, "tab_open": self._tab_open,
            "tab_switch": self._tab_switch, "tab_close": self._tab_close, "click": self._click, "type": self._type,
            "select": self._select, "scroll": self._scroll, "find": self._find, "read_page": self._read_page,
            "click_at": self._click_at, "type_text": self._type_text, "press_key": self._press_key}
        self._handlers = {t.name: handlers[t.name] for t in tool_specs(self.mode)}  # only the mode's tools

    def tools(self) -> list[ToolSpec]:
        return tool_specs(self.mode)

    def execute(self, call: ToolCall) -> BrowserResult:
        """The new page (or a tool error); raises BrowserCrashed when the browser crashed or hung."""
        self.step += 1
        misses_before = len(self.browser.archive_misses)
        handler = self._handlers.get(call.name)
        tabs = ""
        try:
            if handler is None:
                raise ArgumentError(f"unknown tool '{call.name}'; available tools: {', '.join(self._handlers)}")
            header, observation = handler(call.parsed_arguments())
            page = observation.head() if self.mode == "screenshot" else observation.text()
            tabs = observation.tabs_line()
            text, is_error = f"{header}\n\n{page}", False
        except (ActionError, ValueError) as exc:  # ArgumentError and malformed JSON arguments are ValueErrors
            text, is_error = f"Error: {_named(call.name, str(exc))}", True
        notes = self.browser.take_notes()  # dialogs answered, downloads refused
        if notes:  # after the first line, before the page: what the observation cap cuts is the page's end
            first, gap, rest = text.partition("\n\n")
            text = "\n".join([first, *notes]) + gap + rest
        misses = tuple(url for url, kind in self.browser.archive_misses[misses_before:] if kind == "document")
        if misses:
            text = (f"Error: not in the replay archive (no network in replay mode): "
                    f"{shortened(misses[-1], URL_CHARS)}\n\n{text}")
            is_error = True
        content, truncated = cap_text(text, self.cap)
        if self.mode == "aria":
            shot, failed = self._screenshot()
            images: tuple[ImagePart, ...] = ()
        else:
            shot, failed, images = self._shown_screenshot()
        note = str(failed) if failed else ""
        if isinstance(failed, TabClosed):  # the page shown above hung after it was read: its tab is gone, and
            content, is_error = f"{content}\n\nError: {note}", True  # its numbers with it
        elif note and self.mode != "aria":
            content += f"\n(no screenshot: {note})"
        url = shortened(self.browser.url(), URL_CHARS)
        return BrowserResult(content, is_error, url, shot, truncated, len(text), self.cap, misses, self.step, note,
                             images, tabs)

    def _screenshot(self) -> tuple[str | None, ActionError | None]:
        if self.screenshots_dir is None:
            return None, None
        try:
            return str(self.browser.screenshot(self.screenshots_dir / f"step_{self.step:03d}.png")), None
        except ActionError as exc:
            return None, exc

    def _shown_screenshot(self) -> tuple[str | None, ActionError | None, tuple[ImagePart, ...]]:
        """The viewport as the agent's image part (also the judge's step screenshot when one is kept)."""
        path = self.screenshots_dir / f"step_{self.step:03d}.png" if self.screenshots_dir is not None else None
        try:
            png = self.browser.capture(path)
        except ActionError as exc:
            return None, exc, ()
        width, height = png_size(png) or (self.browser.config.viewport_width, self.browser.config.viewport_height)
        image = ImagePart("image/png", base64.b64encode(png).decode("ascii"), width, height,
                          str(path) if path is not None else None)
        return image.file, None, (image,)

    # ---- tools ---------------------------------------------------------------------------------------------
    def _goto(self, args: dict[str, Any]) -> tuple[str, Observation]:
        url = _string(args, "url")
        return f"Opened {shortened(url, URL_CHARS)}.", self.browser.goto(url)

    def _go_back(self, args: dict[str, Any]) -> tuple[str, Observation]:
        return "Went back.", self.browser.go_back()

    def _tab_open(self, args: dict[str, Any]) -> tuple[str, Observation]:
        url = _string(args, "url", required=False)
        shown = f" at {shortened(url, URL_CHARS)}" if url else ""
        return f"Opened a new tab{shown}.", self.browser.tab_open(url or None)

    def _tab_switch(self, args: dict[str, Any]) -> tuple[str, Observation]:
        index = _number(args, "index")
        return f"Switched to tab {index}.", self.browser.tab_switch(index)

    def _tab_close(self, args: dict[str, Any]) -> tuple[str, Observation]:
        index = _number(args, "index")
        return f"Closed tab {index}.", self.browser.tab_close(index)

    def _click(self, args: dict[str, Any]) -> tuple[str, Observation]:
        element = self.browser.element(_number(args, "element"))
        return f"Clicked {element.label()}.", self.browser.click(element.number)

    def _type(self, args: dict[str, Any]) -> tuple[str, Observation]:
        element = self.browser.element(_number(args, "element"))
        text, submit = _string(args, "text", allow_empty=True), _flag(args, "submit")
        observation = self.browser.type(element.number, text, submit)
        typed = json.dumps(shortened(text, ECHO_CHARS))
        return f"Typed {typed} into {element.label()}{' and pressed Enter' if submit else ''}.", observation

    def _select(self, args: dict[str, Any]) -> tuple[str, Observation]:
        element = self.browser.element(_number(args, "element"))
        value = _string(args, "value", allow_empty=True)
        shown = json.dumps(shortened(value, ECHO_CHARS))
        return f"Selected {shown} in {element.label()}.", self.browser.select(element.number, value)

    def _scroll(self, args: dict[str, Any]) -> tuple[str, Observation]:
        direction = _string(args, "direction")
        return f"Scrolled {direction}.", self.browser.scroll(direction)

    def _find(self, args: dict[str, Any]) -> tuple[str, Observation]:
        text = _string(args, "text")
        lines, observation = self.browser.find(text)
        said = json.dumps(shortened(text, ECHO_CHARS))
        if not lines:
            return f"No match for {said} on this page.", observation
        if self.mode == "screenshot":  # the page text (and its line numbers) is not shown in this mode
            return f"{len(lines)} place(s) on the page contain {said}; scrolled to the first.", observation
        shown = [shortened(line, FIND_LINE_CHARS) for line in lines[:MAX_FIND_LINES]]
        more = f"\n  ... and {len(lines) - len(shown)} more" if len(lines) > len(shown) else ""
        return (f"{len(lines)} line(s) of the page contain {said} (line numbers of the page text "
                "below):\n  " + "\n  ".join(shown) + more), observation

    def _read_page(self, args: dict[str, Any]) -> tuple[str, Observation]:
        return "The current page:", self.browser.observe()

    def _click_at(self, args: dict[str, Any]) -> tuple[str, Observation]:
        x, y = _number(args, "x"), _number(args, "y")
        return f"Clicked at ({x}, {y}).", self.browser.click_at(x, y)

    def _type_text(self, args: dict[str, Any]) -> tuple[str, Observation]:
        text, submit = _string(args, "text", allow_empty=True), _flag(args, "submit")
        observation = self.browser.type_text(text, submit)
        return f"Typed {json.dumps(shortened(text, ECHO_CHARS))}{' and pressed Enter' if submit else ''}.", observation

    def _press_key(self, args: dict[str, Any]) -> tuple[str, Observation]:
        key = _string(args, "key")
        return f"Pressed {key}.", self.browser.press_key(key)


def png_size(png: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG's IHDR chunk (the first, at bytes 16-24), None when it is not a PNG."""
    if png[:8] != b"\x89PNG\r\n\x1a\n" or len(png) < 24:
        return None
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def _named(tool: str, message: str) -> str:
    """The tool's error, led by its name once: the browser's own messages may already start with it (`goto <url>:
    ...`, `click [3]: ...`), which read `goto: goto <url>: ...` with the name added again."""
    return message if message.startswith((f"{tool} ", f"{tool}:")) else f"{tool}: {message}"


def cap_text(text: str, cap: int) -> tuple[str, bool]:
    """At most `cap` characters, cut at a line end where one is near, with a note saying how much was shown."""
    if len(text) <= cap:
        return text, False
    note = f"\n[... truncated: {{}} of {len(text)} characters shown; use find(text) to search the rest]"
    room = max(0, cap - len(note.format(cap)))
    cut = text.rfind("\n", 0, room)
    cut = cut if cut >= room // 2 else room
    return text[:cut] + note.format(cut), True


# ---- arguments ------------------------------------------------------------------------------------------------
def _string(args: dict[str, Any], key: str, *, required: bool = True, allow_empty: bool = False) -> str:
    value = args.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise ArgumentError(f"'{key}' must be a string" + ("" if key in args else " (missing)"))
    if not value.strip() and not allow_empty:
        raise ArgumentError(f"'{key}' must not be empty")
    return value


def _number(args: dict[str, Any], key: str) -> int:
    """A whole number; "3" and "[3]" are accepted too (what the page shows)."""
    value = args.get(key)
    if isinstance(value, bool):
        raise ArgumentError(f"'{key}' must be a number, not {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    m = re.fullmatch(r"\s*\[?\s*(\d+)\s*\]?\s*", value) if isinstance(value, str) else None
    if m is None:
        raise ArgumentError(f"'{key}' must be a number such as 3" + ("" if key in args else " (missing)"))
    return int(m.group(1))


def _flag(args: dict[str, Any], key: str) -> bool:
    value = args.get(key, False)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ArgumentError(f"'{key}' must be true or false, not {value!r}")
