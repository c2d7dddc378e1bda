"""Claude Code itself through the proxy: Anthropic's CLI, the closed agent the proxy is for,
pointed at ``/proxy/default`` with ``ANTHROPIC_BASE_URL`` and run headless (``claude -p``)
against the recording upstream.

Its native binary is the pinned npm package ``@anthropic-ai/claude-code-linux-x64``, fetched
from npm's registry the first time and checked against the registry's published sha512, then
cached (~/.cache/ctxmgmt/claude-code-VERSION). It is run, never shipped (its licence: "Use is
subject to the Legal Agreements" of Anthropic). Without network and cache the tests are
skipped, unless CTXMGMT_REQUIRE_CLAUDE_CODE is set (CI sets it).
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxmgmt.api import create_app
from ctxmgmt.formats import anthropic
from ctxmgmt.llm import ModelsConfig

from ..conftest import LiveServer
from .upstream import Reply, Upstream, input_tokens

VERSION = "2.1.332"
TARBALL = (
    f"https://registry.npmjs.org/@anthropic-ai/claude-code-linux-x64/-/claude-code-linux-x64-{VERSION}.tgz"
)
INTEGRITY = "sha512-f4JWhzwYutJIHScC7/dYOPX6s28tt7ZADhsOi8zwOHq5fFPEuUeChh2NMfinSg0GrUckYxaeebC4h0DqiKzLcw=="
"""The registry's ``dist.integrity`` of that tarball (``npm view ...@VERSION dist``)."""
REQUIRE_ENV = "CTXMGMT_REQUIRE_CLAUDE_CODE"
SECRET = "the password is TANGERINE-4711"


def _fetch(dest: Path) -> Path:
    """The binary in ``dest``, downloaded and checked the first time (one test process at a
    time: the others wait for it, then find it)."""
    binary = dest / "claude"
    if binary.exists():
        return binary
    dest.mkdir(parents=True, exist_ok=True)
    with (dest / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return binary
        for left in dest.glob("tmp*"):  # a download a killed run left
            shutil.rmtree(left, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=dest) as tmp:
            staged = _download(Path(tmp))
            staged.replace(binary)  # whole or not at all
    return binary


def _download(folder: Path) -> Path:
    """The tarball's ``package/claude`` in ``folder``, once its sha512 is the published one."""
    archive = folder / "package.tgz"
    digest = hashlib.sha512()
    deadline = time.monotonic() + 600
    with httpx.stream("GET", TARBALL, timeout=httpx.Timeout(60), follow_redirects=True) as r:
        r.raise_for_status()
        with archive.open("wb") as out:
            for chunk in r.iter_bytes(1 << 20):
                if time.monotonic() > deadline:
                    raise OSError(f"{TARBALL} took over 600 s")
                digest.update(chunk)
                out.write(chunk)
    if "sha512-" + base64.b64encode(digest.digest()).decode() != INTEGRITY:
        raise OSError(f"{TARBALL} does not match its published sha512")
    with tarfile.open(archive) as tar:
        source = tar.extractfile(tar.getmember("package/claude"))  # that one file, whatever else
        assert source is not None
        staged = folder / "claude"
        with staged.open("wb") as out:
            shutil.copyfileobj(source, out, 1 << 20)
    staged.chmod(0o755)
    return staged


@pytest.fixture(scope="session")
def claude() -> Path:
    """The pinned Claude Code binary (see the module docstring)."""
    try:
        if sys.platform != "linux" or platform.machine() != "x86_64":
            raise OSError(f"its pinned package is for linux x86_64, not {sys.platform} {platform.machine()}")
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        return _fetch(cache / "ctxmgmt" / f"claude-code-{VERSION}")
    except (OSError, httpx.HTTPError) as exc:
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"{REQUIRE_ENV} is set but Claude Code cannot be fetched: {exc}")
        pytest.skip(f"Claude Code cannot be fetched: {exc}")


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    for block in content or ():
        if block.get("type") == "text":
            out.append(block["text"])
        elif block.get("type") == "tool_result":
            out += _texts(block.get("content"))
    return out


class _Model:
    """The scripted model: a request with tools reads ``files`` one after the other with
    Claude Code's Read tool (the next after the one the newest result shows, each file
    opening with ``FILE-k``: what the proxy kept of older ones does not matter), then answers
    with what the last result said of the secret; Claude Code's side requests (no tools) get
    a short text."""

    def __init__(self, files: list[Path]) -> None:
        self.files = files

    def __bool__(self) -> bool:
        return True

    def popleft(self) -> Any:
        return self.reply

    def reply(self, body: dict[str, Any]) -> Reply:
        if not body.get("tools"):
            return Reply(text="ok")
        last = body["messages"][-1]
        results = (
            [b for b in last["content"] if b.get("type") == "tool_result"]
            if last["role"] == "user" and isinstance(last["content"], list)
            else []
        )
        said = "\n".join(_texts(results[-1].get("content"))) if results else ""
        shown = re.search(r"FILE-(\d+)", said)
        step = int(shown.group(1)) + 1 if shown else 0
        if step < len(self.files):
            return Reply(calls=[("Read", {"file_path": str(self.files[step])})])
        found = re.search(r"TANGERINE-\d+", said)
        return Reply(text=f"DONE {found.group(0) if found else 'nothing'}")


@pytest.fixture
def served(store) -> Iterator[tuple[Upstream, str]]:
    """The recording upstream and the proxy's base URL for Claude Code; the model keys are ids
    Claude Code does not know, so it sends its environment as a mid-conversation system
    message (as it does for new models)."""
    with Upstream() as upstream:
        spec = {"base_url": upstream.base_url, "provider": "anthropic", "model": "claude-upstream"}
        models = ModelsConfig.from_dict(
            {
                "models": {
                    "claude": {**spec, "context_window": 200_000},
                    "claude-small": {**spec, "context_window": 24_000},
                }
            }
        )
        with LiveServer(create_app(store, models=models)) as proxy:
            yield upstream, f"{proxy.url}/proxy/default"


def _run(claude: Path, base_url: str, model: str, work: Path, home: Path) -> dict[str, Any]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "TERM": "dumb",
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-ant-client-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        **{
            name: model
            for name in (
                "ANTHROPIC_MODEL",
                "ANTHROPIC_SMALL_FAST_MODEL",
                "ANTHROPIC_DEFAULT_SONNET_MODEL",
                "ANTHROPIC_DEFAULT_HAIKU_MODEL",
                "ANTHROPIC_DEFAULT_OPUS_MODEL",
            )
        },
    }
    command = [
        str(claude),
        "-p",
        "Read the files I name and tell me the password.",
        "--output-format",
        "json",
    ]
    done = subprocess.run(
        [*command, "--allowedTools", "Read"], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _requests(upstream: Upstream) -> list[dict[str, Any]]:
    return [s.body for s in upstream.seen if s.path.partition("?")[0] == "/v1/messages"]


def test_claude_code_runs_a_tool_loop_through_the_proxy(claude, served, store, tmp_path):
    """Claude Code's own requests (its system prompt as cached blocks, its environment as a
    mid-conversation system message, thinking, context_management, ``?beta=true``) go
    upstream valid, its Read tool's result comes back to the model, and its run ends with
    the model's answer. Its key goes upstream; nothing of it is kept."""
    upstream, base_url = served
    work = tmp_path / "work"
    work.mkdir()
    note = work / "note.txt"
    note.write_text(f"FILE-0\n{SECRET}\n")
    upstream.replies = _Model([note])  # type: ignore[assignment]
    result = _run(claude, base_url, "claude", work, tmp_path / "home")
    assert result["is_error"] is False and result["result"].strip() == "DONE TANGERINE-4711"
    sent = _requests(upstream)
    assert len(sent) >= 2 and all(anthropic.check(b["messages"], b.get("system")) == [] for b in sent)
    assert any(m["role"] == "system" for b in sent for m in b["messages"])  # its system turn, kept
    main = [b for b in sent if b.get("tools")]
    assert main and all("thinking" in b and "context_management" in b for b in main)  # its features, kept
    assert all(any("cache_control" in block for block in b["system"]) for b in main)  # its cache breakpoints
    seen = [s for s in upstream.seen if s.path.partition("?")[0] == "/v1/messages"]
    assert all(
        s.path.endswith("?beta=true") and s.headers.get("x-api-key") == "sk-ant-client-key" for s in seen
    )


def test_claude_code_over_its_window_is_managed_and_still_answers(claude, served, tmp_path):
    """A Claude Code run whose history outgrows a 24k window: every upstream request fits it,
    stays valid with its system turn, and the run still ends with the model's answer, read
    from the last file."""
    upstream, base_url = served
    work = tmp_path / "work"
    work.mkdir()
    files = []
    for i in range(6):
        path = work / f"log{i}.txt"
        lines = [f"FILE-{i}"]
        lines += [
            f"{i}:{k:04d} worker-{k % 7} processed batch {k * 13 % 997} in {k % 50} ms" for k in range(400)
        ]
        path.write_text("\n".join(lines) + (f"\n{SECRET}\n" if i == 5 else "\n"))
        files.append(path)
    upstream.replies = _Model(files)  # type: ignore[assignment]
    result = _run(claude, base_url, "claude-small", work, tmp_path / "home")
    assert result["result"].strip() == "DONE TANGERINE-4711"
    sent = [b for b in _requests(upstream) if b.get("tools")]
    assert len(sent) > len(files)  # a read of each, then the answer (and any retry of Claude Code's)
    for body in sent:
        assert anthropic.check(body["messages"], body.get("system")) == []
        assert any(m["role"] == "system" for m in body["messages"])
        assert input_tokens(body) <= 24_000
    assert "[ctxmgmt:summary]" in json.dumps(sent[-1]["messages"])  # the definition fired
