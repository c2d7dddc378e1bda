from __future__ import annotations

from collections.abc import Iterator

import pytest

from ctxmgmt import ModelConfig, ModelsConfig
from ctxmgmt.testing import ChatServer


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """A scripted OpenAI-compatible server on 127.0.0.1."""
    with ChatServer() as server:
        yield server


@pytest.fixture
def models(chat_server: ChatServer) -> ModelsConfig:
    """A models configuration whose 'summarizer' is the local chat server."""
    config = ModelConfig(
        id="summarizer", base_url=chat_server.base_url, model="fake", timeout=2.0, max_retries=1
    )
    return ModelsConfig({"summarizer": config})
