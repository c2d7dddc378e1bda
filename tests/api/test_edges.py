"""The server's edges against a real uvicorn server: writes need a JSON body (415), the
Host and Origin must be the server's own or configured (403), read keys never call a
model, and an unknown definition name suggests the closest stored ones."""

import hashlib
import json

import httpx
import pytest

from ctxmgmt import ConfigError
from ctxmgmt.api import ServerConfig, create_app
from tests.conftest import LiveServer, shipped, tool_call

BASE = "/_plugins/_ml/context_management"
AGENTS = "/_plugins/_ml/agents"
DEFINITION = json.dumps(shipped("default")).encode()
AGENT = json.dumps(
    {"name": "spy", "type": "conversational", "tools": [{"type": "http", "url": "http://evil.example/"}]}
).encode()


def stored(client: httpx.Client) -> tuple[int, int]:
    """(definitions, agents) stored, read through the API."""
    return (
        client.get(BASE, params={"size": 1}).json()["total"],
        client.get(AGENTS, params={"size": 1}).json()["total"],
    )


@pytest.fixture
def api(store):
    """A keyless server (the default) and a client of it."""
    with LiveServer(create_app(store)) as server, httpx.Client(base_url=server.url) as client:
        yield client


def port(client: httpx.Client) -> int:
    return int(client.base_url.port or 80)


# -- 415: a write's body must say it is JSON ----------------------------------------------
FORGEABLE = [
    pytest.param({}, id="no-type"),
    pytest.param({"content-type": "text/plain"}, id="text-plain"),
    pytest.param({"content-type": "text/plain;charset=UTF-8"}, id="text-plain-charset"),
    pytest.param({"content-type": "application/x-www-form-urlencoded"}, id="form"),
    pytest.param({"content-type": "multipart/form-data; boundary=x"}, id="multipart"),
]
WRITES = [
    pytest.param("POST", f"{BASE}/forged", DEFINITION, id="create"),
    pytest.param("PUT", f"{BASE}/default", DEFINITION, id="replace"),
    pytest.param("POST", f"{AGENTS}/_register", AGENT, id="register"),
    pytest.param("POST", f"{BASE}/_simulate", b'{"definition": {}}', id="simulate"),
    pytest.param("POST", f"{AGENTS}/{'0' * 32}/_execute", b"{}", id="execute"),
    pytest.param("DELETE", f"{BASE}/default", b"{}", id="delete-with-body"),
    pytest.param("POST", f"{BASE}/forged", b"", id="create-without-body"),
]


@pytest.mark.parametrize("headers", FORGEABLE)
@pytest.mark.parametrize(("method", "path", "content"), WRITES)
def test_a_write_whose_body_is_not_declared_json_is_415_and_stores_nothing(
    api, store, method, path, content, headers
):
    """A POST, PUT or a DELETE with a body, without Content-Type: application/json (what a
    page of another origin can send without asking), is a 415 naming the fix; nothing changes."""
    store.create("default", shipped("default"))
    before = stored(api)
    r = api.request(method, path, content=content, headers=headers)
    assert r.status_code == 415, r.text
    assert r.json()["error"]["type"] == "media_type_exception"
    assert "Content-Type: application/json" in r.json()["error"]["reason"]
    assert stored(api) == before
    assert store.get("default").version == 1


def test_a_delete_without_a_body_needs_no_type_and_json_still_writes(api, store):
    """A DELETE without a body is not a 415 (a page can send one only after a preflight),
    and a JSON body with its type is written as before."""
    r = api.post(f"{BASE}/mine", content=DEFINITION, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    assert api.delete(f"{BASE}/mine").status_code == 200
    assert not store.exists("mine")


# -- 403: Host and Origin ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "host",
    ["evil.example:{port}", "evil.example", "localhost.evil.example:{port}", "127.0.0.1.nip.io:{port}"],
)
def test_a_foreign_host_is_403_and_stores_nothing(api, host):
    """A Host that is not the server's (DNS rebinding: the page's own name pointed at
    127.0.0.1) is a 403 saying what to configure, for reads and writes alike."""
    before = stored(api)
    headers = {"host": host.format(port=port(api)), "content-type": "application/json"}
    r = api.post(f"{BASE}/rebound", content=DEFINITION, headers=headers)
    assert r.status_code == 403, r.text
    assert r.json()["error"]["type"] == "security_exception"
    assert "server.allowed_hosts" in r.json()["error"]["reason"]
    assert api.get(BASE, headers={"host": headers["host"]}).status_code == 403
    assert stored(api) == before


@pytest.mark.parametrize(
    "origin", ["http://evil.example", "null", "http://127.0.0.1:{other}", "https://127.0.0.1:{port}"]
)
def test_a_page_of_another_origin_is_403_and_stores_nothing(api, origin):
    """A request from a page of another origin (another host, another port, another scheme,
    or an opaque 'null' origin) is a 403 saying what to configure; nothing is written."""
    before = stored(api)
    headers = {
        "origin": origin.format(port=port(api), other=port(api) + 1),
        "content-type": "application/json",
    }
    for method, path, content in (
        ("POST", f"{BASE}/forged", DEFINITION),
        ("POST", f"{AGENTS}/_register", AGENT),
    ):
        r = api.request(method, path, content=content, headers=headers)
        assert r.status_code == 403, r.text
        assert "server.allowed_origins" in r.json()["error"]["reason"]
    assert api.delete(f"{BASE}/forged", headers=headers).status_code == 403
    assert stored(api) == before


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}", "[::1]:{port}"])
def test_the_servers_own_names_and_pages_are_answered(api, store, host):
    """The loopback names at the listening port are answered, and so is a page of the same
    origin (such as /ui): the page loads, and its JSON writes are stored."""
    host = host.format(port=port(api))
    page = api.get("/ui", headers={"host": host})
    assert page.status_code == 200 and "<html" in page.text.lower()
    headers = {"host": host, "origin": f"http://{host.lower()}", "content-type": "application/json"}
    assert api.post(f"{BASE}/mine", content=DEFINITION, headers=headers).status_code == 200
    assert store.exists("mine")


@pytest.mark.parametrize("path", ["/", "/ui/"])
def test_the_servers_root_leads_to_the_page(api, path):
    """The address the server prints, or /ui/ typed with a slash, leads to the page (it was a
    JSON 404), with no key asked."""
    r = api.get(path, follow_redirects=False)
    assert r.status_code == 302 and r.headers["location"] == "/ui"
    page = api.get(path, follow_redirects=True)
    assert page.status_code == 200 and "<html" in page.text.lower()


def test_the_same_names_at_another_port_are_refused(api):
    """The default names are the listening port's: localhost at another port is refused."""
    assert api.get(BASE, headers={"host": f"localhost:{port(api) + 1}"}).status_code == 403


def test_configured_hosts_and_origins_are_answered(store):
    """server.allowed_hosts (a name, a *.domain at a port) and server.allowed_origins let
    exactly those names and pages through."""
    config = ServerConfig.from_dict(
        {
            "allowed_hosts": ["ctxmgmt.internal", "*.corp.example:8443"],
            "allowed_origins": ["http://dash.example:3000"],
        }
    )
    with LiveServer(create_app(store, config=config)) as server, httpx.Client(base_url=server.url) as client:
        ok = {"host": "ctxmgmt.internal:9999", "origin": "http://dash.example:3000"}
        assert client.get(BASE, headers=ok).status_code == 200
        assert client.get(BASE, headers={"host": "api.corp.example:8443"}).status_code == 200
        assert client.get(BASE, headers={"host": "api.corp.example:8444"}).status_code == 403
        assert client.get(BASE, headers={"host": "corp.example:8443"}).status_code == 403
        assert client.get(BASE, headers={"origin": "http://dash.example:3001"}).status_code == 403


def test_a_configured_origin_gets_cors_answers_and_no_other_does(store):
    """A page of a configured origin has its preflight granted (JSON, keys, If-Match; no
    credentials) and reads the answers; the server's own page and other pages get no CORS."""
    config = ServerConfig.from_dict({"allowed_origins": ["http://dash.example:3000"]})
    preflight = {"access-control-request-method": "POST", "access-control-request-headers": "content-type"}
    with LiveServer(create_app(store, config=config)) as server, httpx.Client(base_url=server.url) as client:
        dash = {"origin": "http://dash.example:3000"}
        r = client.options(f"{BASE}/x", headers={**dash, **preflight})
        assert r.status_code == 204 and r.headers["access-control-allow-origin"] == dash["origin"]
        assert "content-type" in r.headers["access-control-allow-headers"]
        assert "POST" in r.headers["access-control-allow-methods"]
        assert "access-control-allow-credentials" not in r.headers
        r = client.post(f"{BASE}/x", json=shipped("default"), headers=dash)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == dash["origin"]
        assert (
            client.options(f"{BASE}/x", headers={"origin": "http://evil.example", **preflight}).status_code
            == 403
        )
        own = client.get(BASE, headers={"origin": server.url})
        assert own.status_code == 200 and "access-control-allow-origin" not in own.headers


def test_a_malformed_allowed_host_is_refused_at_start_up(store, tmp_path):
    """A bad server.allowed_hosts entry is a configuration error naming its pointer, both
    from the configuration file (its schema) and given directly."""
    from ctxmgmt.api import load_config

    with pytest.raises(ConfigError, match="/server/allowed_hosts/0"):
        create_app(store, config=ServerConfig(allowed_hosts=("http://x/",)))
    path = tmp_path / "config.yaml"
    path.write_text("server:\n  allowed_hosts: ['bad host']\n  allowed_origins: ['evil.example']\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(path))
    pointers = {p.pointer for p in info.value.problems}
    assert {"/server/allowed_hosts/0", "/server/allowed_origins/0"} <= pointers


# -- read keys never call a model -------------------------------------------------------------
SUMMARISE = {
    "name": "paid",
    "hooks": {
        "pre_llm": [
            {
                "type": "SummarizationManager",
                "config": {
                    "summarization_model_id": "summarizer",
                    "summary_ratio": 0.5,
                    "preserve_recent_messages": 1,
                },
                "activation": {"message_count_exceed": 3},
            }
        ]
    },
}
LONG = {
    "messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(8)]
}
SHORT = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def keyed(store, agent_models, tools, monkeypatch, chat_server):
    """A server with a write key (w-secret) and a read key (r-secret), whose models are
    the local chat server; yields (client, chat server)."""
    monkeypatch.setenv("EDGE_WRITE_KEY", "w-secret")
    config = ServerConfig.from_dict(
        {
            "api_keys": [
                {"name": "writer", "scope": "write", "key_env": "EDGE_WRITE_KEY"},
                {"name": "reader", "scope": "read", "key_sha256": hashlib.sha256(b"r-secret").hexdigest()},
            ]
        }
    )
    store.create("paid", SUMMARISE)
    app = create_app(store, models=agent_models, config=config, tools=tools)
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        yield client, chat_server


READ = {"authorization": "Bearer r-secret"}
WRITE = {"authorization": "Bearer w-secret"}


def model_routes(client, chat_server):
    """Every route that can reach a model, as (method, path, body) for a call that would."""
    agent = {
        "name": "a",
        "type": "conversational",
        "llm": {"model_id": "chat"},
        "context_management_name": "paid",
    }
    agent_id = client.post(f"{AGENTS}/_register", json=agent, headers=WRITE).json()["agent_id"]
    chat_server.reply(tool_call(("echo", {"x": 1})))
    chat_server.reply("done")
    memory_id = client.post(
        f"{AGENTS}/{agent_id}/_execute", json={"parameters": {"question": "go"}}, headers=WRITE
    ).json()["inference_results"][0]["output"][0]["result"]
    return [
        ("POST", f"{BASE}/_simulate", {"definition": SUMMARISE, "context": LONG}),
        ("POST", f"{BASE}/paid/_simulate", {"context": LONG}),
        ("POST", f"{AGENTS}/{agent_id}/_execute", {"parameters": {"question": "again"}}),
        ("POST", f"{AGENTS}/{agent_id}/_compact", {"memory_id": memory_id}),
    ]


def test_a_read_key_gets_403_on_every_route_that_calls_a_model_and_nothing_is_called(keyed):
    """A read key on _simulate (inline and stored, with a summariser that fires), _execute
    and _compact is a 403 that says a write key is needed, and the model gets no request."""
    client, chat_server = keyed
    routes = model_routes(client, chat_server)
    calls = len(chat_server.requests)
    for method, path, body in routes:
        r = client.request(method, path, json=body, headers=READ)
        assert r.status_code == 403, (path, r.text)
        assert "reader" in r.json()["error"]["reason"] and "write" in r.json()["error"]["reason"], path
    assert len(chat_server.requests) == calls


def test_a_write_key_simulation_calls_the_model(keyed):
    """The same simulation with a write key calls the summariser (the guard is the key's)."""
    client, chat_server = keyed
    r = client.post(f"{BASE}/paid/_simulate", json={"context": LONG}, headers=WRITE)
    assert r.status_code == 200, r.text
    assert chat_server.requests and "summary" in json.dumps(chat_server.requests[0])


def test_a_read_key_simulates_what_calls_no_model(keyed):
    """A read key may still simulate when no model would be called (the summariser does not fire)."""
    client, chat_server = keyed
    r = client.post(f"{BASE}/paid/_simulate", json={"context": SHORT}, headers=READ)
    assert r.status_code == 200, r.text
    assert chat_server.requests == []


# -- did you mean ---------------------------------------------------------------------------
def test_an_unknown_definition_name_suggests_the_closest_stored_ones(store, agent_models, tools):
    """Registering with, executing with, reading or simulating a misspelt definition name
    answers with the closest stored names."""
    store.create("default", shipped("default"))
    app = create_app(store, models=agent_models, tools=tools)
    with LiveServer(app) as server, httpx.Client(base_url=server.url) as client:
        agent = {"name": "a", "type": "conversational", "llm": {"model_id": "chat"}}
        r = client.post(f"{AGENTS}/_register", json={**agent, "context_management_name": "defualt"})
        assert r.status_code == 400
        assert "did you mean 'default'?" in json.dumps(r.json())
        agent_id = client.post(f"{AGENTS}/_register", json=agent).json()["agent_id"]
        r = client.post(
            f"{AGENTS}/{agent_id}/_execute",
            json={"parameters": {"question": "q", "context_management_name": "defaul"}},
        )
        assert r.status_code == 404 and "did you mean 'default'?" in r.json()["error"]["reason"]
        r = client.get(f"{BASE}/defualt")
        assert r.status_code == 404 and "did you mean 'default'?" in r.json()["error"]["reason"]
        r = client.post(f"{BASE}/defualt/_simulate", json={"context": SHORT})
        assert r.status_code == 404 and "did you mean 'default'?" in r.json()["error"]["reason"]
        r = client.get(f"{BASE}/zzzz-unrelated")
        assert r.status_code == 404 and "did you mean" not in r.json()["error"]["reason"]


# -- ctxmgmt serve beyond loopback ------------------------------------------------------------
def serve_output(folder, *args: str, env: dict | None = None) -> str:
    """What `ctxmgmt serve` prints until it answers /_health on 127.0.0.1, then stops."""
    import os
    import subprocess
    import sys
    import time

    from tests.conftest import free_port

    port = free_port()
    command = [
        sys.executable,
        "-m",
        "ctxmgmt.cli",
        "serve",
        "--port",
        str(port),
        "--db",
        f"sqlite:///{folder}/s.db",
    ]
    proc = subprocess.Popen(
        [*command, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=folder,
        env={**os.environ, **(env or {})},
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/_health", timeout=30).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert "serving on" in out, out
    return out


def test_serving_beyond_loopback_without_keys_warns_what_is_exposed(tmp_path):
    """`ctxmgmt serve --host 0.0.0.0` without keys warns that anyone reaching it can write
    definitions, register agents with tool URLs and spend the models' keys, and says what
    to configure; with keys, or on 127.0.0.1, it does not."""
    out = serve_output(tmp_path, "--host", "0.0.0.0")
    warning = next(line for line in out.splitlines() if line.startswith("warning:"))
    for words in ("without API keys", "definitions", "tool URLs", "spend", "server.api_keys", "127.0.0.1"):
        assert words in warning, words
    config = tmp_path / "config.yaml"
    config.write_text("server:\n  api_keys:\n    - {name: ops, scope: write, key_env: EDGE_SERVE_KEY}\n")
    keyed = serve_output(tmp_path, "--host", "0.0.0.0", "--config", str(config), env={"EDGE_SERVE_KEY": "k"})
    assert "warning:" not in keyed
    assert "warning:" not in serve_output(tmp_path, "--host", "127.0.0.1")


# -- the contract ----------------------------------------------------------------------------
def test_the_openapi_document_states_the_edges():
    """Every operation documents the 403 of the Host/Origin guard, every one with a body the
    415, and every one that refuses schema-valid requests states its rules on its 400."""
    from ctxmgmt.api.openapi import SEMANTIC_KEY, openapi_document

    document = openapi_document()
    operations = [(path, op) for path, item in document["paths"].items() for op in item.values()]
    for path, op in operations:
        assert "403" in op["responses"], path
        if "requestBody" in op:
            assert "415" in op["responses"], path
        if SEMANTIC_KEY in op:
            assert op[SEMANTIC_KEY] in op["responses"]["400"]["description"], path
    declared = {path for path, op in operations if SEMANTIC_KEY in op}
    for path in (
        "_validate",
        "_register",
        "_execute",
        "_search",
        "{name}/_simulate",
        "/context_management/_simulate",
    ):
        assert any(p.endswith(path) for p in declared), path
