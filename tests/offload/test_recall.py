"""The recall tools in the agent loop, and the REST endpoints, read archived content exactly."""

import re

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctxmgmt.agents.runner import Runner
from ctxmgmt.api import create_app
from ctxmgmt.archive import session_key
from ctxmgmt.offload import LocalOffloader
from tests.conftest import LiveServer, tool_call

OFFLOADING = {
    "hooks": {
        "post_tool": [
            {"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 400, "offload": True}}
        ]
    }
}


def test_model_recalls_a_truncated_output_exactly(store, agent_models, tools, chat_server, tmp_path):
    """Once a result is archived the runner shows context_read (not before); the model reads
    the cut part back page by page, byte for byte, each page a result within the truncation
    limit like any other."""
    runner = Runner(store, agent_models, tools, offloader=LocalOffloader(tmp_path))
    store.create("offloading", OFFLOADING)
    agent_id = runner.register(
        {
            "name": "r",
            "llm": {"model_id": "chat"},
            "tools": [{"type": "big"}],
            "context_management_name": "offloading",
        }
    )
    shown: dict[str, str] = {}
    pages: list[str] = []

    def read_on(request):
        """The model's next turn: read the next page of the cut part, or answer at the end."""
        last = [m for m in request["messages"] if m["role"] == "tool"][-1]["content"]
        if "text" not in shown:
            shown["text"] = last
            args = re.search(r'context_read\(ref="(t-[0-9a-f]{32})", offset=(\d+), limit=\d+\)', last)
            shown["ref"], offset = args.group(1), int(args.group(2))
        else:
            assert len(last) <= 400  # a recalled page is cut like any result; this one fits
            header, text = last.split("\n", 1)
            pages.append(text)
            following = re.search(r"next offset (\d+)", header)
            if following is None:
                return "done"
            offset = int(following.group(1))
        return tool_call(("context_read", {"ref": shown["ref"], "offset": offset, "limit": 300}))

    chat_server.reply(tool_call(("big", {"size": 1200})))
    for _ in range(6):
        chat_server.respond(read_on)
    result = runner.execute(agent_id, "read everything")
    assert result.finished
    shown_tools = [{t["function"]["name"] for t in r.get("tools", ())} for r in chat_server.requests]
    assert shown_tools[0] == {"big"}
    assert shown_tools[1] == shown_tools[2] == {"big", "context_read", "context_search"}
    original = "row " * 300
    head = shown["text"][: shown["text"].index("\n[truncated")]
    assert head + "".join(pages) == original
    stored, _, _ = runner.memory.load(result.memory_id, agent_id)
    assert stored[2]["content"] == original  # the memory keeps the original


def test_rest_reads_and_searches_offloaded_content(store, tmp_path):
    """GET /_plugins/_ml/offload/{ref} and _search read a session's archive; other sessions get 404."""
    offloader = LocalOffloader(tmp_path)
    ref = offloader.store_tool_result("mem1", "alpha\nbeta ERROR 42\ngamma\n")
    with (
        LiveServer(create_app(store, offloader=offloader)) as server,
        httpx.Client(base_url=server.url) as http,
    ):
        got = http.get(
            f"/_plugins/_ml/offload/{ref}",
            params={"session": "mem1", "offset": 1, "limit": 1, "unit": "lines"},
        )
        assert got.json()["text"] == "beta ERROR 42\n" and got.json()["next_offset"] == 2
        hits = http.get(
            "/_plugins/_ml/offload/_search", params={"session": "mem1", "pattern": r"ERROR \d+"}
        ).json()
        assert hits["hits"][0]["ref"] == ref
        assert http.get(f"/_plugins/_ml/offload/{ref}", params={"session": "other"}).status_code == 404
        assert http.get("/_plugins/_ml/offload/..%2Fetc", params={"session": "mem1"}).status_code in (
            400,
            404,
        )
        assert http.get(f"/_plugins/_ml/offload/{ref}").status_code == 400
        assert (
            http.get("/_plugins/_ml/offload/_search", params={"session": "mem1", "pattern": "("}).status_code
            == 400
        )


def test_rest_lists_a_sessions_archives_and_reports_torn_records(store, tmp_path):
    """GET /_plugins/_ml/offload?session= lists the archives oldest first; a record torn by a
    crash is skipped and counted as damaged there and in a search."""
    offloader = LocalOffloader(tmp_path)
    first = offloader.store_tool_result("mem1", "alpha ERROR 1\n", tool_call_id="c1")
    with open(tmp_path / session_key("mem1") / "index.jsonl", "ab") as f:
        f.write(b'{"ref": "t-00')  # a crash mid-write
    second = offloader.store_messages("mem1", [{"role": "user", "content": "ERROR 2"}])
    with (
        LiveServer(create_app(store, offloader=offloader)) as server,
        httpx.Client(base_url=server.url) as http,
    ):
        listed = http.get("/_plugins/_ml/offload", params={"session": "mem1"}).json()
        assert [a["ref"] for a in listed["archives"]] == [first, second]
        assert listed["archives"][0]["tool_call_id"] == "c1" and listed["damaged"] == 1
        hits = http.get("/_plugins/_ml/offload/_search", params={"session": "mem1", "pattern": "ERROR"})
        assert [h["ref"] for h in hits.json()["hits"]] == [first, second] and hits.json()["damaged"] == 1
        assert http.get("/_plugins/_ml/offload", params={"session": "none"}).json() == {
            "archives": [],
            "damaged": 0,
        }
        assert http.get("/_plugins/_ml/offload").status_code == 400


def test_summaries_that_archive_come_with_the_recall_tools(store, agent_models, tools, chat_server, tmp_path):
    """A summariser-only definition archives with a store: from the request whose summary
    guides to the archive on, the model has context_read; before it, no recall tools."""
    runner = Runner(store, agent_models, tools, offloader=LocalOffloader(tmp_path))
    summarizer = {
        "type": "SummarizationManager",
        "config": {"preserve_recent_messages": 1, "summary_ratio": 0.8},
    }
    store.create("summ-only", {"hooks": {"pre_llm": [summarizer]}})
    agent_id = runner.register(
        {
            "name": "s",
            "llm": {"model_id": "chat"},
            "tools": [{"type": "big"}],
            "context_management_name": "summ-only",
        }
    )
    for _ in range(3):
        chat_server.reply(tool_call(("big", {"size": 2000})))
    chat_server.reply("ok")
    runner.execute(agent_id, "q")
    shown_tools = [{t["function"]["name"] for t in r.get("tools", ())} for r in chat_server.requests]
    assert shown_tools[:2] == [{"big"}, {"big"}]
    assert shown_tools[2] == shown_tools[3] == {"big", "context_read", "context_search"}
    assert any("## Archived messages" in str(m["content"]) for m in chat_server.requests[2]["messages"])
    chat_server.requests.clear()
    chat_server.reply("ok")
    runner.execute(agent_id, "q")  # a new conversation: nothing archived for it yet
    assert {t["function"]["name"] for t in chat_server.requests[0]["tools"]} == {"big"}
    bare = Runner(store, agent_models, tools)  # no store: nothing is archived, no recall tools
    chat_server.reply("ok")
    bare.execute(agent_id, "q")
    assert {t["function"]["name"] for t in chat_server.requests[1]["tools"]} == {"big"}


def test_context_read_returns_at_most_its_limit_whatever_it_is_asked(tmp_path):
    """A 2 MB archive: context_read returns 4,000 chars with no limit, at most 20,000 with any
    larger limit (its header giving the next offset), and by lines at most 20,000 chars of
    whole lines; a line longer than that is cut and the header says so."""
    import asyncio

    from ctxmgmt.agents.tools import recall_tools

    offloader = LocalOffloader(tmp_path)
    huge = "".join(f"line {i:07d} " + "x" * 86 + "\n" for i in range(20_000))  # 2,000,000 chars
    ref = offloader.store_tool_result("s", huge)
    wide = offloader.store_tool_result("s", "y" * 50_000 + "\nshort\n")
    read = {t.name: t for t in recall_tools(offloader, "s")}["context_read"]

    def call(**arguments):
        header, text = asyncio.run(read.run({"ref": ref, **arguments})).split("\n", 1)
        return header, text

    header, text = call()
    assert text == huge[:4_000] and "next offset 4000" in header
    for limit in (20_001, 2_000_000, "9999999"):
        header, text = call(limit=limit, offset=100)
        assert text == huge[100:20_100] and "next offset 20100" in header
    header, text = call(limit=2_000_000, unit="lines")
    assert text == huge[: 200 * 100] and "next offset 200" in header  # 200 whole lines of 100 chars
    header, text = asyncio.run(read.run({"ref": wide, "limit": 5, "unit": "lines"})).split("\n", 1)
    assert text == "y" * 20_000 and "next offset 1" in header and "read it by chars" in header


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"offset": "x"}, 'offset must be a whole number of 0 or more (given: "x")'),
        ({"offset": [1]}, "offset must be a whole number of 0 or more (given: [1])"),
        ({"offset": 1e400}, "offset must be a whole number of 0 or more"),
        ({"offset": 1.9}, "offset must be a whole number of 0 or more (given: 1.9)"),
        ({"offset": 1e300}, "offset must be a whole number of 0 or more (given: 1e+300)"),
        ({"offset": "1_0"}, 'offset must be a whole number of 0 or more (given: "1_0")'),
        ({"offset": "\u0663"}, "offset must be a whole number of 0 or more"),
        ({"limit": "lots"}, 'limit must be a whole number from 1 to 20,000 (given: "lots")'),
        ({"limit": None}, "limit must be a whole number from 1 to 20,000 (given: null)"),
    ],
)
def test_context_read_says_what_a_bad_number_should_be(tmp_path, arguments, said):
    """A model's offset or limit that is no whole number gets an error that names the argument
    and what it should be (it was Python's "invalid literal for int() with base 10")."""
    import asyncio

    from ctxmgmt.agents.tools import recall_tools
    from ctxmgmt.errors import ToolError

    offloader = LocalOffloader(tmp_path)
    ref = offloader.store_tool_result("s", "some archived text")
    read = {t.name: t for t in recall_tools(offloader, "s")}["context_read"]
    with pytest.raises(ToolError) as caught:
        asyncio.run(read.run({"ref": ref, **arguments}))
    assert said in str(caught.value) and "int()" not in str(caught.value)
    assert asyncio.run(read.run({"ref": ref, "offset": "5", "limit": 4.0})).endswith("\narch")


def test_rest_read_answers_at_most_its_bound(store, tmp_path):
    """GET /_plugins/_ml/offload/{ref} with a limit over 200,000 answers 200,000 chars and the
    next offset; with none, 20,000."""
    offloader = LocalOffloader(tmp_path)
    ref = offloader.store_tool_result("mem1", "z" * 500_000)
    with (
        LiveServer(create_app(store, offloader=offloader)) as server,
        httpx.Client(base_url=server.url) as http,
    ):
        got = http.get(f"/_plugins/_ml/offload/{ref}", params={"session": "mem1", "limit": 10**7}).json()
        assert len(got["text"]) == 200_000 and got["next_offset"] == 200_000 and got["total"] == 500_000
        got = http.get(f"/_plugins/_ml/offload/{ref}", params={"session": "mem1"}).json()
        assert len(got["text"]) == 20_000 and got["next_offset"] == 20_000


_LINE_TEXT = st.text(alphabet=st.sampled_from("ab\n\r\x0b\x85\u2028é"), max_size=60)


@settings(max_examples=300)
@example(text="a\r\nb", cuts=[2], offset=0, limit=5, unit="lines")
@example(text="a\r", cuts=[2], offset=1, limit=1, unit="lines")
@example(text="\r\n\r", cuts=[1, 2], offset=0, limit=None, unit="lines")
@given(
    text=_LINE_TEXT,
    cuts=st.lists(st.integers(0, 60), max_size=6),
    offset=st.integers(0, 12),
    limit=st.none() | st.integers(0, 12),
    unit=st.sampled_from(["chars", "lines"]),
)
def test_a_streamed_slice_is_the_slice_of_the_whole_text(text, cuts, offset, limit, unit):
    """Read in pieces cut anywhere (inside a \\r\\n too): the slice and total of the whole text."""
    from ctxmgmt.archive import slice_text
    from ctxmgmt.offload.base import slice_stream

    bounds = sorted({min(c, len(text)) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *bounds], [*bounds, len(text)], strict=True)]
    assert slice_stream("t-x", pieces, offset, limit, unit) == slice_text("t-x", text, offset, limit, unit)


def test_a_large_archive_is_read_in_pieces(tmp_path, monkeypatch):
    """A tool output archived in a file of its own and larger than the stream bound is sliced
    and searched without being held whole: a 24 MB archive costs a few MB to read."""
    import tracemalloc

    import ctxmgmt.offload.local as local_module

    monkeypatch.setattr(local_module, "STREAM_BYTES", 1024 * 1024)
    store = LocalOffloader(tmp_path)
    stream = store.open_tool_result("s", tool_call_id="c")
    line = "row %07d of the archive\n"
    for block in range(60):
        stream.write("".join(line % (block * 20_000 + i) for i in range(20_000)))
    stream.commit()
    ref = stream.ref
    tracemalloc.start()
    got = store.read("s", ref, offset=600_000, limit=2, unit="lines")
    chars = store.read("s", ref, offset=27 * 1_000_000, limit=27)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert got.text == (line % 600_000) + (line % 600_001) and got.total == 1_200_000
    assert chars.text == line % 1_000_000 and chars.total == 27 * 1_200_000
    assert peak < 16 * 1024 * 1024  # pieces of 1 MiB; the archive is 32.4 MB
    import ctxmgmt.offload.base as base_module

    for module in (local_module, base_module):
        monkeypatch.setattr(module, "SEARCH_BYTES", 1024 * 1024)
    assert len(store.search("s", "row 0038000 ")) == 1  # within the search's scan bound
    beyond = store.search("s", "row 0040000 ")  # past it: not read, and the search says so
    assert len(beyond) == 0 and beyond.truncated
