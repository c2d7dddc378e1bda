"""One resolver: a definition is built from its document once per version, for the store,
a registry server's definition in the adapters and the runner's inline definitions."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ctxmgmt import Definition
from ctxmgmt.agents.conversation import Source
from ctxmgmt.agents.runner import Runner
from ctxmgmt.definitions import Resolver

WINDOW = {"hooks": {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 5}}]}}


@pytest.fixture
def builds(monkeypatch) -> list[str]:
    """The names of the definitions built from a document, in order."""
    built: list[str] = []
    original = Definition.from_dict.__func__  # type: ignore[attr-defined]

    def counting(cls, document, **kwargs):  # type: ignore[no-untyped-def]
        built.append(document.get("name", "?"))
        return original(cls, document, **kwargs)

    monkeypatch.setattr(Definition, "from_dict", classmethod(counting))
    return built


def test_the_store_builds_a_definition_once_per_version(store, builds):
    """Resolving a stored name again builds nothing while its version stands; an update is
    built once, on the next resolve; a deleted name is forgotten."""
    store.create("w", WINDOW)
    builds.clear()  # the write validated it by building it
    first, v1 = store.resolve_version("w")
    assert store.resolve_version("w") == (first, v1) and builds == ["w"]
    store.replace(
        "w", {"hooks": {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 7}}]}}
    )
    builds.clear()
    second, v2 = store.resolve_version("w")
    assert v2 == v1 + 1 and second is not first and store.resolve_version("w")[0] is second
    assert builds == ["w"]
    store.delete("w")
    store.create("w", WINDOW)
    builds.clear()
    third, v3 = store.resolve_version("w")
    assert third is not second and v3 > v2 and builds == ["w"]  # a new name never reuses a version


def test_a_registry_definition_in_an_adapter_is_built_once_per_version(builds):
    """An adapter's registry definition is fetched at every use and built only when the
    version the server reports changes (each time when it reports none)."""
    served: dict[str, Any] = {"name": "w", "version": 1, **WINDOW}

    class Registry:
        def get(self, name: str) -> dict[str, Any]:
            return dict(served)

    source = Source((Registry(), "w"))
    first = source.get()
    assert source.get() is first and builds == ["w"]
    served["version"] = 2
    assert source.get() is not first and len(builds) == 2
    del served["version"]
    source.get(), source.get()
    assert len(builds) == 4


def test_the_runner_builds_an_inline_definition_once_per_text(
    store, agent_models, tools, chat_server, builds
):
    """An agent's inline definition is built once while its text stands, by the store's
    resolver, whichever execution runs it; another text is another definition."""
    runner = Runner(store, agent_models, tools)
    store.create("w", WINDOW)
    store.resolver.kept = 1  # one stored definition kept: an inline one must not push it out
    stored, _ = store.resolve_version("w")
    body = {"name": "a", "type": "conversational", "llm": {"model_id": "chat"}, "context_management": WINDOW}
    agent_id = runner.register(body)
    for _ in range(3):
        chat_server.reply("done")
        runner.execute(agent_id, "go")
    assert builds.count("inline") == 1
    assert store.resolve_version("w")[0] is stored
    seven = {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 7}}]}
    other = runner.register({**body, "context_management": {"hooks": seven}})
    chat_server.reply("done")
    runner.execute(other, "go")
    assert builds.count("inline") == 2


def test_a_resolver_keeps_what_a_newer_load_returned_and_its_bounds():
    """A load that returns a newer version than the one asked for is kept at the version it
    is; at most `kept` definitions and `max_bytes` of keys stay, the least recently used
    going first; concurrent resolves of one version return one of the definitions built."""
    resolver = Resolver(kept=2, max_bytes=10)
    doc = {"name": "n", **WINDOW}
    built, version = resolver.resolve("a", 1, lambda: (doc, 2))
    assert version == 2 and resolver.resolve("a", 2, lambda: pytest.fail("built again"))[0] is built
    resolver.resolve("b", 1, lambda: (doc, 1))
    resolver.resolve("a", 2, lambda: pytest.fail("built again"))  # a is the most recent now
    resolver.resolve("c", 1, lambda: (doc, 1))  # b goes
    assert resolver.resolve("a", 2, lambda: pytest.fail("built again"))[0] is built
    rebuilt: list[int] = []
    resolver.resolve("b", 1, lambda: (rebuilt.append(1) or doc, 1))  # type: ignore[func-returns-value]
    assert rebuilt == [1]
    resolver.resolve("x" * 9, 1, lambda: (doc, 1))  # 9 bytes of key: only it fits with one of 1
    assert resolver._bytes <= 10 and len(resolver._built) <= 2
    results: list[Definition] = []
    threads = [
        threading.Thread(target=lambda: results.append(resolver.resolve("t", 1, lambda: (doc, 1))[0]))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert resolver.resolve("t", 1, lambda: pytest.fail("built again"))[0] in results


def test_a_definition_forgotten_while_it_was_built_is_not_kept():
    """A delete (forget) that lands while a definition is being built: the build is returned
    to its caller but not kept, so the deleted definition is never served from the cache."""
    resolver = Resolver()
    doc = {"name": "n", **WINDOW}

    def load() -> tuple[dict[str, Any], int]:
        resolver.forget("k")  # the delete, from another thread, meanwhile
        return doc, 1

    built, _ = resolver.resolve("k", 1, load)
    assert resolver.resolve("k", 1, lambda: (doc, 1))[0] is not built
