"""SummarizationManager: replace the oldest messages with one structured summary."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .. import _resources
from ..archive import sizing_ref
from ..cache import clean_usage
from ..context import Context
from ..errors import LLMError
from ..llm import ChatClient, ChatResponse, HTTPPool, parse_json_object
from ..manager import ContextManager, Runtime
from ..messages import SYSTEM_ROLES, is_summary, text_of, units, units_from_end
from ..summaries import (
    DEFAULT_PROMPT,
    SECTIONS,
    STATE_KEY,
    Sections,
    fitted,
    floor_room,
    last_message_key,
    merge,
    previous,
    render,
    summarize_offline,
    with_summary,
)
from ..tokens import REPLY_PRIMING
from .base import builtin_schema, target_tokens


def _used(runtime: Runtime, model_id: str, response: ChatResponse) -> str:
    """The answer's text; its usage goes into the trace entry (``details["model_calls"]``),
    so that the execution prices the summariser's calls apart."""
    runtime.details.setdefault("model_calls", []).append(
        {"model_id": model_id, "usage": clean_usage(response.usage)}
    )
    return response.content


@dataclass(frozen=True, slots=True)
class _Plan:
    removed: tuple[int, ...]
    cut: int
    previous: Sections | None
    previously_summarized: int


class SummarizationManager(ContextManager):
    """Summarises the oldest ``summary_ratio`` of the messages into one message.

    The newest ``preserve_recent_messages`` are kept, the cut never splits a tool
    call from its results, and with ``pin: task`` the current task is kept. The
    summary goes right after the system messages (and the pinned task) and is
    also kept in ``state["summary"]``. An earlier summary is merged, never nested.
    With ``summarization_model_id`` a chat model writes it; otherwise the offline
    summariser does. If the model fails, nothing is removed and the trace says why.
    """

    type_name = "SummarizationManager"
    DEFAULT_PROMPT = DEFAULT_PROMPT
    """The summariser's system prompt when the config gives none (read by /compact)."""
    config_schema = builtin_schema(type_name)
    archives = True
    trusted = True

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self._schema = config.get("summary_schema") or _resources.schema("summary.schema.json")
        self._validator = Draft202012Validator(self._schema)

    @classmethod
    def check_config(cls, config: Any) -> list[tuple[str, str]]:
        """Checks JSON Schema cannot express: summary_schema must itself be a valid schema."""
        schema = config.get("summary_schema")
        if schema is None:
            return []
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            return [("/summary_schema", f"is not a valid JSON Schema: {exc.message}")]
        if schema.get("type") != "object" or not schema.get("properties"):
            return [
                (
                    "/summary_schema",
                    'must be {"type": "object", "properties": {...}}: the fields of a summary',
                )
            ]
        return []

    def apply(self, context: Context, runtime: Runtime) -> Context:
        plan = self._plan(context, runtime)
        if plan is None:
            return context
        removed = [context.messages[i] for i in plan.removed]
        archive = None
        model_id = self.config.get("summarization_model_id")
        try:
            if model_id is None:
                sections = self._offline(removed, plan.previous)
            else:
                client, request = self._request(removed, plan.previous, runtime)
                answer = _used(runtime, model_id, client.complete(request))
                try:
                    sections = self._read(answer, plan.previous, model_id)
                except _InvalidSummary as exc:  # one retry, told what was wrong
                    answer = _used(runtime, model_id, client.complete(_retry(request, answer, exc)))
                    sections = self._read(answer, plan.previous, model_id)
        except LLMError as exc:
            sections, archive = self._fallback(plan, removed, exc, runtime)
        return self._finish(context, plan, sections, runtime, removed, archive)

    @property
    def awaits(self) -> bool:
        """Only a summary by a model awaits (the offline one is CPU work), or a subclass's
        own ``aapply``."""
        if type(self).aapply is not SummarizationManager.aapply:
            return True
        return self.config.get("summarization_model_id") is not None

    async def aapply(self, context: Context, runtime: Runtime) -> Context:
        plan = self._plan(context, runtime)
        model_id = self.config.get("summarization_model_id")
        if plan is None or model_id is None:
            return self.apply(context, runtime)
        removed = [context.messages[i] for i in plan.removed]
        archive = None
        try:
            client, request = self._request(removed, plan.previous, runtime)
            answer = _used(runtime, model_id, await client.acomplete(request))
            try:
                sections = self._read(answer, plan.previous, model_id)
            except _InvalidSummary as exc:
                answer = _used(runtime, model_id, await client.acomplete(_retry(request, answer, exc)))
                sections = self._read(answer, plan.previous, model_id)
        except LLMError as exc:
            sections, archive = self._fallback(plan, removed, exc, runtime)
        return self._finish(context, plan, sections, runtime, removed, archive)

    def _fallback(
        self, plan: _Plan, removed: list[Any], exc: LLMError, runtime: Runtime
    ) -> tuple[Sections, dict[str, Any]]:
        """Only with fallback: drop, and only once archived, remove the messages anyway,
        keeping the last valid summary. Otherwise the failure stands: nothing is removed."""
        if self.config["fallback"] != "drop" or runtime.offloader is None:
            raise exc
        archive = self._archive(removed, runtime)
        runtime.details["fallback"] = f"dropped after archiving, the summary failed: {exc}"
        assert archive is not None
        return {k: list(v) for k, v in (plan.previous or {}).items()}, archive

    def _offline(self, removed: list[Any], previous: Sections | None) -> Sections:
        sections = summarize_offline(removed, previous)
        fields = self._schema.get("properties", {})
        return (
            {k: v for k, v in sections.items() if k in fields}
            if self.config.get("summary_schema")
            else sections
        )

    # -- planning ------------------------------------------------------------------
    def _plan(self, context: Context, runtime: Runtime) -> _Plan | None:
        msgs = context.messages
        reason = self._loop_guard(context, runtime)
        if reason is not None:
            runtime.details["note"] = reason
            return None
        pinned = {i for i, m in enumerate(msgs) if m.get("role") in SYSTEM_ROLES}
        pinned |= runtime.constraints.head(msgs)[0]  # a turn the provider needs whole at its head
        if self.config["pin"] == "task":
            task = runtime.constraints.task_index(msgs)
            if task is not None:
                pinned.add(task)
        summaries = {i for i, m in enumerate(msgs) if is_summary(m)}
        skip = pinned | summaries  # kept, and not counted as recent
        countable = [i for i in range(len(msgs)) if i not in skip]
        preserve: int = self.config["preserve_recent_messages"]
        # Messages at or after `limit` are recent and kept; the cut never goes past it.
        limit = countable[-preserve] if 0 < preserve <= len(countable) else len(msgs)
        if preserve > len(countable):
            limit = 0
        wanted = int(len(countable) * self.config["summary_ratio"])
        reserve = self._reserve(context, runtime, skip - summaries)
        if reserve is not None:
            # Keep by tokens: the newest whole units within the reserve (and within
            # reserve_messages, when given); summarise the rest.
            kept_tokens = kept = 0
            most = self.config.get("reserve_messages")
            tokens_of = runtime.counter.message
            for start, end in units_from_end(msgs):  # the newest first: pays for what it keeps
                counted = [i for i in range(start, end) if i not in skip]
                cost, size = sum(tokens_of(msgs[i], i) for i in counted), len(counted)
                if kept_tokens + cost > reserve or (most is not None and kept + size > most):
                    break
                kept_tokens += cost
                kept += size
                limit = min(limit, start)
            wanted = len(countable)
        removed: list[int] = []
        cut = 0
        for start, end in units(msgs):
            if end > limit or len(removed) >= wanted:
                break
            removed.extend(i for i in range(start, end) if i not in skip)
            cut = end
        if not removed:
            runtime.details["note"] = "nothing to summarise: the messages are recent or pinned"
            return None
        sections, count, _ = previous(context)
        return _Plan(tuple(removed), cut, sections, count)

    def _reserve(self, context: Context, runtime: Runtime, pinned: set[int]) -> int | None:
        """The tokens of newest messages to keep: reserve_tokens, reserve_ratio of the
        window, and what target_tokens / target_ratio leave once the system prompt, tools,
        pinned messages and the summary's budget are counted; the smallest of those given."""
        given = []
        if "reserve_tokens" in self.config:
            given.append(int(self.config["reserve_tokens"]))
        if "reserve_ratio" in self.config and context.context_window:
            given.append(int(self.config["reserve_ratio"] * context.context_window))
        target = target_tokens(self.config, context, runtime)
        if target is not None:
            counter = runtime.counter
            budget = int(self.config["max_summary_tokens"])
            if context.context_window:
                budget = min(budget, context.context_window // _WINDOW_SHARE)
            fixed = (
                counter.system_prompt(context.system_prompt)
                + counter.tools(context.tools)
                + REPLY_PRIMING
                + sum(counter.message(context.messages[i], i) for i in pinned)
            )
            given.append(max(0, target - fixed - budget))
        return min(given) if given else None

    def _loop_guard(self, context: Context, runtime: Runtime) -> str | None:
        """Why not to summarise again now, or None."""
        state = context.state.get(STATE_KEY)
        if isinstance(state, dict) and state.get("upto") and state["upto"] == last_message_key(context):
            # Summarising what was already summarised would only lose more.
            return "no message has arrived since the last summary"
        last = state.get("execution") if isinstance(state, dict) else None
        if runtime.execution is None or not isinstance(last, dict) or last.get("id") != runtime.execution:
            return None
        count, saving = last.get("count", 0), last.get("saving", 1.0)
        if not isinstance(count, int) or not isinstance(saving, (int, float)):
            return None  # not a state ctxmgmt wrote: no guard to apply
        if count >= self.config["max_per_execution"]:
            return f"already summarised {last['count']} times in this execution (max_per_execution)"
        if saving < self.config["min_saving_ratio"]:
            return (
                f"the last summary in this execution freed only {last['saving']:.0%} of the tokens "
                f"(min_saving_ratio {self.config['min_saving_ratio']:.0%})"
            )
        return None

    # -- model -----------------------------------------------------------------------
    def _request(
        self, removed: list[Any], previous: Sections | None, runtime: Runtime
    ) -> tuple[ChatClient, list[dict[str, Any]]]:
        model_id = self.config["summarization_model_id"]
        if runtime.models is None:
            raise LLMError(
                "no models configuration was given (--config or CTXMGMT_CONFIG)", model_id=model_id
            )
        pool = runtime.pool if isinstance(runtime.pool, HTTPPool) else None
        client = ChatClient(runtime.models[model_id], pool=pool)
        transcript = "\n\n".join(_transcript_line(m) for m in removed)
        prompt = self.config.get("summarization_system_prompt") or DEFAULT_PROMPT
        user = (
            f"Previous summary (JSON):\n{json.dumps(previous or {}, ensure_ascii=False)}\n\n"
            f"New messages:\n{transcript}"
        )
        return client, [{"role": "system", "content": prompt}, {"role": "user", "content": user}]

    def _read(self, answer: str, previous: Sections | None, model_id: str) -> Sections:
        try:
            data = parse_json_object(answer)
        except ValueError as exc:
            raise _InvalidSummary(f"the summary is not valid JSON ({exc})", model_id=model_id) from None
        errors = list(self._validator.iter_errors(data))
        if errors:
            raise _InvalidSummary(
                f"the summary does not match its schema: {errors[0].message}", model_id=model_id
            )
        # The model was given the previous summary to merge; keep the goal stable.
        return merge({"goal": (previous or {}).get("goal", [])}, data)

    @staticmethod
    def _archive(removed: list[Any], runtime: Runtime) -> dict[str, Any] | None:
        """Offload the messages about to be removed, first, when there is an offload store.
        A failed write raises, so nothing is removed."""
        if runtime.offloader is None:
            return None
        ref = runtime.offloader.store_messages(runtime.session, [dict(m) for m in removed])
        runtime.details["offloaded"] = ref
        return {"ref": ref, "count": len(removed)}

    # -- result ----------------------------------------------------------------------
    def _finish(
        self,
        context: Context,
        plan: _Plan,
        sections: Sections,
        runtime: Runtime,
        removed: list[Any],
        archive: dict[str, Any] | None,
    ) -> Context:
        """The context with the summary, archiving the removed messages first (with a store),
        and only when the summary saves tokens: a summary that would not, archives nothing."""
        msgs = context.messages
        summarized = plan.previously_summarized + len(plan.removed)
        # A summary may take at most half the room of what it replaces (the removed
        # messages and the previous summary), so that summarising always saves tokens.
        count = runtime.counter.message
        replaced = sum(count(msgs[i], i) for i in plan.removed) + sum(
            count(m, i) for i, m in enumerate(msgs) if is_summary(m)
        )
        limit = min(self.config["max_summary_tokens"], max(64, replaced // 2))
        if context.context_window:  # and at most a sixth of the window
            limit = min(limit, max(64, context.context_window // _WINDOW_SHARE))
        before = runtime.counter.context(context)[0]
        if runtime.room is not None:  # and what the request has room for, beside what it keeps
            staying = before - replaced
            # Not below an eighth of the room when the kept part alone is (nearly) over it: the
            # fit step cuts then anyway, and a summary squeezed to a line would lose its
            # sections for good (later runs merge what it kept).
            limit = min(limit, max(floor_room(runtime.room), runtime.room - staying - _SUMMARY_OVERHEAD))
        # A role user_first providers accept; the summary's room counts its guide to the archives.
        role = "user" if runtime.constraints.user_first else self.config["summary_role"]
        bare = render({}, summarized)
        # The message's overhead, with the placeholder tag: the room never depends on the tag drawn.
        limit += runtime.counter.message({"role": role, "content": bare}) - runtime.counter.text(bare)
        earlier = previous(context)[2]
        # Measure with a reference of the store's length before writing anything.
        pending = archive or ({"ref": _PLACEHOLDER, "count": len(removed)} if runtime.offloader else None)

        def build(entry: dict[str, Any] | None) -> Context:
            archives = [*earlier, entry] if entry is not None else list(earlier)
            summary, kept = fitted(sections, summarized, archives, limit, role, runtime.counter)
            state = {"sections": kept, "summarized": summarized, "archives": archives}
            before = runtime.constraints.head(msgs)[1]
            return with_summary(context, plan.removed, plan.cut, summary, state, before=before)

        new = build(pending)
        after = runtime.counter.context(new)[0]
        if after >= before:
            runtime.details["note"] = (
                f"the summary would not save tokens ({after} >= {before}); nothing was changed"
            )
            return context
        if pending is not None and archive is None:  # archive first, now that it is worth it
            new = build(self._archive(removed, runtime))
            after = runtime.counter.context(new)[0]
        text = next(str(m.get("content")) for m in new.messages if is_summary(m))
        if runtime.execution is not None:
            last = context.state.get(STATE_KEY)
            last_run = last.get("execution") if isinstance(last, dict) else None
            runs = (
                last_run.get("count", 0)
                if isinstance(last_run, dict) and last_run.get("id") == runtime.execution
                else 0
            )
            runs = runs if isinstance(runs, int) and not isinstance(runs, bool) else 0
            # `new` was built here and not handed out yet: completing its state is safe.
            new.state[STATE_KEY]["execution"] = {
                "id": runtime.execution,
                "count": runs + 1,
                "saving": round(1 - after / before, 4),
            }
        runtime.details.update(summarized=len(plan.removed), summary_tokens=runtime.counter.text(text))
        target = target_tokens(self.config, context, runtime)
        if target is not None and after > target:
            runtime.details["note"] = (
                f"{after:,} tokens, over the target of {target:,}: what must stay (the newest "
                "messages of preserve_recent_messages, the pinned task, the newest tool-call group, "
                "the system prompt and tools, the summary) is larger; lower "
                "preserve_recent_messages or raise the target"
            )
        return new


_PLACEHOLDER = sizing_ref("messages")
_WINDOW_SHARE = 6
"""A summary takes at most this part of the window. Measured on generated 300-call runs: a
sixth keeps 86% of the paths the agent used again at 16k (an eighth: 81%) for 4% more
tokens a call; the room left beside the kept messages caps it first (see below)."""
_SUMMARY_OVERHEAD = 16
"""The summary message's own tokens beyond its text (role, header), over-reckoned."""


class _InvalidSummary(LLMError):
    """The model answered, but not with a summary that matches the schema."""


def _retry(request: list[dict[str, Any]], answer: str, exc: LLMError) -> list[dict[str, Any]]:
    return [
        *request,
        {"role": "assistant", "content": answer},
        {
            "role": "user",
            "content": f"That answer is invalid: {exc}. Answer again with only the JSON object.",
        },
    ]


def _transcript_line(m: Any) -> str:
    role = m.get("role")
    text = text_of(m.get("content"))
    calls = m.get("tool_calls") or ()
    called = "; ".join(
        f"called {c.get('function', {}).get('name')}({c.get('function', {}).get('arguments', '')})"
        for c in calls
    )
    return f"[{role}] {text} {called}".strip()


__all__ = ["DEFAULT_PROMPT", "SECTIONS", "SummarizationManager"]  # DEFAULT_PROMPT: ctxmgmt.summaries
