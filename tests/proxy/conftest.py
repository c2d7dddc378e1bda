"""The proxy's fixtures: a recording upstream, and a real uvicorn server over a store that
holds the shipped definitions."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from ctxmgmt.api import create_app
from ctxmgmt.llm import ModelsConfig
from ctxmgmt.offload import LocalOffloader
from ctxmgmt.store import ExecutionStore

from ..conftest import LiveServer, shipped
from .upstream import Upstream


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with Upstream() as up:
        yield up


def post_text(url: str, text: str, definition: str = "default", timeout: float = 60) -> httpx.Response:
    """A chat request's body sent as the given JSON text (its bytes as a client wrote them)."""
    return httpx.post(
        f"{url}/proxy/{definition}/v1/chat/completions",
        content=text,
        headers={"content-type": "application/json"},
        timeout=timeout,
    )


def stored_record(store, agent: str = "proxy-default") -> dict:
    """The one execution record of ``agent`` (a stream's is stored once its last event went out)."""
    executions = ExecutionStore(store.engine)
    for _ in range(200):
        total, listed = executions.list(agent)
        if total:
            break
        time.sleep(0.05)
    assert total == 1, "the record was not stored"
    return executions.get(listed[0]["execution_id"])


def models_for(up: Upstream, window: int = 16_000, **settings: object) -> ModelsConfig:
    """The models ``gpt-test`` and ``claude-test`` on ``up``, each with ``settings`` (``timeout``, ...)."""
    return ModelsConfig.from_dict(
        {
            "models": {
                "gpt-test": {
                    "base_url": up.base_url,
                    "model": "gpt-upstream",
                    "context_window": window,
                    **settings,
                },
                "claude-test": {
                    "base_url": up.base_url,
                    "model": "claude-upstream",
                    "provider": "anthropic",
                    "context_window": window,
                    **settings,
                },
            }
        }
    )


@pytest.fixture
def store(store):
    """The store, with the shipped definitions as ``ctxmgmt serve`` seeds them."""
    for name in ("default", "cache-aware"):
        store.seed(name, shipped(name))
    return store


@pytest.fixture
def archiving(store, upstream, tmp_path) -> Iterator[LiveServer]:
    """The proxy with an offload store, and the archiving definition ``long-running-agent``."""
    store.seed("long-running-agent", shipped("long-running-agent"))
    app = create_app(store, models=models_for(upstream), offloader=LocalOffloader(tmp_path / "archive"))
    with LiveServer(app) as server:
        yield server


@pytest.fixture
def proxy(store, upstream) -> Iterator[LiveServer]:
    with LiveServer(create_app(store, models=models_for(upstream))) as server:
        yield server


@pytest.fixture(autouse=True)
def _sdk_clients_closed(monkeypatch):
    """The providers' SDK clients a test makes (LangChain's included) are closed when it ends:
    a kept-alive connection left to the garbage collector would warn in a later test."""
    made: list = []
    for module, name in ((openai, "OpenAI"), (anthropic, "Anthropic"), (anthropic, "Client")):
        original = getattr(module, name)

        class Tracked(original):  # type: ignore[misc, valid-type]
            def __init__(self, *args, **kwargs) -> None:
                super().__init__(*args, **kwargs)
                made.append(self)

        Tracked.__name__ = Tracked.__qualname__ = original.__name__
        monkeypatch.setattr(module, name, Tracked)
    yield
    for client in made:
        client.close()
    gc.collect()  # what is still unclosed warns here, in the test that left it
