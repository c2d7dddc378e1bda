"""The context a definition is applied to, and the result of applying it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from .errors import ContextError, Problem
from .history import History, items
from .types import FORMAT_NAMES, MARK_MEMBER, MARK_MEMBER_REFUSED, TraceEntry

__all__ = ["ApplyResult", "Context", "Edit"]

Change = tuple[int, int, Sequence[Mapping[str, Any]]]
"""``(start, end, messages)``: the messages from ``start`` to ``end`` are replaced by ``messages``."""

_FIELDS = (
    "system_prompt",
    "messages",
    "tools",
    "model",
    "context_window",
    "state",
    "format",
    "max_output_tokens",
)

_FORMAT_CHECK: list[Callable[[Context], list[Problem]]] = []
"""How :meth:`Context.from_dict` checks the messages against their provider's rules. The
formats know those rules and deal in contexts (they import this module), so they hand
their check in (:func:`checks_formats`); a value type imports no format."""


def checks_formats(check: Callable[[Context], list[Problem]]) -> Callable[[Context], list[Problem]]:
    """Make ``check`` the provider check of :meth:`Context.from_dict` (``ctxmgmt.formats``
    does, as it is imported: importing ctxmgmt imports it). Returns it, to decorate."""
    _FORMAT_CHECK[:] = [check]
    return check


def _restored(cls: type[Context], state: dict[str, Any]) -> Context:
    """A pickled context (see :meth:`Context.__reduce__`), its fields as they were."""
    new = object.__new__(cls)
    new.__dict__.update(state, _counts={}, _edit=None)
    return new


class _NewState:
    """The default of :class:`Context`'s ``state``: a new empty dict each time."""

    def __repr__(self) -> str:
        return "{}"  # as the signature shows it


_NO_STATE: Any = _NewState()


@dataclass(frozen=True, eq=False, init=False)
class Context:
    """What an LLM call would see: system prompt, messages, tool schemas, model.

    Every argument is optional. ``messages`` are plain dicts in the provider's own
    format: OpenAI chat messages, Anthropic messages (with ``system_prompt`` a string or
    Anthropic's system blocks) or OpenAI Responses input items. ``format``
    (``openai_chat``, ``anthropic`` or ``openai_responses``) declares which; without
    it, the format is detected from the messages. Messages are treated as immutable
    values, so do not edit one in place after handing it over. A Context is never
    changed: managers return a new one
    (``dataclasses.replace`` or :meth:`with_messages`), and :meth:`append` adds
    messages in O(1). ``messages`` is held as a :class:`~ctxmgmt.History`, a sequence
    that behaves as a tuple.
    """

    system_prompt: str | Sequence[Mapping[str, Any]] | None = None
    messages: Sequence[Mapping[str, Any]] = ()
    tools: Sequence[Mapping[str, Any]] = ()
    model: str | None = None
    context_window: int | None = None
    state: Mapping[str, Any] = field(default_factory=dict)
    format: str | None = None
    max_output_tokens: int | None = None
    """The most tokens the reply may take (the request's ``max_tokens``): the fit step keeps
    this much of the window free, as the provider requires (so far as the window allows:
    see :func:`ctxmgmt.fit.reply_reserve`)."""
    _counts: dict[str, tuple[int, int]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _edit: Edit | None = field(default=None, init=False, repr=False, compare=False)

    def __init__(
        self,
        system_prompt: str | Sequence[Mapping[str, Any]] | None = None,
        messages: Sequence[Mapping[str, Any]] = (),
        tools: Sequence[Mapping[str, Any]] = (),
        model: str | None = None,
        context_window: int | None = None,
        state: Mapping[str, Any] = _NO_STATE,
        format: str | None = None,
        max_output_tokens: int | None = None,
    ) -> None:
        # dataclasses' frozen __init__, in one write (this runs on every apply): a frozen
        # dataclass forbids setting its fields, not its instance dict.
        self.__dict__.update(
            system_prompt=system_prompt,
            messages=messages,
            tools=tools,
            model=model,
            context_window=context_window,
            state={} if state is _NO_STATE else state,
            format=format,
            max_output_tokens=max_output_tokens,
            _counts={},
            _edit=None,
        )
        self.__post_init__()

    def __post_init__(self) -> None:
        # Callers may be untyped (JSON, REST): check every field at the boundary (the usual
        # types first, at the cost of a few identity tests: this runs on every apply).
        if not self._usual():
            problems: list[Problem] = []
            self._check(problems)
            if problems:
                raise ContextError(problems)
        # A History is immutable, and an append extends it (and its token counts) in O(1); a
        # list that extends one handed in before shares what is known of it (History.of).
        if not isinstance(self.messages, History):
            object.__setattr__(self, "messages", History.of(self.messages))
        if not isinstance(self.tools, tuple):
            object.__setattr__(self, "tools", tuple(self.tools))
        if not isinstance(self.state, dict):
            object.__setattr__(self, "state", dict(self.state))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (and deep-copied) as its fields (a subclass's own too), not what was counted
        of it nor the context it was spliced from: those are the process's own."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("_counts", "_edit")}
        return (_restored, (type(self), state))

    def _usual(self) -> bool:
        """Whether every field has a type :meth:`_check` passes without looking further."""
        prompt, model, window = self.system_prompt, self.model, self.context_window
        reply = self.max_output_tokens
        return (
            (type(self.messages) is list or type(self.messages) is History)
            and (prompt is None or type(prompt) is str)
            and (model is None or (type(model) is str and len(model) <= 256))
            and (window is None or (type(window) is int and window >= 1))
            and self.format is None
            and (reply is None or (type(reply) is int and reply >= 1))
            and type(self.tools) in (tuple, list)
            and type(self.state) is dict
        )

    def _check(self, problems: list[Problem]) -> None:
        values: dict[str, Any] = {f: getattr(self, f) for f in _FIELDS}
        fmt = values["format"]
        if fmt is not None and fmt not in FORMAT_NAMES:
            problems.append(
                Problem("/format", f"must be one of {', '.join(FORMAT_NAMES)}, or left out to detect it")
            )
        prompt = values["system_prompt"]
        blocks = isinstance(prompt, list) and fmt in (None, "anthropic")
        if prompt is not None and not isinstance(prompt, str) and not blocks:
            problems.append(
                Problem("/system_prompt", "must be a string (or, for Anthropic, a list of text blocks)")
            )
        if isinstance(self.messages, (str, bytes, Mapping)) or not isinstance(self.messages, Sequence):
            problems.append(Problem("/messages", "must be a list of message objects"))
        if isinstance(values["tools"], (str, bytes, Mapping)) or not isinstance(values["tools"], Sequence):
            problems.append(Problem("/tools", "must be a list of tool schemas"))
        if values["model"] is not None and (
            not isinstance(values["model"], str) or len(values["model"]) > 256
        ):
            problems.append(Problem("/model", "must be a model name, a string of at most 256 characters"))
        cw = values["context_window"]
        if cw is not None and (isinstance(cw, bool) or not isinstance(cw, int) or cw < 1):
            problems.append(Problem("/context_window", "must be a whole number >= 1"))
        reply = values["max_output_tokens"]
        if reply is not None and (isinstance(reply, bool) or not isinstance(reply, int) or reply < 1):
            problems.append(Problem("/max_output_tokens", "must be a whole number >= 1, or left out"))
        if not isinstance(values["state"], Mapping):
            problems.append(Problem("/state", "must be an object"))

    def with_messages(self, messages: Sequence[Mapping[str, Any]], **changes: Any) -> Context:
        """A copy with other messages (and any other field changed)."""
        return replace(self, messages=messages, **changes)

    def append(self, *messages: Mapping[str, Any], **changes: Any) -> Context:
        """A copy with ``messages`` after this context's (and any other field changed).

        This is how a growing conversation stays cheap: the copy shares this context's
        messages and their token counts, so it costs only what it adds, at any length.
        """
        history = cast(History, self.messages).append(*messages)
        if changes:
            return replace(self, messages=history, **changes)
        # The hot path of a growing conversation: the other fields were checked already.
        new = object.__new__(Context)
        fields = new.__dict__  # a frozen dataclass's fields, set as dataclasses' __init__ does
        fields.update(self.__dict__)
        fields["messages"] = history
        fields["_counts"] = {}
        fields["_edit"] = None
        return new

    def _derive(self, **changes: Any) -> Context:
        """A copy with fields changed to values of their checked types (a History of messages),
        without checking them again: a provider format's context in the internal form."""
        new = object.__new__(Context)
        for name in _FIELDS:
            object.__setattr__(new, name, changes[name] if name in changes else getattr(self, name))
        object.__setattr__(new, "_counts", {})
        object.__setattr__(new, "_edit", None)
        return new

    def splice(self, changes: Iterable[Change], *, state: Mapping[str, Any] | None = None) -> Context:
        """A copy with each ``(start, end, messages)`` change made: ``self.messages[start:end]``
        replaced by ``messages``, the indices being this context's. Changes come in order
        and do not overlap; a removal has no messages, an insertion has ``start == end``.

        The copy remembers the changes (as :attr:`edit`), so that checking it and counting
        its tokens cost what changed, not its length. Built-in managers make their output so.
        """
        source = items(self.messages)
        n = len(self.messages)
        out: list[Mapping[str, Any]] = []
        done: list[tuple[int, int, tuple[Mapping[str, Any], ...]]] = []
        spans: list[tuple[int, int]] = []
        pos = 0
        for start, end, new in changes:
            if not pos <= start <= end <= n:
                raise ValueError(f"change ({start}, {end}) is out of order or outside 0..{n}")
            out.extend(source[pos:start])
            added = tuple(new)
            spans.append((len(out), len(out) + len(added)))
            out.extend(added)
            done.append((start, end, added))
            pos = end
        out.extend(source[pos:n])
        changed = replace(self, messages=History.own(out), state=self.state if state is None else state)
        object.__setattr__(changed, "_edit", Edit(self, tuple(done), tuple(spans)))
        return changed

    @property
    def edit(self) -> Edit | None:
        """How :meth:`splice` made this context from another one, if it did."""
        return self._edit

    def to_dict(self) -> dict[str, Any]:
        """The context as JSON-able data, with the same fields as the input format."""
        return {
            "system_prompt": self.system_prompt,
            "messages": list(self.messages),
            "tools": list(self.tools),
            "model": self.model,
            "context_window": self.context_window,
            "state": dict(self.state),
            "format": self.format,
            "max_output_tokens": self.max_output_tokens,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Context:
        """Build a context from a JSON list of messages or an object with the context
        fields, checking that the messages are ones their provider's API would accept."""
        if isinstance(data, list):
            data = {"messages": data}
        if not isinstance(data, Mapping):
            raise ContextError([Problem("", "expected a list of messages or an object with 'messages'")])
        unknown = sorted(set(data) - set(_FIELDS))
        if unknown:
            raise ContextError(
                [
                    Problem(f"/{key}", f"unknown field; expected one of {', '.join(_FIELDS)}")
                    for key in unknown
                ]
            )
        messages = data.get("messages")
        marked = [
            Problem(f"/messages/{i}/{MARK_MEMBER}", MARK_MEMBER_REFUSED)
            for i, m in enumerate(messages if isinstance(messages, list) else ())
            if isinstance(m, Mapping) and MARK_MEMBER in m
        ]
        if marked:
            raise ContextError(marked)
        ctx = cls(**{k: data[k] for k in _FIELDS if k in data and data[k] is not None})
        problems = [p for check in _FORMAT_CHECK for p in check(ctx)]
        if problems:
            raise ContextError(problems)
        return ctx


@dataclass(frozen=True, slots=True)
class Edit:
    """The changes :meth:`Context.splice` made to ``source``."""

    source: Context
    changes: tuple[tuple[int, int, tuple[Mapping[str, Any], ...]], ...]
    """``(start, end, messages)`` in the source's indices, in order."""
    spans: tuple[tuple[int, int], ...]
    """Where each change's messages are in the result (``start == end`` for a removal)."""


def runs(indices: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted indices as ``(start, end)`` runs of consecutive ones."""
    out: list[tuple[int, int]] = []
    for i in sorted(indices):
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """The new context and what each manager did."""

    context: Context
    trace: tuple[TraceEntry, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"context": self.context.to_dict(), "trace": list(self.trace)}
