"""Hostile bodies and headers get a 4xx naming the field, on SQLite and PostgreSQL, never a 500."""

import json

import httpx
import pytest

from ctxmgmt.api import ServerConfig, create_app
from tests.conftest import LiveServer, shipped

BASE = "/_plugins/_ml/context_management"
GOOD = shipped("default")
JSON = {"content-type": "application/json"}


def nested_any_of(depth):
    rule = {"tokens_exceed": 5}
    for _ in range(depth):
        rule = {"any_of": [rule]}
    return rule


def raw(obj):
    return json.dumps(obj).encode()


HOSTILE = [
    ("POST", f"{BASE}/deep", b'{"a":' * 3000 + b"1" + b"}" * 3000, {}, "nested deeper than 64"),
    ("POST", f"{BASE}/deep2", b'{"description": ' + b"[" * 100 + b"]" * 100 + b"}", {}, "/description/0/0"),
    (
        "POST",
        f"{BASE}/anyof",
        raw(
            {
                **GOOD,
                "hooks": {"pre_llm": [{"type": "SlidingWindowManager", "activation": nested_any_of(20)}]},
            }
        ),
        {},
        "any_of may nest at most 8 deep",
    ),
    (
        "POST",
        f"{BASE}/sur",
        b'{"description": "\\ud800", "hooks": {}}',
        {},
        "/description: a string holds a lone",
    ),
    ("POST", f"{BASE}/sur2", b'{"hooks": {"\\udfff": []}}', {}, "lone surrogate"),
    ("POST", f"{BASE}/nul", raw({**GOOD, "description": "a\x00b"}), {}, "/description: a string holds a NUL"),
    (
        "POST",
        f"{BASE}/default/_simulate",
        b'{"context": {"messages": [{"role": "user", "content": "\\ud83d"}]}}',
        {},
        "/context/messages/0/content",
    ),
    ("POST", f"{BASE}/default/_simulate", b'{"context": {"state": {"x": 1e400}}}', {}, "too large"),
    ("PUT", f"{BASE}/default", raw(GOOD), {"if-match": "2147483648"}, "from 1 to 2147483647"),
    ("PUT", f"{BASE}/default", raw(GOOD), {"if-match": ""}, "version number"),
    ("GET", f"{BASE}?q=a%00b", None, {}, "NUL"),
]


@pytest.fixture
def api(store):
    store.create("default", GOOD)
    app = create_app(store, config=ServerConfig(max_body_bytes=1 << 20))
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def test_hostile_input_is_a_clear_4xx_and_changes_nothing(api):
    """Deep nesting, deep any_of, lone surrogates, NUL, non-finite numbers and out-of-range
    versions each get a 400 that says what and where; the stored definition is untouched."""
    for method, path, content, headers, says in HOSTILE:
        r = api.request(method, path, content=content, headers={**JSON, **headers})
        assert r.status_code == 400, (path, r.text[:300])
        assert says in r.json()["error"]["reason"] + json.dumps(r.json()["error"].get("problems")), (
            says,
            r.text,
        )
    assert api.get(f"{BASE}/default").json()["version"] == 1
    assert api.get("/_health").status_code == 200
