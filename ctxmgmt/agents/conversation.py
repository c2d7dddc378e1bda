"""The one conversation engine: a definition in any form (:class:`Source`, rebuilt when its
stored version changes), and the bookkeeping of one agent conversation (the caller's record,
the model's managed view, calibration, the prompt cache, ``post_tool`` then ``pre_llm``).

An adapter translates the framework's messages to a provider format and back, and wires
:class:`Conversation` into the framework's hook; the logic lives here, so every entry point
behaves the same.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import logging
import operator
import weakref
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cache import Pricing, PromptCache, ratios_for
from ..calibration import MAX_REPORTED, Calibration
from ..context import ApplyResult, Context
from ..definitions import Definition, Resolver, load_definition
from ..errors import ContextError, Problem
from ..formats import internal, is_tool_result
from ..history import EDGE, EXACT_UP_TO, SAMPLES, History, same_start
from ..managers.base import Environment
from ..messages import (
    CACHE_CONTROL,
    call_ids,
    check_messages,
    is_summary,
    mentions_archive,
    text_of,
    without_cache_control,
)
from ..tokens import TokenCounter, get_counter
from ..types import Hook, TraceEntry

if TYPE_CHECKING:
    from ..llm import ModelsConfig
    from ..offload import Offloader

__all__ = [
    "UNMANAGED",
    "USAGE_FIELDS",
    "Conversation",
    "DefinitionSource",
    "Source",
    "Translate",
    "Turn",
    "refuse_invalid",
    "reply_limit",
    "token_settings",
    "usage_record",
]

DefinitionSource = Any
"""A :class:`~ctxmgmt.Definition`, a file path, a shipped definition's name, a dict, or
``(client, name)`` for a definition stored on a registry server."""

log = logging.getLogger("ctxmgmt.adapters")

_ASYNC_CLIENT = (
    "the definition's registry client is an async one (AsyncClient), and this model call is "
    "synchronous: run the agent asynchronously (ainvoke, Runner.run, run()), which fetches "
    "it with Source.aget, or give the definition as (ctxmgmt.Client(url), name)"
)


class Source:
    """A definition given in any form. One stored on a registry server is fetched at every
    use and rebuilt only when its version changed, as the server's own resolve does."""

    def __init__(self, definition: DefinitionSource) -> None:
        self._definition: Definition | None = None
        self._remote: tuple[Any, str] | None = None
        self._resolver = Resolver(kept=1)  # the registry's definition, by its version
        if isinstance(definition, Definition):
            self._definition = definition
        elif isinstance(definition, tuple):
            if len(definition) != 2 or not isinstance(definition[1], str):
                raise TypeError("give a registry definition as (client, name)")
            self._remote = (definition[0], definition[1])
        elif isinstance(definition, (str, Path, Mapping)):
            self._definition = load_definition(definition)
        else:
            raise TypeError(
                "definition must be a Definition, a path, a shipped name, a dict or (client, name); "
                f"got {type(definition).__name__}"
            )

    @property
    def name(self) -> str:
        return (
            self._definition.name if self._definition is not None else str(self._remote and self._remote[1])
        )

    def get(self) -> Definition:
        """The definition, fetched again when it is a registry server's (with a
        :class:`~ctxmgmt.Client`: an :class:`~ctxmgmt.AsyncClient` is for :meth:`aget`)."""
        if self._remote is None:
            assert self._definition is not None
            return self._definition
        client, name = self._remote
        if inspect.iscoroutinefunction(client.get):
            raise TypeError(_ASYNC_CLIENT)
        stored = client.get(name)
        if inspect.isawaitable(stored):
            if inspect.iscoroutine(stored):
                stored.close()  # never awaited: closed here rather than warned about later
            raise TypeError(_ASYNC_CLIENT)
        return self._built(stored)

    async def aget(self) -> Definition:
        """:meth:`get` for async frameworks: an :class:`~ctxmgmt.AsyncClient`'s request is
        awaited, a :class:`~ctxmgmt.Client`'s (which blocks) runs in a worker thread."""
        if self._remote is None:
            assert self._definition is not None
            return self._definition
        client, name = self._remote
        if inspect.iscoroutinefunction(client.get):
            stored = await client.get(name)
        else:
            stored = await asyncio.to_thread(client.get, name)
            if inspect.isawaitable(stored):
                stored = await stored
        return self._built(stored)

    def _built(self, stored: Mapping[str, Any]) -> Definition:
        version = stored.get("version")

        def body() -> dict[str, Any]:
            return {k: v for k, v in stored.items() if k in ("name", "description", "settings", "hooks")}

        if version is None:  # no version to tell a change by: built each time
            self._definition = Definition.from_dict(body())
        else:  # built only when the version changed
            self._definition, _ = self._resolver.resolve("", version, lambda: (body(), version))
        return self._definition


@dataclass(slots=True)
class Turn:
    """What the model sees for one call, and what the managers did to get there."""

    context: Context
    """The managed view: its messages (:attr:`messages`), system prompt, tools and model."""
    trace: list[TraceEntry] = field(default_factory=list)
    """The trace entries of every hook run of this turn: post_tool for each new group of tool
    results, then pre_llm."""
    reusable_prefix_tokens: int = 0
    """The tokens of this request's prefix (tools, system prompt, messages) identical to the
    previous request's: what the provider's prompt cache can serve."""
    usage: dict[str, Any] | None = None
    """Once the provider answered: the call's :func:`usage_record` (input tokens counted,
    calibrated and reported, the reusable prefix, the provider's cache figures)."""
    start: int = 0
    """Where the record's messages new to this turn begin (in the record's own units)."""
    extends: bool = False
    """The managed messages are the previous turn's plus the new record messages, untouched."""
    whole: bool = False
    """The managed messages are the whole record, untouched."""
    fresh: bool = False
    """The view was made anew from the whole record (restored or started), not continued
    from the live one: every record message was translated."""
    counted: int = 0
    """The request's tokens as ctxmgmt counts them (system prompt, tools, messages)."""
    ratio: float = 1.0
    """The calibration ratio the request was counted with."""
    tokens_before: int = 0
    """The request's counted tokens before ``pre_llm`` ran (with the recall tools when this
    turn showed them): what the managers had to work with (memoised: the hook counts it)."""
    runs: list[dict[str, Any]] = field(default_factory=list)
    """With ``Conversation(runs=True)``: this turn's hook runs that traced something, each
    with its hook, the model call it belongs to (``iteration``: 0 for ``post_memory``, the
    call for ``pre_llm``, the call whose tool calls the results answer for ``post_tool``),
    its trace entries, and what it removed from the view and added (with previews), per
    entry where they can be told."""
    _messages: list[Any] | None = field(default=None, repr=False)

    @property
    def messages(self) -> list[Any]:
        """The managed messages, in the conversation's format: a list made when first asked
        for (an adapter whose view is the record never needs it: a copy per call saved)."""
        if self._messages is None:
            self._messages = list(self.context.messages)
        return self._messages


Translate = Callable[[Any], Sequence[Any]]
"""One framework message -> the messages it is in the conversation's format (one or more)."""


@dataclass(slots=True)
class _Live:
    """The view the last turn ended with, kept in memory: the next turn continues it when
    the record continues the one it was made from, so a turn costs what is new."""

    context: Context
    covered: _Covered
    """The record messages (in the record's own units) the view covers: a next record
    continues the view only if it starts with them."""
    whole: bool
    """The view is the record, untouched."""
    upto: int
    """The record's messages in the conversation's format that the view covers (saved as
    ``upto``), and the fingerprint chain of all of them (saved as ``chain``)."""
    chain: str
    turn: int = 0
    """Calls compared so far (turns the samples of a long record's comparison)."""
    copies: int = 0
    """Calls in a row whose record continued the view as copies (equal, not the same
    objects): from :data:`COPIES_UNWATCHED` on, the objects are no longer watched."""
    begun: bool = False
    """The view was begun by the caller (:meth:`Conversation.begin`) and covers no record
    yet: every record continues it."""
    handed: _Covered | None = None
    """The framework's messages handed back for the view, when the framework may keep them
    as its record (``keep_view=False``) and they are not the record: a next record may
    start with them instead."""


UNMANAGED = Definition("none", "", {}, {"fit": False})
"""No definition (an agent without one): no hook runs, no fit step; the window is still
checked with ``window_check``."""

COPIES_UNWATCHED = 2
"""A framework that hands copies of its record at this many calls in a row (pydantic-ai, at
every call) is not watched for the very objects any more: renewing the watch at each call
made a weak reference per covered message (up to 4,096) that the next call never used."""

VALUES_EXACT_UP_TO = 256
"""Covered messages that a record of copies is compared with whole, by value; beyond, the
first and last :data:`~ctxmgmt.history.EDGE` and :data:`~ctxmgmt.history.SAMPLES` more
spread evenly, their offset turning each call (as :meth:`History.of` samples a list)."""


class _Covered:
    """The record messages a live view covers, kept so that a next record is checked against
    them at the cost of what is new, without keeping the framework's objects alive.

    A framework may hand the same objects again (LangGraph within one invoke, pydantic-ai's
    responses) or copies of the whole record (a checkpointer's, at each invoke; a
    middleware's deep copy). So two things are kept:

    - *values*: each message's fields (its ``__dict__``; a dict message itself), grown as
      messages are added and kept while records continue. Holding the fields rather than the
      objects lets a framework free its copies where it drops them (a 10,000-message record
      of LangChain messages freed here cost 10 ms a call), and a copy that continues the
      record is not kept, so nothing is freed here either.
    - *watched*: weak references to the objects, so that the same objects handed again are
      told by identity: every one (from a new view, grown by each new message), or, once a
      record of copies continued, the copies at the positions History compares (all up to
      :data:`~ctxmgmt.history.EXACT_UP_TO`, else both ends and a sample drawn then). Dicts
      cannot be weakly referenced: their values are the objects, compared as
      :meth:`History.of` compares a list handed again.

    A record continues when the watched objects are the very ones (History's rule), else when
    its messages equal the values, in C-level comparisons of their fields: every one up to
    :data:`VALUES_EXACT_UP_TO`, beyond that both ends and a sample turning each call. The
    trade-off is History's: a copy whose one message in the middle of a long record changed
    is found within ``covered // SAMPLES`` calls, one among the newest at once (an edit
    replacing many, as ContextEditingMiddleware's clearing, is found at once in practice).
    """

    __slots__ = ("at", "refs", "values")

    def __init__(self, values: list[Any], at: list[int] | None, refs: list[Any]) -> None:
        self.values = values
        self.at = at
        """The positions watched, ``refs[i]`` at ``at[i]``; None: ``refs[i]`` at ``i``, all."""
        self.refs = refs

    @classmethod
    def of(cls, messages: Sequence[Any]) -> _Covered:
        seq = messages if isinstance(messages, list) else list(messages)
        return cls(_values(seq), None, _refs(seq))

    def __len__(self) -> int:
        return len(self.values)

    def identical(self, seq: list[Any], turn: int) -> bool:
        """Whether ``seq`` holds the watched objects where they were (identity only)."""
        k, values, refs = len(self.values), self.values, self.refs
        if not 0 < k <= len(seq):
            return False
        if not refs:  # dicts: the values are the objects
            return values[0] is seq[0] and same_start(values, k, seq, turn)
        if self.at is not None:
            return all(map(operator.is_, map(operator.call, refs), map(seq.__getitem__, self.at)))
        if k <= EXACT_UP_TO:
            return all(map(operator.is_, map(operator.call, refs), seq))
        at = _positions(k, turn)
        return all(map(operator.is_, map(operator.call, map(refs.__getitem__, at)), map(seq.__getitem__, at)))

    def equal(self, seq: list[Any], turn: int) -> bool:
        """Whether ``seq`` starts with messages equal to the values (sampled past
        :data:`VALUES_EXACT_UP_TO`)."""
        k, values = len(self.values), self.values
        if not 0 < k <= len(seq):
            return False
        if k <= VALUES_EXACT_UP_TO:
            return values == _values(seq[:k])
        if values[:EDGE] != _values(seq[:EDGE]) or values[k - EDGE :] != _values(seq[k - EDGE : k]):
            return False
        stride = k // SAMPLES
        start = turn % stride
        return values[start:k:stride] == _values(seq[start:k:stride])

    def grown(self, seq: list[Any], start: int, same: bool, turn: int, watch: bool = True) -> _Covered:
        """These covered messages continued by ``seq[start:]``: the values kept and grown;
        the watch grown too when ``seq`` held the very objects (``same``), else renewed on
        ``seq``'s own objects, or with ``watch`` False (copies again and again) dropped: the
        next record is compared by its values, and no weak reference is made for it."""
        # Grown in place (a live view's covered messages are its own): a call costs what is new.
        values, new = self.values, seq[start:]
        del values[start:]
        values.extend(_values(new))
        if not seq or isinstance(seq[0], dict):
            return _Covered(values, None, [])  # dicts: the values are the objects
        if same and (self.at is not None or len(self.refs) == start):
            if self.at is not None:
                self.at.extend(range(start, len(seq)))
            self.refs.extend(_refs(new))
            return self
        if not same and not watch:
            return _Covered(values, None, [])
        if len(seq) <= EXACT_UP_TO:
            return _Covered(values, None, _refs(seq))
        at = _positions(len(seq), turn)
        return _Covered(values, at, _refs(list(map(seq.__getitem__, at))))


def _values(messages: list[Any]) -> list[Any]:
    """Each message's fields, compared by value in C: a dict message itself, an object's
    ``__dict__`` (a pydantic model's or a dataclass's fields), else the object."""
    if not messages or isinstance(messages[0], dict):
        return list(messages)
    try:
        return list(map(vars, messages))
    except TypeError:  # a mixed record, or objects without a __dict__
        return [getattr(m, "__dict__", m) for m in messages]


def _refs(messages: list[Any]) -> list[Any]:
    """Weak references to the messages; none when they cannot be weakly referenced (dicts:
    the values are the objects themselves)."""
    try:
        return list(map(weakref.ref, messages))
    except TypeError:
        return []


def _positions(k: int, turn: int) -> list[int]:
    """Both ends of ``k`` covered messages and a sample between, its offset turning with
    ``turn``: the positions History compares in a list longer than EXACT_UP_TO."""
    stride = k // SAMPLES
    return sorted({*range(EDGE), *range(turn % stride, k, stride), *range(k - EDGE, k)})


class Conversation:
    """The one bookkeeping of an agent conversation, under every entry point (the adapters,
    the evaluation replay, a provider-compatible proxy).

    The caller keeps the complete record; the conversation keeps the view the model saw
    last, the record length it covers and the managers' state. Before each model call
    (:meth:`prepare`), the record's new messages are added to the view (``post_tool`` runs
    after each new group of tool results), then ``pre_llm`` runs; the request is counted,
    calibrated by the provider's reports (:meth:`observe`) and measured against the previous
    one for the prompt cache.

    In one process the view is kept live: a record that continues the last one (it starts
    with the messages the view covers, the same objects or equal ones) costs only its new
    messages, translated one by one with ``translate`` when the record is a framework's.
    :attr:`saved` is JSON-able: adapters persist it where the framework keeps its state, and
    :meth:`load` restores it; it holds a fingerprint chain of every covered message. A record
    that does not continue the saved one (another conversation, or an earlier message edited,
    replaced or removed: a redaction, another middleware's edit) starts a new view.
    """

    def __init__(
        self,
        definition: DefinitionSource,
        *,
        models: ModelsConfig | None = None,
        offloader: Offloader | None = None,
        session: str = "default",
        format: str = "openai_chat",
        keep_view: bool = True,
        user_first: bool = False,
        pricing: Pricing | None = None,
        pool: object | None = None,
        execution: str | None = None,
        runs: bool | list[dict[str, Any]] = False,
        window_check: bool = False,
        persist: bool = True,
    ) -> None:
        self.source = definition if isinstance(definition, Source) else Source(definition)
        self.calibration = Calibration()
        self.cache = PromptCache(pricing or ratios_for("anthropic" if format == "anthropic" else None))
        """The requests sent, for the reusable prefix and ``settings: {cache: aware}``; the
        last one is kept with the saved view, so that a conversation restored from it (the
        LangChain middleware's, at every call) measures against it."""
        self.environment = Environment(
            models,
            offloader,
            session,
            execution=execution,
            pool=pool,
            user_first=user_first,
            calibration=self.calibration,
            cache=self.cache,
        )
        self.format = format
        self.keep_view = keep_view
        """False when the framework keeps the managed messages as its record (pydantic-ai)."""
        self.saved: dict[str, Any] = {}
        """The state to persist (see the class docstring); kept up to date unless ``persist``
        is False (the runner, which stores its view itself)."""
        self.persist = persist
        self.window_check = window_check
        """Refuse (ContextError) a request whose calibrated count exceeds its window, rather
        than return it: the runner never calls its model with one."""
        self.runs = runs is not False
        """Describe each hook run (:attr:`Turn.runs`; :meth:`advance` returns its own)."""
        self.sink: list[dict[str, Any]] | None = runs if isinstance(runs, list) else None
        """Given a list as ``runs``: each hook run described is appended to it as soon as it
        is done (a turn that then fails keeps its record of what ran)."""
        self.calls = 0
        """The requests prepared so far."""
        self.changed = False
        """Whether a hook run changed the view since the conversation began."""
        self.archived = False
        """Whether something of this conversation was archived (a manager's trace says so, or
        the caller set it for a tool output it archived): the recall tools are shown then."""
        self.recall: list[Any] = []
        """Recall tools' schemas offered (:meth:`offer_recall`), not yet shown to the model."""
        self._shown: list[Any] = []  # recall tools' schemas shown: in every request from then on
        self._post_memory = False  # post_memory runs once the next messages are in
        self._last: tuple[str | None, int, int] | None = None  # (model, counted, reusable) last sent
        self._observed: dict[str, Any] | None = None  # its usage record, once observed
        self._live: _Live | None = None
        self._out: list[Any] | None = None  # the framework's messages handed back last
        self._names: tuple[int, bool] | None = None  # (turn, whether its view names an archive)

    @property
    def context(self) -> Context | None:
        """The live managed view (the one the last turn ended with), or None before one."""
        return None if self._live is None else self._live.context

    @property
    def shown(self) -> list[Any]:
        """The recall tools' schemas shown to the model (in every request from then on)."""
        return list(self._shown)

    @property
    def covered(self) -> int:
        """How many record messages (in the record's own units) the live view covers."""
        return 0 if self._live is None else len(self._live.covered)

    def begin(
        self,
        messages: Sequence[Any] = (),
        *,
        state: Mapping[str, Any] | None = None,
        calibration: Mapping[str, Any] | None = None,
        post_memory: bool = False,
        **request: Any,
    ) -> None:
        """Start from a view the caller kept (the runner's memory: the view saved by its last
        execution plus what was stored after it) that covers none of the record to come:
        every record the conversation is then given is new to it. With ``post_memory``, the
        next turn runs ``post_memory`` once its new messages (the question) are in.
        ``calibration``: the ratios saved with that view (:meth:`Calibration.to_dict`)."""
        self.calibration = Calibration(calibration)
        self.environment = replace(self.environment, calibration=self.calibration)
        # A history of its own (History.own): the conversation keeps its view and extends it, so
        # the process-wide lists kept to find a list handed again never hold it after it goes.
        context = Context(
            messages=History.own(list(messages)), state=dict(state or {}), format=self.format, **request
        )
        self._live = _Live(
            context, _Covered([], None, []), whole=False, upto=0, chain=_CHAIN_START, begun=True
        )
        self._names = None
        self._post_memory = post_memory

    def offer_recall(self, schemas: Sequence[Any], *, now: bool = False) -> None:
        """The recall tools' schemas (context_read, context_search), shown to the model from
        the first turn after something was archived (:attr:`archived`), or ``now``; once
        shown they stay in every request (a tool list that changes voids the cached prefix)."""
        if now:
            self._shown.extend(schemas)
        else:
            self.recall.extend(schemas)

    @property
    def last_counted(self) -> int | None:
        """The tokens of the last prepared request, as counted (None before the first)."""
        return None if self._last is None else self._last[1]

    def load(self, saved: Mapping[str, Any] | None) -> None:
        """Continue from a state that :attr:`saved` held (as the framework persisted it)."""
        self.saved = dict(saved) if isinstance(saved, Mapping) else {}
        self._live = self._out = self._names = None
        ratios = self.saved.get("calibration")
        self.calibration = Calibration(ratios if isinstance(ratios, Mapping) else None)
        self.environment = replace(self.environment, calibration=self.calibration)
        view = self.saved.get("view")
        if isinstance(view, list):
            self.cache.restore(self.saved.get("cache"), view)

    def went_without(self, tokens: int) -> None:
        """The last prepared request went without ``tokens`` of what it counted (tools its
        hooks were shown in case they went, such as the proxy's recall tools when it named no
        archive): its report is taken against what went."""
        if self._last is not None and self._observed is None and tokens > 0:
            model, counted, reusable = self._last
            self._last = (model, max(1, counted - tokens), reusable)

    def observe(self, reported: Any, *, cached: Any = None, written: Any = None) -> dict[str, Any] | None:
        """The provider's reported input tokens for the last prepared request: they calibrate
        the next ones. ``cached`` and ``written``: its prompt-cache figures, when it reports
        them. Returns the call's :func:`usage_record` (as the runner records it), or None when
        no request was prepared. A call is observed once: told again, the same record."""
        if self._last is None:
            return None
        if self._observed is not None:  # told twice of one call (two hooks of a framework)
            return dict(self._observed)
        model, counted, reusable = self._last
        record = usage_record(
            counted, self.calibration.ratio(model), reusable, reported, cached=cached, written=written
        )
        if self.calibration.observe(model, counted, record["reported"]) is not None:
            self.saved["calibration"] = self.calibration.to_dict()
        self._observed = record
        return dict(record)

    def prepare(self, record: Sequence[Any], *, translate: Translate | None = None, **request: Any) -> Turn:
        """The managed messages for the next model call (see the class docstring).

        ``record``: the conversation's messages, in its format, or a framework's messages
        that ``translate`` turns into it. ``request``: ``system_prompt``, ``tools``,
        ``model``, ``context_window``, ``max_output_tokens``."""
        definition = self.source.get()
        steps = self._steps(definition, record, translate, request, self._covered(record))
        turn, _ = self._drive(definition, steps)
        assert turn is not None
        return turn

    async def aprepare(
        self, record: Sequence[Any], *, translate: Translate | None = None, **request: Any
    ) -> Turn:
        """:meth:`prepare` for async frameworks: model calls do not block the event loop."""
        definition = await self.source.aget()
        covered = self._covered(record)
        steps = self._steps(definition, record, translate, request, covered)
        turn, _ = await self._adrive(definition, steps, cold=covered is None)
        assert turn is not None
        return turn

    def advance(
        self, record: Sequence[Any], *, translate: Translate | None = None, **request: Any
    ) -> list[dict[str, Any]]:
        """Add the record's new messages to the view now, ``post_tool`` running after each new
        group of tool results, without preparing a request (the runner, once a round of tool
        calls is in: the results are managed before anything else happens). Returns the hook
        runs, described as :attr:`Turn.runs` (with ``runs=True``)."""
        definition = self.source.get()
        covered = self._covered(record)
        steps = self._steps(definition, record, translate, request, covered, llm=False)
        return self._drive(definition, steps)[1]

    async def aadvance(
        self, record: Sequence[Any], *, translate: Translate | None = None, **request: Any
    ) -> list[dict[str, Any]]:
        """:meth:`advance` for async callers."""
        definition = await self.source.aget()
        covered = self._covered(record)
        steps = self._steps(definition, record, translate, request, covered, llm=False)
        return (await self._adrive(definition, steps, cold=covered is None))[1]

    def _drive(self, definition: Definition, steps: _Steps) -> tuple[Turn | None, list[dict[str, Any]]]:
        """Run a turn's step machine with sync hook runs: (the turn, its runs described)."""
        result: ApplyResult | None = None
        runs: list[dict[str, Any]] = []
        while True:
            step = _send(steps, result)
            if not isinstance(step, tuple):
                return _done(step, runs)
            hook, context, iteration = step
            result = definition.apply(hook, context, environment=self.environment)
            if self.runs and result.trace:
                self._described(runs, _run_record(definition, hook, iteration, context, result))

    async def _adrive(
        self, definition: Definition, steps: _Steps, *, cold: bool
    ) -> tuple[Turn | None, list[dict[str, Any]]]:
        """Run a turn's step machine with async hook runs. Without a manager that awaits (a
        summary by a model), the whole turn is CPU work, run in one worker thread. Otherwise
        a new view translates, checks and counts the whole record (``cold``): CPU work that
        would stall the event loop, so its steps run in a worker thread; a continued one
        costs what is new."""
        if not await definition.aawaits_in():  # CPU work only: the whole turn in one worker thread
            return await asyncio.to_thread(self._drive, definition, steps)
        result: ApplyResult | None = None
        runs: list[dict[str, Any]] = []
        while True:
            step = await asyncio.to_thread(_send, steps, result) if cold else _send(steps, result)
            if not isinstance(step, tuple):
                return _done(step, runs)
            hook, context, iteration = step
            result = await definition.aapply(hook, context, environment=self.environment)
            if self.runs and result.trace:
                if result.context is context:
                    record = _run_record(definition, hook, iteration, context, result)
                else:  # comparing the two views: off the loop
                    record = await asyncio.to_thread(
                        _run_record, definition, hook, iteration, context, result
                    )
                self._described(runs, record)

    def framework_messages(
        self, turn: Turn, record: Sequence[Any], rebuild: Callable[[Turn], list[Any]]
    ) -> list[Any]:
        """The framework's messages for a turn's managed view: the record itself when the view
        is the record, the previous turn's plus the new ones when the view only grew, else
        ``rebuild(turn)`` (the adapter's translation back, which costs the view's length)."""
        if turn.whole:
            out = list(record)
        elif turn.extends and self._out is not None:
            out = [*self._out, *record[turn.start :]]
        else:
            out = rebuild(turn)
        # Kept for a next turn that only grows a view that is not the record (a view that is
        # the record is the record then too); holding the framework's old messages otherwise
        # would free them here, at the next turn, rather than where the framework drops them.
        self._out = None if turn.whole else out
        live = self._live
        if not self.keep_view and live is not None:
            # The framework may keep these as its record: the next turn may continue after them.
            if turn.whole:
                live.handed = None  # they are the record, which the live view covers
            elif turn.extends and live.handed is not None and len(live.handed) <= len(out):
                live.handed = live.handed.grown(out, len(live.handed), True, live.turn)
            else:
                live.handed = _Covered.of(out)
        return out

    def _covered(self, record: Sequence[Any]) -> tuple[_Covered, bool] | None:
        """(the messages of ``record`` that the live view covers, whether they are the very
        objects) when the record continues the one it was made from (it starts with it: see
        :class:`_Covered`), or the messages handed back for it (a framework that keeps those
        as its record); None when it continues neither."""
        live = self._live
        if live is None:
            return None
        if live.begun:  # covers no record yet: every record continues it
            return live.covered, True
        seq = record if isinstance(record, list) else list(record)
        live.turn += 1
        for covered in (live.covered, live.handed):
            if covered is not None and covered.identical(seq, live.turn):
                return covered, True
        for covered in (live.covered, live.handed):
            if covered is not None and covered.equal(seq, live.turn):
                return covered, False
        return None

    def _described(self, runs: list[dict[str, Any]], run: dict[str, Any]) -> None:
        runs.append(run)
        if self.sink is not None:
            self.sink.append(run)

    def _steps(
        self,
        definition: Definition,
        record: Sequence[Any],
        translate: Translate | None,
        request: Mapping[str, Any],
        covered: tuple[_Covered, bool] | None,
        *,
        llm: bool = True,
    ) -> _Steps:
        """The hook runs of one turn, as a step machine that a sync or an async driver runs
        (``covered``: the record messages the live view covers, and whether they are the very
        objects, when the record continues it). Without ``llm``, the new messages are added
        (and ``post_tool`` run) and no request is prepared."""
        live = self._live
        continued = covered is not None
        if not llm:  # the view may change with no turn counted: the next one reads it
            self._names = None
        if self._shown:  # the recall tools, once shown, stay
            request = {**request, "tools": [*(request.get("tools") or ()), *self._shown]}
        if covered is not None:
            assert live is not None
            start = len(covered[0])
            new = _translated(record[start:], translate)
            if self.format == "openai_chat":  # the view was checked when it was made
                refuse_invalid(live.context.messages, new, checked=True)
            context = _continue(live.context, request)
            whole = live.whole
            upto = live.upto + len(new)
            chain = _chain(live.chain, new) if self.persist else live.chain
        else:
            # A new or restored view: the whole record is translated once, each message's
            # translations counted, so that its new messages are found in its own units.
            chat, sizes = _translated_sized(record, translate)
            view, upto, state, chain = self._continued(chat)
            if self.format == "openai_chat":  # the provider formats are checked whole when converted
                refuse_invalid(view, chat[upto:], checked=view is self.saved.get("view"))
            new = chat[upto:]
            start, seen = len(record), 0
            while start > 0 and seen < len(new):
                start -= 1
                seen += sizes[start]
            context = Context(messages=History.own(list(view)), state=state, format=self.format, **request)
            whole = upto == len(view) and view == chat[:upto]
            upto = len(chat)
        trace: list[TraceEntry] = []
        changed = False

        def took(result: ApplyResult, given: Context) -> Context:
            nonlocal changed
            changed = changed or result.context is not given
            trace.extend(result.trace)
            if not self.archived and any(e["details"].get("offloaded") for e in result.trace):
                self.archived = True
            return result.context

        hooks = definition.hooks
        post_tool = bool(hooks.get(Hook.POST_TOOL))
        for i, m in enumerate(new):
            context = context.append(m)
            # Once a group of tool results is all in, as the runner does: the newest results
            # are each seen once (a run per result would look at the whole group each time).
            last_of_group = i + 1 == len(new) or not is_tool_result(new[i + 1], self.format)
            if post_tool and last_of_group and is_tool_result(m, self.format):
                context = took((yield "post_tool", context, self.calls), context)
        if self._post_memory and new:  # the memory loaded and the question in
            self._post_memory = False
            if hooks.get(Hook.POST_MEMORY):
                context = took((yield "post_memory", context, 0), context)
        if llm:
            self.calls += 1
            counter = get_counter(context.model, definition.tokenizer)
            before = self._counted(context, counter)  # memoised: the hook counts it too
            # No pre_llm entry and no fit step (an unmanaged agent): nothing to run, nor trace.
            managed = bool(hooks.get(Hook.PRE_LLM)) or definition.settings.get("fit", True) is not False
            out = took((yield "pre_llm", context, self.calls), context) if managed else context
            if self.recall and self.archived:  # archived just now: the model needs the tools
                pending, self.recall = self.recall, []
                self._shown.extend(pending)
                shown = replace(out, tools=(*out.tools, *pending))
                before += self._counted(shown, counter) - self._counted(out, counter)
                out = took((yield "pre_llm", shown, self.calls), shown) if managed else shown
            # The request as counted (memoised: the hooks counted it).
            way = internal(out)
            inner = way.context if way is not None else out
            counted = counter.context(inner)[0]
        else:
            out, way = context, None
        self.changed = self.changed or changed
        whole = whole and not changed
        seq = record if isinstance(record, list) else list(record)
        turns = live.turn if live is not None else 0
        if covered is not None:
            copies = 0 if covered[1] else (live.copies + 1 if live is not None else 1)
            now = covered[0].grown(seq, len(covered[0]), covered[1], turns, copies < COPIES_UNWATCHED)
        else:
            now, copies = _Covered.of(seq), 0
        self._live = _Live(out, now, whole=whole, upto=upto, chain=chain, turn=turns, copies=copies)
        if self.persist:
            if self.keep_view:
                # A view that is the record is saved as such: the framework persists the record
                # already, and a copy would double what it writes at every call.
                self.saved = {"upto": upto, "chain": chain, "state": dict(out.state)}
                if whole:
                    self.saved["whole"] = True
                else:
                    self.saved["view"] = list(out.messages)
            self.saved["calibration"] = self.calibration.to_dict()
        _log_changes(definition, trace)
        if not llm:
            return None
        if self.window_check:  # after the view was kept: what the managers did stands
            _check_window(definition, inner, counted, self.environment, counter)
        # What the request reuses of the previous one: it is sent now.
        reusable = self.cache.measure(inner, counter)
        self._last, self._observed = (out.model, counted, reusable), None
        if self.persist and self.keep_view and way is None:  # the saved view is the request's messages
            self.saved["cache"] = self.cache.export()
        turn = Turn(out, trace, reusable)
        turn.counted, turn.ratio, turn.tokens_before = counted, self.environment.ratio(out.model), before
        turn.start, turn.whole, turn.fresh = start, whole, not continued
        turn.extends = continued and not changed
        return turn

    def names_archive(self, turn: Turn) -> bool:
        """Whether ``turn``'s managed view (the last turn's) holds a mark of ctxmgmt's that
        names an archive (a summary's guide, an offloaded result's notice): what the recall
        tools read. A view that is the record holds none (marks are ctxmgmt's own: a copy in
        the client's messages is not read as one); a view that only grew the previous turn's
        has its answer; else the view is read."""
        if turn.whole:
            found = False
        elif turn.extends and self._names is not None and self._names[0] == self.calls - 1:
            found = self._names[1]
        else:
            way = internal(turn.context)
            view = (way.context if way is not None else turn.context).messages
            found = any(mentions_archive(m) for m in view)
        self._names = (self.calls, found)
        return found

    @staticmethod
    def _counted(context: Context, counter: TokenCounter) -> int:
        """A view's counted tokens, in the internal form (memoised: the hooks count it too)."""
        way = internal(context)
        return counter.context(way.context if way is not None else context)[0]

    def _continued(self, record: Sequence[Any]) -> tuple[list[Any], int, dict[str, Any], str]:
        """(view, how many record messages it covers, state, the fingerprint chain of the
        whole record): the saved view when the record starts with every message it was made
        from (by the chain), else a new view of the record."""
        saved = self.saved
        upto, view, whole = saved.get("upto"), saved.get("view"), saved.get("whole") is True
        # A new view is the record as it is, its newest tool results new (post_tool runs).
        start = len(record)
        while start > 0 and is_tool_result(record[start - 1], self.format):
            start -= 1
        if not (isinstance(upto, int) and (isinstance(view, list) or whole) and 0 < upto <= len(record)):
            upto = None  # nothing saved to continue
        # One pass hashes each message once: the saved view's check, and the record's chain.
        chains = _chains(record, (upto or 0, len(record)))
        if upto is not None and saved.get("chain") == chains[upto]:
            if not isinstance(view, list):
                view = list(record[:upto])
                self.cache.restore(saved.get("cache"), view)
            return view, upto, dict(saved.get("state") or {}), chains[len(record)]
        return list(record[:start]), start, {}, chains[len(record)]


USAGE_FIELDS = (
    "counted",
    "calibrated",
    "reported",
    "reusable_prefix_tokens",
    "cached_tokens",
    "cache_write_tokens",
)
"""The fields of a :func:`usage_record` (the last two only when the provider reports them)."""


def usage_record(
    counted: int,
    ratio: float,
    reusable: int,
    reported: Any = None,
    *,
    cached: Any = None,
    written: Any = None,
) -> dict[str, Any]:
    """The usage of one model call, as every entry point records it (the runner, the
    adapters through :meth:`Conversation.observe`, an execution's record): ``counted``,
    ctxmgmt's count of the request sent; ``calibrated``, that count times the calibration
    ratio it was sent with; ``reported``, the provider's input tokens (None when it reported
    none, or no count); ``reusable_prefix_tokens``; and ``cached_tokens`` /
    ``cache_write_tokens`` when the provider reports them."""
    record: dict[str, Any] = {
        "counted": counted,
        "calibrated": round(counted * ratio),
        "reported": reported if _count(reported) and reported > 0 else None,
        "reusable_prefix_tokens": reusable,
    }
    for key, value in (("cached_tokens", cached), ("cache_write_tokens", written)):
        if _count(value):
            record[key] = value
    return record


def _count(value: Any) -> bool:
    """Whether a reported figure is a token count (an int from 0 to MAX_REPORTED)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_REPORTED


_Steps = Generator[tuple[str, Context, int], ApplyResult, "Turn | None"]
"""A turn's step machine: it yields (hook, context, the call it belongs to) for each hook
run, is sent the run's result, and returns the turn (None when no request was prepared)."""


def _send(steps: _Steps, result: ApplyResult | None) -> tuple[str, Context, int] | Turn | None:
    """The step machine's next hook run, or its turn once done (a StopIteration cannot cross
    a thread's future)."""
    try:
        return steps.send(result)  # type: ignore[arg-type]
    except StopIteration as done:
        turn: Turn | None = done.value
        return turn


def _done(turn: Turn | None, runs: list[dict[str, Any]]) -> tuple[Turn | None, list[dict[str, Any]]]:
    if turn is not None:
        turn.runs = runs
    return turn, runs


def _check_window(
    definition: Definition, context: Context, counted: int, environment: Environment, counter: TokenCounter
) -> None:
    """Raise ContextError when a request's calibrated count exceeds its window (with fit off,
    or with no definition, nothing made it fit): the model is never called with it."""
    window = context.context_window
    tokens = round(counted * environment.window_ratio(context.model))
    if window and tokens > window:
        fix = (
            f"turn on the fit step of {definition.name!r} (settings.fit)"
            if any(definition.hooks.values())
            else "give the agent a context management definition"
        )
        raise ContextError(
            [
                Problem(
                    "/context_window",
                    f"the request has {tokens:,} tokens ({counter.tokenizer}) and the model's window "
                    f"is {window:,}; {fix}",
                )
            ]
        )


def _run_record(
    definition: Definition, hook: str, iteration: int, before: Context, applied: ApplyResult
) -> dict[str, Any]:
    """A hook run as the execution record shows it: its hook, call and trace entries, and
    when it changed the view, what it removed and added, per entry where they can be told."""
    run: dict[str, Any] = {"hook": hook, "iteration": iteration, "entries": list(applied.trace)}
    after = applied.context
    if after is not before:
        # A provider format's run is described in the internal (chat) form the managers saw:
        # its previews read the same fields, and the entries' counts are of that form.
        ways = internal(before), internal(after)
        if ways[0] is not None and ways[1] is not None:
            before, after = ways[0].context, ways[1].context
        run.update(_changes(before, after))
        if ways[0] is None or ways[1] is not None:  # the entries' counts are of this form
            counter = get_counter(before.model, definition.tokenizer)
            credits = _credits(before, after, applied.trace, counter)
            if credits is not None:
                run["changes"] = credits
    return run


_CHAIN_START = ""


_ENCODE = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str).encode
_CACHE_KEY = f'"{CACHE_CONTROL}"'


def _canonical(m: Any) -> str:
    """A message as the chain hashes it: all of it but its prompt-cache breakpoints (a client
    moves them from message to message), in a canonical form (one encoder: ``json.dumps``
    with options builds one per call)."""
    text = _ENCODE(m)
    return _ENCODE(without_cache_control(m)) if _CACHE_KEY in text else text


def _chain(chain: str, messages: Iterable[Mapping[str, Any]]) -> str:
    """The fingerprint chain ``chain`` extended by ``messages``: one hash of every message a
    saved view covers, each whole (an edit anywhere in a long message changes it), grown as
    messages are added (each is hashed once)."""
    sha256, canonical = hashlib.sha256, _canonical
    for m in messages:
        chain = sha256(f"{chain}:{canonical(m)}".encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return chain


def _chains(messages: Sequence[Mapping[str, Any]], points: Iterable[int]) -> dict[int, str]:
    """The fingerprint chain of ``messages[:k]`` for each ``k`` of ``points``, in one pass."""
    wanted = sorted(set(points))
    out = {0: _CHAIN_START}
    chain, done = _CHAIN_START, 0
    for k in wanted:
        if k > done:
            chain, done = _chain(chain, messages[done:k]), k
        out[k] = chain
    return out


def _translated(messages: Sequence[Any], translate: Translate | None) -> list[Any]:
    if translate is None:
        return list(messages)
    return [d for m in messages for d in translate(m)]


def _translated_sized(messages: Sequence[Any], translate: Translate | None) -> tuple[list[Any], list[int]]:
    """The messages translated, and how many messages each one became."""
    if translate is None:
        return list(messages), [1] * len(messages)
    out: list[Any] = []
    sizes: list[int] = []
    for m in messages:
        done = translate(m)
        out.extend(done)
        sizes.append(len(done))
    return out, sizes


_REQUEST = ("system_prompt", "tools", "model", "context_window", "max_output_tokens")


def token_settings(**values: Any) -> None:
    """Refuse an entry point's token settings (``context_window=``, ``max_tokens=``) that are no
    whole number >= 1 (None leaves one out): a :class:`~ctxmgmt.errors.ContextError` naming
    each when the entry point is made, not a setting ignored, or refused, at a model call."""
    problems = [
        Problem(f"/{name}", f"must be a whole number of tokens >= 1, or None (got {value!r:.60})")
        for name, value in values.items()
        if value is not None and (type(value) is not int or value < 1)
    ]
    if problems:
        raise ContextError(problems)


def reply_limit(*values: Any) -> int | None:
    """The first of a framework's reply limits (its ``max_tokens`` settings, most specific
    first) that is a token count: what the fit keeps free for the reply."""
    return next((v for v in values if type(v) is int and v >= 1), None)


def _continue(context: Context, request: Mapping[str, Any]) -> Context:
    """The live view with this request's fields (a new system prompt, tools or model)."""
    changes: dict[str, Any] = {}
    for name in _REQUEST:
        value = request.get(name)
        if name == "tools":
            value = tuple(value or ())
        if value != getattr(context, name):
            changes[name] = value
    return replace(context, **changes) if changes else context


def _log_changes(definition: Definition, trace: Sequence[TraceEntry]) -> None:
    for entry in trace:  # what changed something (or failed), not every gate that opened
        changed = (entry["tokens_before"], entry["messages_before"]) != (
            entry["tokens_after"],
            entry["messages_after"],
        )
        if entry["activated"] and (changed or entry["error"]):
            log.info(
                "%s %s[%d] %s: %d -> %d tokens, %d -> %d messages%s",
                definition.name,
                entry["hook"],
                entry["index"],
                entry["type"],
                entry["tokens_before"],
                entry["tokens_after"],
                entry["messages_before"],
                entry["messages_after"],
                f" (error: {entry['error']})" if entry["error"] else "",
            )


PREVIEWS = 20
"""Messages a hook run's record shows of what it removed and what it added (a summary, a cut
result), each by its role and the start of its text; the memory keeps them whole."""
PREVIEW_CHARS = 300


def _changes(before: Context, after: Context) -> dict[str, Any]:
    """What a hook run removed from the view and what it added, as previews. A context made by
    one splice of the view says so itself (the cost of what changed); otherwise the two lists
    are compared by identity."""
    edit = after.edit
    if edit is not None and edit.source is before:
        removed = [m for start, end, _ in edit.changes for m in before.messages[start:end]]
        added = [m for _, _, new in edit.changes for m in new]
    else:
        kept = {id(m) for m in after.messages}
        was = {id(m) for m in before.messages}
        removed = [m for m in before.messages if id(m) not in kept]
        added = [m for m in after.messages if id(m) not in was]
    return {
        "removed": len(removed),
        "added": len(added),
        "removed_preview": [_preview(m) for m in removed[:PREVIEWS]],
        "added_preview": [_preview(m) for m in added[:PREVIEWS]],
    }


def _credits(
    before: Context, after: Context, trace: Sequence[Mapping[str, Any]], counter: TokenCounter
) -> list[dict[str, Any]] | None:
    """What each entry of a hook run changed, as ``_changes`` with its index; None when the
    run's contexts cannot be told apart. The outputs are found on the chain of splices that
    leads from the run's input to its output, each where its entry's trace numbers (messages
    and tokens after) are met, in the entries' order; an output made otherwise breaks it."""
    chain = [after]
    while chain[-1] is not before:
        edit = chain[-1].edit
        if edit is None:
            return None
        chain.append(edit.source)
    chain.reverse()
    out: list[dict[str, Any]] = []
    at = 0
    for entry in trace:
        details = entry.get("details") or {}
        if not entry["activated"] or entry["error"] or details.get("postponed"):
            continue  # its output, if any, was not used
        if (entry["messages_after"], entry["tokens_after"]) == (
            entry["messages_before"],
            entry["tokens_before"],
        ):
            continue  # changed nothing, by its numbers
        end = at + 1
        while end < len(chain) and (
            len(chain[end].messages) != entry["messages_after"]
            or counter.context(chain[end])[0] != entry["tokens_after"]
        ):
            end += 1
        if end == len(chain):
            return None
        out.append({"index": entry["index"], **_changes(chain[at], chain[end])})
        at = end
    return out if at == len(chain) - 1 else None


def _preview(m: Mapping[str, Any]) -> dict[str, Any]:
    text = text_of(m.get("content"))
    out: dict[str, Any] = {"role": m.get("role"), "text": text[:PREVIEW_CHARS], "chars": len(text)}
    calls = [c.get("function", {}).get("name") for c in m.get("tool_calls") or () if isinstance(c, dict)]
    if calls:
        out["calls"] = calls
    if is_summary(m):  # told here, where the whole message proves its mark (a preview cannot)
        out["summary"] = True
    return out


def refuse_invalid(view: Sequence[Any], new: Sequence[Any], *, checked: bool = False) -> None:
    """Raise :class:`~ctxmgmt.ContextError` when a request of OpenAI chat messages (the view
    the model saw, and the framework's messages since) is one the model's API refuses: a tool
    result that answers no call of the assistant message right before it (an orphan), a call
    with no result before the next message (dangling), a call or a result without an id. Every
    adapter refuses what the runner never makes and the Agents SDK adapter refuses in its
    format, rather than managing it and sending it on. With ``checked`` (a view saved from an
    earlier call, valid then) it costs the new messages: only the view's last tool-call group
    is checked again with them."""
    lo = len(view) if checked else 0
    while lo > 0 and view[lo - 1].get("role") == "tool":
        lo -= 1
    if lo > 0 and call_ids(view[lo - 1]):
        lo -= 1
    part = [*view[lo:], *new]
    problems = check_messages(part, offset=lo)
    if problems:
        if any(p.message.endswith(_PAIRING) for p in problems):  # said once, how to mend it
            problems.append(Problem("/messages", _PAIRING_FIX))
        raise ContextError(problems)


_PAIRING = ("has no tool result", "right before it", "needs a tool_call_id")
"""How :func:`~ctxmgmt.messages.check_messages` says a call and its result do not pair."""
_PAIRING_FIX = (
    "each tool result must follow the assistant message that calls it, with the same id, "
    "and each call needs its result before the next message: restore or remove the message"
)
