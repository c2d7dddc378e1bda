"""One proxied request: the definition's hooks over the request's conversation, the managed
request upstream, the upstream's answer back as it came (whole, or streamed as it arrives).

Keys: the project's API keys (when configured) protect these routes as the others; the key is
read from ``X-Ctxmgmt-Key``, or from ``Authorization`` / ``x-api-key`` (a key that is the
project's is never forwarded). The upstream key is the model's configured one
(``api_key_env``), else the client's ``Authorization`` / ``x-api-key`` passed on. No key is
stored, logged or recorded.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import hashlib
import json
import logging
import operator
import re
import uuid
from collections.abc import AsyncGenerator, Awaitable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import httpx
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..._reply import error_message
from ...agents.conversation import Conversation, Turn, usage_record
from ...agents.records import call_entry
from ...agents.tools import Tool, recall_tools
from ...errors import ContextError, ToolError
from ...fit import input_limit, reply_reserve
from ...formats import CHAT, internal
from ...llm import ModelConfig
from ...llm.decoding import Decoder, TooLarge
from ...messages import (
    CACHE_CONTROL,
    RECALL_TOOLS,
    cache_control_values,
    holds_cache_control,
    is_custom_call,
    without_cache_control,
)
from ...store.repository import now_ms, relaxed
from ...store.sessions import SessionStore
from ...summaries import message_key
from ...tokens import TokenCounter, get_counter
from ..requests import body_text, state
from . import streams, upstream
from .apis import Api, Parts
from .body import Bodies, Body, parse, positions, size_of, upstream_text
from .checks import (
    DEFINITION_HEADER,
    Refused,
    answer,
    authorize,
    definition_name,
    model_of,
    one_header,
    stored_version,
)
from .recall import (
    MAX_CALLS,
    MAX_ROUNDS,
    NOTHING_SAID,
    RECALL_CHARS,
    calls_of,
    continued,
    last_round,
    only_recall,
    opened,
    reply_of,
    schemas,
    unechoed,
    with_recall,
    without_recall_calls,
)
from .state import Live, pack, unpack
from .streams import Accumulator, continuation, unsent
from .usage import usage_of

__all__ = ["DEFINITION_HEADER", "SESSION_HEADER", "proxy_request"]

SESSION_HEADER = "x-ctxmgmt-session"
_SESSION = re.compile(r"[A-Za-z0-9._:-]{1,128}")
log = logging.getLogger("ctxmgmt.proxy")


async def proxy_request(request: Request, api: Api) -> Response:
    """Answer one request of ``api`` (see the module docstring)."""
    try:
        return await _proxy(request, api)
    except Exception as exc:  # every answer in the provider's shape (a fault: logged, a 500)
        return answer(api, exc)


_HEX32 = re.compile(r"[0-9a-f]{32}")


def _covers(stored: Mapping[str, Any], body: Body) -> bool:
    """Whether a stored state was made from the very messages this body starts with (by the
    client's own text of them), not from a look-alike that ends the same way."""
    covered = stored.get("covered")
    return isinstance(covered, str) and covered == body.digest(stored.get("upto"))


def _upto(stored: Mapping[str, Any]) -> int:
    """How many of the client's messages a stored state was made from (0 when it says none)."""
    upto = stored.get("upto")
    return upto if isinstance(upto, int) else 0


SLOTS = 4
"""Conversations that share a key (the same start, or the same ``X-Ctxmgmt-Session``) keep up
to this many states side by side: parallel agents or evaluation runs with one prompt and one
task would otherwise take each other's place on every request, each starting anew (its whole
history summarised and archived again)."""


def _slot(sessions: SessionStore, key: str, body: Body) -> tuple[str, dict[str, Any] | None]:
    """The slot of ``key`` whose stored state this request continues, and that state; else
    (another conversation with the same start, or this one with an earlier message changed)
    a free slot, or the one used longest ago, and None: a new view, a new archive namespace."""
    slots = [key, *(hashlib.sha256(f"{key}:{i}".encode()).hexdigest() for i in range(1, SLOTS))]
    found = sessions.get_many(slots)
    # The state made from the most of its messages first (a look-alike that just began covers
    # only the start), the newest of equals first.
    for slot, (stored, _) in sorted(found.items(), key=lambda kv: (-_upto(kv[1][0]), -kv[1][1])):
        if _covers(stored, body):
            return slot, stored
    free = [s for s in slots if s not in found]
    return (free[0] if free else min(found, key=lambda s: found[s][1])), None


def _session_header(request: Request) -> str | None:
    """``X-Ctxmgmt-Session``, checked (a request refused for it, used or not)."""
    given = one_header(request, SESSION_HEADER)
    if given is not None and not _SESSION.fullmatch(given):
        raise Refused(
            400, "illegal_argument_exception", f"{SESSION_HEADER}: 1-128 characters of A-Z a-z 0-9 . _ : -"
        )
    return given


def session_key(request: Request, api: Api, name: str, model: str, parts: Parts) -> str:
    """The conversation's key: ``X-Ctxmgmt-Session`` when given, else its start (the system
    prompt and the first message). Conversations with the same start share a key, each in a slot
    of its own (:func:`_slot`), and a saved view is used only when the request continues it
    (else a new view): a shared key never costs correctness."""
    given = _session_header(request)
    first = parts.record[0]
    start = (
        given
        if given is not None
        else [
            without_cache_control(parts.system_prompt),
            message_key(first) if isinstance(first, Mapping) else None,
        ]
    )
    data = json.dumps([api.name, name, model, start], ensure_ascii=False, default=str)
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()


async def _proxy(request: Request, api: Api) -> Response:
    started = now_ms()
    own_key = authorize(request)
    st = state(request)
    name = definition_name(request)
    upstream.query(request)  # before any work: a query too long to go upstream
    # The definition is read from the store while the body arrives.
    resolving = _begun(asyncio.to_thread(st.store.resolve_version, name))
    text = await body_text(request, setting="proxy_max_body_bytes")
    bodies: Bodies = request.app.state.proxy_bodies
    previous = bodies.find(text)  # the conversation's previous body: only what follows is read
    if len(text) - (previous.prefix_end if previous else 0) > 65536:  # a large read: off the loop
        parsed = await asyncio.to_thread(parse, text, api.field, previous)
    else:
        parsed = parse(text, api.field, previous)
    body = parsed.data
    try:
        config = model_of(request, body, api)
    except Refused as exc:
        if exc.status == 404:  # an unknown model; an unknown definition, the path's, is said first
            await stored_version(st, name, resolving)
        raise
    headers = upstream.headers(request, config, own_key)  # before anything is run, kept or recorded
    if api.name == "messages" and isinstance(body.get("thread"), Mapping):  # before its history: a
        # continued thread's holds only what is new, which is no valid history by itself
        raise Refused(
            400, "illegal_argument_exception", _THREADS, {"error_code": "thread_unsupported_request"}
        )
    held = _held_upstream(api, body) or _legacy_calls(api, parsed)
    parts = api.parts(body, unmanaged=held is not None)
    if isinstance(parts, str):
        raise Refused(400, "illegal_argument_exception", parts)
    if held is not None:  # nothing to manage: recorded as it went
        _session_header(request)  # checked, as every request's
        definition, version = await stored_version(st, name, resolving)
        calls = [{"call": 1, "calibrated_before": 0, "calibrated": 0, "reported": None, "unmanaged": held}]
        record = _record(name, version, started, config, api, uuid.uuid4().hex, calls, [])
        return await _forwarded(request, api, config, headers, parsed, parts.stream, record)
    key = session_key(request, api, name, str(body["model"]), parts)  # its header checked, used or not
    # The conversation as managed: its messages without their prompt-cache breakpoints, the
    # same objects from request to request where the client only moved one (Body.canon).
    canon = parsed.canon if parsed.array is not None else parts.record
    definition, version = await stored_version(st, name, resolving)
    live: Live = request.app.state.proxy_live
    # Content is archived only when the model can read it back: a request offered no recall
    # (see _recallable) is managed without an archive, so that nothing sent names one.
    offer = _recallable(api, body, parts, st.runner.offloader)
    offloader = st.runner.offloader if offer is not None else None
    archives = offloader is not None
    counter = get_counter(config.model, definition.tokenizer)
    asked: dict[str, Any] = {
        "system_prompt": parts.system_prompt,
        # With the recall tools when they may be offered: they go upstream when the managed
        # request names an archive, so the hooks manage it with them (as the fit counts them).
        "tools": parts.tools if offer is None else offer,
        "model": config.model,
        "context_window": config.context_window,
        "max_output_tokens": parts.reply_limit,
    }

    went_on = [False]

    def conversation_of() -> tuple[Conversation, str, str]:
        """The conversation (this process's, or made from the stored state), its id and the
        slot its state goes to."""
        slot, stored = _slot(SessionStore(st.store.engine), key, parsed)
        if stored is not None and stored.get("archives", True) is not archives:
            # Made archiving, and now no recall can be offered, or the other way round: a
            # view made anew (what was cut unarchived could not be read back).
            stored = None
        conversation_id = (stored or {}).get("conversation")
        if not isinstance(conversation_id, str) or not _HEX32.fullmatch(conversation_id):
            conversation_id, stored = uuid.uuid4().hex, None
        # The conversation this process served last, while the store holds what it wrote then
        # and this body was read from the one it was made from. Else (a member before the
        # conversation changed, the previous body no longer kept) the view is made again from
        # the stored state, by position, so that it holds this body's objects.
        made_from = previous if parsed.grown else None
        conversation = (
            live.take(slot, (stored or {}).get("generation"), (version, archives), made_from)
            if stored
            else None
        )
        went_on[0] = conversation is not None  # the one made from the previous body
        if conversation is None:
            conversation = Conversation(
                definition,
                models=st.models,
                offloader=offloader,
                session=conversation_id,
                format=api.format,
                pricing=config.pricing,
                runs=True,
            )
            conversation.load(unpack(stored, canon) if stored else None)
        return conversation, conversation_id, slot

    marked = parsed.breakpoints()

    def upstream_messages(turn: Turn) -> list[Any]:
        return _client_messages(turn.messages, canon, parts.record, marked)

    def prepared() -> tuple[Conversation, str, str, Turn, list[Any]]:
        """CPU work only: the stored state read and the whole turn, in one worker thread."""
        conversation, conversation_id, slot = conversation_of()
        turn = conversation.prepare(canon, **asked)
        return conversation, conversation_id, slot, turn, upstream_messages(turn)

    async def managed() -> tuple[Conversation, str, str, Turn, list[Any]]:
        if not await definition.aawaits_in():
            return await asyncio.to_thread(prepared)
        # A summary by a model: awaited on the loop.
        conversation, conversation_id, slot = await asyncio.to_thread(conversation_of)
        turn = await conversation.aprepare(canon, **asked)
        return conversation, conversation_id, slot, turn, await asyncio.to_thread(upstream_messages, turn)

    try:
        conversation, conversation_id, slot, turn, messages = await managed()
    except ContextError as exc:
        if offer is None or not any(p.pointer == "/context_window" for p in exc.problems):
            raise
        # It cannot fit with the recall tools: managed again without them (and without an
        # archive, which nothing could read back), as a request offered none is.
        offer, offloader, archives = None, None, False
        asked["tools"] = parts.tools
        conversation, conversation_id, slot, turn, messages = await managed()
    # An accepted request's body: the next one is read from it. It replaces the one it was
    # read from when it is that conversation's next (not another's with the same start).
    bodies.keep(parsed, previous, replaces=parsed.extends or went_on[0])
    exchange_state = _Kept(slot, version, canon, parsed, conversation_id, archives)
    outgoing = api.managed(body, messages, config.model)
    recall: list[Tool] = []
    room: int | None = None  # for the recall rounds (see below); None: no window to keep within
    if offer is not None and conversation.names_archive(turn):
        if config.context_window is not None:
            # What the window leaves beside the managed request (counted tokens), for the recall
            # rounds' calls and results, which no hook sees. The limit is the fit's (the reserve
            # it kept, the turn's thinking that no counter sees); the recall tools are in the
            # counted request.
            way = internal(turn.context)
            inner, constraints = (way.context, way.constraints) if way is not None else (turn.context, CHAT)
            ratio = max(1.0, turn.ratio)
            reserve = reply_reserve(inner, definition.settings, counter, constraints, ratio)
            room = input_limit(inner, reserve, ratio, constraints) - turn.counted
        if room is None or room >= MIN_RECALL_ROOM:  # else a call could read nothing: not offered
            recall, outgoing["tools"] = recall_tools(offloader, conversation_id), offer
    counted, before = turn.counted, turn.tokens_before
    if offer is not None and not recall:
        # Managed with the recall tools, which go when the request names an archive: this one
        # went without them, so its count, and what its report calibrates, leave them out.
        way = internal(turn.context)
        shown = (way.context if way is not None else turn.context).tools
        unsent_tools = counter.tools(only_recall("chat", shown))
        conversation.went_without(unsent_tools)
        counted, before = counted - unsent_tools, before - unsent_tools
    changes: dict[str, Any] = {k: outgoing[k] for k in ("model", "tools") if k in outgoing}
    first = upstream_text(parsed, messages, changes)  # the client's own bytes where unchanged
    sent = usage_record(counted, turn.ratio, turn.reusable_prefix_tokens)
    record = _record(
        name,
        version,
        started,
        config,
        api,
        conversation_id,
        [call_entry(1, before, turn.ratio, sent)],
        # The hook runs of this request (post_tool for the client's new results, then pre_llm).
        [{**run, "iteration": 1, "call": 1} for run in turn.runs],
    )
    exchange = _Exchange(
        request, api, config, headers, conversation, record, exchange_state, recall, parts.stream
    )
    if recall and room is not None:
        exchange.counter, exchange.room = counter, room
    if parts.stream:
        # A stream's record is stored after its last event went out, when the client may
        # already be sending its next request to another process: the state goes first,
        # written while the upstream starts to answer (awaited before any of it goes back).
        exchange.storing = asyncio.ensure_future(_store(st, live, conversation, exchange_state))
        exchange.storing.add_done_callback(_state_written)
    return await _upstream(exchange, outgoing, parts.stream, first)


def _client_messages(
    messages: list[Any], record: Sequence[Any], given: Sequence[Any], marked: Sequence[int]
) -> list[Any]:
    """The managed messages as they go upstream. Where a message is ctxmgmt's copy of one of
    the client's without its breakpoints (``record``, see :attr:`Body.canon`), the client's
    own (``given``), whose text goes upstream as the client wrote it. A message ctxmgmt wrote
    (a summary, a cut result) goes without breakpoints (one it was made with in an earlier
    request is stale: the client has moved its own since, and each would be one more than the
    four Anthropic takes), but for those the client puts now on the results it stands for
    (``marked``: the client's messages that may hold one)."""
    if len(messages) == len(given) and all(map(operator.is_, messages, record)):
        return list(given)  # the view is the record: every message the client's own
    where = positions(messages, record)
    out = [m if k is None else given[k] for m, k in zip(messages, where, strict=True)]
    written = [i for i, k in enumerate(where) if k is None]  # the messages ctxmgmt wrote
    if not written:
        return out
    # The client's results with a breakpoint, by their calls: each placed once, and not at all
    # when the client's message goes upstream itself (ids a client repeats must not spread its
    # breakpoints), else on the newest cut message that stands for them.
    placed = {ids: r for r in map(given.__getitem__, marked) if (ids := _result_ids(r))}
    if placed and record is not given:
        for k in where:
            if k is not None and record[k] is not given[k]:
                placed.pop(_result_ids(given[k]), None)
    for i in reversed(written):
        m = messages[i]
        # Made from breakpoint-free messages: only a state stored before holds one.
        fresh = without_cache_control(m) if holds_cache_control(m) else m
        source = placed.pop(_result_ids(fresh), None) if placed else None
        out[i] = fresh if source is None else _breakpoints_of(source, fresh)
    return out


def _result_ids(m: Any) -> frozenset[str]:
    """The calls whose results a message carries: an Anthropic user message's ``tool_result``
    blocks, a chat ``tool`` message's call (empty for any other)."""
    if not isinstance(m, Mapping):
        return frozenset()
    if m.get("role") == "tool":
        call = m.get("tool_call_id")
        return frozenset([call]) if isinstance(call, str) else frozenset()
    content = m.get("content") if m.get("role") == "user" else None
    if not isinstance(content, list):
        return frozenset()
    return frozenset(
        b["tool_use_id"]
        for b in content
        if isinstance(b, Mapping) and b.get("type") == "tool_result" and isinstance(b.get("tool_use_id"), str)
    )


def _mark_of(value: Any, depth: int) -> Any:
    """The last breakpoint that a block (``depth`` 2) or a message (3) holds where a provider
    reads one; None."""
    return next((v for v in reversed(list(cache_control_values(value, depth))) if v is not None), None)


def _breakpoints_of(source: Mapping[str, Any], m: Mapping[str, Any]) -> Mapping[str, Any]:
    """``m`` (a cut copy of ``source``'s results, without breakpoints) with the breakpoints
    ``source`` holds. A chat tool message's goes where it was: on the message, or on its last
    part (its text made a part when it is a string). An Anthropic message's go block for block
    when both have as many blocks, else by the call; a breakpoint inside a result's content
    goes on its block (a cut result's content is not the one it was put in)."""
    if source.get("role") == "tool":
        if source.get(CACHE_CONTROL) is not None:
            return {**m, CACHE_CONTROL: source[CACHE_CONTROL]}
        mark = _mark_of(source, 3)
        content = m.get("content")
        if mark is None:
            return m
        if isinstance(content, str):
            return {**m, "content": [{"type": "text", "text": content, CACHE_CONTROL: mark}]}
        if isinstance(content, list) and content and isinstance(content[-1], Mapping):
            return {**m, "content": [*content[:-1], {**content[-1], CACHE_CONTROL: mark}]}
        return m
    given, blocks = source["content"], m.get("content")
    marks = [_mark_of(b, 2) for b in given]
    if not isinstance(blocks, list) or all(mark is None for mark in marks):
        return m
    by_call = {  # by the calls whose ids are strings (an id of another type is no call's)
        b["tool_use_id"]: mark
        for b, mark in zip(given, marks, strict=True)
        if mark is not None and isinstance(b, Mapping) and isinstance(b.get("tool_use_id"), str)
    }
    out = []
    for i, b in enumerate(blocks):
        if len(blocks) == len(given):
            mark = marks[i]
        else:
            call = b.get("tool_use_id") if isinstance(b, Mapping) else None
            mark = by_call.get(call) if isinstance(call, str) else None
        out.append({**b, CACHE_CONTROL: mark} if mark is not None and isinstance(b, Mapping) else b)
    return {**m, "content": out}


def _recallable(api: Api, body: Mapping[str, Any], parts: Parts, offloader: Any) -> list[Any] | None:
    """The client's tools with the recall tools after them, when the model can be offered
    them with this request; else None. That needs an archive, an answer the proxy can hold
    back to answer a recall call, and the client's tools leaving room for them
    (:func:`~.recall.with_recall`). Not for several chat choices (each could call recall, and
    one answer goes back), nor for a streamed response the upstream stores: the stream must
    complete the response it began (SDKs check its id), which would end in a recall call, and
    the client's next request may continue it by its id."""
    if offloader is None:
        return None
    if api.name == "chat" and body.get("n") not in (None, 1):
        return None
    if api.name == "responses" and parts.stream and body.get("store") is not False:
        return None
    return with_recall(api.name, parts.tools, schemas(api.name, recall_tools(offloader, "-")))


_HELD = ("previous_response_id", "conversation")
"""What makes a Responses request continue a conversation the upstream keeps (only its new
items are sent)."""


_THREADS = (
    "thread: the proxy manages the whole history on every request, and a message thread the "
    "upstream keeps would hold it unmanaged; send the whole history without `thread` (Anthropic's "
    "SDKs do so on this error when told to continue unthreaded)"
)


def _held_upstream(api: Api, body: Mapping[str, Any]) -> str | None:
    """The member by which a request continues a conversation the upstream holds, if any; for
    a Responses request without ``input`` (a stored prompt's, or one that only continues a
    stored response), ``input``: there is nothing here to manage."""
    if api.name != "responses":
        return None
    held = next((k for k in _HELD if body.get(k) is not None), None)
    return held if held is not None or body.get("input") is not None else "input"


def _legacy_calls(api: Api, parsed: Body) -> str | None:
    """``function_call`` when a chat request holds the deprecated function calling (an
    assistant's ``function_call``, a ``function`` message), ``custom_tool_call`` when it holds
    a call of a custom tool (``{"type": "custom", "custom": {name, input}}``, GPT-5's
    free-form tools), which the hooks do not manage in chat: it goes upstream as it is.
    Looked for in the text read past the previous body's messages (a continued
    conversation's new ones: such a one is never kept as a previous body), and only where
    that text names it."""
    if api.name != "chat":
        return None
    legacy = parsed.text.find('"function_call"', parsed.read_from) >= 0
    custom = parsed.text.find('"custom"', parsed.read_from) >= 0
    if not (legacy or custom):
        return None
    messages = parsed.data.get("messages")
    # Only the messages read anew: the previous body's held none (it would not be kept).
    first = bisect.bisect_left(parsed.spans, parsed.read_from, key=lambda span: span[1])
    for m in messages[first:] if isinstance(messages, list) else ():
        if not isinstance(m, Mapping):
            continue
        if legacy and (m.get("role") == "function" or m.get("function_call") is not None):
            return "function_call"
        calls = m.get("tool_calls")
        if custom and isinstance(calls, list) and any(is_custom_call(c) for c in calls):
            return "custom_tool_call"
    return None


def _record(
    name: str,
    version: Any,
    started: int,
    config: ModelConfig,
    api: Api,
    memory: str,
    calls: list[dict[str, Any]],
    hooks: list[dict[str, Any]],
) -> dict[str, Any]:
    """A proxied request's execution record, as it begins."""
    return {
        "execution_id": uuid.uuid4().hex,
        "agent_id": f"proxy-{name}",
        "memory_id": memory,
        "definition": name,
        "definition_version": version,
        "definition_source": "proxy",
        "started_time": started,
        "status": "running",
        "llm_calls": 1,
        "context_window": config.context_window,
        "model": config.model,
        "api": api.name,
        "calls": calls,
        "hooks": hooks,
    }


async def _forwarded(
    request: Request,
    api: Api,
    config: ModelConfig,
    headers: dict[str, str],
    parsed: Body,
    stream: bool,
    record: dict[str, Any],
) -> Response:
    """A request that continues a conversation the upstream keeps: its history is not in the
    request, so there is nothing to manage. It goes upstream as the client wrote it (the
    model's name written in), its answer comes back as it came, and ``record`` is stored."""
    exchange = _Exchange(request, api, config, headers, None, record, None, [], stream)
    first = upstream_text(parsed, None, {"model": config.model})
    return await _upstream(exchange, parsed.data, stream, first)


def _save(st: Any, record: Mapping[str, Any]) -> None:
    """Store an execution's record (see :func:`~ctxmgmt.store.repository.relaxed`)."""
    with relaxed(st.store.engine) as conn:
        st.runner.executions.save(record, conn=conn)


def _state_written(task: asyncio.Future[None]) -> None:
    """A stream's state write is over: its failure logged, whoever waits for it or not."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("could not store the proxy's conversation state", exc_info=task.exception())


def _begun(read: Awaitable[Any]) -> asyncio.Future[Any]:
    """A read begun now, awaited later or never (a request refused before it needs it): then
    its failure is not reported as one nobody retrieved."""
    task = asyncio.ensure_future(read)
    task.add_done_callback(_retrieved)
    return task


def _retrieved(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


@dataclass(frozen=True, slots=True)
class _Kept:
    """Where a conversation's state goes: its key, the definition's version, the history."""

    key: str
    version: Any
    record: list[Any]
    body: Body
    conversation: str
    """The conversation's own id: its archives' namespace (never shared by a look-alike)."""
    archives: bool
    """Whether its content is archived (see :func:`_recallable`)."""


async def _store(
    st: Any, live: Live, conversation: Conversation, kept: _Kept, record: Mapping[str, Any] | None = None
) -> None:
    """Store the conversation's state (for every process) and the execution's record, in one
    transaction, and keep the conversation here too. The state is packed and fingerprinted
    in the worker thread too: both cost the size of the request, never the event loop's time."""

    def write() -> dict[str, Any]:
        packed = pack(conversation.saved, kept.record)
        packed["conversation"] = kept.conversation
        packed["archives"] = kept.archives
        packed["covered"] = kept.body.digest(conversation.saved.get("upto"))
        with relaxed(st.store.engine) as conn:
            SessionStore(st.store.engine).put(kept.key, packed, conn=conn)
            if record is not None:
                st.runner.executions.save(record, conn=conn)
        return packed

    packed = await asyncio.to_thread(write)
    # What it holds: the request's messages (its view is made of them) and what was written.
    stamp = (packed["generation"], (kept.version, kept.archives), kept.body)
    live.keep(kept.key, stamp, conversation, size_of(kept.body))


@dataclass(slots=True)
class _Exchange:
    """One proxied request on its way: where it goes, and what it has done."""

    request: Request
    api: Api
    config: ModelConfig
    headers: dict[str, str]
    conversation: Conversation | None
    """None for a request whose history the upstream keeps (see :func:`_forwarded`)."""
    record: dict[str, Any]
    kept: _Kept | None
    recall: list[Tool]
    """The recall tools offered to the model (none: the request names no archive)."""
    stream: bool
    room: int = 0
    """Counted tokens the model's window leaves for recall rounds (see :func:`_recall_rounds`)."""
    counter: TokenCounter | None = None
    storing: asyncio.Future[None] | None = None
    """The conversation's state being written before a stream's answer goes back."""
    usage: Mapping[str, int] | None = None
    """The upstream's report on the managed request, once its answer was read: recorded (and
    calibrated on) also when what follows it fails, such as a recall round."""
    unread: bool = False
    """The client did not read a stream's events by their deadline (see :class:`_Stream`)."""

    async def settled(self) -> None:
        """The state written before the stream (:attr:`storing`) is in the store. A failure
        to write it is logged (:func:`_state_written`) and the answer goes on: the next
        request makes the state anew from the one stored before (or from its messages). A
        request cancelled meanwhile leaves the write to finish."""
        task, self.storing = self.storing, None
        if task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(task)

    async def send(self, body: Mapping[str, Any] | str, deadline: float) -> httpx.Response:
        """Send a request upstream (a body, or its JSON text) by ``deadline``; its answer's head
        (the body is read as a stream)."""
        target = upstream.url(self.config, self.api.path.removeprefix("/v1"), self.request)
        text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
        content = text.encode("utf-8", "surrogatepass")
        return await upstream.call(self.request, self.config, target, content, self.headers, deadline)


async def _upstream(exchange: _Exchange, body: dict[str, Any], stream: bool, first: str) -> Response:
    """The managed request upstream (``body``; ``first`` its JSON text), its answer back: whole
    (with recall rounds answered here) or streamed as it arrives. A request the upstream fails
    is recorded too."""
    try:
        return await _exchange(exchange, body, stream, first)
    except Refused as exc:
        await _finish(exchange, exchange.usage, exc.message)
        raise
    except Exception as exc:  # the upstream's answer held what the recall rounds cannot read
        log.warning("proxy: the upstream's answer could not be read", exc_info=True)
        message = f"the upstream's answer could not be read ({type(exc).__name__})"
        await _finish(exchange, exchange.usage, message)
        raise Refused(502, "llm_exception", message) from None


async def _exchange(exchange: _Exchange, body: dict[str, Any], stream: bool, first: str) -> Response:
    api, config = exchange.api, exchange.config
    deadline = asyncio.get_running_loop().time() + config.timeout
    response = await exchange.send(first, deadline)
    try:
        await exchange.settled()
    except BaseException:  # cancelled: nothing owns the upstream's response yet
        await response.aclose()
        raise
    returned = upstream.returned(response)
    kind = response.headers.get("content-type", "").lower()  # a media type is case-insensitive
    if stream and response.is_success and "text/event-stream" in kind:
        try:  # an encoding it cannot bound, or a length over its bound: a 502 before any event
            decoder = upstream.decoded(response, exchange.config, stream=True)
        except TooLarge as exc:
            await response.aclose()
            raise Refused(502, "llm_exception", f"the upstream's stream: {exc}") from None
        events = _events(exchange, response, deadline, body, decoder)
        return _Stream(exchange, events, response.status_code, returned, deadline)
    try:
        data = await upstream.read(response, deadline, config)
    finally:
        await response.aclose()
    if stream and exchange.recall and response.is_success and upstream.looks_like_events(data):
        # Events under another content type (read whole, within max_response_bytes): a client
        # reads them as events, so they are watched for recall calls as a stream's are.
        decoder = Decoder(config.max_stream_bytes, httpx.Headers(), "max_stream_bytes")
        events = _events(exchange, response, deadline, body, decoder, given=data)
        return _Stream(exchange, events, response.status_code, returned, deadline)
    # Parsed once, for its usage and its calls.
    answer = upstream.answer_of(data, response, stream, bool(exchange.recall), api.name)
    usage = exchange.usage = usage_of(api.name, answer)
    failure = None if response.is_success else f"upstream status {response.status_code}"
    if exchange.recall and response.is_success:
        status, last, headers, final = await _recall_rounds(
            exchange, body, answer, deadline, (response.status_code, returned)
        )
        if status is not None:  # the answer called recall: the last round's answer goes back
            if not 200 <= status < 300:  # the proxy's own request failed: not the client's
                raise Refused(
                    502,
                    "llm_exception",
                    f"the upstream answered {status} to a recall round (the proxy's own request, "
                    "which read an archive for the model); the request the client sent was taken",
                )
            else:
                whole = opened(api.name, answer, final) or final
                plain = unechoed(api.name, whole) or whole
                if plain is not final:
                    last = json.dumps(plain, ensure_ascii=False).encode()
            await _finish(exchange, usage, failure)
            return Response(last, status, headers=headers)
        if (plain := unechoed(api.name, answer)) is not None:
            data = json.dumps(plain, ensure_ascii=False).encode()
    await _finish(exchange, usage, failure)
    return Response(data, response.status_code, headers=returned)


class _Stream(StreamingResponse):
    """The events of :func:`_events` going to the client, until the model's ``deadline`` and
    its timeout again at the latest. The deadline bounds the upstream's reads; a client that
    reads too slowly to take what came by then and the error event after it (one that reads
    nothing holds the server's send for ever) is cut off, the upstream's answer closed and
    the record stored, which says so."""

    def __init__(
        self,
        exchange: _Exchange,
        events: AsyncGenerator[bytes, None],
        status: int,
        headers: Mapping[str, str],
        deadline: float,
    ) -> None:
        # A client that goes away cancels the stream: its generator may be left where it was
        # (after its last event, the record not yet stored). Closing it afterwards runs what
        # is left: the upstream's response closed, the record stored.
        super().__init__(events, status, headers=headers, background=BackgroundTask(events.aclose))
        self.exchange, self.events = exchange, events
        self.until = deadline + exchange.config.timeout

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            async with asyncio.timeout_at(self.until):
                await super().__call__(scope, receive, send)
        except TimeoutError:
            log.warning(
                "proxy: a client read too little of its stream by %g s after the model's deadline "
                "(the model's timeout); its connection is closed, the answer unfinished",
                self.exchange.config.timeout,
            )
            self.exchange.unread = True
            await self.events.aclose()


_PER_ITEM = 16
"""Counted tokens a recall call or result takes beyond its text (its message, ids, name)."""
_NO_ROOM = "error: the model's window has no room left for recall results; answer with what you have read"
MIN_RECALL_ROOM = 512
"""Counted tokens the window must leave beside a managed request for the recall tools to be
offered with it: a round's call and a result worth reading (with less, a model that calls
one reads nothing, and its answer is cut to what it said beside the call)."""
_CUT = "\n[cut: the model's window has no room for more of it; read a narrower part]"


def _within(said: str, tokens: int, counter: TokenCounter) -> tuple[str, int]:
    """A recall result within ``tokens`` counted tokens (cut with a notice, or the error that
    there is no room), and its tokens."""
    whole = counter.text(said)
    if whole <= tokens:
        return said, whole
    room = tokens - counter.text(_CUT)
    if room < 32:  # every call has its result (the reply's reserve holds these few tokens)
        return _NO_ROOM, counter.text(_NO_ROOM)
    cut = counter.head(said, room) + _CUT
    return cut, counter.text(cut)


async def _recall_rounds(
    exchange: _Exchange,
    body: dict[str, Any],
    answer: Any,
    deadline: float,
    head: tuple[int, dict[str, str]],
    unreadable: Collection[str] = (),
) -> tuple[int | None, bytes, dict[str, str], Any]:
    """Answer the recall calls of ``answer`` (parsed; ``unreadable``, the ids of its calls
    whose streamed arguments were no JSON object) and ask the upstream again (whole
    answers), until an answer calls none: (its status, body, headers, parsed body), or a None
    status when ``answer`` called none (``head``: its status and headers, for an answer that
    is the last because no round fits the window). The rounds share the request's
    ``deadline`` (the model's ``timeout`` is the whole call's, recall included)."""
    api, config = exchange.api, exchange.config
    body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    status: int | None = None
    data, returned = b"", dict[str, str]()
    rounds = 0
    left = RECALL_CHARS
    room = exchange.room
    counter = exchange.counter
    while rounds < MAX_ROUNDS:
        calls = calls_of(api.name, answer, unreadable if rounds == 0 else ())
        if not calls:
            break
        rounds += 1
        results = []
        last = rounds == MAX_ROUNDS  # its answer may call no recall tool
        reply = reply_of(api.name, answer, {call_id for call_id, _, _ in calls})
        if counter is not None:  # the answer that called goes back too: its text, thinking and calls
            room -= counter.text(json.dumps(reply, ensure_ascii=False, default=str)) + _PER_ITEM
            if room < len(calls) * (_PER_ITEM + counter.text(_NO_ROOM)):
                # Not even an error for each call fits: this answer is the last, its recall
                # calls taken out (below).
                if status is None:
                    status, returned = head
                break
        for k, (call_id, name, args) in enumerate(calls):
            if k >= MAX_CALLS:
                said = f"error: at most {MAX_CALLS} recall calls are answered at once" + (
                    "; answer with what you have read" if last else "; call again for it"
                )
            elif left <= 0:
                said = (
                    f"error: this request's recall results are spent ({RECALL_CHARS} characters); "
                    "answer with what you have read"
                )
            else:
                said = await _recall(exchange.recall, name, args, deadline)
                if len(said) > left:
                    said = (
                        said[:left] + f"\n[cut: this request's {RECALL_CHARS} characters of recall are spent]"
                    )
                left -= len(said)
            if counter is not None:  # within the model's window, as every request
                said, tokens = _within(said, room - _PER_ITEM, counter)
                room -= tokens + _PER_ITEM
            results.append((call_id, said))
        body = continued(api.name, api.field, body, reply, results)
        if last:  # its answer calls no recall tool
            body = last_round(api.name, body)
        response = await exchange.send(body, deadline)
        returned = upstream.returned(response)
        try:
            data = await upstream.read(response, deadline, config)
        finally:
            await response.aclose()
        status = response.status_code
        # A recall round's request is measured by the upstream's report (it is the managed
        # request and the recall exchange, which no hook saw).
        answer = upstream.answer_of(data, response, recall=True, api=exchange.api.name)
        reported = (usage_of(api.name, answer) or {}).get("input", 0)
        exchange.record["calls"].append(
            {
                "call": rounds + 1,
                "calibrated_before": reported,
                "calibrated": reported,
                "reported": reported or None,
                "recall": [name for _, name, _ in calls],
            }
        )
        if not response.is_success:
            break
    if (
        status is not None
        and 200 <= status < 300
        and (plain := without_recall_calls(api.name, answer)) is not None
    ):
        answer, data = plain, json.dumps(plain, ensure_ascii=False).encode()
    return status, data, returned, answer


async def _events(
    exchange: _Exchange,
    response: httpx.Response,
    deadline: float,
    body: dict[str, Any],
    decoder: Decoder,
    given: bytes | None = None,
) -> AsyncGenerator[bytes, None]:
    """The upstream's events as they arrive (or as ``given``, already read, holds them), then the
    record. With recall offered, until one starts a tool call; the rest is held to the
    stream's end: passed on as it came when the answer calls no recall tool, else the recall
    rounds (whole answers) and the final answer as the events that end the same message (see
    :mod:`ctxmgmt.api.proxy.streams`). An error event when it breaks off."""
    api, config = exchange.api, exchange.config
    # MAX_EVENT_BYTES read at call time: a test may lower it.
    events = streams.Events(streams.MAX_EVENT_BYTES, refuse_deep=bool(exchange.recall))
    usage: dict[str, int] = {}
    acc = Accumulator(api.name)
    n = body.get("n")  # chat's choices: each one's end is awaited
    answer_end = streams.Ending(api.name, min(n, streams.MAX_CHOICES) if type(n) is int and n >= 1 else 1)
    failure: str | None = None
    failed_status = 502  # 504 once the upstream's deadline passed
    holding = False
    held: list[bytes] = []
    kept = [0]  # the bytes of ``held``
    """The events from the first tool call on (within max_stream_bytes, as the stream)."""
    tail = bytearray()
    """Passed through: the bytes of the event that has not ended yet."""
    delivered = False
    """Whether the client has had the answer's end: the stream is over, or the event that ends
    the answer went out (a client may leave then, while the upstream is slow to close)."""
    said: str | None = None
    """The upstream's own error event (passed on, or held with a call): the stream failed."""

    def read(split: list[tuple[bytes, Any]]) -> tuple[bytes, bool]:
        """The events' usage kept and recall watched for; the bytes to pass on, and whether
        they end the answer."""
        nonlocal holding, said
        out: list[bytes] = []
        last = False
        for event, data in split:
            found = usage_of(api.name, data)
            if found:
                usage.update(found)
            end = answer_end.event(event, data)
            if (
                said is None
                and isinstance(data, Mapping)
                and (data.get("type") in ("error", "response.failed") or data.get("error"))
            ):
                said = error_message(data) or "no message"
                said = f"the upstream's stream ended with an error event: {said}"
            if exchange.recall:
                if (plain := unechoed(api.name, data)) is not None:
                    event = streams.with_data(event, plain)
                holding = acc.event(data) or holding
                if holding and acc.held is None:  # a reasoning item's hold let go: text follows
                    out.extend(held)
                    held.clear()
                    kept[0] = 0
                    holding = False
                if holding:
                    held.append(event)
                    kept[0] += len(event)
                    if kept[0] > config.max_response_bytes:  # held whole in memory: a whole answer's bound
                        raise TooLarge(
                            f"the answer held to watch for recall calls is over {config.max_response_bytes} "
                            "bytes (max_response_bytes)"
                        )
                    continue
                out.append(event)
            last = end or last
        return b"".join(out), last

    raws = cast("AsyncGenerator[bytes, None]", response.aiter_raw()) if given is None else _once(given)
    try:
        try:
            while True:
                # The deadline bounds the upstream's reads only: a yield waits for the client,
                # and a timeout that fired there would tear the stream, its error event unsent.
                async with asyncio.timeout_at(deadline):
                    raw = await anext(raws, None)
                if raw is None:
                    break
                chunk = decoder.feed(raw)
                if not chunk:
                    continue
                if not exchange.recall:  # nothing to watch for: passed on as it came
                    # Read for its usage and the answer's end: an event over the bound
                    # goes unread (its usage lost), not the ones after it.
                    split = events.feed(chunk, skip=True)
                    # Up to the last event's end: an unended event's bytes wait for the rest
                    # of it (a client's SDK reads events whole; one torn off by a failure
                    # would be parsed as half an event before the error event).
                    tail += chunk
                    cut = len(tail) - min(events.unfinished, len(tail))
                    if cut:
                        passed = bytes(tail[:cut])
                        del tail[:cut]
                        yield passed
                    delivered = read(split)[1] or delivered
                    continue
                passed, last = read(events.feed(chunk))
                if passed:
                    yield passed
                    delivered = last or delivered
            decoder.finish()
            if not exchange.recall:
                # What the last chunk held after an overlong event (it waits for the next
                # chunk), then an unended last event: read for their usage and the end.
                read(events.finish(skip=True))
                rest = bytes(tail)
            else:
                rest, _ = read(events.finish())
            if said is not None and holding:  # the held answer failed: no round is made of it
                failure = said
            elif not answer_end.ended and said is None and not events.skipped:
                # Cut short, yet closed as a whole stream: a client would take what came for
                # the whole answer (a call's arguments cut in the middle, for one). Not when
                # the upstream's error event went out (the client knows), nor when an event too
                # long to read went by unread (it may have been the end).
                failure = (
                    "the upstream's stream ended before the answer's end (no "
                    f"{streams.ENDS[api.name]}); what came is not the whole answer"
                )
            if failure is None and rest:  # the last event, which no blank line ended
                yield rest
        except TooLarge as exc:
            failure = f"the upstream's stream: {exc}"
        except (TimeoutError, httpx.HTTPError) as exc:
            fault = upstream.fault(config, exc, "broke off")
            failure, failed_status = fault.message, fault.status
        except (streams.EventTooLong, streams.EventTooDeep) as exc:
            failure = str(exc)
        except Exception as exc:  # events no reader of them can take
            log.warning("proxy: the upstream's stream could not be read", exc_info=True)
            failure = f"the upstream's stream could not be read ({type(exc).__name__})"
        finally:
            await response.aclose()
        try:
            whole = acc.answer() if holding and failure is None else None
            recalls = calls_of(api.name, whole, acc.unreadable) if whole is not None else []
        except Exception as exc:  # events no reader of them can take
            log.warning("proxy: the upstream's stream could not be read", exc_info=True)
            failure, whole = f"the upstream's stream could not be read ({type(exc).__name__})", None
        if whole is not None and not recalls:  # the client's calls only
            yield b"".join(held)
        elif whole is not None:
            try:
                status, _, _, answer = await _recall_rounds(
                    exchange, body, whole, deadline, (200, {}), acc.unreadable
                )
                final = answer if status is not None and 200 <= status < 300 else None
                final = unechoed(api.name, final) or final
                if isinstance(final, Mapping) and len(exchange.record["calls"]) == 1:
                    final = unsent(acc, final, NOTHING_SAID)  # no round went: part of it is out
                ending = (
                    continuation(acc, final, bool((body.get("stream_options") or {}).get("include_usage")))
                    if isinstance(final, Mapping)
                    else None
                )
            except Refused as exc:
                failure = exc.message
            except Exception as exc:  # an answer the recall rounds cannot read
                log.warning("proxy: the upstream's answer could not be read", exc_info=True)
                failure = f"the upstream's answer could not be read ({type(exc).__name__})"
            else:
                if ending is None:
                    failure = f"upstream status {status} in a recall round"
                else:
                    for event in ending:
                        yield event
        if failure is not None:
            if held and holding and not _may_be_recall(acc.started()):
                # Broken off while holding the client's own calls: what came, as it came.
                yield b"".join(held)
            yield _stream_error(api, failure, failed_status)
        delivered = True
    finally:
        await raws.aclose()
        if exchange.unread:
            failure = "the client did not read the answer within the model's deadline (timeout) after it"
        elif failure is None and not delivered:  # closed at a yield, or cancelled while it waited
            failure = "the client went away before the answer's end"
        await _finish_shielded(exchange, usage or None, failure or said)


async def _once(data: bytes) -> AsyncGenerator[bytes, None]:
    yield data


def _may_be_recall(names: list[str]) -> bool:
    """Whether a call among those started may be a recall call: its name, as far as it has
    arrived, begins one (a name cut short is one too)."""
    return any(tool.startswith(name) for name in names for tool in RECALL_TOOLS)


_FINISHING: set[asyncio.Task[None]] = set()
"""Records being stored for streams whose client went away (a reference keeps each task)."""


async def _finish_shielded(exchange: _Exchange, usage: Mapping[str, int] | None, failure: str | None) -> None:
    """:func:`_finish`, run to its end even when the stream's task is cancelled (the client
    disconnected while it ran): the record is stored either way."""
    task = asyncio.ensure_future(_finish(exchange, usage, failure))
    _FINISHING.add(task)
    task.add_done_callback(_finished)
    await asyncio.shield(task)


def _finished(task: asyncio.Task[None]) -> None:
    """A record's write is over: its failure logged (its stream may be gone, with no one to read it)."""
    _FINISHING.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.warning("the proxy's record could not be finished", exc_info=task.exception())


async def _recall(tools: Sequence[Tool], name: str, arguments: dict[str, Any] | None, deadline: float) -> str:
    """A recall tool's answer (its error, said, when it fails), within its own timeout and
    the request's ``deadline``."""
    if arguments is None:
        return f"error: {name}'s arguments are not a JSON object; call it again with them as one"
    tool = next(t for t in tools if t.name == name)
    own = asyncio.get_running_loop().time() + tool.timeout
    try:
        async with asyncio.timeout_at(min(deadline, own)):
            return await tool.run(arguments)
    except ToolError as exc:
        return f"error: {exc}"
    except TimeoutError:
        if deadline < own:
            return f"error: {name} did not finish before this request's deadline (the model's timeout)"
        return f"error: {name} did not finish within {tool.timeout:g} s"
    except Exception as exc:  # arguments no store can take (Infinity, ...): said to the model
        return f"error: {name} could not use these arguments ({type(exc).__name__})"


def _stream_error(api: Api, message: str, status: int = 502) -> bytes:
    """An error event the provider's clients understand, after part of a stream went out (of
    the type a 504 has when the upstream's deadline passed: Anthropic's ``timeout_error``)."""
    payload = json.dumps(api.error(status, "llm_timeout" if status == 504 else "llm_exception", message))
    # After a blank line: the events before may have stopped mid-event.
    event = (
        f"\n\nevent: error\ndata: {payload}\n\n"
        if api.provider == "anthropic"
        else f"\n\ndata: {payload}\n\n"
    )
    return event.encode()


async def _finish(exchange: _Exchange, usage: Mapping[str, int] | None, failure: str | None) -> None:
    """Calibrate on the reported usage (kept with the conversation), and store the record;
    once the answer went out, a failure to store is only logged."""
    await exchange.settled()  # a stream's state, written first (the upstream may have failed)
    st = state(exchange.request)
    conversation, record = exchange.conversation, exchange.record
    recalibrated = False
    if conversation is None:  # nothing managed: the upstream's report is the request's size
        reported = (usage or {}).get("input")
        record["calls"][0].update(calibrated=reported or 0, reported=reported)
    else:
        calibrated = conversation.calibration.to_dict()
        if usage and "input" in usage:
            call = record["calls"][0]
            ratio = conversation.calibration.ratio(exchange.config.model)  # as the request was sent
            sent = conversation.observe(
                usage["input"], cached=usage.get("cached"), written=usage.get("written")
            )
            if sent is not None:
                record["calls"][0] = call_entry(1, call["tokens_before"], ratio, sent, usage)
        # The state is stored again after a stream only when the report moved the calibration.
        recalibrated = conversation.calibration.to_dict() != calibrated
    record["status"] = "error" if failure else "finished"
    record["error"] = failure
    record["ended_time"] = now_ms()
    record["llm_calls"] = len(record["calls"])
    record["max_request_tokens"] = max(c["calibrated"] for c in record["calls"])
    try:
        if conversation is not None and exchange.kept is not None and (recalibrated or not exchange.stream):
            await _store(st, exchange.request.app.state.proxy_live, conversation, exchange.kept, record)
        else:
            await asyncio.to_thread(_save, st, record)
    except Exception:
        log.warning("could not store the proxy's execution record %s", record["execution_id"], exc_info=True)
