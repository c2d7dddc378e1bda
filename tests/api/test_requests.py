"""Request bodies: large bodies parsed and checked off the event loop, a 413 naming the limit
that was exceeded."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from ctxmgmt.api import create_app, requests
from ctxmgmt.api.config import ServerConfig

from ..conftest import LiveServer


def test_a_large_body_is_parsed_and_checked_in_one_worker_thread(store, monkeypatch):
    """A body over 64 KiB is parsed and checked off the event loop, both in the same worker
    thread (a deep or large body never stalls other requests)."""
    seen: list[tuple[str, bool]] = []
    for name in ("_parse", "check_values"):
        original = getattr(requests, name)

        def spy(*args, _original=original, _name=name, **kwargs):
            try:
                asyncio.get_running_loop()
                on_loop = True
            except RuntimeError:
                on_loop = False
            import threading

            seen.append((threading.current_thread().name, on_loop))
            return _original(*args, **kwargs)

        monkeypatch.setattr(requests, name, spy)
    body = {"context": {"messages": [{"role": "user", "content": "x" * 100_000}]}, "hook": "pre_llm"}
    with LiveServer(create_app(store)) as server:
        httpx.post(f"{server.url}/_plugins/_ml/context_management/_simulate", json=body, timeout=30)
    assert len(seen) == 2 and seen[0] == seen[1] and not seen[0][1], seen


def test_a_413_names_the_limit_that_was_exceeded(store):
    """When server.max_body_bytes and server.proxy_max_body_bytes are equal, a 413 names the
    setting of the route that refused (the proxy's, or the server's)."""
    config = ServerConfig.from_dict({"max_body_bytes": 4096, "proxy_max_body_bytes": 4096})
    big = {"model": "m", "messages": [{"role": "user", "content": "x" * 8000}]}
    with LiveServer(create_app(store, config=config)) as server:
        proxied = httpx.post(f"{server.url}/proxy/default/v1/chat/completions", json=big, timeout=30)
        api = httpx.post(f"{server.url}/_plugins/_ml/context_management/_validate", json=big, timeout=30)
    assert proxied.status_code == api.status_code == 413
    assert "(server.proxy_max_body_bytes)" in proxied.json()["error"]["message"], proxied.text
    assert "(server.max_body_bytes)" in api.json()["error"]["reason"], api.text


def test_the_api_reads_a_gzip_body(store):
    """A REST request body sent with Content-Encoding gzip is read as the JSON it holds."""
    import gzip

    definition = {
        "name": "zipped",
        "hooks": {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 5}}]},
    }
    headers = {"content-type": "application/json", "content-encoding": "gzip"}
    data = gzip.compress(json.dumps({"text": json.dumps(definition)}).encode())
    with LiveServer(create_app(store)) as server:
        r = httpx.post(
            f"{server.url}/_plugins/_ml/context_management/_validate",
            content=data,
            headers=headers,
            timeout=30,
        )
    assert r.status_code == 200 and r.json()["valid"] is True, r.text


def test_a_budget_of_bodies_below_a_body_limit_is_refused_naming_it():
    """server.bodies_in_flight_bytes below a body limit would refuse a body within its limit
    for ever (a 429 each time): the configuration is refused, naming the setting."""
    from ctxmgmt.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        ServerConfig.from_dict(
            {"proxy_max_body_bytes": 4096, "bodies_in_flight_bytes": 2048, "max_body_bytes": 1024}
        )
    assert caught.value.problems[0].pointer == "/server/bodies_in_flight_bytes"
    assert "4096" in caught.value.problems[0].message
