"""The ctxmgmt command against a real server: definitions create/get, and what serve loads."""

import contextlib
import subprocess
import sys
import time

import httpx
import pytest

from ctxmgmt import Client
from tests.conftest import ROOT, free_port, shipped


def ctxmgmt(url, *args):
    return subprocess.run(
        [sys.executable, "-m", "ctxmgmt.cli", *args, "--url", url],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_definitions_create_lists_every_problem_with_its_line(live, tmp_path):
    """create shows every problem the server found, each as file:line: pointer: message."""
    path = tmp_path / "bad.yaml"
    path.write_text(
        "name: bad\nhooks:\n  pre_llm:\n    - type: SlidingWindowManager\n      config:\n"
        "        max_messages: 0\n    - type: Nope\n    - type: SlidingWindowManager\n"
        "      config: {max_messages: -1}\n"
    )
    run = ctxmgmt(live.url, "definitions", "create", str(path))
    assert run.returncode == 2, run.stderr
    head, *problems = run.stderr.strip().splitlines()
    assert head.startswith("ctxmgmt: error: 400 ") and head.endswith(": 3 problems:")
    assert problems == [
        f"  {path}:6: /hooks/pre_llm/0/config/max_messages: must be >= 1 (got 0)",
        f"  {path}:7: /hooks/pre_llm/1/type: unknown manager type 'Nope'" + problems[1].split("'Nope'")[1],
        f"  {path}:9: /hooks/pre_llm/2/config/max_messages: must be >= 1 (got -1)",
    ]


def test_definitions_create_lists_every_parse_problem_of_the_file(live, tmp_path):
    """Problems the file has before it is sent (duplicate keys) are all listed with lines too."""
    path = tmp_path / "dup.yaml"
    path.write_text("name: d\nname: e\nhooks: {}\nhooks: {}\n")
    run = ctxmgmt(live.url, "definitions", "create", str(path))
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "ctxmgmt: error: invalid definition: 2 problems:",
        f"  {path}:2: /name: duplicate key (first given on line 1)",
        f"  {path}:4: /hooks: duplicate key (first given on line 3)",
    ]


def test_a_file_refused_for_its_name_shows_every_problem_with_its_line(live, tmp_path):
    """A file whose name the server refuses before reading its body is checked whole by the
    server: every problem is shown with its line, not the name's alone."""
    path = tmp_path / "bad.yaml"
    path.write_text(
        "name: Bad Name\nhooks:\n  pre_llm:\n    - type: NoSuchManager\n"
        "    - type: SlidingWindowManager\n      config:\n        max_messages: -3\n"
    )
    run = ctxmgmt(live.url, "definitions", "create", str(path))
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert lines[0] == "ctxmgmt: error: invalid definition: 3 problems:", run.stderr
    assert [line.split(": ")[0].strip() for line in lines[1:]] == [f"{path}:1", f"{path}:4", f"{path}:7"]


def test_creating_a_name_that_exists_says_the_command_that_replaces_it(live, tmp_path):
    """create of a stored name is exit 2 naming the CLI command to use, not an HTTP verb."""
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nhooks:\n  pre_llm:\n    - type: SlidingWindowManager\n")
    assert ctxmgmt(live.url, "definitions", "create", str(path)).returncode == 0
    run = ctxmgmt(live.url, "definitions", "create", str(path))
    assert run.returncode == 2 and "PUT" not in run.stderr
    assert run.stderr.strip().endswith(f"exists already; to replace it: ctxmgmt definitions update {path}")
    for _ in range(2):
        run = ctxmgmt(live.url, "definitions", "create", str(path), "--name", "copy")
    assert run.stderr.strip().endswith(f"to replace it: ctxmgmt definitions update {path} --name copy")


def test_a_mistyped_definition_name_gets_did_you_mean(live):
    """get, delete and update of a name the server lacks suggest the closest stored name."""
    with Client(live.url) as client:
        client.create("long-conversation", shipped("long-conversation"))
    for args in (("get", "long-convrsation"), ("delete", "long-conversaton")):
        run = ctxmgmt(live.url, "definitions", *args)
        assert run.returncode == 2
        assert run.stderr.strip().endswith("; did you mean 'long-conversation'?"), run.stderr
        assert run.stderr.count("did you mean") == 1, run.stderr  # the server's and the CLI's: once
    run = ctxmgmt(live.url, "definitions", "update", "default", "--name", "long-conversatio")
    assert run.returncode == 2 and run.stderr.count("did you mean 'long-conversation'?") == 1


@pytest.mark.parametrize(
    ("hook", "says"), [("pre_lm", "did you mean 'pre_llm'?"), ("posttool", "'post_tool'")]
)
def test_a_mistyped_hook_gets_did_you_mean(hook, says):
    """apply --hook with a near miss exits 2 with one line suggesting the hook."""
    run = subprocess.run(
        [sys.executable, "-m", "ctxmgmt.cli", "apply", "default", "--hook", hook, "--input", "-"],
        input="[]",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert run.returncode == 2 and says in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


@contextlib.contextmanager
def serving(folder, db_url):
    """A real `ctxmgmt serve` on a free port: yields (url, output), the output filled in when it stops."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "ctxmgmt.cli", "serve", "--port", str(port), "--db", db_url]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=folder)
    output: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/_health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url, output
    finally:
        proc.terminate()
        output.append(proc.communicate(timeout=30)[0])


def test_a_deleted_shipped_definition_stays_deleted_until_created_again(tmp_path):
    """serve does not bring back a shipped definition the user deleted; it says how to restore
    it, and `definitions create NAME` (the shipped name) does."""
    db = f"sqlite:///{tmp_path}/s.db"
    with serving(tmp_path, db) as (url, output):
        assert ctxmgmt(url, "definitions", "delete", "default").returncode == 0
    assert "definition(s) in" in output[0] and "not loaded" not in output[0]
    with serving(tmp_path, db) as (url, output):
        missing = ctxmgmt(url, "definitions", "get", "default")
        restored = ctxmgmt(url, "definitions", "create", "default")
        got = ctxmgmt(url, "definitions", "get", "default")
    assert ", 0 new (" in output[0]
    assert (
        "not loaded, as they were deleted: default; to restore one, `ctxmgmt definitions create " in output[0]
    )
    assert missing.returncode == 2 and "404" in missing.stderr
    assert restored.returncode == 0, restored.stderr
    assert got.returncode == 0 and '"version": 2' in got.stdout  # it continues after the deleted one


def test_seed_remembers_deletions(store):
    """seed creates a missing definition once, leaves a stored one, and never re-creates a deleted one."""
    document = shipped("default")
    assert store.seed("default", document) == "created"
    assert store.seed("default", document) == "exists"
    store.delete("default")
    assert store.seed("default", document) == "deleted" and not store.exists("default")
    store.create("default", document)
    assert store.seed("default", document) == "exists"
