"""A proxied request's JSON body, read and written in what changed since the conversation's
previous request.

A client resends its whole history every time: the body of the next request starts with the
bytes of the previous one up to its last message. The body is scanned at its top level, and
its conversation (``messages``, or ``input``) element by element, each element with the
standard JSON decoder, keeping where each element's text is. When the new body starts with the
previous one's text up to its last element, those elements are the previous request's own
objects (parsed and checked once), and only the rest is read. The upstream's body is the
client's text with the spans that changed replaced: the conversation's array joined from the
client's own element texts and the messages ctxmgmt wrote, ``model`` and ``tools`` when they
change. Untouched messages go upstream byte for byte as the client sent them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import sys
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import is_, is_not, itemgetter
from typing import Any

from ...loader import json_containers
from ...messages import CACHE_CONTROL, cache_controls, without_cache_control
from ...types import MARK_MEMBER, MARK_MEMBER_REFUSED
from ..errors import HTTPProblem
from ..requests import DECODER, check_values, json_problem

__all__ = [
    "BODIES_BYTES",
    "MAX_CONTAINERS",
    "Bodies",
    "Body",
    "parse",
    "positions",
    "size_of",
    "upstream_text",
]

BODIES_BYTES = 256 << 20
"""The previous bodies a process keeps to read the next ones from, by their text's size."""
MAX_CONTAINERS = 500_000
"""A body holds at most this many JSON arrays and objects. A 10,000-message history with tool
calls holds about 60,000; reading each costs CPU time beyond its bytes, and a few MiB of tiny
nested arrays would otherwise cost seconds a request."""
_FINGERPRINT = 1024
"""A body is found again by its first characters (its system prompt and first messages)."""

_WS = re.compile(r"[ \t\n\r]*")


@dataclass(slots=True)
class Body:
    """A scanned body: its values, and where the conversation's elements are in its text."""

    text: str
    data: dict[str, Any]
    member: str
    """The member that holds the conversation (``messages``, ``input``)."""
    spans: list[tuple[int, int]] = field(default_factory=list)
    """Where each element of ``data[member]`` is in ``text`` (when it is an array)."""
    array: tuple[int, int] | None = None
    """Where ``data[member]``'s array is, brackets included."""
    values: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Where each other top-level value is."""
    marks: tuple[int, int, int, int] = (0, 0, 0, 0)
    """The brackets (at least its arrays and objects), quotes, commas and ``\\u`` escapes of
    :attr:`prefix`, counted once per text: the next body's container budget and the bound of
    what its parsed values hold (see :func:`size_of`) count only the text after it."""
    hashed: list[tuple[int, Any]] = field(default_factory=list)
    """SHA-256 states of the text from the first element's start to an offset (taken by
    :meth:`digest`, kept by the next body while its text starts the same)."""
    grown: bool = False
    """Whether the body was read from a previous one: its first elements are that body's own
    objects (else every element is a new object, equal or not)."""
    read_from: int = 0
    """Where the text was read from: past the previous body's elements it starts with (0 when
    it was read whole)."""
    extends: bool = False
    """Whether the body starts with every element of the one it was read from (not only with
    its first ones): the next request of that conversation, which replaces it in
    :class:`Bodies`."""
    canon: list[Any] = field(default_factory=list)
    """The conversation as ctxmgmt manages it: each element without its prompt-cache
    breakpoints (a copy where it has one), and the very object the previous body gave where it
    is equal to it. A client that moves its breakpoint (to its newest message, on every
    request) changes the text of the elements it leaves: the conversation it continues is
    still made of the same objects."""
    copied: tuple[int, int, int, int] = (0, 0, 0, 0)
    """The marks (see :attr:`marks`) of the elements :attr:`canon` holds a copy of: what the
    copies may hold beside the elements (:func:`size_of`)."""

    @property
    def prefix_end(self) -> int:
        """Where :attr:`prefix` ends in the text."""
        if self.array is None:
            return 0
        return self.spans[-1][1] if self.spans else self.array[0] + 1

    @property
    def prefix(self) -> str:
        """The text up to the end of the last element: what the next request starts with."""
        return self.text[: self.prefix_end]

    def breakpoints(self) -> list[int]:
        """The conversation's elements whose text holds a ``cache_control`` key, found at C
        speed (a look-alike inside a string is found too: the caller reads the object)."""
        return [] if self.array is None else self._marked(*self.array)

    def _marked(self, at: int, end: int) -> list[int]:
        """:meth:`breakpoints` between two offsets of the text."""
        text, spans = self.text, self.spans
        out: list[int] = []
        while (at := text.find(_KEY, at, end)) >= 0:
            k = bisect_right(spans, at, key=itemgetter(0)) - 1
            if k >= 0 and (not out or out[-1] != k):
                out.append(k)
            at += len(_KEY)
        return out

    def digest(self, upto: Any) -> str | None:
        """A fingerprint of the client's own text of its first ``upto`` elements (None when it
        has not as many), without their prompt-cache breakpoints (a client moves them to its
        newest message on every request), and with every other member of that name (in a
        tool's input: the model's data). It costs the text since the longest fingerprint this
        body or the bodies it grew from took, not the whole."""
        if self.array is None or not isinstance(upto, int) or not 0 < upto <= len(self.spans):
            return None
        start, end = self.spans[0][0], self.spans[upto - 1][1]
        at, state = max(
            ((e, h) for e, h in self.hashed if e <= end), default=(start, None), key=itemgetter(0)
        )
        state = hashlib.sha256() if state is None else state.copy()  # a kept state never changes
        for piece in self._unmarked(at, end):
            state.update(piece.encode("utf-8", "surrogatepass"))
        if at < end:
            self.hashed = [*self.hashed[-1:], (end, state)]
        return str(state.hexdigest())

    def _unmarked(self, at: int, end: int) -> Iterator[str]:
        """The text of whole elements from ``at`` to ``end`` without the breakpoints a provider
        reads (:func:`_unmarked_element`)."""
        items = self.data[self.member]
        for k in self._marked(at, end):
            start, stop = self.spans[k]
            stripped = _unmarked_element(self.text[start:stop], items[k])
            if stripped is not None:
                yield self.text[at:start]
                yield stripped
                at = stop
        yield self.text[at:end]


_CHOICES = 16
"""Choices of an element's ``cache_control`` members tried as its provider breakpoints."""
_CHOICE_CHARS = 1 << 20
"""Characters of an element's text parsed in all to try those choices: a large element (a long
tool result) gets fewer tries (one past 1 MiB), so a request's fingerprint costs what its
size does, not 16 parses of it."""


def _unmarked_element(text: str, item: Any) -> str | None:
    """An element's text without the breakpoints a provider reads on it, as the client writes
    it without them: the members named ``cache_control`` (with a flat object, see
    :data:`_BREAKPOINT`) whose removal leaves the element as ctxmgmt manages it (one in a
    tool's input is the model's data, and stays). None when it holds no breakpoint, or no
    such choice is found (a breakpoint of another value): it is fingerprinted as written,
    which no text without that breakpoint matches (a miss, never two histories as one)."""
    breakpoints = cache_controls(item)
    if not breakpoints:
        return None
    spans = [m.span() for m in _BREAKPOINT.finditer(text)]
    want = without_cache_control(item)
    tries = max(1, min(_CHOICES, _CHOICE_CHARS // max(1, len(text))))
    for chosen in itertools.islice(itertools.combinations(spans, breakpoints), tries):
        kept, at = [], 0
        for start, end in chosen:
            kept.append(text[at:start])
            at = end
        kept.append(text[at:])
        out = "".join(kept)
        try:
            if DECODER.decode(out) == want:
                return out
        except (RecursionError, ValueError):
            continue
    return None


_KEY = f'"{CACHE_CONTROL}"'
_MEMBER = _KEY + r"\s*:\s*(?:\{[^{}]*\}|null)"
_BREAKPOINT = re.compile(rf",\s*{_MEMBER}|{_MEMBER}\s*(?:,\s*)?")
"""A ``cache_control`` member (its value a flat object, or ``null``, which clients that write
every optional field put on each block) and the comma that parts it from its neighbour: the
text of its object as the client writes it without one. Each alternative
begins with a literal character (no leading whitespace pattern, which a long run of blanks would
make quadratic), so a search is linear in the text. Only a fingerprint is
made of the text it leaves (a look-alike in a string fools no more than that fingerprint)."""


def _error(text: str, at: int, message: str) -> HTTPProblem:
    return json_problem(json.JSONDecodeError(message, text, at))


def _value(text: str, at: int) -> tuple[Any, int]:
    try:
        return DECODER.raw_decode(text, at)
    except (RecursionError, ValueError) as exc:
        raise json_problem(exc, text, at) from None


def _ws(text: str, at: int) -> int:
    found = _WS.match(text, at)
    return found.end() if found else at


def _expect(text: str, at: int, chars: str) -> str:
    if at >= len(text) or text[at] not in chars:
        raise _error(text, at, f"expected {' or '.join(repr(c) for c in chars)}")
    return text[at]


def parse(text: str, field: str, previous: Body | None = None) -> Body:
    """The body of ``text``; its ``field``'s elements read only past ``previous``'s, when the
    text starts with them (see the module docstring). Checked as every JSON body is
    (:func:`ctxmgmt.api.requests.check_values`): what ``previous`` held was checked then."""
    reuse = previous is not None and previous.member == field and previous.array is not None
    kept = _kept(text, previous) if previous is not None and reuse else None
    if kept is not None:
        assert previous is not None and previous.array is not None
        n, end = kept  # the previous body's first n elements, its text to ``end``
        whole = n == len(previous.spans)
        # A body read past a changed element is counted whole (its marks are the kept text's).
        exact = _budget(text, end, previous.marks[0]) if whole else _budget(text, 0, 0)
        body = Body(text, {}, field, previous.spans[:n], previous.array, {})
        body.hashed = [(e, h) for e, h in previous.hashed if e <= end]
        body.grown, body.extends, body.read_from = True, whole, end
        body.data = {
            k: v for k, v in previous.data.items() if previous.values.get(k, (0, 0))[0] < previous.array[0]
        }
        body.values = {k: v for k, v in previous.values.items() if v[0] < previous.array[0]}
        elements = previous.data[field][:n]
        at = _elements(text, end, elements, body.spans, first=not elements, member=field)
        body.data[field] = elements
        _check_new(text, body, n)
        _rest(text, at, body)
        before = previous.marks if whole else _marks(text, 0, end, (0, 0, 0, 0))
        body.marks = _marks(text, end, body.prefix_end, before, exact)
        _canonical(body, previous, n)
        return body
    exact = _budget(text, 0, 0)
    body = Body(text, {}, field)
    at = _ws(text, 0)
    _expect(text, at, "{")
    at = _ws(text, at + 1)
    if text.startswith("}", at):
        _end(text, at + 1)
        check_values(body.data, nul=False, text=text)
        return body
    _members(text, at, body)
    check_values(body.data, nul=False, text=text)
    body.marks = _marks(text, 0, body.prefix_end, (0, 0, 0, 0), exact)
    _canonical(body, None, 0)
    return body


_MOVED = 8
"""How many of a previous body's last elements may have changed for the rest to be kept: a
breakpoint moved from the newest message, or from the last two user messages' older one."""


def _kept(text: str, previous: Body) -> tuple[int, int] | None:
    """(how many of ``previous``'s elements ``text`` starts with, where their text ends) when
    it starts with all of them, or with all but a few of the newest (a moved breakpoint);
    None when it starts with none of those."""
    prefix = previous.prefix
    if prefix and text.startswith(prefix):
        return len(previous.spans), len(prefix)
    spans, old = previous.spans, previous.text
    for n in range(len(spans) - 1, max(0, len(spans) - 1 - _MOVED), -1):
        start, end = spans[n - 1]
        if text[start:end] != old[start:end]:  # its last element differs: no need to copy more
            continue
        after = _ws(text, end)
        if after < len(text) and text[after] == "," and text.startswith(old[:end]):
            return n, end
    return None


def _canonical(body: Body, previous: Body | None, kept: int) -> None:
    """Make :attr:`Body.canon` (and :attr:`Body.copied`): ``previous``'s for the ``kept``
    elements read from it, then each new element without its breakpoints, the previous body's
    object where that is equal."""
    if body.array is None:
        return
    elements, spans, text = body.data[body.member], body.spans, body.text
    canon = previous.canon[:kept] if previous is not None else []
    copied = previous.copied if previous is not None and kept == len(previous.spans) else (0, 0, 0, 0)
    if previous is not None and kept < len(previous.spans):  # the kept copies' marks, counted again
        for i in itertools.compress(range(kept), map(is_not, canon, elements)):
            copied = _marks(text, *spans[i], copied)
    before = previous.canon if previous is not None else []
    for i in range(len(canon), len(elements)):
        m = elements[i]
        start, end = spans[i]
        plain = m if text.find(_KEY, start, end) < 0 else without_cache_control(m)
        if i < len(before) and before[i] is not m and before[i] == plain:
            plain = before[i]  # the very object it was: the conversation goes on
        if plain is not m:  # held beside the element
            copied = _marks(text, start, end, copied)
        canon.append(plain)
    body.canon, body.copied = canon, copied


def _marks(
    text: str, start: int, end: int, before: tuple[int, int, int, int], exact: int | None = None
) -> tuple[int, int, int, int]:
    """``before`` and the marks of ``text[start:end]`` (see :attr:`Body.marks`); ``exact``: the
    whole text's arrays and objects, when counted, stand for its brackets."""
    brackets = before[0] + text.count("[", start, end) + text.count("{", start, end)
    return (
        brackets if exact is None else exact,
        before[1] + text.count('"', start, end),
        before[2] + text.count(",", start, end),
        before[3] + text.count("\\u", start, end),
    )


def _budget(text: str, start: int, before: int) -> int | None:
    """Refuse ``text`` before it is decoded when it holds more than :data:`MAX_CONTAINERS`
    arrays and objects, ``before`` of them (a bound) up to ``start``. The brackets past
    ``start`` are counted in C, strings and all; only a count over the budget is made exact,
    over the whole text, and returned (a bound for any part of it, kept by the next body)."""
    if before + text.count("[", start) + text.count("{", start) <= MAX_CONTAINERS:
        return None
    exact = json_containers(text, MAX_CONTAINERS)
    if exact > MAX_CONTAINERS:
        raise HTTPProblem(
            400,
            f"the body holds {exact} JSON arrays and objects, more than the {MAX_CONTAINERS} "
            "a request may hold; send fewer or flatter values",
        )
    return exact


def _members(text: str, at: int, body: Body) -> None:
    """The top-level members from ``at`` (a key's start) to the closing brace."""
    while True:
        _expect(text, at, '"')
        start = at
        key, at = _value(text, at)
        if key in body.data or key in body.values:
            raise _error(text, start, f"the member {key[:60]!r} is given twice; give it once")
        at = _ws(text, at)
        _expect(text, at, ":")
        at = _ws(text, at + 1)
        if key == body.member and text.startswith("[", at):
            start = at
            elements: list[Any] = []
            body.spans = []
            at = _elements(text, at + 1, elements, body.spans, first=True, member=key)
            body.data[key] = elements
            body.array = (start, at)
            body.values.pop(key, None)
        else:
            value, end = _value(text, at)
            body.data[key] = value
            body.values[key] = (at, end)
            if key == body.member:
                body.array, body.spans = None, []
            at = end
        at = _ws(text, at)
        if _expect(text, at, ",}") == "}":
            _end(text, at + 1)
            return
        at = _ws(text, at + 1)


def _elements(
    text: str, at: int, out: list[Any], spans: list[tuple[int, int]], *, first: bool, member: str
) -> int:
    """Read array elements from ``at`` (after ``[`` when ``first``, else after the last
    element) to the closing bracket; returns the position after it. An element that holds
    ctxmgmt's own :data:`~ctxmgmt.types.MARK_MEMBER` is refused (it would tell the token count
    and the turn rules what to believe)."""
    at = _ws(text, at)
    if first:
        if text.startswith("]", at):
            return at + 1
    else:
        if _expect(text, at, ",]") == "]":
            return at + 1
        at = _ws(text, at + 1)
    while True:
        value, end = _value(text, at)
        if type(value) is dict and MARK_MEMBER in value:
            raise HTTPProblem(400, f"/{member}/{len(out)}/{MARK_MEMBER}: {MARK_MEMBER_REFUSED}")
        out.append(value)
        spans.append((at, end))
        at = _ws(text, end)
        if _expect(text, at, ",]") == "]":
            return at + 1
        at = _ws(text, at + 1)


def _rest(text: str, at: int, body: Body) -> None:
    """After the conversation's array: the other members, to the end."""
    assert body.array is not None
    body.array = (body.array[0], at)
    at = _ws(text, at)
    if _expect(text, at, ",}") == "}":
        _end(text, at + 1)
    else:
        _members(text, _ws(text, at + 1), body)
    rest = {k: v for k, v in body.data.items() if k != body.member and body.values[k][0] > body.array[0]}
    check_values(rest, nul=False, text=text[body.array[1] :])


def _check_new(text: str, body: Body, start: int) -> None:
    """The new elements, checked as a body's values are (nested two deep in the body); on a
    problem, the whole conversation is walked for its exact pointer."""
    if start >= len(body.spans):
        return
    first, last = body.spans[start][0], body.spans[-1][1]
    try:
        check_values(body.data[body.member][start:], nul=False, text="[[" + text[first:last] + "]]")
    except HTTPProblem:
        check_values({body.member: body.data[body.member]}, nul=False)
        raise


def _end(text: str, at: int) -> None:
    at = _ws(text, at)
    if at != len(text):
        raise _error(text, at, "extra data after the body's object")


def upstream_text(body: Body, messages: Sequence[Any] | None, changes: Mapping[str, Any]) -> str:
    """The upstream's body: ``body``'s text with its conversation replaced by ``messages``
    (the client's own element texts where a message is one of its elements, JSON for the
    rest; None: the conversation as the client wrote it) and the top-level ``changes``
    (``model``, ``tools``) written in."""
    if messages is None:
        return upstream_text(body, body.data[body.member], changes) if body.array else _written(body, changes)
    if body.array is None:  # the conversation is not an array of elements: written whole
        given = body.data.get(body.member)
        if isinstance(given, str) and list(messages) == [{"role": "user", "content": given}]:
            return _written(body, changes)  # a Responses string input no manager changed: as sent
        return json.dumps({**body.data, body.member: list(messages), **changes}, ensure_ascii=False)
    spans, text = body.spans, body.text
    parts: list[str] = []
    prefix, where = _positions(messages, body.data[body.member])
    run: list[int] = [0, prefix - 1] if prefix else []  # the client's consecutive elements: one slice
    for i in range(prefix, len(messages)):
        m, k = messages[i], where[i]
        if run and k == run[1] + 1:
            run[1] = k
            continue
        if run:
            parts.append(text[spans[run[0]][0] : spans[run[1]][1]])
            run = []
        if k is None:
            parts.append(json.dumps(m, ensure_ascii=False))
        else:
            run = [k, k]
    whole = run == [0, len(spans) - 1] and len(parts) == 0  # the client's array as it wrote it
    if run:
        parts.append(text[spans[run[0]][0] : spans[run[1]][1]])
    edits: list[tuple[int, int, str]] = [] if whole else [(*body.array, "[" + ", ".join(parts) + "]")]
    added = []
    for key, value in changes.items():
        if key in body.values:
            if body.data.get(key) != value:
                edits.append((*body.values[key], json.dumps(value, ensure_ascii=False)))
        else:
            added.append(f"{json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
    text = body.text
    out = []
    at = 0
    for start, end, replacement in sorted(edits):
        out += [text[at:start], replacement]
        at = end
    tail = text[at:]
    if added:  # before the closing brace
        close = tail.rstrip().rfind("}")
        tail = tail[:close] + ", " + ", ".join(added) + tail[close:]
    return "".join(out) + tail


def _written(body: Body, changes: Mapping[str, Any]) -> str:
    """A body without an array of elements for its conversation, ``changes`` written in."""
    return json.dumps({**body.data, **changes}, ensure_ascii=False)


def positions(view: Sequence[Any], items: Sequence[Any]) -> list[int | None]:
    """Where each of ``view``'s objects is in ``items`` (the very object), or None (a
    message ctxmgmt wrote). A view mostly keeps runs of the items in order, so the item after
    the last one found is tried first; any other is looked up in a map of the items made at
    the first such message (in any order, twice or not at all)."""
    return _positions(view, items)[1]


def _positions(view: Sequence[Any], items: Sequence[Any]) -> tuple[int, list[int | None]]:
    """(how many of ``view``'s first objects are ``items``' first ones, :func:`positions`).
    The common start and the common end are found at C speed (a view that did not change is
    a long start; a summary and the newest messages, a short start and a long end), and so
    are which of the rest are items at all: what costs the items' length in Python is only
    a view that holds items out of their order."""
    n = len(view)
    prefix = _common(view, items)
    if prefix == n:
        return prefix, list(range(n))
    tail = min(_common(reversed(view), reversed(items)), n - prefix)
    out: list[int | None] = list(range(prefix))
    rest = view[prefix : n - tail]
    found = {id(m) for m in rest}.intersection(map(id, items)) if rest else set()
    where: dict[int, int] | None = None
    at = prefix  # the item after the last one found
    for m in rest:
        if at < len(items) and items[at] is m:
            k: int | None = at
        elif id(m) not in found:  # no item at all (both alive: an id is one object's)
            k = None
        else:
            if where is None:
                where = dict(zip(map(id, items), range(len(items)), strict=True))
            k = where.get(id(m))
            if k is not None and items[k] is not m:
                k = None
        out.append(k)
        if k is not None:
            at = k + 1
    out.extend(range(len(items) - tail, len(items)))
    return prefix, out


def _common(a: Iterable[Any], b: Iterable[Any]) -> int:
    """How many of the first objects of ``a`` and ``b`` are the very same, pair by pair."""
    same = list(map(is_, a, b))
    try:
        return same.index(False)
    except ValueError:
        return len(same)


class Bodies:
    """The bodies this process read last, within ``max_bytes``: a bounded LRU of single bodies,
    the oldest evicted first. The next request of a conversation starts with its previous
    body's text up to the last element; bodies are grouped by their first characters to find
    it (any number of conversations may share a long system prompt)."""

    def __init__(self, max_bytes: int = BODIES_BYTES) -> None:
        self.max_bytes = max_bytes
        self._order: OrderedDict[int, tuple[str, Body, int]] = OrderedDict()
        """Each kept body by its id, oldest first: (its group, the body, its size)."""
        self._groups: dict[str, dict[int, Body]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def find(self, text: str) -> Body | None:
        """The kept body whose text up to its last element ``text`` starts with (the longest),
        or else up to one of its last few (a moved breakpoint changed the newest: see
        :func:`parse`)."""
        with self._lock:
            found = self._groups.get(text[:_FINGERPRINT])
            candidates = list(found.values()) if found else []
        best = None
        for body in candidates:
            prefix = body.prefix
            if prefix and text.startswith(prefix) and (best is None or len(prefix) > len(best.prefix)):
                best = body
        if best is not None:
            return best
        most = 0
        for body in candidates:
            kept = _kept(text, body) if body.array is not None else None
            if kept is not None and kept[1] > most:
                best, most = body, kept[1]
        return best

    def keep(self, body: Body, previous: Body | None, *, replaces: bool = True) -> None:
        """Keep ``body``, in place of ``previous`` (the one it was read from, if any) when it
        ``replaces`` it: not when another conversation with the same start may go on from it."""
        size = size_of(body)
        with self._lock:
            if previous is not None and replaces:
                self._drop(id(previous))
            if size > self.max_bytes or body.array is None:
                return
            self._drop(id(body))
            key = body.text[:_FINGERPRINT]
            self._order[id(body)] = (key, body, size)
            self._groups.setdefault(key, {})[id(body)] = body
            self._bytes += size
            while self._bytes > self.max_bytes:
                self._drop(next(iter(self._order)))

    def _drop(self, ident: int) -> None:
        found = self._order.pop(ident, None)
        if found is None:
            return
        key, _, size = found
        self._bytes -= size
        group = self._groups[key]
        del group[ident]
        if not group:
            del self._groups[key]


def size_of(body: Body) -> int:
    """The bytes a kept body holds, bounded from above whatever its values: its text, its
    strings' characters (at most the text's bytes, or 4 a character when an escape may widen
    them), and an object for each value its text can hold:
    a string for each two quotes, a number or a slot for each comma, a mapping or a list for
    each bracket (counted once for the conversation's elements, by :func:`parse`). Many tiny
    values hold 12 times their text; a history of prose, about twice."""
    text = body.text
    (a, b, c, d), (e, f, g, h) = body.marks, body.copied  # the copies' marks beside the body's
    containers, quotes, commas, escapes = _marks(
        text, body.prefix_end, len(text), (a + e, b + f, c + g, d + h)
    )
    # An escape may make a string of a narrow text wide (4 bytes a character).
    strings = 4 * len(text) if escapes else sys.getsizeof(text)
    return sys.getsizeof(text) + strings + 28 * quotes + 32 * commas + 160 * containers
