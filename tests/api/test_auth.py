import hashlib

import httpx
import pytest

from ctxmgmt.api import ServerConfig, create_app
from tests.conftest import LiveServer, shipped

BASE = "/_plugins/_ml/context_management"


@pytest.fixture
def api(store, monkeypatch):
    monkeypatch.setenv("WRITE_KEY", "w-secret")
    config = ServerConfig.from_dict(
        {
            "api_keys": [
                {"name": "writer", "scope": "write", "key_env": "WRITE_KEY"},
                {"name": "reader", "scope": "read", "key_sha256": hashlib.sha256(b"r-secret").hexdigest()},
            ]
        }
    )
    with LiveServer(create_app(store, config=config)) as server, httpx.Client(base_url=server.url) as client:
        yield client


def test_no_key_is_401(api):
    """Without a valid key every API request is a 401; health stays open."""
    assert api.get(BASE).status_code == 401
    assert api.get(BASE, headers={"authorization": "Bearer wrong"}).status_code == 401
    assert api.get("/_health").status_code == 200


def test_read_key_reads_but_cannot_write(api):
    """A read key may list and get, and gets 403 on writes."""
    assert api.get(BASE, headers={"x-api-key": "r-secret"}).status_code == 200
    r = api.post(f"{BASE}/x", json=shipped("default"), headers={"authorization": "Bearer r-secret"})
    assert r.status_code == 403 and "reader" in r.json()["error"]["reason"]


def test_write_key_writes_and_is_recorded(api):
    """A write key creates, and created_by names the key (not the secret)."""
    r = api.post(f"{BASE}/x", json=shipped("default"), headers={"authorization": "Bearer w-secret"})
    assert r.status_code == 200
    got = api.get(f"{BASE}/x", headers={"authorization": "Bearer w-secret"}).json()
    assert got["created_by"] == "writer"
    assert "w-secret" not in str(got)


def test_missing_key_variable_is_a_config_error(monkeypatch):
    """A key_env that is not set is refused at start-up."""
    from ctxmgmt import ConfigError

    monkeypatch.delenv("NOPE_KEY", raising=False)
    with pytest.raises(ConfigError, match="NOPE_KEY"):
        ServerConfig.from_dict({"api_keys": [{"name": "n", "scope": "read", "key_env": "NOPE_KEY"}]})


def test_offload_endpoints_follow_the_api_keys(store, monkeypatch, tmp_path):
    """Reading offloaded content needs a valid key when keys are configured."""
    from ctxmgmt.offload import LocalOffloader

    offloader = LocalOffloader(tmp_path)
    ref = offloader.store_tool_result("mem", "secret output")
    config = ServerConfig.from_dict(
        {"api_keys": [{"name": "r", "scope": "read", "key_sha256": hashlib.sha256(b"r-key").hexdigest()}]}
    )
    with (
        LiveServer(create_app(store, config=config, offloader=offloader)) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        url = f"/_plugins/_ml/offload/{ref}?session=mem"
        assert client.get(url).status_code == 401
        assert client.get("/_plugins/_ml/offload/_search?session=mem&pattern=secret").status_code == 401
        assert client.get(url, headers={"x-api-key": "r-key"}).json()["text"] == "secret output"
