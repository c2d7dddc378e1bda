"""A corpus of malformed requests: every one gets a 4xx with a clear reason, never a 500."""

import json
import re

import httpx
import pytest

from ctxmgmt.api import ServerConfig, create_app
from tests.conftest import LiveServer, shipped

BASE = "/_plugins/_ml/context_management"
GOOD = shipped("default")
JSON = {"content-type": "application/json"}


def body(obj):
    return json.dumps(obj).encode()


def entry(**kw):
    return {**GOOD, "hooks": {"pre_llm": [{"type": "SlidingWindowManager", **kw}]}}


CASES = []


def case(method, path, content=None, headers=None, status=400, why=""):
    CASES.append(pytest.param(method, path, content, headers or JSON, status, id=why or f"{method} {path}"))


# malformed JSON bodies
for i, raw in enumerate(
    [
        b"{",
        b"}",
        b"[",
        b"{'a': 1}",
        b'{"a": }',
        b"nul",
        b"NaN",
        b'{"a": NaN}',
        b'{"a": Infinity}',
        b"\xff\xfe",
        b"   ",
        b"",
        b'{"a":1}{"b":2}',
        b'"just a string"',
        b"[1, 2]",
        b"123",
        b"true",
        b"null",
        b'{"a": "\\x"}',
        b"\x00",
    ]
):
    case("POST", f"{BASE}/m{i}", raw, why=f"malformed-{i}")
# wrong content types: 415 (a page of another origin sends these without asking)
for i, ctype in enumerate(
    [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
        "application/xml",
        "text/json-ish",
        "image/png",
    ]
):
    case("POST", f"{BASE}/t{i}", body(GOOD), {"content-type": ctype}, 415, why=f"ctype-{ctype}")
    case("PUT", f"{BASE}/t{i}", body(GOOD), {"content-type": ctype}, 415, why=f"put-ctype-{ctype}")
# oversized body (limit set to 4096 below) and a lying content-length
case("POST", f"{BASE}/big", body({**GOOD, "description": "x" * 10_000}), status=413, why="oversized")
# bad names
for i, name in enumerate(["UPPER", "a%20b", "x" * 50, "_reserved", "_simulate2", "na.me", "%C3%BC"]):
    case("POST", f"{BASE}/{name}", body(GOOD), why=f"name-{i}")
    case("GET", f"{BASE}/{name}", why=f"get-name-{i}")
case("POST", f"{BASE}/a%2Fb", body(GOOD), status=404, why="name-with-slash")
# invalid definitions
invalid = [
    {},
    {"hooks": {}},
    {"hooks": []},
    {"hooks": "pre_llm"},
    {"hooks": {"pre_llm": []}},
    {"hooks": {"pre_lm": GOOD["hooks"]["pre_llm"]}},
    {**GOOD, "extra": 1},
    {**GOOD, "description": 5},
    {**GOOD, "settings": {"tokenizer": 3}},
    {**GOOD, "settings": {"x": 1}},
    entry(config={"max_messages": 0}),
    entry(config={"max_messages": "ten"}),
    entry(config={"max_messages": 1.5}),
    entry(config={"pin": "all"}),
    entry(config={"nope": 1}),
    entry(config=[]),
    entry(activation={}),
    entry(activation={"tokens_exceed": -5}),
    entry(activation={"tokens_exced": 5}),
    entry(activation={"any_of": []}),
    entry(activation={"tokens_ratio_exceed": 2}),
    entry(activation={"always": "yes"}),
    entry(activation={"rule_type": "sometimes"}),
    entry(on_error="retry"),
    entry(type=None),
    {**GOOD, "hooks": {"pre_llm": [{"type": "Unknown"}]}},
    {**GOOD, "hooks": {"pre_llm": [{}]}},
    {**GOOD, "hooks": {"pre_llm": ["SlidingWindowManager"]}},
    {**GOOD, "hooks": {"pre_llm": [{"type": "SummarizationManager", "config": {"summary_ratio": 0.95}}]}},
    {
        **GOOD,
        "hooks": {"pre_llm": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 1}}]},
    },
    {**GOOD, "hooks": {"pre_llm": GOOD["hooks"]["pre_llm"], "PRE_LLM": GOOD["hooks"]["pre_llm"]}},
]
for i, doc in enumerate(invalid):
    case("POST", f"{BASE}/inv{i}", body(doc), why=f"invalid-{i}")
    case(
        "POST",
        f"{BASE}/_simulate",
        body({"definition": doc, "context": {"messages": []}}),
        why=f"sim-invalid-{i}",
    )
# bad list parameters
for q in [
    "size=0",
    "size=1001",
    "size=-1",
    "size=abc",
    "from=-1",
    "from=x",
    "size=1.5",
    "from=1e3",
    "size=",
    "q=" + "x" * 101,
]:
    case("GET", f"{BASE}?{q}", why=f"list-{q[:12]}")
# bad If-Match / if_version / force
for i, h in enumerate(["abc", "-1", "1.0", '"x"', "*"]):
    case("PUT", f"{BASE}/default", body(GOOD), {**JSON, "if-match": h}, why=f"if-match-{i}")
case("PUT", f"{BASE}/default?if_version=two", body(GOOD), why="if-version-text")
case("DELETE", f"{BASE}/default?force=maybe", why="force-maybe")
# bad simulations
for i, sim in enumerate(
    [
        {"hook": "pre_lm", "context": {}},
        {"hook": 5, "context": {}},
        {"context": "hi"},
        {"context": {"messages": [{"role": "tool", "tool_call_id": "x", "content": "r"}]}},
        {"context": {"messages": [{"role": "robot", "content": "r"}]}},
        {"context": {"messages": "hello"}},
        {"context": {"colour": 1}},
        {"context": {}, "extra": 1},
        {"context": {"context_window": -1}},
        {"context": {"model": 5}},
    ]
):
    case("POST", f"{BASE}/default/_simulate", body(sim), why=f"simulate-{i}")
case("POST", f"{BASE}/_simulate", body({"context": {}}), why="simulate-inline-without-definition")
# unknown routes and methods
case("PATCH", f"{BASE}/default", body(GOOD), status=405, why="patch")
case("GET", "/_plugins/_ml/nothing", status=404, why="unknown-route")
case("GET", f"{BASE}/missing", status=404, why="missing")
case("POST", f"{BASE}/default", body(GOOD), status=409, why="exists")


def test_corpus_is_large_enough():
    """The corpus has at least 100 malformed requests."""
    assert len(CASES) >= 100


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    from ctxmgmt.store import DefinitionStore

    store = DefinitionStore.open(f"sqlite:///{tmp_path_factory.mktemp('db')}/bad.db")
    store.create("default", GOOD)
    app = create_app(store, config=ServerConfig(max_body_bytes=4096))
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        yield client
    store.engine.dispose()


@pytest.mark.parametrize(("method", "path", "content", "headers", "status"), CASES)
def test_bad_input_gets_a_4xx_with_a_reason(api, method, path, content, headers, status):
    """Malformed bodies, headers and query strings get 4xx in OpenSearch's error shape."""
    r = api.request(method, path, content=content, headers=headers)
    assert r.status_code == status, r.text
    data = r.json()
    assert data["status"] == status
    assert data["error"]["type"] and len(data["error"]["reason"]) > 10
    assert api.get(f"{BASE}/default").json()["version"] == 1  # nothing was lost or changed


def test_a_huge_declared_length_is_refused_before_reading(api):
    """A Content-Length far over the limit is a 413 at once, without reading the body (raw socket)."""
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(str(api.base_url))
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(
            f"POST {BASE}/big HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: 999999999\r\n\r\n{".encode()
        )
        answer = read_response(sock)
    assert answer.startswith("HTTP/1.1 413") and "max_body_bytes" in answer


def test_a_client_sending_an_oversized_body_reads_the_413(api):
    """A client that sends 6 MiB (over the limit, under the drain bound) finishes sending and
    reads the JSON error: no connection reset while it is still sending."""
    r = api.post(f"{BASE}/big2", content=b"x" * (6 * 1024 * 1024), headers=JSON)
    assert r.status_code == 413 and r.json()["error"]["reason"].startswith("the body is larger")
    assert api.get(f"{BASE}/default").status_code == 200  # the same connection still works


def read_response(sock) -> str:
    """The whole HTTP response: its headers, then as many body bytes as it declares
    (a single recv may return only the headers)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    declared = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    while declared and len(body) < int(declared.group(1)):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return (head + b"\r\n\r\n" + body).decode()
