"""Tool endpoints that misbehave, against the runner: real loopback servers on raw sockets
that trickle, hang after their headers or flood; every tool call has a deadline for the
whole call, every output a size limit, and a cut output is archived whole as it streams."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from ctxmgmt import ToolRegistry, register_tool
from ctxmgmt.agents.runner import Runner
from ctxmgmt.agents.tools import OutputReader, Tool
from ctxmgmt.agents.tools import call_tool as _call
from ctxmgmt.offload import LocalOffloader
from tests.conftest import tool_call

ROOT = Path(__file__).resolve().parent.parent


# -- raw loopback endpoints ------------------------------------------------------------
def _read_request(conn: socket.socket) -> None:
    """Read one HTTP request: its header lines, then a Content-Length body."""
    with conn.makefile("rb") as stream:
        length = 0
        for line in iter(stream.readline, b"\r\n"):
            if not line:
                return
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        stream.read(length)


@contextmanager
def raw_endpoint(behave: Callable[[socket.socket], None]) -> Iterator[str]:
    """A loopback HTTP endpoint on a raw socket: for each connection, the request is read,
    then ``behave(conn)`` writes whatever it likes. Yields the URL."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    stop = threading.Event()
    conns: list[socket.socket] = []

    def handle(conn: socket.socket) -> None:
        try:
            _read_request(conn)
            behave(conn)
        except OSError:
            pass  # the client gave up: what these tests expect
        finally:
            conn.close()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conns.append(conn)
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/tool"
    finally:
        stop.set()
        server.close()
        for conn in conns:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


def trickle(conn: socket.socket) -> None:
    """Headers, then one byte every 0.1 s, for a minute."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n")
    for _ in range(600):
        conn.sendall(b"x")
        time.sleep(0.1)


def hang_after_headers(conn: socket.socket) -> None:
    """Headers, then nothing until the client goes."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n\r\n")
    conn.recv(1)  # returns when the client closes


def pattern(size: int) -> Iterator[bytes]:
    """``size`` bytes of numbered lines, in pieces of 64 KiB (never held whole)."""
    block = b"".join(b"line %07d of the flood\n" % i for i in range(2849))[:65536]
    sent = 0
    while sent < size:
        piece = block[: size - sent]
        sent += len(piece)
        yield piece


def flood(size: int) -> Callable[[socket.socket], None]:
    def behave(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % size)
        for piece in pattern(size):
            conn.sendall(piece)

    return behave


def digest(size: int) -> str:
    h = hashlib.sha256()
    for piece in pattern(size):
        h.update(piece)
    return h.hexdigest()


# -- the runner -------------------------------------------------------------------------
@pytest.fixture
def slow_tools() -> ToolRegistry:
    """Python tools that never finish: a sync one that sleeps, an async one that waits."""
    registry = ToolRegistry(group="ctxmgmt.test-no-tools")
    register_tool("sleepy", lambda **_: time.sleep(30) or "late", registry=registry, timeout=1)

    async def waits(**_: object) -> str:
        await asyncio.sleep(3600)
        return "late"

    register_tool("waits", waits, registry=registry, timeout=1)
    register_tool("huge", lambda size=0, **_: "é" * size, registry=registry, max_output_bytes=1024)
    register_tool("surrogate", lambda **_: "a\ud800b", registry=registry)
    return registry


def run_agent(runner: Runner, chat_server, tools: list[dict], calls, **kw) -> tuple[object, float]:
    agent_id = runner.register({"name": "t", "llm": {"model_id": "chat"}, "tools": tools, **kw})
    chat_server.reply(tool_call(*calls))
    chat_server.reply("done")
    started = time.monotonic()
    result = runner.execute(agent_id, "go")
    return result, time.monotonic() - started


def tool_results(chat_server, request: int = 1) -> list[str]:
    return [m["content"] for m in chat_server.requests[request]["messages"] if m["role"] == "tool"]


@pytest.mark.parametrize("behave", [trickle, hang_after_headers], ids=["trickle", "hang-after-headers"])
def test_a_slow_http_tool_ends_at_its_whole_call_deadline(store, agent_models, chat_server, behave):
    """An endpoint that trickles or hangs after its headers: the model gets a timeout result
    by the deadline (1 s) and the execution goes on to its answer."""
    runner = Runner(store, agent_models)
    with raw_endpoint(behave) as url:
        spec = {"type": "http", "name": "slow", "parameters": {"url": url, "timeout": 1}}
        result, elapsed = run_agent(runner, chat_server, [spec], [("slow", {"q": 1})])
    assert result.response == "done" and result.finished
    assert tool_results(chat_server) == [
        "error: the tool slow did not finish within 1 s (parameters.timeout)"
    ]
    assert elapsed < 1 + 1 + 2  # the deadline, its slack, and the two model calls with room for CI


@pytest.mark.parametrize("name", ["sleepy", "waits"])
def test_a_python_tool_past_its_deadline_is_a_timeout_result(
    store, agent_models, chat_server, slow_tools, name
):
    """A sync callable (in a thread) and a coroutine that never finish end at their deadline."""
    runner = Runner(store, agent_models, slow_tools)
    result, elapsed = run_agent(runner, chat_server, [{"type": name}], [(name, {})])
    assert result.response == "done"
    assert tool_results(chat_server) == [
        f"error: the tool {name} did not finish within 1 s (parameters.timeout)"
    ]
    assert elapsed < 4


def test_an_execution_ends_at_its_whole_deadline(store, agent_models, chat_server, slow_tools):
    """Five parallel calls of a tool that waits its 1 s each: the execution's own deadline
    (1.5 s) ends it with an ExecutionTimeoutError, the record says so, and the memory keeps
    no half round."""
    from ctxmgmt import ExecutionTimeoutError

    runner = Runner(store, agent_models, slow_tools)
    agent_id = runner.register(
        {
            "name": "t",
            "llm": {"model_id": "chat", "parameters": {"execution_timeout": 1.5}},
            "tools": [{"type": "waits"}],
        }
    )
    chat_server.reply(tool_call(*[("waits", {})] * 5))
    started = time.monotonic()
    with pytest.raises(ExecutionTimeoutError, match=r"within 1.5 s \(llm.parameters.execution_timeout\)"):
        runner.execute(agent_id, "go")
    assert time.monotonic() - started < 4
    _, (summary,) = runner.executions.list(agent_id)
    record = runner.executions.get(summary["execution_id"])
    assert record["status"] == "error" and "ExecutionTimeoutError" in record["error"]
    stored = runner.memory.messages(record["memory_id"])
    assert [m["role"] for m in stored] == ["user"]  # the question; the unfinished round is not kept


@pytest.mark.parametrize("name", ["context_read", "context_search"])
def test_a_tool_may_not_take_a_recall_tools_name(store, agent_models, name):
    """A tool named like ctxmgmt's recall tools is refused at registration with its pointer:
    its results would be taken for recalls (cut without an archive)."""
    from ctxmgmt import AgentError

    runner = Runner(store, agent_models)
    spec = {"type": "http", "name": name, "parameters": {"url": "http://127.0.0.1:9/x"}}
    with pytest.raises(AgentError) as caught:
        runner.register({"name": "t", "llm": {"model_id": "chat"}, "tools": [spec]})
    assert [p.pointer for p in caught.value.problems] == ["/tools/0/name"]
    assert "recall tool" in caught.value.problems[0].message


def test_a_tool_specs_timeout_overrides_the_registered_one(store, agent_models, chat_server, slow_tools):
    """parameters.timeout of an agent's tool spec is the deadline, for any tool type."""
    runner = Runner(store, agent_models, slow_tools)
    spec = {"type": "waits", "parameters": {"timeout": 0.5}}
    run_agent(runner, chat_server, [spec], [("waits", {})])
    assert tool_results(chat_server) == [
        "error: the tool waits did not finish within 0.5 s (parameters.timeout)"
    ]


@pytest.mark.parametrize(
    ("parameters", "pointer"),
    [
        ({"timeout": "1"}, "/tools/0/parameters/timeout"),
        ({"timeout": 0}, "/tools/0/parameters/timeout"),
        ({"timeout": 601}, "/tools/0/parameters/timeout"),
        ({"max_output_bytes": 10}, "/tools/0/parameters/max_output_bytes"),
        ({"max_output_bytes": True}, "/tools/0/parameters/max_output_bytes"),
        ({"max_output_bytes": 2**40}, "/tools/0/parameters/max_output_bytes"),
        ([1], "/tools/0/parameters"),
    ],
)
def test_bad_tool_bounds_are_refused_with_their_pointer(store, agent_models, slow_tools, parameters, pointer):
    """A tool spec's timeout and max_output_bytes are checked for every tool type, at registration."""
    from ctxmgmt import AgentError

    runner = Runner(store, agent_models, slow_tools)
    for kind in ("waits", "http"):
        spec = {"type": kind, "parameters": parameters}
        if kind == "http" and isinstance(parameters, dict):
            spec["parameters"] = {"url": "http://127.0.0.1:9/", **parameters}
        with pytest.raises(AgentError) as info:
            runner.register({"name": "t", "llm": {"model_id": "chat"}, "tools": [spec]})
        assert {p.pointer for p in info.value.problems} == {pointer}, info.value.problems


def test_a_flooding_tool_without_a_store_is_cut_and_not_read_further(store, agent_models, chat_server):
    """Without an offload store a 20 MB output is cut at max_output_bytes, with a notice; the
    memory and the request hold only the kept part."""
    runner = Runner(store, agent_models)
    with raw_endpoint(flood(20_000_000)) as url:
        spec = {"type": "http", "name": "flood", "parameters": {"url": url, "max_output_bytes": 4096}}
        result, _ = run_agent(runner, chat_server, [spec], [("flood", {})])
    (sent,) = tool_results(chat_server)
    notice, _, kept = sent.partition("\n")
    assert notice == (
        "[ctxmgmt: the output of flood was cut: more than 4,096 bytes, of which the first 4,096 are kept "
        "(parameters.max_output_bytes)]"
    )
    assert kept.encode() == b"".join(pattern(20_000_000))[:4096]
    stored = runner.memory.load(result.memory_id, runner.memory.owner(result.memory_id))[0]
    assert [m["content"] for m in stored if m["role"] == "tool"] == [sent]


def test_a_cut_output_is_archived_whole_and_recalled_exactly(store, agent_models, chat_server, tmp_path):
    """With a store, a 5 MB output is kept to its limit and archived whole as it streams: the
    notice names the archive, context_read gives it back byte for byte, the recall tools appear
    and the record lists the archive."""
    offloader = LocalOffloader(tmp_path / "offload")
    runner = Runner(store, agent_models, offloader=offloader)
    size = 5_000_000
    with raw_endpoint(flood(size)) as url:
        spec = {"type": "http", "name": "flood", "parameters": {"url": url, "max_output_bytes": 2048}}
        result, _ = run_agent(runner, chat_server, [spec], [("flood", {})])
    (sent,) = tool_results(chat_server)
    notice, _, kept = sent.partition("\n")
    ref = next(w for w in notice.replace(":", " ").split() if w.startswith("t-"))
    assert notice == (
        f"[ctxmgmt: the output of flood was cut: 5,000,000 bytes, of which the first 2,048 are kept "
        f"(parameters.max_output_bytes); the whole output is archived as {ref}: read it with context_read]"
    )
    assert len(kept.encode()) == 2048
    whole = offloader.read(result.memory_id, ref)
    assert hashlib.sha256(whole.text.encode()).hexdigest() == digest(size)
    names = [t["function"]["name"] for t in chat_server.requests[1]["tools"]]
    assert "context_read" in names and "context_search" in names
    assert runner.executions.get(result.execution_id)["archived"] == [ref]
    assert not list((tmp_path / "offload").glob("*/*.tmp.txt"))  # no temporary file is left


def test_a_tool_output_archived_in_sql_is_whole(store, agent_models, chat_server):
    """The SQL store archives a streamed output in parts joined in the database: read back exactly."""
    from ctxmgmt.offload import SQLOffloader

    offloader = SQLOffloader(store.engine)
    runner = Runner(store, agent_models, offloader=offloader)
    size = 3_500_000  # four parts
    with raw_endpoint(flood(size)) as url:
        spec = {"type": "http", "name": "flood", "parameters": {"url": url, "max_output_bytes": 2048}}
        result, _ = run_agent(runner, chat_server, [spec], [("flood", {})])
    (ref,) = runner.executions.get(result.execution_id)["archived"]
    whole = offloader.read(result.memory_id, ref)
    assert hashlib.sha256(whole.text.encode()).hexdigest() == digest(size)
    assert [a["ref"] for a in offloader.list(result.memory_id)] == [ref]  # the parts are gone


def test_a_python_tools_long_result_is_cut_at_a_character_boundary(
    store, agent_models, chat_server, slow_tools
):
    """A callable's 3,000 two-byte characters, limit 1,024 bytes: 512 whole characters are kept."""
    runner = Runner(store, agent_models, slow_tools)
    run_agent(runner, chat_server, [{"type": "huge"}], [("huge", {"size": 3000})])
    (sent,) = tool_results(chat_server)
    assert sent.split("\n", 1)[1] == "é" * 512


def test_a_tool_result_is_always_valid_unicode(store, agent_models, chat_server, slow_tools):
    """A lone surrogate from a Python tool becomes U+FFFD: the memory stores valid text."""
    runner = Runner(store, agent_models, slow_tools)
    result, _ = run_agent(runner, chat_server, [{"type": "surrogate"}], [("surrogate", {})])
    stored = runner.memory.load(result.memory_id, runner.memory.owner(result.memory_id))[0]
    assert [m["content"] for m in stored if m["role"] == "tool"] == ["a\ufffdb"]


def test_utf8_split_across_pieces_is_decoded_and_invalid_bytes_replaced():
    """The reader decodes across piece boundaries and replaces invalid bytes with U+FFFD."""

    async def read(*pieces: bytes, limit: int = 1024) -> str:
        reader = OutputReader(limit)
        for piece in pieces:
            await reader.feed(piece)
        return await reader.result()

    assert asyncio.run(read(b"caf\xc3", b"\xa9 ok")) == "café ok"
    assert asyncio.run(read(b"a\xff", b"b")) == "a\ufffdb"
    assert asyncio.run(read("é".encode() * 600, limit=1025)).endswith("\n" + "é" * 512)


def test_a_failed_tool_leaves_no_archive(tmp_path):
    """A tool that fails after more than its limit: an error result, and nothing archived."""

    async def stream(_: dict) -> object:
        yield b"x" * 5000
        raise RuntimeError("broke midway")

    async def unused(_: dict) -> str:
        return ""

    offloader = LocalOffloader(tmp_path)
    tool = Tool("broken", "", {}, unused, max_output_bytes=1024, stream=stream)
    call = {"id": "c1", "function": {"name": "broken", "arguments": "{}"}}
    opener = lambda call_id: offloader.open_tool_result("s", tool_call_id=call_id)  # noqa: E731
    text, ref, _ = asyncio.run(_call({"broken": tool}, call, opener))
    assert (text, ref) == ("error: the tool broken failed (RuntimeError)", None)
    assert offloader.list("s") == [] and not list(tmp_path.glob("*/*.txt"))


RSS_SCRIPT = textwrap.dedent(
    """
    import hashlib, json, resource, sys, tempfile
    sys.path.insert(0, sys.argv[1])
    from tests.test_tool_edges import raw_endpoint, flood, digest
    from ctxmgmt import ModelConfig, ModelsConfig
    from ctxmgmt.offload import LocalOffloader
    from ctxmgmt.agents.runner import Runner
    from ctxmgmt.store import DefinitionStore
    from ctxmgmt.testing import ChatServer
    from tests.conftest import tool_call

    size = int(sys.argv[2])
    with tempfile.TemporaryDirectory() as tmp, ChatServer() as chat:
        store = DefinitionStore.open(f"sqlite:///{tmp}/db.sqlite")
        models = ModelsConfig({"chat": ModelConfig(id="chat", base_url=chat.base_url, model="m")})
        offloader = LocalOffloader(f"{tmp}/offload")
        runner = Runner(store, models, offloader=offloader)
        with raw_endpoint(flood(size)) as url, raw_endpoint(flood(3_000_000)) as small:
            tools = [
                {"type": "http", "name": "flood", "parameters": {"url": url}},
                {"type": "http", "name": "warm", "parameters": {"url": small}},
            ]
            agent = runner.register({"name": "t", "llm": {"model_id": "chat"}, "tools": tools})
            for name in ("warm", "flood"):  # the first run warms every cache and import
                chat.reply(tool_call((name, {})))
                chat.reply("done")
                result = runner.execute(agent, "go")
                if name == "warm":
                    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        ref = runner.executions.get(result.execution_id)["archived"][0]
        stored = runner.memory.load(result.memory_id, runner.memory.owner(result.memory_id))[0]
        kept = max(len(m["content"]) for m in stored if m["role"] == "tool")
        whole = offloader.read(result.memory_id, ref).text.encode()
        print(json.dumps({
            "grew_kb": after - before,
            "kept": kept,
            "same": hashlib.sha256(whole).hexdigest() == digest(size),
        }))
    """
)


def test_a_100_mb_tool_output_costs_no_100_mb_of_memory(tmp_path):
    """A 100 MB output through the runner with a local store: peak RSS grows by at most 64 MB,
    the memory keeps 1 MiB of it, and the archive is the whole output, exactly."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", RSS_SCRIPT, str(ROOT), str(100_000_000)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["same"], figures
    assert figures["kept"] < 1024 * 1024 + 400, figures
    assert figures["grew_kb"] <= 64 * 1024, figures


def test_an_output_the_database_refuses_is_cut_and_says_it_was_not_archived(store, agent_models, chat_server):
    """NUL characters (which PostgreSQL's text refuses): the execution goes on, the model gets the
    kept part; the archive is exact where the database takes it, else the notice says it failed
    and no part of it is left behind."""
    from sqlalchemy import func, select

    from ctxmgmt.offload import SQLOffloader
    from ctxmgmt.store.models import offload

    registry = ToolRegistry(group="ctxmgmt.test-no-tools")
    register_tool("nul", lambda **_: "a\x00" * 3000, registry=registry, max_output_bytes=1024)
    offloader = SQLOffloader(store.engine)
    runner = Runner(store, agent_models, registry, offloader=offloader)
    result, _ = run_agent(runner, chat_server, [{"type": "nul"}], [("nul", {})])
    assert result.response == "done"
    (sent,) = tool_results(chat_server)
    notice, _, kept = sent.partition("\n")
    assert kept == "a\x00" * 512
    if store.engine.dialect.name == "postgresql":
        assert notice.endswith("it could not be archived (OffloadError)]"), notice
        assert runner.executions.get(result.execution_id)["archived"] == []
    else:
        (ref,) = runner.executions.get(result.execution_id)["archived"]
        assert offloader.read(result.memory_id, ref).text == "a\x00" * 3000
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).where(offload.c.kind == "part")).scalar() == 0


def respond(head: bytes, body: bytes) -> Callable[[socket.socket], None]:
    """An endpoint answering with the given status line and headers, then ``body``."""

    def behave(conn: socket.socket) -> None:
        conn.sendall(head + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    return behave


@pytest.mark.parametrize(
    ("head", "body", "expected"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=latin-1", "café".encode("latin-1"), "café"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip",
            __import__("gzip").compress("zipped é".encode()),
            "{url} answered with content-encoding 'gzip', though an uncompressed body was asked for "
            "(accept-encoding: identity)",
        ),
        (
            b"HTTP/1.1 503 Busy\r\nContent-Type: text/plain",
            b"come back later",
            "{url} answered 503: come back later",
        ),
    ],
    ids=["latin-1", "gzip", "503"],
)
def test_an_http_tools_body_is_decoded_as_declared(head, body, expected):
    """A body in its declared charset, a compressed body, and an error status all reach the model as text."""
    from ctxmgmt.agents.tools import default_tools

    with raw_endpoint(respond(head, body)) as url:
        tool = default_tools.build({"type": "http", "name": "h", "parameters": {"url": url, "timeout": 5}})
        call = {"id": "c", "function": {"name": "h", "arguments": "{}"}}
        text, ref, _ = asyncio.run(_call({"h": tool}, call))
    expected = expected.format(url=url)
    assert (text, ref) == ((f"error: {expected}" if "answered" in expected else expected), None)


def test_a_compressed_body_is_read_when_the_tool_asks_for_it():
    """A spec that sends accept-encoding itself gets the body decoded (and bounded as ever)."""
    import gzip

    from ctxmgmt.agents.tools import default_tools

    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip"
    with raw_endpoint(respond(head, gzip.compress(b"a" * 50_000))) as url:
        spec = {"url": url, "headers": {"Accept-Encoding": "gzip"}, "max_output_bytes": 1024}
        tool = default_tools.build({"type": "http", "name": "h", "parameters": spec})
        call = {"id": "c", "function": {"name": "h", "arguments": "{}"}}
        text, ref, archived = asyncio.run(_call({"h": tool}, call))
    assert text.endswith("\n" + "a" * 1024) and "was cut" in text and (ref, archived) == (None, 0)


def test_an_execution_archives_at_most_its_budget(tmp_path):
    """Once an execution's archive budget is spent, a cut output is archived in part, then not at all."""

    async def stream(_: dict) -> object:
        for _ in range(30):
            yield b"z" * 10_000

    async def unused(_: dict) -> str:
        return ""

    offloader = LocalOffloader(tmp_path)
    tool = Tool("long", "", {}, unused, max_output_bytes=1024, stream=stream)
    opener = lambda call_id: offloader.open_tool_result("s", tool_call_id=call_id)  # noqa: E731
    call = {"id": "c1", "function": {"name": "long", "arguments": "{}"}}
    _, ref, archived = asyncio.run(_call({"long": tool}, call, opener, 10**9, 120_000))
    assert archived == 120_000 and offloader.read("s", ref).text == "z" * 120_000
    text, ref, archived = asyncio.run(_call({"long": tool}, call, opener, 10**9, 0))
    assert (ref, archived) == (None, 0) and "was cut" in text


def test_a_plugin_tool_that_returns_no_text_is_an_error_result():
    """A plugin whose run() returns a number (not text): an error result, not a number of NUL bytes."""

    async def run(_: dict) -> object:
        return 10**9

    tool = Tool("bad", "", {}, run)  # type: ignore[arg-type]
    call = {"id": "c", "function": {"name": "bad", "arguments": "{}"}}
    assert asyncio.run(_call({"bad": tool}, call)) == ("error: the tool bad returned int, not text", None, 0)


def test_a_sync_tool_that_never_returns_does_not_hold_up_the_process_exit(tmp_path):
    """A sync callable still sleeping past its deadline: the execution ends, and so does the process."""
    script = textwrap.dedent(
        """
        import asyncio, time
        from ctxmgmt.agents.tools import call_tool as _call
        from ctxmgmt.agents.tools import ToolRegistry, register_tool
        registry = ToolRegistry(group="none")
        register_tool("stuck", lambda **_: time.sleep(600), registry=registry, timeout=0.2)
        tool = registry.build({"type": "stuck"})
        call = {"id": "c", "function": {"name": "stuck", "arguments": "{}"}}
        print(asyncio.run(_call({"stuck": tool}, call))[0])
        """
    )
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
    )
    assert out.stdout.strip() == "error: the tool stuck did not finish within 0.2 s (parameters.timeout)", (
        out.stderr
    )
    assert time.monotonic() - started < 30


def test_the_outputs_of_one_turn_share_a_budget(monkeypatch):
    """Past the turn's budget each call keeps 1 KiB, and its notice names the turn's limit."""
    import ctxmgmt.agents.tools as runner_module

    registry = ToolRegistry(group="none")
    register_tool("big", lambda **_: "x" * 5000, registry=registry, max_output_bytes=4096)
    tool = registry.build({"type": "big"})
    call = {"id": "c", "function": {"name": "big", "arguments": "{}"}}
    monkeypatch.setattr(runner_module, "TURN_OUTPUT_BYTES", 8 * 1024 * 1024)
    full, *_ = asyncio.run(_call({"big": tool}, call, None, 10**9))
    spent, *_ = asyncio.run(_call({"big": tool}, call, None, 10))
    assert full.endswith("\n" + "x" * 4096) and "(parameters.max_output_bytes)" in full
    assert spent.endswith("\n" + "x" * 1024)
    assert "of which the first 1,024 are kept (the 8 MiB of tool output one model turn may have)" in spent


def test_an_output_past_the_archive_bound_is_archived_in_part_and_says_so(tmp_path, monkeypatch):
    """Reading stops at the archive's bound: the archive holds that much, and the notice says
    it is the output's first part of more."""
    import ctxmgmt.agents.tools as tools_module

    monkeypatch.setattr(tools_module, "MAX_ARCHIVE_BYTES", 300_000)
    offloader = LocalOffloader(tmp_path)

    async def stream(_: dict) -> object:
        for _ in range(100):
            yield b"y" * 10_000

    async def unused(_: dict) -> str:
        return ""

    tool = Tool("long", "", {}, unused, max_output_bytes=1024, stream=stream)
    call = {"id": "c1", "function": {"name": "long", "arguments": "{}"}}
    opener = lambda call_id: offloader.open_tool_result("s", tool_call_id=call_id)  # noqa: E731
    text, ref, archived = asyncio.run(_call({"long": tool}, call, opener))
    assert archived == 300_000
    assert text.startswith(
        f"[ctxmgmt: the output of long was cut: more than 300,000 bytes, of which the first 1,024 are kept "
        f"(parameters.max_output_bytes); its first 300,000 bytes are archived as {ref}"
    )
    assert offloader.read("s", ref).text == "y" * 300_000


def test_a_tool_with_bounds_out_of_range_is_refused_when_built():
    """A plugin's Tool with a zero timeout or a 10-byte limit: a ValueError saying the range."""

    async def run(_: dict) -> str:
        return ""

    with pytest.raises(ValueError, match=r"parameters.timeout is the whole call's deadline"):
        Tool("t", "", {}, run, timeout=0)
    with pytest.raises(ValueError, match=r"max_output_bytes is an integer from 1024"):
        Tool("t", "", {}, run, max_output_bytes=10)


def test_a_cancelled_call_leaves_no_unfinished_archive(tmp_path):
    """An execution cancelled while a cut output streams into its archive: the temporary file goes."""
    offloader = LocalOffloader(tmp_path)
    fed = asyncio.Event()

    async def stream(_: dict) -> object:
        yield b"z" * 5000  # cut: the archive opens
        yield b"z" * 5000
        fed.set()  # both pieces were taken
        await asyncio.sleep(3600)
        yield b""

    async def unused(_: dict) -> str:
        return ""

    tool = Tool("slow", "", {}, unused, max_output_bytes=1024, stream=stream)
    call = {"id": "c1", "function": {"name": "slow", "arguments": "{}"}}
    opener = lambda call_id: offloader.open_tool_result("s", tool_call_id=call_id)  # noqa: E731

    async def main() -> None:
        task = asyncio.create_task(_call({"slow": tool}, call, opener))
        await fed.wait()
        assert list(tmp_path.glob("*/*.tmp.txt"))  # the archive was being written
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert not list(tmp_path.glob("*/*.txt")) and offloader.list("s") == []
