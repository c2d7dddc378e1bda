"""What every adapter shares: the conversation's reusable prefix and its cache figures."""

import pytest

from ctxmgmt.agents.conversation import Conversation
from ctxmgmt.context import Context
from ctxmgmt.tokens import REPLY_PRIMING, get_counter

DEFINITION = {
    "name": "d",
    "hooks": {"post_tool": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 400}}]},
}


def test_each_turn_measures_what_it_reuses_of_the_previous_request():
    """The first turn reuses nothing; the next reuses the whole previous request (what the
    framework sent before, identical), and observe() records it with the provider's cache figures."""
    conversation = Conversation(DEFINITION)
    record = [{"role": "user", "content": "Why does the build fail?"}]
    first = conversation.prepare(record, system_prompt="Be brief.", model="gpt-4o")
    assert first.reusable_prefix_tokens == 0
    assert conversation.observe(30, cached=0)["reusable_prefix_tokens"] == 0
    record += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "a", "type": "function", "function": {"name": "log", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "a", "content": "ERROR " * 300},
    ]
    second = conversation.prepare(record, system_prompt="Be brief.", model="gpt-4o")
    seen = conversation.observe(60, cached=25, written=35)
    assert seen["counted"] - seen["reusable_prefix_tokens"] > REPLY_PRIMING  # the new messages
    assert second.reusable_prefix_tokens == seen["reusable_prefix_tokens"] > 0
    assert (seen["cached_tokens"], seen["cache_write_tokens"]) == (25, 35)
    other = conversation.prepare(record, system_prompt="Be thorough.", model="gpt-4o")
    assert other.reusable_prefix_tokens == 0  # no tools, and a new system prompt: nothing reused


QUIET = {
    "name": "quiet",
    "hooks": {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 1000}}]},
}
WINDOWED = {
    "name": "windowed",
    "hooks": {
        "pre_llm": [
            {
                "type": "SlidingWindowManager",
                "config": {"max_messages": 4},
                "activation": {"message_count_exceed": 8},
            }
        ]
    },
}


def _framework(n: int) -> list[tuple[str, str]]:
    """A framework's record: (role, text) pairs, each a message of its own kind."""
    return [("user" if i % 2 == 0 else "assistant", f"message {i}") for i in range(n)]


def test_a_continued_record_translates_only_its_new_messages():
    """A record that continues the last one costs its new messages: translate sees only those,
    and the managed view is the whole record."""
    seen: list[tuple[str, str]] = []

    def translate(m):
        seen.append(m)
        return [{"role": m[0], "content": m[1]}]

    conversation = Conversation(QUIET)
    record = _framework(51)
    conversation.prepare(record, translate=translate)
    seen.clear()
    record = [*record, ("assistant", "ok"), ("user", "one more")]
    turn = conversation.prepare(record, translate=translate)
    assert seen == [("assistant", "ok"), ("user", "one more")]
    assert (turn.start, turn.extends, turn.whole) == (51, True, True)
    assert [m["content"] for m in turn.messages] == [m[1] for m in record]
    assert conversation.framework_messages(turn, record, lambda t: []) == record


def test_a_record_that_does_not_continue_starts_a_new_view():
    """A record whose message at the covered length changed (another conversation, or an edit)
    is translated whole and managed from scratch."""
    conversation = Conversation(QUIET)
    translate = lambda m: [{"role": m[0], "content": m[1]}]  # noqa: E731
    conversation.prepare(_framework(11), translate=translate)
    other = [("user", "another task"), *_framework(12)[1:]]
    other[10] = ("user", "edited")
    turn = conversation.prepare(other, translate=translate)
    assert not turn.extends
    assert [m["content"] for m in turn.messages] == [m[1] for m in other]


def test_a_view_that_only_grew_hands_back_the_previous_messages_and_the_new():
    """After a manager changed the view, a turn that changes nothing more hands the framework
    its previous managed messages plus the new ones, without rebuilding them."""
    conversation = Conversation(WINDOWED)
    translate = lambda m: [{"role": m[0], "content": m[1]}]  # noqa: E731
    record = _framework(9)
    first = conversation.prepare(record, translate=translate)
    assert not first.whole and len(first.messages) <= 4
    rebuilt = conversation.framework_messages(first, record, lambda t: [("built", len(t.messages))])
    assert rebuilt == [("built", len(first.messages))]
    record = [*record, ("assistant", "ok")]
    turn = conversation.prepare(record, translate=translate)
    assert turn.extends and not turn.whole
    out = conversation.framework_messages(turn, record, lambda t: [("built again",)])
    assert out == [*rebuilt, ("assistant", "ok")]


def test_a_view_that_is_the_record_is_saved_as_such_and_restored():
    """A view no manager changed is saved without a copy of the messages; a conversation that
    loads it continues from the record."""
    record = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    conversation = Conversation(QUIET)
    conversation.prepare(record)
    assert conversation.saved["whole"] is True and "view" not in conversation.saved
    restored = Conversation(QUIET)
    restored.load(conversation.saved)
    turn = restored.prepare([*record, {"role": "user", "content": "c"}])
    assert turn.start == 2 and [m["content"] for m in turn.messages] == ["a", "b", "c"]


def _chat(n: int) -> list[dict[str, str]]:
    return [{"role": role, "content": text} for role, text in _framework(n)]


@pytest.mark.parametrize("restored", [False, True])
def test_an_earlier_message_edited_starts_a_new_view(restored):
    """A record whose message before the covered length was edited (a redaction, another
    middleware's edit), the last covered one equal, is managed afresh, live and restored from
    the saved view: the model sees the edit, never the stale copy."""
    conversation = Conversation(WINDOWED)
    record = _chat(9)
    first = conversation.prepare(record)
    assert "view" in conversation.saved and "message 6" in [m["content"] for m in first.messages]
    edited = [*record[:6], {"role": "user", "content": "[redacted]"}, *(dict(m) for m in record[7:])]
    edited.append({"role": "assistant", "content": "ok"})
    if restored:
        saved, conversation = conversation.saved, Conversation(WINDOWED)
        conversation.load(saved)
    turn = conversation.prepare(edited)
    contents = [m["content"] for m in turn.messages]
    assert "[redacted]" in contents and "message 6" not in contents
    assert not turn.extends


@pytest.mark.parametrize("restored", [False, True])
def test_a_request_never_exceeds_its_window_when_an_earlier_message_grew(restored):
    """A first message replaced by a long one, the later ones unchanged, is counted and fitted:
    the request counted and the messages handed to the framework stay within the window."""
    fitted = {**QUIET, "settings": {"fit": True}}
    conversation = Conversation(fitted)
    record = [{"role": "user", "content": "short"}, {"role": "assistant", "content": "ok"}]
    record.append({"role": "user", "content": "go"})
    conversation.prepare(record, model="gpt-4o", context_window=2000)
    if restored:
        saved, conversation = conversation.saved, Conversation(fitted)
        conversation.load(saved)
    grown = [{"role": "user", "content": "word " * 5000}, *record[1:], {"role": "assistant", "content": "a"}]
    turn = conversation.prepare(grown, model="gpt-4o", context_window=2000)
    out = conversation.framework_messages(turn, grown, lambda t: t.messages)
    sent = get_counter("gpt-4o").context(Context(messages=out, model="gpt-4o"))[0]
    assert conversation.last_counted is not None and conversation.last_counted <= 2000
    assert sent <= 2000


@pytest.mark.parametrize("definition", [QUIET, WINDOWED])
def test_a_restored_conversation_translates_and_fingerprints_each_message_once(definition, monkeypatch):
    """A conversation restored from a state saved many messages ago translates each record
    message once and fingerprints each once, whether the saved view still fits or not."""
    import ctxmgmt.agents.conversation as engine

    keyed: list[object] = []
    key = engine._canonical
    monkeypatch.setattr(engine, "_canonical", lambda m: keyed.append(m) or key(m))
    seen: list[tuple[str, str]] = []

    def translate(m):
        seen.append(m)
        return [{"role": m[0], "content": m[1]}]

    saved_from = Conversation(definition)
    saved_from.prepare(_framework(5), translate=translate)
    for record in (_framework(41), [("user", "another task"), *_framework(41)[1:]]):
        restored = Conversation(definition)
        restored.load(saved_from.saved)
        seen.clear()
        keyed.clear()
        turn = restored.prepare(record, translate=translate)
        assert seen == record and len(keyed) == len(record) and turn.fresh
        assert [m["content"] for m in turn.messages][-1] == record[-1][1]


def _registry_transport(wait=None):
    """A registry server's GET /definitions/<name> answer (version 1), after ``wait()``."""
    import httpx

    def handler(request):
        if wait is not None and not wait():
            return httpx.Response(500, json={"error": {"reason": "the event loop never ran"}})
        return httpx.Response(200, json={"name": "quiet", "version": 1, **QUIET})

    return handler


def test_a_sync_registry_client_does_not_block_the_event_loop():
    """Source.aget with a sync Client fetches in a worker thread: the event loop runs other
    work while the request waits (here the very work that lets the request answer)."""
    import asyncio
    import threading

    import httpx

    from ctxmgmt import Client
    from ctxmgmt.agents.conversation import Source

    released = threading.Event()
    client = Client(
        "http://registry", transport=httpx.MockTransport(_registry_transport(lambda: released.wait(5)))
    )
    source = Source((client, "quiet"))

    async def main():
        async def release():
            released.set()

        fetched, _ = await asyncio.gather(source.aget(), release())
        return fetched

    assert asyncio.run(main()).name == "quiet"
    client.close()


def test_an_async_registry_client_in_a_sync_call_is_a_clear_error():
    """Source.get (a synchronous model call) with an AsyncClient says to run asynchronously or
    pass a Client, and leaves no coroutine unawaited; aget fetches with it."""
    import asyncio

    import httpx

    from ctxmgmt import AsyncClient
    from ctxmgmt.agents.conversation import Source

    client = AsyncClient("http://registry", transport=httpx.MockTransport(_registry_transport()))
    source = Source((client, "quiet"))
    with pytest.raises(TypeError, match=r"AsyncClient.*ainvoke.*Source.aget.*ctxmgmt.Client"):
        source.get()
    conversation = Conversation(source)
    with pytest.raises(TypeError, match="AsyncClient"):
        conversation.prepare([{"role": "user", "content": "hi"}])

    async def main():
        try:
            return await source.aget()
        finally:
            await client.aclose()

    assert asyncio.run(main()).name == "quiet"


def test_an_edit_inside_a_long_earlier_message_starts_a_new_view_when_restored():
    """A restored conversation whose record has an earlier long message edited in its middle
    (the start and the end as they were) is managed afresh: the model sees the edit."""
    long = "a" * 6000 + " the secret is 42 " + "z" * 6000
    record = _chat(9)
    record[7] = {"role": "assistant", "content": long}
    conversation = Conversation(WINDOWED)
    first = conversation.prepare(record)
    assert "view" in conversation.saved and long in [m["content"] for m in first.messages]
    edited = [*record[:7], {"role": "assistant", "content": long.replace("42", "--")}, record[8]]
    edited.append({"role": "assistant", "content": "ok"})  # the edit keeps the length
    restored = Conversation(WINDOWED)
    restored.load(conversation.saved)
    turn = restored.prepare(edited)
    assert turn.fresh and not any("secret is 42" in str(m["content"]) for m in turn.messages)


class _Message:
    """A framework's message object (fields in a ``__dict__``, weakly referable), as
    LangChain's and pydantic-ai's are."""

    def __init__(self, role: str, content: str) -> None:
        self.role, self.content = role, content

    def copy(self) -> "_Message":
        """An equal copy, its text a new object (as a checkpointer's)."""
        return _Message(self.role, type(self.content)((self.content + "x")[:-1]))


class _Text(str):
    """A message text that counts how often it is compared by value."""

    compared = 0

    def __eq__(self, other):
        _Text.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def _objects(n: int, text=str) -> list[_Message]:
    return [_Message(role, text(content)) for role, content in _framework(n)]


def _to_chat(m: _Message) -> list[dict[str, str]]:
    return [{"role": m.role, "content": str(m.content)}]


def _recording(seen: list[_Message]):
    def translate(m: _Message) -> list[dict[str, str]]:
        seen.append(m)
        return _to_chat(m)

    return translate


def test_copies_of_the_record_continue_the_view_and_are_not_kept_alive():
    """A record of equal copies (a checkpointer's, at each invoke) continues the live view,
    translating only its new messages, and the conversation keeps no framework message alive:
    the copies a framework drops are freed where it drops them."""
    import gc
    import weakref

    conversation = Conversation(QUIET)
    record = _objects(9)
    conversation.prepare(record, translate=_to_chat)
    dropped = [weakref.ref(m) for m in record]
    for k in range(3):
        record = [*(m.copy() for m in record), _Message("assistant", f"new {k}")]
        seen: list[_Message] = []
        turn = conversation.prepare(record, translate=_recording(seen))
        assert not turn.fresh and seen == record[-1:]
        gc.collect()
        assert all(ref() is None for ref in dropped)
        dropped = [weakref.ref(m) for m in record]


def test_the_same_objects_handed_again_are_told_by_identity():
    """The very objects handed again (LangGraph within one invoke) continue the view with no
    message compared by value, also once a record of copies renewed what is watched; copies
    are compared by value."""
    conversation = Conversation(QUIET)
    record = _objects(9, _Text)
    conversation.prepare(record, translate=_to_chat)
    _Text.compared = 0
    record = [*record, _Message("assistant", _Text("a"))]
    assert not conversation.prepare(record, translate=_to_chat).fresh
    assert _Text.compared == 0
    record = [*(m.copy() for m in record), _Message("user", _Text("b"))]
    assert not conversation.prepare(record, translate=_to_chat).fresh
    assert _Text.compared >= 10  # the copies, by value
    _Text.compared = 0
    record = [*record, _Message("assistant", _Text("c"))]
    assert not conversation.prepare(record, translate=_to_chat).fresh
    assert _Text.compared == 0


@pytest.mark.parametrize("at", [5, 300])
def test_a_long_record_of_copies_with_one_message_changed_starts_a_new_view(at):
    """A record of copies longer than what is compared whole, one earlier message changed,
    is managed afresh: at once when the change is among the newest covered messages, within
    covered // SAMPLES calls in the middle (the sample turns each call); the view then holds
    the change."""
    from ctxmgmt.agents.conversation import VALUES_EXACT_UP_TO
    from ctxmgmt.history import SAMPLES

    n = 600
    assert n > VALUES_EXACT_UP_TO
    conversation = Conversation(QUIET)
    record = _objects(n)
    conversation.prepare(record, translate=_to_chat)
    changed = n - at
    for call in range(n // SAMPLES + 1):
        record = [*(m.copy() for m in record), _Message("user", f"more {call}")]
        record[changed] = _Message(record[changed].role, "[redacted]")
        turn = conversation.prepare(record, translate=_to_chat)
        if turn.fresh:
            break
    assert turn.fresh and (call == 0 or at > 32)
    assert turn.messages[changed]["content"] == "[redacted]"


@pytest.mark.parametrize("value", ["128k", 0, -5, 1.5, True])
@pytest.mark.parametrize("adapter", ["langchain", "openai_agents", "pydantic_ai"])
def test_an_adapter_refuses_a_token_setting_that_is_no_token_count(adapter, value):
    """A window (or, for the Agents SDK filter, a reply limit) that is no whole number >= 1 is a
    ContextError naming it when the adapter is made: it was ignored (LangChain, the Agents SDK's
    max_tokens) or refused only at the first model call."""
    from ctxmgmt.errors import ContextError

    if adapter == "langchain":
        from ctxmgmt.adapters.langchain import ContextManagementMiddleware as made
    elif adapter == "openai_agents":
        from ctxmgmt.adapters.openai_agents import ContextManagementFilter as made
    else:
        from ctxmgmt.adapters.pydantic_ai import ContextManagementProcessor as made
    with pytest.raises(ContextError, match="/context_window: must be a whole number of tokens"):
        made("default", context_window=value)
    assert made("default", context_window=8000) is not None
    if adapter == "openai_agents":
        with pytest.raises(ContextError, match="/max_tokens: must be a whole number of tokens"):
            made("default", max_tokens=value)
