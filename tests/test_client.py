import asyncio

import pytest

from ctxmgmt import ApiError, AsyncClient, Client
from ctxmgmt.testing import make_conversation
from tests.conftest import shipped


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
