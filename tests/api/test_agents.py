"""Agents end to end through REST, on SQLite and PostgreSQL, against the local chat server."""

import httpx
import pytest

from ctxmgmt.api import create_app
from tests.conftest import LiveServer, shipped, tool_call

DEFS = "/_plugins/_ml/context_management"
AGENTS = "/_plugins/_ml/agents"


@pytest.fixture
def api(store, agent_models, tools):
    with (
        LiveServer(create_app(store, models=agent_models, tools=tools)) as server,
        httpx.Client(base_url=server.url, timeout=60) as client,
    ):
        yield client


def managers(answer):
    """The definition's manager types in the execution's trace (not the final fit step)."""
    output = {o["name"]: o["result"] for o in answer["inference_results"][0]["output"]}
    trace = output["context_management"]["trace"]
    return {e["type"] for t in trace for e in t["entries"] if e["type"] != "fit"}, output


def execute(api, agent_id, **parameters):
    return api.post(f"{AGENTS}/{agent_id}/_execute", json={"parameters": {"question": "hi", **parameters}})


def test_register_execute_override_update_delete(api, chat_server):
    """A's managers run; B overrides by name; an update of A applies at once; a deleted B is a 404."""
    a = {"hooks": {"pre_llm": [{"type": "SlidingWindowManager"}]}}
    b = {"hooks": {"pre_llm": [{"type": "ToolsOutputTruncateManager"}]}}
    assert api.post(f"{DEFS}/def-a", json=a).status_code == 200
    assert api.post(f"{DEFS}/def-b", json=b).status_code == 200
    agent_id = api.post(
        f"{AGENTS}/_register",
        json={
            "name": "helper",
            "type": "conversational",
            "llm": {"model_id": "chat", "parameters": {"max_iteration": 5}},
            "context_management_name": "def-a",
            "memory": {"type": "conversation_index"},
            "app_type": "chat",
        },
    ).json()["agent_id"]
    for _ in range(4):
        chat_server.reply("answer")

    types, output = managers(execute(api, agent_id).json())
    assert types == {"SlidingWindowManager"} and output["context_management"]["definition"] == "def-a"
    assert output["response"] == "answer" and output["memory_id"]

    types, _ = managers(execute(api, agent_id, context_management_name="def-b").json())
    assert types == {"ToolsOutputTruncateManager"}
    top = api.post(
        f"{AGENTS}/{agent_id}/_execute",
        json={"parameters": {"question": "hi"}, "context_management_name": "def-b"},
    )
    assert managers(top.json())[0] == {"ToolsOutputTruncateManager"}

    api.put(
        f"{DEFS}/def-a", json={"hooks": {"pre_llm": [{"type": "SummarizationManager"}]}}
    ).raise_for_status()
    assert managers(execute(api, agent_id).json())[0] == {"SummarizationManager"}

    assert api.delete(f"{DEFS}/def-b").status_code == 200
    gone = execute(api, agent_id, context_management_name="def-b")
    assert gone.status_code == 404 and "def-b" in gone.json()["error"]["reason"]


def test_opensearch_body_is_stored_and_returned(api):
    """Unused registration fields (memory, app_type, ...) are stored and returned."""
    body = {
        "name": "os",
        "type": "conversational",
        "description": "d",
        "llm": {"model_id": "chat", "parameters": {}},
        "memory": {"type": "conversation_index"},
        "app_type": "rag",
        "tools": [{"type": "echo", "name": "echo"}],
    }
    agent_id = api.post(f"{AGENTS}/_register", json=body).json()["agent_id"]
    got = api.get(f"{AGENTS}/{agent_id}").json()
    assert {k: got[k] for k in body} == body
    assert api.get(AGENTS).json()["total"] == 1
    assert api.delete(f"{AGENTS}/{agent_id}").json() == {"agent_id": agent_id, "result": "deleted"}
    assert api.get(f"{AGENTS}/{agent_id}").status_code == 404


def test_definition_in_use_cannot_be_deleted_without_force(api, chat_server):
    """Deleting a definition an agent uses is a 409 naming the agent, unless force=true."""
    api.post(f"{DEFS}/used", json=shipped("default")).raise_for_status()
    agent_id = api.post(
        f"{AGENTS}/_register",
        json={"name": "user-of-used", "llm": {"model_id": "chat"}, "context_management_name": "used"},
    ).json()["agent_id"]
    refused = api.delete(f"{DEFS}/used")
    assert refused.status_code == 409 and "user-of-used" in refused.json()["error"]["reason"]
    assert api.delete(f"{DEFS}/used?force=true").status_code == 200
    orphan = execute(api, agent_id)
    assert orphan.status_code == 404 and "does not run unmanaged" in orphan.json()["error"]["reason"]


def test_memory_continues_over_rest(api, chat_server):
    """A memory_id from one execution continues the conversation in the next."""
    agent_id = api.post(f"{AGENTS}/_register", json={"name": "m", "llm": {"model_id": "chat"}}).json()[
        "agent_id"
    ]
    chat_server.reply(tool_call(("echo", {"n": 1})))
    chat_server.reply("one")
    chat_server.reply("two")
    first = {o["name"]: o["result"] for o in execute(api, agent_id).json()["inference_results"][0]["output"]}
    execute(api, agent_id, memory_id=first["memory_id"]).raise_for_status()
    assert [m["role"] for m in chat_server.requests[-1]["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert execute(api, agent_id, memory_id="f" * 32).status_code == 404


def test_llm_error_is_a_502_with_the_reason(api, chat_server):
    """An LLM failure ends the execution with a clear 502."""
    agent_id = api.post(f"{AGENTS}/_register", json={"name": "x", "llm": {"model_id": "chat"}}).json()[
        "agent_id"
    ]
    chat_server.fail(500, "model overloaded")
    chat_server.fail(500, "model overloaded")
    r = execute(api, agent_id)
    assert r.status_code == 502 and "model overloaded" in r.json()["error"]["reason"]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "words"),
    [
        ("POST", f"{AGENTS}/{'0' * 32}/_execute", {"parameters": {"question": "q"}}, 404, "no agent"),
        ("POST", f"{AGENTS}/not-an-id/_execute", {"parameters": {"question": "q"}}, 404, "no agent"),
        ("GET", f"{AGENTS}/{'0' * 32}", None, 404, "no agent"),
        ("POST", f"{AGENTS}/_register", b"{broken", 400, "invalid JSON"),
        (
            "POST",
            f"{AGENTS}/_register",
            {"name": "x", "llm": {"model_id": "chat"}, "tools": [{"type": "teleport"}]},
            400,
            "unknown tool type",
        ),
        ("POST", f"{AGENTS}/_register", {"name": "x"}, 400, "/llm"),
        (
            "POST",
            f"{AGENTS}/_register",
            {"name": "x", "llm": {"model_id": "chat"}, "context_management_name": "nope"},
            400,
            "no definition named 'nope'",
        ),
        (
            "POST",
            f"{AGENTS}/_register",
            {
                "name": "x",
                "llm": {"model_id": "chat"},
                "context_management_name": "a",
                "context_management": {"hooks": {}},
            },
            400,
            "not both",
        ),
        (
            "POST",
            f"{AGENTS}/_register",
            {"name": "x", "llm": {"model_id": "chat", "parameters": {"max_iteration": 1000}}},
            400,
            "max_iteration",
        ),
        ("POST", "EXEC", {"parameters": {}}, 400, "question is required"),
        ("POST", "EXEC", {"parameters": {"question": ""}}, 400, "question is required"),
        ("POST", "EXEC", {"parameters": "q"}, 400, "parameters must be an object"),
        ("POST", "EXEC", {"parameters": {"question": "q", "memory_id": 5}}, 400, "memory_id"),
        ("POST", "EXEC", b"[]", 400, "JSON object"),
        ("GET", f"{AGENTS}?size=0", None, 400, "size"),
    ],
)
def test_bad_agent_requests_get_4xx(api, method, path, body, status, words):
    """Unknown agents, malformed bodies, unknown tool types and missing questions get 4xx with reasons."""
    if path == "EXEC":
        agent_id = api.post(f"{AGENTS}/_register", json={"name": "x", "llm": {"model_id": "chat"}}).json()[
            "agent_id"
        ]
        path = f"{AGENTS}/{agent_id}/_execute"
    kwargs = (
        {"content": body, "headers": {"content-type": "application/json"}}
        if isinstance(body, bytes)
        else {"json": body}
    )
    r = api.request(method, path, **({} if body is None else kwargs))
    assert r.status_code == status, r.text
    assert words in r.text


def conversation_to_compact(api, chat_server):
    """An agent whose definition summarises, and a 5-round conversation: (agent_id, memory_id)."""
    never = {"tokens_exceed": 10**9}  # only a manual compaction summarises
    summ = {"type": "SummarizationManager", "config": {"preserve_recent_messages": 2}, "activation": never}
    api.post(f"{DEFS}/summ", json={"hooks": {"pre_llm": [summ]}})
    body = {
        "name": "c",
        "llm": {"model_id": "chat"},
        "tools": [{"type": "big"}],
        "context_management_name": "summ",
    }
    agent_id = api.post(f"{AGENTS}/_register", json=body).json()["agent_id"]
    for i in range(5):
        chat_server.reply(tool_call(("big", {"size": 3000 + i})))
    chat_server.reply("done")
    output = execute(api, agent_id).json()["inference_results"][0]["output"]
    return agent_id, {o["name"]: o["result"] for o in output}["memory_id"]


def test_compact_endpoint(api, chat_server):
    """POST _compact summarises a conversation now; memory_id is required."""
    agent_id, memory_id = conversation_to_compact(api, chat_server)
    assert api.post(f"{AGENTS}/{agent_id}/_compact", json={}).status_code == 400
    r = api.post(f"{AGENTS}/{agent_id}/_compact", json={"memory_id": memory_id, "instruction": "be brief"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["compacted"] and body["tokens_after"] < body["tokens_before"] and body["summary"]


def test_compact_command(api, chat_server, capsys):
    """`ctxmgmt compact --agent --memory` compacts through the server; bad ids exit 2 with a reason."""
    from ctxmgmt.cli import main

    agent_id, memory_id = conversation_to_compact(api, chat_server)
    url = str(api.base_url)
    assert main(["compact", "--agent", agent_id, "--memory", memory_id, "--url", url]) == 0
    assert "compacted:" in capsys.readouterr().err
    chat_server.reply("hello")
    output = execute(api, agent_id).json()["inference_results"][0]["output"]
    short = {o["name"]: o["result"] for o in output}["memory_id"]
    assert main(["compact", "--agent", agent_id, "--memory", short, "--url", url]) == 0
    assert "nothing compacted (" in capsys.readouterr().err  # two messages: nothing to summarise
    assert main(["compact", "--agent", agent_id, "--memory", "f" * 32, "--url", url]) == 2
    assert "404" in capsys.readouterr().err
