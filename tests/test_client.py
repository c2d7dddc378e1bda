import asyncio
import inspect
import re

import httpx
import pytest

from ctxmgmt import ApiError, AsyncClient, Client
from ctxmgmt.api.routes import TABLE
from ctxmgmt.testing import make_conversation
from tests.conftest import shipped, tool_call


def test_client_covers_every_route(live):
    """The client creates, reads, updates, lists, simulates and deletes over HTTP."""
    with Client(live.url) as client:
        assert client.health()["status"] == "green"
        assert client.create("mine", shipped("long-conversation"))["status"] == "created"
        assert client.get("mine")["version"] == 1
        assert client.update("mine", shipped("long-conversation"), if_version=1)["version"] == 2
        assert client.list(q="mine")["total"] == 1
        sim = client.simulate("mine", {"messages": make_conversation(30, seed=2)})
        assert sim["trace"][0]["type"] == "SlidingWindowManager"
        inline = client.simulate(None, {"messages": []}, definition=shipped("tool-heavy"), hook="post_tool")
        assert len(inline["trace"]) == 2
        assert client.delete("mine")["status"] == "deleted"


def test_client_errors_are_typed(live):
    """Error answers raise ApiError with the status, type, reason and problems."""
    with Client(live.url) as client:
        with pytest.raises(ApiError) as info:
            client.get("missing")
        assert info.value.status == 404 and info.value.type == "resource_not_found_exception"
        with pytest.raises(ApiError) as info:
            client.create("bad", {"hooks": {"pre_llm": [{"type": "Nope"}]}})
        assert info.value.status == 400
        assert info.value.problems[0].pointer == "/hooks/pre_llm/0/type"


def test_async_client(live):
    """The async client does the same over HTTP."""

    async def run():
        async with AsyncClient(live.url) as client:
            await client.create("a", shipped("default"))
            got = await client.get("a")
            listed = await client.list()
            with pytest.raises(ApiError):
                await client.create("a", shipped("default"))
            await client.delete("a")
            return got, listed

    got, listed = asyncio.run(run())
    assert got["name"] == "a" and listed["total"] == 1


LIFECYCLE = {"close", "aclose"}


def methods(cls) -> dict[str, object]:
    """The public request methods of a client class, by name."""
    return {
        name: getattr(cls, name) for name in dir(cls) if not name.startswith("_") and name not in LIFECYCLE
    }


def test_both_clients_have_the_same_methods_with_the_same_signatures():
    """Every method of Client is a method of AsyncClient with the same signature, and back;
    the async ones are coroutines."""
    sync, concurrent = Client("http://127.0.0.1:9"), AsyncClient("http://127.0.0.1:9")
    assert set(methods(Client)) == set(methods(AsyncClient))
    for name in methods(Client):
        one, other = getattr(sync, name), getattr(concurrent, name)
        assert inspect.signature(one) == inspect.signature(other), name
        assert inspect.iscoroutinefunction(other) and not inspect.iscoroutinefunction(one), name
        assert one.__doc__ and one.__doc__ == other.__doc__, name
    sync.close()
    asyncio.run(concurrent.aclose())


def test_the_clients_send_every_route_of_the_table_a_client_should_have():
    """The clients' methods are exactly the senders the route table names; only the document
    itself, the web page's files and the ways to it, and the proxy's provider APIs (which the
    providers' own clients send) have none."""
    senders = {op.client for op in TABLE if op.client}
    assert set(methods(Client)) == senders
    assert {(op.method, op.path) for op in TABLE if not op.client and not op.path.startswith("/proxy/")} == {
        ("GET", "/openapi.json"),
        ("GET", "/ui"),
        ("GET", "/ui/{file}"),
        ("GET", "/"),
        ("GET", "/ui/"),
    }


ARGS = {
    "name": "my-def",
    "definition": {"hooks": {}},
    "context": {"messages": []},
    "body": {"name": "a"},
    "text": "hooks: {}",
    "agent_id": "a/../b?c",
    "execution_id": "e" * 32,
    "memory_id": "m" * 32,
    "report_id": "r" * 32,
    "question": "q",
    "ref": "t-" + "0" * 32,
    "session": "s",
    "pattern": "x",
}
"""A value for each required argument of the client methods."""


def route_of(method: str, path: str):
    """The operation of the table a request is routed to, the way the app matches it."""
    for op in TABLE:
        template = re.sub(r"\{[^}]+\}", "[^/]+", re.escape(op.path).replace(r"\{", "{").replace(r"\}", "}"))
        if op.method == method and re.fullmatch(template, path):
            return op
    return None


@pytest.mark.parametrize("name", sorted(methods(Client)))
def test_each_client_request_is_routed_to_its_operation(name):
    """What a client method sends reaches the operation of the table that names it, with
    only the query parameters and headers that operation states; a path segment never
    splits into another route."""
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"agent_id": "x", "inference_results": [{"output": []}]})

    with Client("http://test", transport=httpx.MockTransport(answer)) as client:
        method = getattr(client, name)
        required = [
            p.name
            for p in inspect.signature(method).parameters.values()
            if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD
        ]
        method(*(ARGS[arg] for arg in required))
        if name == "simulate":
            method(None, ARGS["context"], definition=ARGS["definition"])
        if name == "update":
            method("my-def", ARGS["definition"], if_version=3)
    for request in sent:
        op = route_of(request.method, request.url.raw_path.split(b"?")[0].decode())
        assert op is not None and op.client == name, (request.method, request.url)
        stated = {p.name.lower() for p in op.params if p.where != "path"}
        assert set(request.url.params) <= stated
        assert {"if-match"} & set(request.headers) <= stated


@pytest.fixture
def agent_server(store, agent_models, tools, tmp_path):
    """A live server with models, tools and an offloader."""
    from ctxmgmt.api import create_app
    from ctxmgmt.offload import LocalOffloader
    from tests.conftest import LiveServer

    app = create_app(store, models=agent_models, tools=tools, offloader=LocalOffloader(tmp_path))
    with LiveServer(app) as server:
        yield server


class Blocking:
    """An AsyncClient driven from synchronous code: each method runs to its end in one loop."""

    def __init__(self, url: str) -> None:
        self.runner = asyncio.Runner()
        self.client = AsyncClient(url, timeout=60)

    def __getattr__(self, name):
        method = getattr(self.client, name)
        return lambda *args, **kwargs: self.runner.run(method(*args, **kwargs))

    def close(self) -> None:
        self.runner.run(self.client.aclose())
        self.runner.close()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_both_clients_drive_agents_and_their_archives(agent_server, chat_server, kind):
    """Through either client: register, read, list and replace an agent, execute it, compact
    its conversation, read its records and memory, list, search and read its archives,
    validate a text, and meet a 404 as ApiError; then delete the agent."""
    client = Client(agent_server.url, timeout=60) if kind == "sync" else Blocking(agent_server.url)
    try:
        text = "name: w\nhooks:\n  pre_llm:\n    - type: SlidingWindowManager\n"
        assert client.validate(text)["valid"] is True
        never = {"tokens_exceed": 10**9}  # only a manual compaction summarises
        summarise = {"type": "SummarizationManager", "config": {"preserve_recent_messages": 2}}
        truncate = {
            "type": "ToolsOutputTruncateManager",
            "config": {"max_output_length": 400, "offload": True},
        }
        hooks = {"pre_llm": [{**summarise, "activation": never}], "post_tool": [truncate]}
        client.create("summ", {"hooks": hooks})
        body = {"name": "c", "llm": {"model_id": "chat"}, "tools": [{"type": "big"}]}
        agent_id = client.register_agent({**body, "context_management_name": "summ"})
        assert client.get_agent(agent_id)["name"] == "c"
        assert client.list_agents()["total"] == 1
        assert client.replace_agent(agent_id, {**body, "name": "d", "context_management_name": "summ"})
        for i in range(5):
            chat_server.reply(tool_call(("big", {"size": 3000 + i})))
        chat_server.reply("done")
        output = client.execute(agent_id, "hi")
        memory_id = output["memory_id"]
        compacted = client.compact(agent_id, memory_id, instruction="be brief")
        assert compacted["compacted"] and compacted["tokens_after"] < compacted["tokens_before"]
        execution = client.execution(output["execution_id"])
        assert client.executions(agent_id)["executions"][0]["execution_id"] == execution["execution_id"]
        assert client.memory(memory_id)["memory_id"] == memory_id
        assert client.memory_messages(memory_id, size=2)["total"] > 2
        archives = client.archives(memory_id)["archives"]
        assert [a["kind"] for a in archives] == ["tool_result"] * 5 + ["messages"]  # the last: compacted
        hits = client.search_archives(memory_id, "row", size=1)["hits"]
        assert [hit["ref"] for hit in hits] == [archives[0]["ref"]]
        read = client.read_archive(archives[0]["ref"], memory_id, limit=8)
        assert read["text"] == "row row " and read["next_offset"] == 8
        with pytest.raises(ApiError) as info:
            client.eval_report("0" * 32)
        assert info.value.status == 404 and "eval report" in info.value.reason
        assert client.delete_agent(agent_id)["result"] == "deleted"
        with pytest.raises(ApiError):
            client.get_agent(agent_id)
    finally:
        client.close()


def test_the_clients_read_the_route_table_without_the_server():
    """Importing the clients loads the route table, not the app or its handlers."""
    import subprocess
    import sys

    code = "import sys, ctxmgmt.client; print(*(m for m in sys.modules if m.startswith('ctxmgmt.api')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "ctxmgmt.api.routes" in loaded.split()
    assert set(loaded.split()) <= {
        "ctxmgmt.api",
        "ctxmgmt.api.errors",
        "ctxmgmt.api.params",
        "ctxmgmt.api.routes",
    }
