"""The agent loop, with context management at every hook.

For one execution:

1. resolve the definition: the name in the request, else the agent's stored name,
   else the agent's inline definition, else none (a named one that does not exist
   is NotFound: the agent never runs unmanaged);
2. load the memory and add the question, then run ``post_memory``;
3. repeat until a final answer or ``max_iteration``: run ``pre_llm``, call the
   model, run each tool call and ``post_tool`` after each result;
4. append what happened to the memory, in its original form. Managers change only
   what the model sees, never the stored record.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, cast

import httpx

from .._memo import BY_CONTENT, Memo, rough_size
from ..cache import cache_figures, clean_usage, ratios_for
from ..calibration import reported_input_tokens
from ..context import Context
from ..definitions import Definition, Resolver
from ..errors import (
    AgentError,
    ExecutionTimeoutError,
    LLMError,
    ManagerError,
    NotFound,
    Problem,
)
from ..llm import ChatClient, HTTPPool, ModelsConfig
from ..managers.base import Environment
from ..messages import RECALL_TOOLS, is_summary, mentions_archive
from ..offload import Offloader
from ..registry import default_registry
from ..store import AgentStore, DefinitionStore, ExecutionStore, MemoryStore
from ..store.repository import now_ms
from ..summaries import STATE_KEY
from ..validation import validate_definition
from .conversation import UNMANAGED, Conversation
from .records import ExecutionResult, Ran, cache_summary, execution_record
from .tools import (
    EXECUTION_ARCHIVE_BYTES,
    TURN_OUTPUT_BYTES,
    ToolRegistry,
    call_tool,
    default_tools,
    recall_tools,
    tool_archive,
)

__all__ = ["ExecutionResult", "Runner"]

log = logging.getLogger("ctxmgmt.runner")
DEFAULT_MAX_ITERATION = 10
DEFAULT_EXECUTION_TIMEOUT = 600.0
"""Seconds one execution may take, whole (``llm.parameters.execution_timeout``)."""
INLINE_KEPT = 256
INLINE_BYTES = 8 * 1024 * 1024
"""Inline definitions kept built: at most this many, and this many bytes of their JSON."""
VIEW_KEY = "_view"
"""Memory state key of the managed view: what the model saw at the end of the last
execution, and how many stored messages it covers. The record itself stays complete."""


ENDED_BYTES = 64 * 1024 * 1024
"""Bytes of memories the runner keeps as their last execution here left them (see _Ended)."""


class _Ended:
    """A memory as an execution here left it: where the next one continues from, kept while
    the memory's (length, last modified) says nobody wrote it since, so that continuing a
    long conversation costs what is new, not reading and counting it all again."""

    __slots__ = ("calibration", "length", "messages", "modified", "size", "state")

    def __init__(
        self,
        length: int,
        modified: int,
        messages: Sequence[Mapping[str, Any]],
        state: dict[str, Any],
        calibration: dict[str, Any],
        size: int | None = None,
    ) -> None:
        self.length, self.modified = length, modified
        self.messages = tuple(messages)  # the messages themselves are values, never changed
        self.state, self.calibration = copy.deepcopy(state), copy.deepcopy(calibration)
        self.size = rough_size(self.messages) if size is None else size
        """About the bytes its messages keep alive (counted once, then what was added)."""

    def current(self, length: int, modified: int) -> bool:
        return (self.length, self.modified) == (length, modified)


class _Start(NamedTuple):
    """Where an execution continues from: the messages, the state, the stored length, the
    calibration, the last-modified stamp, and the memory kept here it came from (None: read
    from the store, the caller's own)."""

    messages: list[dict[str, Any]]
    state: dict[str, Any]
    length: int
    calibration: dict[str, Any]
    modified: int
    kept: _Ended | None = None


class Runner:
    """Registers and executes agents over a store, a models configuration and tools."""

    def __init__(
        self,
        store: DefinitionStore,
        models: ModelsConfig,
        tools: ToolRegistry | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        offloader: Offloader | None = None,
        pool: HTTPPool | None = None,
    ) -> None:
        self.offloader = offloader
        self.pool = pool
        """Kept-alive LLM connections shared by executions; closed by its owner on its loop
        (the server, on shutdown). Without one, an execution pools its own calls."""
        self.definitions = store
        self.agents = AgentStore(store.engine)
        self.memory = MemoryStore(store.engine)
        self.executions = ExecutionStore(store.engine)
        self.models = models
        self.tools = tools or default_tools
        self._transport = transport
        self._inline = Resolver(store.registry, kept=INLINE_KEPT, max_bytes=INLINE_BYTES)
        self._ended: Memo[_Ended] = Memo(ENDED_BYTES)

    # -- registration ------------------------------------------------------------------
    def register(self, body: Mapping[str, Any]) -> str:
        """Validate and store an agent (OpenSearch's registration body). Returns its id."""
        return self.agents.register(body, checks=self._checks(body))

    def replace(self, agent_id: str, body: Mapping[str, Any]) -> None:
        """Replace an agent's registration, with the same checks as :meth:`register`."""
        self.agents.replace(agent_id, body, checks=self._checks(body))

    def view(self, memory_id: str) -> dict[str, Any]:
        """A memory's state and the managed messages the model saw last."""
        agent_id = self.memory.owner(memory_id)
        start = self._continue(memory_id, agent_id)
        # The caller's own: the runner keeps those it continues from, never to be changed.
        view = copy.deepcopy(start.messages) if start.kept is not None else start.messages
        return {"memory_id": memory_id, "agent_id": agent_id, "state": start.state, "view": view}

    def _checks(self, body: Mapping[str, Any]) -> list[Problem]:
        problems: list[Problem] = []
        name = body.get("context_management_name")
        inline = body.get("context_management")
        if name is not None and inline is not None:
            problems.append(
                Problem(
                    "/context_management",
                    "give context_management_name or an inline context_management, not both",
                )
            )
        elif isinstance(name, str) and not self.definitions.exists(name):
            problems.append(
                Problem(
                    "/context_management_name",
                    f"no definition named {name!r}"
                    + (
                        self.definitions.suggest(name)
                        or f"; create it first (POST /_plugins/_ml/context_management/{name})"
                    ),
                )
            )
        elif isinstance(inline, Mapping):
            doc = {"name": "inline", **inline}
            problems += [
                Problem("/context_management" + p.pointer, p.message)
                for p in validate_definition(doc, registry=self.definitions.registry)
                if p.severity == "error"
            ]
        llm = body.get("llm")
        model_id = llm.get("model_id") if isinstance(llm, Mapping) else None
        if isinstance(model_id, str) and model_id not in self.models:
            known = ", ".join(sorted(self.models)) or "none"
            problems.append(
                Problem(
                    "/llm/model_id",
                    f"model {model_id!r} is not in the models configuration (configured: {known})",
                )
            )
        tools = body.get("tools")
        if isinstance(tools, list):
            seen: set[str] = set()
            for i, spec in enumerate(tools):
                if not isinstance(spec, Mapping) or not isinstance(spec.get("type"), str):
                    continue
                try:
                    tool = self.tools.build(spec)
                except ValueError as exc:
                    problems.append(Problem(f"/tools/{i}{getattr(exc, 'pointer', '')}", str(exc)))
                    continue
                except (TypeError, KeyError, AttributeError) as exc:  # a plugin's factory
                    problems.append(Problem(f"/tools/{i}", f"the tool could not be built: {exc!r}"[:300]))
                    continue
                if tool.name in seen:
                    problems.append(
                        Problem(
                            f"/tools/{i}/name", f"two tools are named {tool.name!r}; give each its own name"
                        )
                    )
                if tool.name in RECALL_TOOLS:
                    problems.append(_reserved(i, tool.name))
                seen.add(tool.name)
        return problems

    # -- execution ---------------------------------------------------------------------
    def execute(
        self,
        agent_id: str,
        question: str,
        context_management_name: str | None = None,
        memory_id: str | None = None,
    ) -> ExecutionResult:
        """Run the agent to a final answer (see :meth:`aexecute`). Not for use inside an event loop."""
        return asyncio.run(self.aexecute(agent_id, question, context_management_name, memory_id))

    async def aexecute(
        self,
        agent_id: str,
        question: str,
        context_management_name: str | None = None,
        memory_id: str | None = None,
    ) -> ExecutionResult:
        agent = await asyncio.to_thread(self.agents.get, agent_id)
        if not isinstance(question, str) or not question.strip():
            raise AgentError(
                [Problem("/parameters/question", "is required: the user's question, a non-empty string")]
            )
        definition, source, version = await asyncio.to_thread(self._resolve, agent, context_management_name)
        llm = agent["llm"]
        params = llm.get("parameters") or {}
        try:
            model = self.models[llm["model_id"]]
        except LLMError as exc:
            raise AgentError([Problem("/llm/model_id", str(exc))]) from None
        try:
            tools = {t.name: t for t in (self.tools.build(s) for s in agent.get("tools") or ())}
        except ValueError as exc:
            raise AgentError([Problem("/tools", str(exc))]) from None
        reserved = [_reserved(i, name) for i, name in enumerate(tools) if name in RECALL_TOOLS]
        if reserved:  # stored before the names were reserved
            raise AgentError(reserved)
        modified = prior = None
        if memory_id is None:
            memory_id = await asyncio.to_thread(self.memory.create, agent_id)
            base: list[dict[str, Any]] = []
            state: dict[str, Any] = {}
            length = 0
            ratios: dict[str, Any] | None = None
        else:
            base, state, length, ratios, modified, prior = await asyncio.to_thread(
                self._continue, memory_id, agent_id
            )
        schemas = [t.schema() for t in tools.values()]
        recall: list[dict[str, Any]] = []
        archive: Callable[[str], Any] | None = None
        if self.offloader is not None:
            # A tool output cut at its limit is archived whole (so is what a manager removes):
            # the recall tools come with the first archive.
            archive = functools.partial(tool_archive, self.offloader, memory_id)
            for tool in recall_tools(self.offloader, memory_id):
                if tools.setdefault(tool.name, tool) is tool:
                    recall.append(tool.schema())

        pool = self.pool or HTTPPool()
        runs: list[dict[str, Any]] = []  # the hook runs that traced something
        conversation = Conversation(
            definition if definition is not None else UNMANAGED,
            models=self.models,
            offloader=self.offloader,
            session=memory_id,
            user_first=model.provider == "anthropic",  # the Messages API wants a user turn first
            pricing=model.pricing or ratios_for(model.provider),
            pool=pool,
            execution=uuid.uuid4().hex,
            runs=runs,  # each hook run described, kept as soon as it is done
            window_check=True,
            persist=False,  # the memory keeps the record, and the view when a manager changed it
        )
        request: dict[str, Any] = {
            "system_prompt": agent.get("system_prompt") or params.get("system_prompt"),
            "tools": schemas,
            "model": model.model,
            "context_window": model.context_window,
            "max_output_tokens": model.reply_limit,  # the fit keeps room for the reply it asks
        }
        conversation.begin(base, state=state, calibration=ratios, post_memory=True, **request)
        found = False
        if recall:
            # With cache: aware the tools never change mid-conversation (a new tool list would
            # void the whole cached prefix): the recall tools are there from the first call.
            aware = definition is not None and definition.settings.get("cache") == "aware"
            found = aware or await asyncio.to_thread(self._archived, memory_id, base)
            conversation.offer_recall(recall, now=found)
        # The previous execution's last request: what it sent ends before its last model turn,
        # about when the memory was last written (the cache may have expired since).
        last_turn = next(
            (i for i in range(len(base) - 1, -1, -1) if base[i].get("role") == "assistant"), None
        )
        if last_turn is not None and modified is not None:
            offered = [*schemas, *conversation.shown] or None  # as the first request offers them
            conversation.cache.seed(offered, request["system_prompt"], base[:last_turn], at=modified / 1000)
        result = ExecutionResult(memory_id, "", False, definition.name if definition else None, source)
        result.execution_id = conversation.environment.execution or ""
        client = ChatClient(model, async_transport=self._transport, pool=pool)
        started = now_ms()
        record: list[dict[str, Any]] = [{"role": "user", "content": question}]
        outputs: list[str] = []  # the references of the tool outputs archived whole when cut
        before: dict[int, int] = {}  # LLM call -> the view's tokens before pre_llm ran
        requests: dict[int, tuple[int, float, int]] = {}  # LLM call -> (counted, ratio, reusable) as sent
        failure: BaseException | None = None
        archive_left = EXECUTION_ARCHIVE_BYTES  # what the execution's tool outputs may archive
        deadline = asyncio.timeout(float(params.get("execution_timeout", DEFAULT_EXECUTION_TIMEOUT)))
        try:
            async with deadline:  # the whole execution: model calls, tools and hooks
                for iteration in range(1, int(params.get("max_iteration", DEFAULT_MAX_ITERATION)) + 1):
                    # The question and the memory: post_memory (first), then pre_llm.
                    turn = await conversation.aprepare(record, **request)
                    before[iteration] = turn.tokens_before
                    requests[iteration] = (turn.counted, turn.ratio, turn.reusable_prefix_tokens)
                    # Messages are immutable values: hand them over without copying.
                    sent = cast(list[dict[str, Any]], list(turn.context.messages))
                    if turn.context.system_prompt:
                        sent.insert(0, {"role": "system", "content": turn.context.system_prompt})
                    extra = {"tools": list(turn.context.tools)} if turn.context.tools else {}
                    response = await client.acomplete(sent, **extra)
                    # This one request's report (never a sum across calls) calibrates the next.
                    figures = cache_figures(response.usage)
                    usage = conversation.observe(
                        reported_input_tokens(response.usage),
                        cached=figures.get("cached_tokens"),
                        written=figures.get("cache_write_tokens"),
                    )
                    assert usage is not None
                    result.usage.append({"iteration": iteration, **clean_usage(response.usage), **usage})
                    message = _assistant(response.message)
                    record.append(message)
                    calls = message.get("tool_calls")
                    if not calls:
                        await conversation.aadvance(record, **request)
                        result.response = response.content
                        result.finished = True
                        break
                    budget = TURN_OUTPUT_BYTES
                    for call in calls:
                        content, ref, archived = await call_tool(tools, call, archive, budget, archive_left)
                        archive_left -= archived
                        budget -= len(content)  # characters: a lower bound of the bytes
                        record.append({"role": "tool", "tool_call_id": call["id"], "content": content})
                        if ref is not None:
                            outputs.append(ref)
                            conversation.archived = True
                    # Once the group's results are all in: post_tool, each result seen once.
                    await conversation.aadvance(record, **request)
                else:
                    result.response = (
                        f"stopped after max_iteration={params.get('max_iteration', DEFAULT_MAX_ITERATION)} "
                        "LLM calls without a final answer"
                    )
        except TimeoutError:
            if not deadline.expired():
                raise
            seconds = params.get("execution_timeout", DEFAULT_EXECUTION_TIMEOUT)
            failure = ExecutionTimeoutError(
                f"the execution did not finish within {seconds:g} s (llm.parameters.execution_timeout); "
                "raise it in the agent, or lower max_iteration or the tools' timeouts"
            )
            raise failure from None
        except BaseException as exc:
            failure = exc
            raise
        finally:
            result.trace = runs
            result.cache = cache_summary(result.usage, runs, model, self.models)
            # Only whole rounds are recorded, so the memory stays consistent even when
            # the model fails midway: the question and every complete call/result group.
            # A round the deadline (or a cancellation) cut short, calls without all their
            # results, is left out.
            kept = record[: len(record) - _unfinished(record)]
            # The stored view (the managed messages) is written again only when a manager
            # changed something: otherwise the view stored before plus the stored record
            # since then is this view already, and writing it would cost O(memory) per execution.
            # It covers the record messages the conversation took in (a hook run cut short
            # took in nothing); the memory's messages after those continue it.
            view = conversation.context
            assert view is not None  # begun above
            saved = (
                {
                    **view.state,
                    VIEW_KEY: {"upto": length + conversation.covered, "messages": list(view.messages)},
                }
                if conversation.changed
                else None
            )
            calibrated = conversation.calibration.to_dict()
            try:
                stamp = await asyncio.to_thread(
                    self.memory.append,
                    memory_id,
                    kept,
                    saved,
                    expected_length=length,
                    # Any write since this execution read the memory (a compaction keeps its
                    # length) is a Conflict: the kept view would go stale, or overwrite it.
                    expected_modified=modified,
                    calibration=calibrated,
                )
            except BaseException as exc:  # nothing was stored (a Conflict): the record says so
                failure = failure or exc
                raise
            else:  # where the next execution continues from, as _continue would read it back
                if saved is not None:
                    after = [*view.messages, *kept[conversation.covered :]]
                    ended = _Ended(length + len(kept), stamp, after, dict(view.state), calibrated)
                else:
                    # Continued from the memory kept here: its size grows by what was added.
                    known = prior.size + rough_size(kept) if prior is not None else None
                    ended = _Ended(length + len(kept), stamp, [*base, *kept], state, calibrated, known)
                self._ended.put(memory_id, BY_CONTENT, ended, ended.size)
            finally:
                if pool is not self.pool:
                    await pool.aclose()
                entry = execution_record(
                    agent_id,
                    result,
                    Ran(definition, view, record, runs, outputs),
                    version,
                    started,
                    before,
                    requests,
                    failure,
                    self.offloader is not None,
                )
                try:
                    await asyncio.to_thread(self.executions.save, entry)
                except Exception:  # the execution's own outcome stands; the record is lost
                    log.exception("the record of execution %s could not be stored", result.execution_id)
        return result

    def compact(self, agent_id: str, memory_id: str, instruction: str | None = None) -> dict[str, Any]:
        """Summarise a conversation now (see :meth:`acompact`). Not for use inside an event loop."""
        return asyncio.run(self.acompact(agent_id, memory_id, instruction))

    async def acompact(self, agent_id: str, memory_id: str, instruction: str | None = None) -> dict[str, Any]:
        """Summarise a conversation now (QwenPaw's /compact), with an optional extra
        instruction for the summariser. The stored record is unchanged; the managed
        view that the next execution continues from is replaced."""
        agent = await asyncio.to_thread(self.agents.get, agent_id)
        definition, _, _ = await asyncio.to_thread(self._resolve, agent, None)
        base, state, length, _, modified, _ = await asyncio.to_thread(self._continue, memory_id, agent_id)
        running = state.get(STATE_KEY)
        if isinstance(running, dict):  # asked for now: summarise even with no new message
            state[STATE_KEY] = {k: v for k, v in running.items() if k != "upto"}
        config = _summarizer_config(definition)
        if instruction:
            # The summariser's own default prompt, from the class the registry builds (the
            # runner imports no built-in manager).
            summarizer = (self.definitions.registry or default_registry).get("SummarizationManager")
            prompt = config.get("summarization_system_prompt") or getattr(summarizer, "DEFAULT_PROMPT", "")
            config["summarization_system_prompt"] = f"{prompt}\nExtra instruction: {instruction}"
        compactor = Definition.from_dict(
            {
                "name": "compact",
                "hooks": {
                    "pre_llm": [{"type": "SummarizationManager", "config": config, "on_error": "fail"}]
                },
            },
            registry=self.definitions.registry,
        )
        model_id = agent["llm"]["model_id"]
        llm = self.models.get(model_id)
        view = Context(
            messages=base,
            model=llm.model if llm else None,
            context_window=llm.context_window if llm else None,
            state=state,
            max_output_tokens=llm.reply_limit if llm else None,
        )
        env = Environment(self.models, self.offloader, memory_id, pool=self.pool)
        try:
            result = await compactor.aapply("pre_llm", view, environment=env)
        except ManagerError as exc:
            if isinstance(exc.__cause__, LLMError):  # the model's fault (502/504), not the definition's
                raise exc.__cause__ from None
            raise
        saved = {
            **result.context.state,
            VIEW_KEY: {"upto": length, "messages": list(result.context.messages)},
        }
        await asyncio.to_thread(
            self.memory.append, memory_id, [], saved, expected_length=length, expected_modified=modified
        )
        entry = result.trace[0]
        summary = next((m.get("content") for m in result.context.messages if is_summary(m)), None)
        return {
            "memory_id": memory_id,
            "compacted": entry["messages_after"] < entry["messages_before"],
            "tokens_before": entry["tokens_before"],
            "tokens_after": entry["tokens_after"],
            "summary": summary,
            "trace": list(result.trace),
        }

    def _archived(self, memory_id: str, base: list[dict[str, Any]]) -> bool:
        """Whether there is something to recall for this conversation: a notice or a
        summary guide in the view, or items in the store."""
        if any(mentions_archive(m) for m in base):  # ctxmgmt's own marks only
            return True
        assert self.offloader is not None
        return bool(self.offloader.list(memory_id))

    def _continue(self, memory_id: str, agent_id: str) -> _Start:
        """Where an execution of a memory starts: the memory as this runner's last execution
        of it left it, while nobody wrote it since; else the managed view saved by the last
        execution plus what was stored after it, reading only those rows."""
        ended = self._ended.get(memory_id, BY_CONTENT)
        if ended is not None and ended.current(*self.memory.version(memory_id, agent_id)):
            # Nobody wrote the memory since this runner's last execution of it.
            state = copy.deepcopy(ended.state)
            messages = cast(list[dict[str, Any]], list(ended.messages))
            return _Start(
                messages, state, ended.length, copy.deepcopy(ended.calibration), ended.modified, ended
            )
        state, length, calibration, modified = self.memory.head(memory_id, agent_id)
        view = state.pop(VIEW_KEY, None)
        if isinstance(view, dict) and isinstance(view.get("messages"), list):
            upto = view.get("upto")
            if isinstance(upto, int) and 0 <= upto <= length:
                newer = self.memory.messages(memory_id, since=upto, until=length)
                return _Start([*view["messages"], *newer], state, length, calibration, modified)
        return _Start(self.memory.messages(memory_id, until=length), state, length, calibration, modified)

    def _resolve(
        self, agent: Mapping[str, Any], requested: str | None
    ) -> tuple[Definition | None, str, int | None]:
        """(the definition, where it came from, its stored version)."""
        if requested is not None:
            try:
                definition, version = self.definitions.resolve_version(requested)
            except NotFound:
                hint = self.definitions.suggest(requested)  # the closest stored names
                raise NotFound(f"context management {requested!r} not found{hint}") from None
            return definition, "request", version
        stored = agent.get("context_management_name")
        if stored is not None:
            try:
                definition, version = self.definitions.resolve_version(stored)
                return definition, "agent", version
            except NotFound:
                raise NotFound(
                    f"the agent's context management {stored!r} no longer exists; "
                    "the agent does not run unmanaged"
                ) from None
        inline = agent.get("context_management")
        if inline is not None:
            key = json.dumps(inline, sort_keys=True, default=str)
            # Built by their own resolver, by their JSON (so they never push out stored ones):
            # an agent replaced (by any process) brings new JSON, so an execution never runs
            # a definition its agent no longer has.
            if self._inline.registry is not self.definitions.registry:
                self._inline = Resolver(self.definitions.registry, kept=INLINE_KEPT, max_bytes=INLINE_BYTES)
            built, _ = self._inline.resolve(key, None, lambda: ({"name": "inline", **inline}, None))
            return built, "inline", None
        return None, "none", None


def _assistant(message: Mapping[str, Any]) -> dict[str, Any]:
    """The assistant message as it goes back into the conversation. The client checked the
    reply (:mod:`ctxmgmt._reply`): its content is a string or null, its calls are well formed
    and their ids unique in the turn, so every tool result answers one call."""
    calls = message.get("tool_calls")
    # An answer without text (a refusal, a reply cut at its length) is kept as "": a null
    # content is valid only beside calls, and the memory must stay a valid history.
    content = message.get("content")
    out: dict[str, Any] = {"role": "assistant", "content": "" if content is None and not calls else content}
    if calls:
        out["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["function"]["name"], "arguments": c["function"]["arguments"]},
            }
            for c in calls
        ]
    return out


def _unfinished(record: Sequence[Mapping[str, Any]]) -> int:
    """How many messages at the end of ``record`` are a round cut short: the last assistant
    turn with tool calls, when some of its calls have no result after it."""
    for i in range(len(record) - 1, -1, -1):
        m = record[i]
        if m.get("role") == "assistant":
            calls = {c.get("id") for c in m.get("tool_calls") or ()}
            answered = {r.get("tool_call_id") for r in record[i + 1 :] if r.get("role") == "tool"}
            return len(record) - i if calls - answered else 0
    return 0


def _reserved(index: int, name: str) -> Problem:
    return Problem(
        f"/tools/{index}/name",
        f"{name!r} is the name of ctxmgmt's own recall tool (context_read, context_search); "
        "give the tool another name",
    )


def _summarizer_config(definition: Definition | None) -> dict[str, Any]:
    """The summariser settings of a definition (its SummarizationManager or AutoCompactManager)."""
    for specs in definition.hooks.values() if definition else ():
        for spec in specs:
            if spec.type == "SummarizationManager":
                return dict(spec.config)
            if spec.type == "AutoCompactManager":
                return dict(spec.config.get("summarization", {}))
    return {}
