"""Run one hook: its entries top to bottom, each gated by its activation.

For every entry the runner records a trace entry. A manager that raises, or that
returns a context an LLM API would reject, is an error: with ``on_error: skip``
the context stays as it was and the trace says why; with ``fail`` it raises
:class:`~ctxmgmt.ManagerError`. Error text never goes into the context.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from .archive import Batch, BatchWriter
from .context import ApplyResult, Context
from .errors import ContextError, ManagerError
from .fit import Fit, input_limit, reply_reserve, reserve_tokens
from .formats import CHAT, USER_FIRST, Constraints
from .history import IS_CHAT, IS_VALID, History
from .manager import ContextManager, Environment, Runtime
from .messages import check_changes, check_format, check_grown, check_messages
from .rules import Activation, Facts, Gate
from .telemetry import hook_telemetry
from .types import Hook, TraceEntry

if TYPE_CHECKING:
    from .tokens import TokenCounter


@dataclass(frozen=True, slots=True)
class Entry:
    """A built manager entry of a hook: the instance and how it is gated."""

    index: int
    type: str
    manager: Any
    activation: Gate
    on_error: str


_HOOK_NAMES = {h: h.value for h in Hook}


@functools.lru_cache(maxsize=64)
def _writes_batches(cls: type) -> bool:
    """Whether an offloader class writes batches (a Protocol check is slow: once per class)."""
    return issubclass(cls, BatchWriter)


class _Run:
    """The state of one hook run: the current context and the trace so far."""

    def __init__(
        self,
        definition: str,
        hook: Hook,
        context: Context,
        counter: TokenCounter,
        environment: Environment,
        settings: Mapping[str, Any] | None = None,
        constraints: Constraints = CHAT,
    ) -> None:
        self.settings = settings or {}
        if environment.user_first and not constraints.user_first:
            constraints = USER_FIRST
        self.constraints = constraints
        self.environment = environment
        self.definition = definition
        self.hook = hook
        self._hook_name: str = _HOOK_NAMES[hook]  # an Enum's value is a slow property
        self.context = self.given = context
        self.counter = counter
        self.trace: list[TraceEntry] = []
        self._facts: Facts | None = None
        self._facts_of: Context | None = None
        self._reserved: tuple[Context, int] | None = None
        self._input_problems: set[str] | None = None
        offloader = environment.offloader
        self._batches = offloader is not None and _writes_batches(type(offloader))
        self._format_checked = False
        self._current: tuple[Entry, tuple[Runtime, float, int, dict[str, Any]]] | None = None
        self._tokenizer = counter.label
        self.ratio = environment.ratio(context.model)
        self._telemetry = hook_telemetry(definition, self._hook_name, context, environment.session)
        # With cache: aware, any hook's edit of the previous request's prefix is weighed.
        self._cache = environment.cache if self.settings.get("cache") == "aware" else None
        if self._cache is not None:
            self._key = f"{definition}:{self._hook_name}"  # a postponed entry's, with its index
            if hook is Hook.PRE_LLM:  # the call's growth, before its edits
                self._cache.note_growth(context, counter)

    def start(self, entry: Entry) -> tuple[Runtime, float, int, dict[str, Any]] | None:
        """Gate an entry. Returns what ``finish`` needs, or None when it does not run."""
        facts = self._facts
        if facts is None or self._facts_of is not self.context:  # one per context a run sees
            self._facts_of = self.context
            facts = self._facts = Facts(
                self.context,
                self.counter,
                self.counter.context(self.context),
                self.ratio,
                self.constraints.hidden_tokens(self.context.messages),
            )
        tokens = facts.tokens_counted
        fired, reason = entry.activation.evaluate(facts)
        if fired and self._cache is not None and entry.type != Fit.type_name:
            waiting = self._cache.waiting(self._key, entry.index, self.context, tokens, self._limit())
            if waiting is not None:  # postponed before, and nothing says it pays yet
                fired, reason = False, {**reason, "postponed": "cache", "cache": waiting}
        if not fired:
            self._record(entry, False, reason, tokens, self.context, 0.0, None, {})
            return None
        if not self._format_checked:
            # Before anything changes a list in another provider's format: a clear error,
            # never a list managed into one that provider would reject.
            check_format(self.context.messages)
            self._format_checked = True
            history = self.context.messages
            if isinstance(history, History) and history.known(IS_VALID):
                # A grown list that was valid: knowing whether it still is costs its new part.
                self._input_problems = {p.message for p in check_grown(history)}
        # Each manager's archives are collected and written in one durable batch.
        store: Any = self.environment.offloader
        if self._batches:
            store = Batch(store)
        runtime = Runtime(
            self.hook,
            self.counter,
            self.definition,
            self.environment,
            store,
            self.constraints,
            room=self._limit(),
        )
        if self._telemetry is not None:
            self._telemetry.entry_started(entry.type, entry.index)
        return runtime, time.perf_counter(), tokens, reason

    def finish(
        self,
        entry: Entry,
        started: tuple[Runtime, float, int, dict[str, Any]],
        output: Any = None,
        exc: BaseException | None = None,
    ) -> None:
        runtime, t0, tokens, reason = started
        duration = (time.perf_counter() - t0) * 1000
        trusted = getattr(type(entry.manager), "trusted", False) is True  # declared, checked at registration
        error = f"{type(exc).__name__}: {exc}" if exc is not None else self._broken(output, trusted)
        if error is None and self._postponed(entry, output, tokens, runtime.details):
            self._record(entry, True, reason, tokens, self.context, duration, None, runtime.details)
            return  # nothing of it is used, so nothing it archived is written
        if error is None and isinstance(runtime.offloader, Batch) and runtime.offloader.pending:
            # Archived first: the output is used only once what it removed is durable.
            try:
                torn = runtime.offloader.commit()
            except Exception as commit_exc:
                exc = commit_exc
                error = f"{type(exc).__name__}: {exc}"
            else:
                if torn:
                    runtime.details["torn_records_closed"] = torn
        if error is not None:
            if entry.on_error == "fail":
                raise ManagerError(
                    error,
                    definition=self.definition,
                    hook=self.hook.value,
                    index=entry.index,
                    type=entry.type,
                ) from exc
            self._record(entry, True, reason, tokens, self.context, duration, error, runtime.details)
            return
        self._record(entry, True, reason, tokens, output, duration, None, runtime.details)
        self.context = output

    def _reserve(self, context: Context | None = None) -> int:
        """The tokens kept for the reply of ``context`` (by default the run's; see
        :func:`~ctxmgmt.fit.reply_reserve`), worked out once per context a run sees."""
        context = self.context if context is None else context
        if context.max_output_tokens is None:  # the definition's (the common case: no sum to do)
            return reserve_tokens(context.context_window or 0, self.settings)
        if self._reserved is None or self._reserved[0] is not context:
            ratio = self.environment.window_ratio(context.model)
            reserve = reply_reserve(context, self.settings, self.counter, self.constraints, ratio)
            self._reserved = (context, reserve)
        return self._reserved[1]

    def _limit(self) -> int | None:
        """The counted tokens a request may have: the window less the reply's reserve."""
        if not self.context.context_window:
            return None
        ratio = self.environment.window_ratio(self.context.model)
        return input_limit(self.context, self._reserve(), ratio, self.constraints)

    def _refire(self, entry: Entry) -> int | None:
        """The counted tokens past which an entry fires again: its activation's token level
        (ANDed rules: the highest; ``any_of``: the lowest alternative; a rule on messages or
        an entry that always runs: 0, it may fire on the next call), and its own ``trigger``
        (clearing) on top; None for a gate that is not an activation."""
        if not isinstance(entry.activation, Activation):
            return None
        level = _token_level(entry.activation, self.context.context_window)
        config = getattr(entry.manager, "config", None)
        trigger = config.get("trigger") if isinstance(config, Mapping) else None
        if isinstance(trigger, int) and not isinstance(trigger, bool) and trigger > 0:
            level = max(level, trigger)
        return int(level / self.ratio)

    def _postponed(self, entry: Entry, output: Context, tokens: int, details: dict[str, Any]) -> bool:
        """With ``cache: aware``: whether an entry's edit of the reusable prefix waits (the
        fit step's never does). The numbers go into its trace entry either way."""
        if self._cache is None or entry.type == Fit.type_name or output is self.context:
            return False
        verdict = self._cache.weigh(
            self.context,
            output,
            self.counter,
            self._limit(),
            self.settings.get("cache_expected_calls"),
            self._refire(entry),
        )
        if verdict is None:
            return False
        if verdict["postpone"] and details.get("model_calls"):
            verdict = {**verdict, "postpone": False, "note": "applied: its model calls are paid for"}
        if not verdict["postpone"]:
            details["cache"] = verdict
            return False
        # Nothing of the edit is used: what it did (and archived) is reported as what it would do.
        would = {k: v for k, v in details.items() if k != "offloaded"}
        details.clear()
        details.update(postponed="cache", cache=verdict, would=would)
        self._cache.postponed(self._key, entry.index, self.context, tokens, self._limit())
        return True

    def _broken(self, output: Any, trusted: bool) -> str | None:
        """Why a manager's output may not be used, or None. A trusted manager's output (a
        built-in's) is checked where it changed; a plugin's, whole."""
        if not isinstance(output, Context):
            return f"apply() returned {type(output).__name__}, not a Context"
        if output is self.context:
            return None
        if output.system_prompt != self.context.system_prompt:
            return "the manager changed the system prompt, which managers must keep"
        msgs, edit = output.messages, output.edit
        if not trusted:  # a plugin's list: the full check, whatever it was made from
            problems = check_messages(msgs, partial_tail=True)
            if not problems and isinstance(msgs, History):
                msgs.mark(IS_VALID)
        elif isinstance(msgs, History) and msgs.known(IS_VALID):
            problems = check_grown(msgs)  # grown from a list known valid: its new messages
        elif edit is not None and edit.source is self.context:
            # Made by splice from this input: only what changed can be new trouble.
            problems = check_changes(msgs, edit.spans)
            source = self.context.messages
            if not problems and isinstance(source, History) and source.known(IS_VALID) >= len(source):
                cast(History, msgs).mark(IS_VALID)  # a valid list, changed without new trouble
        else:
            problems = check_grown(msgs)
        if problems:
            if self._input_problems is None:
                before = check_messages(self.context.messages, partial_tail=True)
                self._input_problems = {p.message for p in before}
            new = [p for p in problems if p.message not in self._input_problems]
            if new:
                return f"the manager produced an invalid message list: {new[0]}"
        if self.constraints.rule is not None:
            why = self.constraints.rule(msgs)
            if why is not None:
                return f"the manager produced a list the provider would reject: {why}"
        if self._format_checked and isinstance(output.messages, History):
            output.messages.mark(IS_CHAT)  # its new messages passed the format check too
        return None

    def _record(
        self,
        entry: Entry,
        activated: bool,
        reason: dict[str, Any],
        tokens_before: int,
        after: Context,
        duration: float,
        error: str | None,
        details: dict[str, Any],
    ) -> None:
        before = len(self.context.messages)  # a History's len is a Python call: once each
        if after is self.context:  # an entry that did not run, or changed nothing
            tokens_after, messages_after = tokens_before, before
        else:
            tokens_after, messages_after = self.counter.context(after)[0], len(after.messages)
        entry_trace: TraceEntry = {
            "hook": self._hook_name,
            "index": entry.index,
            "type": entry.type,
            "activated": activated,
            "reason": reason,
            "tokens_before": tokens_before,
            "tokens_after": tokens_after,
            "messages_before": before,
            "messages_after": messages_after,
            "duration_ms": round(duration, 3) if duration else 0.0,
            "error": error,
            "tokenizer": self._tokenizer,
            "details": details,
        }
        if self.ratio != 1.0:  # what the provider would count, by its reports so far
            entry_trace["calibration"] = {
                "ratio": round(self.ratio, 4),
                "tokens_before": round(tokens_before * self.ratio),
                "tokens_after": round(tokens_after * self.ratio),
            }
        self.trace.append(entry_trace)
        if self._telemetry is not None:
            self._telemetry.entry_done(entry_trace)

    def fit(self, index: int) -> None:
        """The final step of ``pre_llm``: the request fits its window (see :mod:`ctxmgmt.fit`).
        A context that cannot fit raises ContextError; the LLM is never called with it."""
        if (
            self.hook is not Hook.PRE_LLM
            or not self.context.context_window
            or not self.settings.get("fit", True)
        ):
            return
        step = Fit(self.settings, self._reserve(), self._reserve, opening=self.given)
        entry = Entry(index, Fit.type_name, step, step.activation, "fail")
        started = self.start(entry)
        if started is None:
            return
        try:
            output = step.apply(self.context, started[0])
        except ContextError:
            raise
        except Exception as exc:
            self.finish(entry, started, exc=exc)
        else:
            self.finish(entry, started, output)

    def steps(self, entries: Sequence[Entry]) -> Iterator[tuple[Entry, Runtime]]:
        """The entries that run, top to bottom, each with its runtime; report each one's
        outcome with :meth:`done` before taking the next."""
        for entry in entries:
            started = self.start(entry)
            if started is not None:
                self._current = (entry, started)
                yield entry, started[0]

    def done(self, outcome: tuple[Any, Exception | None]) -> None:
        """The outcome of the entry :meth:`steps` gave last: (output, None) or (None, error)."""
        assert self._current is not None
        (entry, started), self._current = self._current, None
        output, exc = outcome
        if exc is None:
            self.finish(entry, started, output)
        else:
            self.finish(entry, started, exc=exc)

    def end(self, entries: int) -> ApplyResult:
        """The fit step, then the result."""
        self.fit(entries)
        return ApplyResult(self.context, tuple(self.trace))

    @contextlib.contextmanager
    def closing(self) -> Iterator[None]:
        """The run's telemetry ends however the run ends, with the error when it raised."""
        try:
            yield
        except BaseException as exc:
            self.close(exc)
            raise
        finally:
            self.close()

    def close(self, error: BaseException | None = None) -> None:
        """End the hook run's telemetry, however the run ended."""
        if self._telemetry is not None:
            self._telemetry.done(tuple(self.trace), self.context, error)
            self._telemetry = None


def _token_level(activation: Activation, window: int | None) -> float:
    """The request's tokens above which an activation may fire (0: at any size)."""
    level = 0.0
    for rule, limit in activation.rules:  # ANDed: all must hold
        if rule == "tokens_exceed":
            level = max(level, limit)
        elif rule == "tokens_ratio_exceed" and window:
            level = max(level, limit * window)
    if activation.any_of:  # one alternative is enough
        level = max(level, min(_token_level(alt, window) for alt in activation.any_of))
    return level


def run_hook(
    definition: str,
    hook: Hook,
    entries: Sequence[Entry],
    context: Context,
    counter: TokenCounter,
    environment: Environment,
    settings: Mapping[str, Any] | None = None,
    *,
    constraints: Constraints = CHAT,
) -> ApplyResult:
    run = _Run(definition, hook, context, counter, environment, settings, constraints)
    try:  # run.closing(), written out: this is every apply's path
        for entry, runtime in run.steps(entries):
            run.done(_call(entry.manager, run.context, runtime))
        return run.end(len(entries))
    except BaseException as exc:
        run.close(exc)
        raise
    finally:
        run.close()


async def arun_hook(
    definition: str,
    hook: Hook,
    entries: Sequence[Entry],
    context: Context,
    counter: TokenCounter,
    environment: Environment,
    settings: Mapping[str, Any] | None = None,
    *,
    constraints: Constraints = CHAT,
) -> ApplyResult:
    """The async form of :func:`run_hook`: its work never blocks the event loop. A hook whose
    managers are all synchronous runs whole in a worker thread (the managers' work, the
    checks, the archive writes and their fsyncs); otherwise each step does, and a manager
    with its own ``aapply`` (one that awaits a model) is awaited on the loop."""
    args = (definition, hook, entries, context, counter, environment, settings)
    if not any(awaits(entry.manager) for entry in entries):
        return await asyncio.to_thread(functools.partial(run_hook, *args, constraints=constraints))
    run = await asyncio.to_thread(
        _Run, definition, hook, context, counter, environment, settings, constraints
    )
    with run.closing():
        steps = run.steps(entries)
        while (step := await asyncio.to_thread(next, steps, None)) is not None:
            entry, runtime = step
            if awaits(entry.manager):
                outcome = await _acall(entry.manager, run.context, runtime)
                await asyncio.to_thread(run.done, outcome)
            else:
                await asyncio.to_thread(_step, run, entry.manager, runtime)
        return await asyncio.to_thread(run.end, len(entries))


def awaits(manager: Any) -> bool:
    """Whether a manager is awaited on the event loop: its ``awaits`` (see
    :class:`~ctxmgmt.ContextManager`), or for a duck-typed plugin, whether it has an
    ``aapply`` other than the base class's."""
    declared = getattr(manager, "awaits", None)
    if isinstance(declared, bool):
        return declared
    aapply = getattr(type(manager), "aapply", None)
    return aapply is not None and aapply is not ContextManager.aapply


def _step(run: _Run, manager: Any, runtime: Runtime) -> None:
    run.done(_call(manager, run.context, runtime))


def _call(manager: Any, context: Context, runtime: Runtime) -> tuple[Any, Exception | None]:
    """(output, None) or (None, what it raised)."""
    try:
        return manager.apply(context, runtime), None
    except Exception as exc:
        return None, exc


async def _acall(manager: Any, context: Context, runtime: Runtime) -> tuple[Any, Exception | None]:
    aapply = getattr(manager, "aapply", None)
    if aapply is None:  # a duck-typed plugin with only apply()
        return _call(manager, context, runtime)
    try:
        return await aapply(context, runtime), None
    except Exception as exc:
        return None, exc
