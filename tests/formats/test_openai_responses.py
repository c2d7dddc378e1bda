"""OpenAI Responses input items in, items out: reasoning stays with the item after it, each
call keeps its one output, untouched items come back as the same objects."""

import base64
import json

import pytest

from ctxmgmt import Context, ContextError, load_definition
from ctxmgmt.testing import assert_invariants, assert_valid_messages


def turn(n: int, size: int = 4000, parallel: int = 1) -> list[dict]:
    """One model turn (reasoning, text, calls) and the calls' outputs, as the Agents SDK sends them."""
    items: list[dict] = [
        {"type": "reasoning", "id": f"rs_{n}", "summary": [], "encrypted_content": f"ENC{n}"},
        {
            "type": "message",
            "id": f"msg_{n}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": f"Looking at {n}.", "annotations": []}],
        },
    ]
    ids = [f"call_{n}_{k}" for k in range(parallel)]
    items += [
        {
            "type": "function_call",
            "id": f"fc_{c}",
            "call_id": c,
            "name": "read_file",
            "arguments": json.dumps({"path": f"{c}.py"}),
            "status": "completed",
        }
        for c in ids
    ]
    items += [
        {"type": "function_call_output", "call_id": c, "output": f"{c} line\n" * (size // 12)} for c in ids
    ]
    return items


def conversation(rounds: int = 6, size: int = 4000) -> list[dict]:
    items: list[dict] = [{"role": "user", "content": "Fix the failing login test."}]
    for n in range(rounds):
        items += turn(n, size, parallel=1 + n % 3)
    return items


def definition(*entries: dict, hook: str = "pre_llm"):
    return load_definition({"name": "t", "hooks": {hook: list(entries)}})


def test_items_are_detected_and_come_back_as_items():
    """Input items are managed as Responses and come back as valid Responses items."""
    items = conversation()
    d = definition({"type": "SlidingWindowManager", "config": {"max_messages": 4}})
    out = d.apply("pre_llm", Context(system_prompt="You are terse.", messages=items)).context
    assert_valid_messages(out.messages, format="openai_responses")
    assert out.messages[0] is items[0]  # the pinned task
    assert all(any(x is y for y in items) for x in out.messages)


def test_reasoning_is_kept_or_dropped_with_its_turn():
    """A window never separates a reasoning item from the message and calls it came with, and
    never keeps a call without its output."""
    items = conversation(8)
    for keep in range(1, 12):
        d = definition({"type": "SlidingWindowManager", "config": {"max_messages": keep, "pin": "none"}})
        out = list(d.apply("pre_llm", Context(messages=items, format="openai_responses")).context.messages)
        assert_valid_messages(out, format="openai_responses")
        for i, x in enumerate(out):
            if x["type"] == "reasoning":
                j = items.index(x)
                assert out[i + 1] is items[j + 1]


def test_a_truncated_output_keeps_its_fields_and_the_rest_is_untouched():
    """post_tool truncation edits only the newest outputs, keeping call_id; every other item is
    the very object that came in."""
    items = conversation(3, size=300) + turn(9, size=30_000, parallel=2)
    d = definition(
        {"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 2000}}, hook="post_tool"
    )
    out = list(d.apply("post_tool", Context(messages=items)).context.messages)
    assert len(out) == len(items)
    edited = [k for k, (a, b) in enumerate(zip(items, out, strict=True)) if a is not b]
    assert edited == [len(items) - 2, len(items) - 1]
    for k in edited:
        assert out[k]["call_id"] == items[k]["call_id"] and len(out[k]["output"]) <= 2000
        assert "[truncated: original" in out[k]["output"]


def test_the_summary_never_reads_reasoning():
    """Encrypted reasoning is never summarised as text; the summary is a plain user message."""
    items = conversation(8)
    d = definition(
        {"type": "SummarizationManager", "config": {"summary_ratio": 0.6, "preserve_recent_messages": 3}}
    )
    out = list(d.apply("pre_llm", Context(messages=items, format="openai_responses")).context.messages)
    summary = out[1]
    assert summary["role"] == "user" and summary["content"].startswith("[ctxmgmt:summary]")
    assert "ENC" not in summary["content"]
    assert_valid_messages(out, format="openai_responses")


@pytest.mark.parametrize(
    ("items", "pointer", "says"),
    [
        (
            [{"type": "function_call_output", "call_id": "c", "output": "x"}],
            "/messages/0/call_id",
            "answers no call",
        ),
        (
            [
                {"role": "user", "content": "q"},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {"role": "user", "content": "next"},
            ],
            "/messages/1",
            "has no output",
        ),
        (
            [{"type": "function_call", "call_id": "c", "name": "f"}],
            "/messages/0",
            "call_id, name and arguments",
        ),
        ([{"role": "tool", "tool_call_id": "c", "content": "x"}], "/messages/0/role", "function_call_output"),
        ([{"id": "x"}], "/messages/0/type", "needs a type"),
        (
            [
                {
                    "type": "function_call_output",
                    "call_id": "c",
                    "output": [{"type": "input_text", "text": 123}],
                }
            ],
            "/messages/0/output/0",
            "text as a string",
        ),
        (
            [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}],
            "/messages/0/content/0/type",
            "use input_text",
        ),
        (
            [
                {"role": "user", "content": "q"},
                {"type": "reasoning", "id": "r", "summary": []},
                {"role": "user", "content": "x"},
            ],
            "/messages/1",
            "reasoning item must be followed",
        ),
        (
            [
                {"role": "user", "content": "q"},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "c", "name": "g", "arguments": "{}"},
            ],
            "/messages/2/call_id",
            "share the call_id",
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "/messages/0/content/0/type",
            "OpenAI chat's format",
        ),
        (
            [
                {"role": "user", "content": "q"},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {"type": "reasoning", "id": "r", "summary": []},
                {"type": "function_call_output", "call_id": "c", "output": "x"},
            ],
            "/messages/2",
            "reasoning item must be followed",
        ),
    ],
)
def test_invalid_items_are_named_with_a_pointer(items, pointer, says):
    """Each thing the Responses API would reject is a ContextError with its pointer."""
    with pytest.raises(ContextError) as raised:
        Context.from_dict({"messages": items, "format": "openai_responses"})
    problem = raised.value.problems[0]
    assert problem.pointer == pointer and says in problem.message, problem


def test_an_unknown_format_is_refused():
    """format must be one of the three."""
    with pytest.raises(
        ContextError, match="/format: must be one of openai_chat, anthropic, openai_responses"
    ):
        Context(messages=[], format="gemini")


def _searched(n: int, then: str) -> list[dict]:
    """A response that searched the web before it answered (``then="message"``) or called the
    client's tool (``"function_call"``, with the call's output): reasoning, web_search_call, then
    the rest, as the API lists a reasoning model's output."""
    items: list[dict] = [
        {"type": "reasoning", "id": f"rs_{n}", "summary": [], "encrypted_content": f"ENC{n}"},
        {"type": "web_search_call", "id": f"ws_{n}", "status": "completed", "action": {"type": "search"}},
    ]
    if then == "message":
        text = {"type": "output_text", "text": f"Found {n}: src/app/mod_{n}.py.", "annotations": []}
        return [*items, {"type": "message", "id": f"msg_{n}", "role": "assistant", "content": [text]}]
    call = {
        "type": "function_call",
        "id": f"fc_{n}",
        "call_id": f"call_{n}",
        "name": "read",
        "arguments": "{}",
    }
    return [*items, call, {"type": "function_call_output", "call_id": f"call_{n}", "output": "x\n" * 300}]


@pytest.mark.parametrize("then", ["message", "function_call"])
def test_an_item_after_a_web_search_keeps_the_reasoning_of_its_response(then):
    """A response's items after a web search (its answer, or its call with the call's output)
    are kept or removed with the reasoning before the search: the API refuses an item without
    the reasoning item of its response. The answer's text is read by the summary."""
    items: list[dict] = [{"role": "user", "content": "Fix the importer."}]
    for n in range(6):
        items += [*_searched(n, then), {"role": "user", "content": f"go on {n}"}]
    summarised = False
    for keep in range(1, 10):
        entry = {"type": "SlidingWindowManager", "config": {"max_messages": keep, "summarize_removed": True}}
        out = assert_invariants(
            definition(entry), "pre_llm", Context(messages=items, format="openai_responses")
        )
        kept = {x.get("id") for x in out.context.messages}
        for n in range(6):
            assert {f"rs_{n}", f"ws_{n}"} <= kept or not {f"msg_{n}", f"fc_{n}"} & kept, (keep, n, kept)
        summary = [x for x in out.context.messages if "[ctxmgmt:summary]" in json.dumps(x)]
        if then == "message" and summary:  # the removed answers' text is read by the summary
            said = [n for n in range(6) if f"src/app/mod_{n}.py" in json.dumps(summary)]
            assert said and not {f"msg_{n}" for n in said} & kept, (keep, said)
            summarised = True
    assert then != "message" or summarised


def _tool_searched(n: int, execution: str) -> list[dict]:
    """A response that searched its deferred tools, then called the one it found (as the API
    lists it): a search the server ran has no call_id (its output answers no call), one the
    client runs pairs by call_id as a function call does."""
    ids = {"call_id": f"ts_{n}"} if execution == "client" else {}  # None: execution left out
    tool = {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object"},
        "defer_loading": True,
    }
    shown = {"execution": execution} if execution else {}
    search = {"type": "tool_search_call", "id": f"tsc_{n}", **shown, "status": "completed"}
    found = {"type": "tool_search_output", "id": f"tso_{n}", **shown, "status": "completed"}
    call = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": "get_weather"}
    answer = {"type": "function_call_output", "call_id": f"call_{n}", "output": f"sunny {n} " * 400}
    return [
        {**search, **ids, "arguments": {"paths": ["get_weather"]}},
        {**found, **ids, "tools": [tool]},
        {**call, "arguments": "{}"},
        answer,
    ]


@pytest.mark.parametrize("execution", ["server", "client", None])
def test_a_tool_search_and_what_it_found_are_a_turn_s_items(execution):
    """A tool search the server ran (``tool_search_call`` and ``tool_search_output`` without a
    call_id, as OpenAI lists them: a real run's items) is the model's item with its own
    result, kept or removed with its turn; one the client runs pairs by call_id. Both were
    refused as an output that answers no call."""
    items: list[dict] = [{"role": "user", "content": "What's the weather in San Francisco?"}]
    for n in range(6):
        items += [*_tool_searched(n, execution), {"role": "user", "content": f"and in city {n}?"}]
    assert_valid_messages(items, format="openai_responses")
    if execution != "client":  # a call_id given as null, as the SDK's types allow: the same
        nulled = [{**x, "call_id": None} if x.get("type", "").startswith("tool_search") else x for x in items]
        assert_valid_messages(nulled, format="openai_responses")
    context = Context(messages=items, format="openai_responses")
    for keep in (1, 3, 5, 8):
        entry = {"type": "SlidingWindowManager", "config": {"max_messages": keep, "summarize_removed": True}}
        out = assert_invariants(definition(entry), "pre_llm", context)
        kept = {x.get("id") for x in out.context.messages}
        for n in range(6):  # one turn's items, or a call with its output: together or gone
            together = {f"tsc_{n}", f"tso_{n}"} | ({f"fc_{n}"} if execution != "client" else set())
            assert together <= kept or not together & kept, (keep, n, kept)


def test_other_calls_and_server_items_are_kept_whole_and_counted():
    """A computer call with its screenshot output, a local shell call, an MCP call and an
    item reference are managed: kept or removed with their turn, counted, never edited."""
    items = [
        {"role": "user", "content": "Open the report."},
        {
            "type": "computer_call",
            "id": "cu1",
            "call_id": "cc1",
            "action": {"type": "click", "x": 1, "y": 2},
            "status": "completed",
        },
        {
            "type": "computer_call_output",
            "call_id": "cc1",
            "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"},
        },
        {
            "type": "local_shell_call",
            "id": "ls1",
            "call_id": "sh1",
            "action": {"type": "exec", "command": ["ls"]},
            "status": "completed",
        },
        {"type": "local_shell_call_output", "call_id": "sh1", "output": "a.txt\n" * 5000},
        {
            "type": "mcp_call",
            "id": "m1",
            "name": "search",
            "arguments": "{}",
            "server_label": "s",
            "output": "found " * 2000,
        },
        {"type": "item_reference", "id": "msg_old"},
        {"role": "user", "content": "And now?"},
    ]
    ctx = Context(messages=items, format="openai_responses", context_window=3000)
    result = load_definition("default").apply("pre_llm", ctx)
    out = list(result.context.messages)
    assert_valid_messages(out, format="openai_responses")
    assert all(
        any(x is y for y in items) or x.get("type") == "local_shell_call_output" or "role" in x for x in out
    )
    assert result.trace[0]["tokens_before"] > 4000  # the shell output and the MCP result are counted
    again = load_definition("default").apply("pre_llm", result.context)
    assert list(again.context.messages) == out


def test_a_shell_calls_outputs_are_its_own_structure_not_content_parts():
    """A ``shell_call_output`` holds a list of each command's stdout, stderr and outcome: a
    valid item (it was refused as content parts with no type), counted, kept as it is."""
    output = [
        {"stdout": "a.txt\n" * 3000, "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
        {"stdout": "", "stderr": "no such file", "outcome": {"type": "exit", "exit_code": 2}},
    ]
    items = [
        {"role": "user", "content": "List the files."},
        {"type": "shell_call", "id": "sc_1", "call_id": "sh1", "action": {"commands": ["ls", "cat x"]}},
        {"type": "shell_call_output", "call_id": "sh1", "output": output},
        {"role": "user", "content": "And now?"},
    ]
    ctx = Context(messages=items, format="openai_responses", context_window=100_000)
    result = load_definition("default").apply("pre_llm", ctx)
    assert list(result.context.messages) == items
    assert result.trace[0]["tokens_before"] > 3000  # its stdout is counted
    earlier = [{"role": r, "content": f"turn {k} " * 200} for k in range(8) for r in ("user", "assistant")]
    longer = [*earlier, *items[1:]]
    small = load_definition("default").apply(
        "pre_llm", Context(messages=longer, format="openai_responses", context_window=8000)
    )
    out = list(small.context.messages)
    assert_valid_messages(out, format="openai_responses")
    assert len(out) < len(longer)  # managed
    assert any(x is items[2] for x in out)  # kept, as it came


def test_outputs_after_a_reference_to_stored_calls_go_with_it():
    """An ``item_reference`` to calls OpenAI stored, then their outputs: valid (each output
    was refused as answering no call), and kept or removed with the reference, never apart."""
    from ctxmgmt.formats import openai_responses

    def turn(k: int) -> list[dict]:
        return [
            {"type": "reasoning", "id": f"rs_{k}", "summary": []},
            {"type": "item_reference", "id": f"fc_{k}"},  # one reference per parallel call
            {"type": "item_reference", "id": f"fd_{k}"},
            {"type": "function_call_output", "call_id": f"c{k}", "output": f"result {k} " * 300},
            {"type": "function_call_output", "call_id": f"d{k}", "output": "ok"},
        ]

    items = [{"role": "user", "content": "Go."}, *[x for k in range(12) for x in turn(k)]]
    items.append({"role": "user", "content": "And now?"})
    assert openai_responses.check(items) == []
    window = {
        "name": "w",
        "hooks": {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 4}}]},
    }
    for definition, size in (("default", 4000), (window, 100_000)):
        result = load_definition(definition).apply(
            "pre_llm", Context(messages=items, format="openai_responses", context_window=size)
        )
        out = list(result.context.messages)
        assert_valid_messages(out, format="openai_responses")
        kept = [x for x in out if x.get("type") in ("reasoning", "item_reference", "function_call_output")]
        assert 0 < len(kept) < 60 and len(kept) % 5 == 0
        for k in range(0, len(kept), 5):
            assert [x["type"] for x in kept[k : k + 5]] == [x["type"] for x in turn(0)]


def test_an_inline_file_is_counted_alike_in_each_format():
    """The same PDF sent inline as a chat file part, a Responses input_file and an Anthropic
    document block is counted alike, from its base64 (a chat file part was a flat 256 tokens
    whatever its size: a request with a large PDF went over its window)."""
    from ctxmgmt import get_counter

    data = base64.b64encode(bytes(range(256)) * 1_800).decode()  # a 450 KB file
    url = f"data:application/pdf;base64,{data}"
    ask = "Summarise this report."
    chat = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": ask},
                {"type": "file", "file": {"filename": "report.pdf", "file_data": url}},
            ],
        }
    ]
    responses = [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": ask},
                {"type": "input_file", "filename": "report.pdf", "file_data": url},
            ],
        }
    ]
    source = {"type": "base64", "media_type": "application/pdf", "data": data}
    document = {"type": "document", "source": source}
    anthropic = [{"role": "user", "content": [{"type": "text", "text": ask}, document]}]
    counter = get_counter("gpt-4o")
    counts = [
        counter.context(Context(messages=m, format=f))[0]
        for m, f in ((chat, "openai_chat"), (responses, "openai_responses"), (anthropic, "anthropic"))
    ]
    assert min(counts) >= len(data) // 6, counts
    assert max(counts) - min(counts) <= 20, counts
