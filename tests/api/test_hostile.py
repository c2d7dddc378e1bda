"""Hostile bodies and headers get a 4xx naming the field, on SQLite and PostgreSQL, never a 500."""

import json
import socket
import time

import httpx
import pytest

from ctxmgmt.api import ServerConfig, create_app
from tests.api.test_bad_input import read_response
from tests.conftest import LiveServer, postgres_url, shipped

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


def simulate(*messages):
    return raw(
        {"definition": {"hooks": {"pre_llm": [{"type": "SlidingWindowManager"}]}}, "context": list(messages)}
    )


# Wrong types where the code compares or measures: each must be a 400 at its pointer.
HOSTILE += [
    ("POST", f"{BASE}/_simulate", simulate({"role": ["user"], "content": "x"}), {}, "/messages/0/role"),
    ("POST", f"{BASE}/_simulate", simulate({"role": {"a": 1}, "content": "x"}), {}, "/messages/0/role"),
    (
        "POST",
        f"{BASE}/_simulate",
        simulate({"role": "user", "content": [{"type": ["text"]}]}),
        {},
        "string type",
    ),
    ("POST", f"{BASE}/_simulate", simulate({"role": "user", "content": [{"type": {}}]}), {}, "string type"),
    (
        "POST",
        f"{BASE}/_simulate",
        simulate({"role": "user", "content": [{"type": "text", "text": 5}]}),
        {},
        "/messages/0/content/0/text",
    ),
    (
        "POST",
        f"{BASE}/_simulate",
        simulate({"role": "assistant", "content": "y", "tool_calls": 5}),
        {},
        "tool_calls",
    ),
    (
        "POST",
        f"{BASE}/_simulate",
        simulate({"role": "assistant", "content": "y", "tool_calls": True}),
        {},
        "tool_calls",
    ),
    ("POST", f"{BASE}/_simulate", simulate({"type": ["message"], "content": "x"}), {}, "/messages/0/role"),
    ("GET", f"{BASE}?size=%D9%A3", None, {}, "size must be a whole number"),  # an Arabic-Indic 3
    ("POST", f"{BASE}/cs", raw(GOOD), {"content-type": "application/json; charset=latin1"}, "UTF-8"),
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


@pytest.fixture
def small_disk():
    """A real 2 MiB file system (tmpfs) where the tests run as root, as CI does. It is
    mounted outside pytest's private tmp folder, so that the PostgreSQL server (another
    user) can reach it."""
    import os
    import subprocess
    import tempfile
    from pathlib import Path

    mount = Path(tempfile.mkdtemp(prefix="ctxmgmt-disk-"))
    mount.chmod(0o755)
    if (
        os.geteuid() != 0
        or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)]).returncode
    ):
        mount.rmdir()
        pytest.skip("needs root to mount a small tmpfs")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)
    mount.rmdir()


def fill(folder):
    """Fill a file system to the last byte; returns the filler file."""
    filler = folder / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_is_a_clear_507_and_recovers_by_itself(small_disk):
    """With the SQLite file on a full disk, writes answer 507 storage_full (no reset, no 500),
    reads still work, and once space is freed writes succeed again; nothing acknowledged is lost."""
    from ctxmgmt.store import DefinitionStore

    store = DefinitionStore.open(f"sqlite:///{small_disk}/registry.db")
    store.create("default", GOOD)
    app = create_app(store, config=ServerConfig(max_body_bytes=1 << 20))
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=30) as api:
        filler = fill(small_disk)
        big = {**GOOD, "description": "d" * 3_000}
        answers = [api.post(f"{BASE}/full{i}", json=big) for i in range(5)]
        assert {r.status_code for r in answers} == {507}, [r.text[:200] for r in answers]
        assert answers[0].json()["error"]["type"] == "storage_full"
        assert api.get(f"{BASE}/default").status_code == 200
        filler.unlink()
        assert api.post(f"{BASE}/after", json=big).status_code == 200
        assert api.get(f"{BASE}/after").json()["description"] == big["description"]
    store.engine.dispose()


@pytest.mark.postgres
def test_a_full_postgresql_disk_is_a_clear_507_and_recovers_by_itself(small_disk):
    """With PostgreSQL's tables on a full file system (a tablespace on the small tmpfs),
    writes answer 507 storage_full with no reset and no 500, reads still work, and once
    space is freed writes succeed again; nothing acknowledged is lost."""
    import os
    import shutil

    from sqlalchemy import create_engine

    from ctxmgmt.store import DefinitionStore

    url = postgres_url()
    # A tablespace belongs to the whole server: one per test process (the worker's database).
    tablespace = f"ctxmgmt_full_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
    space = small_disk / "pg"
    space.mkdir()
    shutil.chown(space, "postgres")
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql("DROP SCHEMA public CASCADE")
        conn.exec_driver_sql("CREATE SCHEMA public")
        conn.exec_driver_sql(f"DROP TABLESPACE IF EXISTS {tablespace}")
        conn.exec_driver_sql(f"CREATE TABLESPACE {tablespace} LOCATION '{space}'")
    sep = "&" if "?" in url else "?"
    store = DefinitionStore.open(f"{url}{sep}options=-c%20default_tablespace%3D{tablespace}")
    try:
        store.create("default", GOOD)
        app = create_app(store, config=ServerConfig(max_body_bytes=1 << 20))
        with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=30) as api:
            filler = fill(small_disk)
            big = {**GOOD, "description": "d" * 3_000}
            answers = [api.post(f"{BASE}/full{i}", json=big) for i in range(40)]
            refused = [r for r in answers if r.status_code != 200]
            assert refused and {r.status_code for r in refused} == {507}, [r.text[:200] for r in refused]
            assert refused[0].json()["error"]["type"] == "storage_full"
            kept = [i for i, r in enumerate(answers) if r.status_code == 200]
            assert api.get(f"{BASE}/default").status_code == 200
            filler.unlink()
            assert api.post(f"{BASE}/after", json=big).status_code == 200
            assert api.get(f"{BASE}/after").json()["description"] == big["description"]
            for i in kept:  # every acknowledged write is there
                assert api.get(f"{BASE}/full{i}").status_code == 200
    finally:
        store.engine.dispose()
        with admin.connect() as conn:
            conn.exec_driver_sql("DROP SCHEMA public CASCADE")
            conn.exec_driver_sql("CREATE SCHEMA public")
            conn.exec_driver_sql(f"DROP TABLESPACE IF EXISTS {tablespace}")
        admin.dispose()


def test_a_body_left_unread_never_holds_the_connection(impatient):
    """A request answered before its body was read (here /_health with a huge declared body)
    gets its answer, then the connection is closed: trickling the rest holds nothing open."""
    with socket.create_connection(("127.0.0.1", impatient.port), timeout=10) as sock:
        sock.sendall(b"GET /_health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000000\r\n\r\n")
        assert read_response(sock).startswith("HTTP/1.1 200")
        started = time.monotonic()
        try:
            while time.monotonic() - started < 5:
                sock.sendall(b"x")
                time.sleep(0.2)
                if sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                    break
        except (BlockingIOError, OSError):
            pass
        assert time.monotonic() - started < 5, "the connection stayed open"


def test_a_request_that_is_not_http_gets_the_json_error(api):
    """Malformed HTTP (a bad Content-Length, a missing Host) is a 400 with the JSON error
    every other answer has, not uvicorn's text."""
    url = api.base_url
    for request in (
        b"GET /_health HTTP/1.1\r\nConnection: close\r\n\r\n",
        b"POST /_health HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello",
    ):
        with socket.create_connection((url.host, url.port), timeout=10) as sock:
            sock.sendall(request)
            answer = read_response(sock)
        head, _, body = answer.partition("\r\n\r\n")
        assert head.startswith("HTTP/1.1 400") and "application/json" in head, answer
        assert json.loads(body)["error"]["type"] == "bad_request"


@pytest.mark.parametrize(
    ("head", "status", "said"),
    [
        (b"GET /_health HTTP/1.1\r\nConnection: close\r\n\r\n", 400, "Missing mandatory Host: header"),
        (b"POST /x HTTP/1.1\r\nHOST\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "Transfer-Encoding: chunked"),
        (b"GET /_health HTTP/2.0\r\nHOST\r\n\r\n", 505, "HTTP/2.0 is not served here; send HTTP/1.1"),
        (b"GET /_health HTTP/1.1\r\nHOST\r\n" + b"x" * 5000 + b" y: z\r\n\r\n", 400, "illegal header line"),
        # headers that never end, past what h11 holds of an unfinished request (16 KiB)
        (b"GET /_health HTTP/1.1\r\nHOST\r\nx-long: " + b"a" * 100_000, 431, "too long"),
    ],
)
def test_a_request_that_is_not_http_is_told_what_is_wrong(api, head, status, said):
    """A request HTTP/1.1 does not allow gets h11's reason for refusing it (uvicorn's answer
    was one generic "Invalid HTTP request received."), with the status it calls for (an
    unsupported transfer coding a 501, another version of HTTP a 505), bounded in length
    (a reason may quote the request), and its connection closed."""
    url = api.base_url
    with socket.create_connection((url.host, url.port), timeout=10) as sock:
        sock.sendall(head.replace(b"HOST", f"Host: {url.host}:{url.port}".encode()))
        answer = read_response(sock)
        assert sock.recv(65536) == b"", "the connection stayed open"
    top, _, body = answer.partition("\r\n\r\n")
    assert top.startswith(f"HTTP/1.1 {status} ") and "connection: close" in top.lower(), answer
    reason = json.loads(body)["error"]["reason"]
    assert said in reason and len(reason) < 300, reason


def test_a_body_framed_both_by_length_and_by_chunks_is_a_400_at_once(api):
    """A request with Content-Length and Transfer-Encoding both (a proxy in front could read
    its body by the other one: request smuggling) is a 400 naming them, at once, and its
    connection is closed: what follows is never read as a request."""
    url = api.base_url
    smuggled = b"GET /_health HTTP/1.1\r\nHost: x\r\n\r\n"
    for method in (b"POST /_plugins/_ml/context_management/_search", b"GET /_health"):
        request = (
            method + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled
        )
        with socket.create_connection((url.host, url.port), timeout=10) as sock:
            started = time.monotonic()
            sock.sendall(request)
            answer = read_response(sock)
            assert time.monotonic() - started < 5
            head, _, body = answer.partition("\r\n\r\n")
            assert head.startswith("HTTP/1.1 400") and "connection: close" in head.lower(), answer
            reason = json.loads(body)["error"]["reason"]
            assert "Content-Length and Transfer-Encoding" in reason, reason
            assert sock.recv(65536) == b"", "the connection stayed open"


def test_a_target_in_absolute_form_is_served_as_its_path_with_its_authority_for_host(api):
    """A request target in absolute form (a client told the server is its proxy) is served
    as its path and query, its authority taken for the Host, as RFC 9112 says a server must
    (uvicorn routed the whole URL as a path: a 404): the host check then reads the authority."""
    url = api.base_url
    own = f"{url.host}:{url.port}"
    with socket.create_connection((url.host, url.port), timeout=10) as sock:
        for target, host in ((f"http://{own}/_health", "elsewhere.example"), (f"HTTP://{own}?x=1", own)):
            sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            head, _, body = read_response(sock).partition("\r\n\r\n")
            status = "200" if "_health" in target else "302"  # "/" sends a browser to the page
            assert head.startswith(f"HTTP/1.1 {status} "), head
        sock.sendall(f"GET http://evil.example/_health HTTP/1.1\r\nHost: {own}\r\n\r\n".encode())
        head, _, body = read_response(sock).partition("\r\n\r\n")
        assert head.startswith("HTTP/1.1 403 "), head
        assert "evil.example" in body, body


def test_a_malformed_body_after_its_answer_closes_the_connection_with_no_second_answer(api):
    """A request answered before its chunked body was read (a 404), whose body then turns out
    malformed: the connection is closed, with no second answer after the first (a client
    would take it for its next request's)."""
    url = api.base_url
    with socket.create_connection((url.host, url.port), timeout=10) as sock:
        host = f"Host: {url.host}:{url.port}\r\n".encode()
        sock.sendall(b"POST /nope HTTP/1.1\r\n" + host + b"Transfer-Encoding: chunked\r\n\r\n")
        first = read_response(sock)
        assert first.startswith("HTTP/1.1 404"), first
        sock.sendall(b"zz\r\nGET /_health HTTP/1.1\r\n" + host + b"\r\n")
        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
        assert rest == b"", rest


@pytest.mark.parametrize("expect", ["100-continue", "100-Continue, x-foo"])
def test_a_body_too_large_by_its_length_is_refused_before_the_client_is_asked_to_send_it(api, expect):
    """A client that waits for a 100 Continue before sending a body whose declared length
    is over the limit gets the 413 at once, never the 100 (which would invite a body only to
    refuse it, or hold the connection until the body deadline)."""
    url = api.base_url
    request = (
        f"POST {BASE}/_validate HTTP/1.1\r\nHost: {url.host}:{url.port}\r\nContent-Type: application/json\r\n"
        f"Expect: {expect}\r\nContent-Length: 2000000\r\n\r\n"
    )
    with socket.create_connection((url.host, url.port), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(request.encode())
        answer = read_response(sock)
        assert time.monotonic() - started < 5
    head, _, body = answer.partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 413") and "connection: close" in head.lower(), answer
    assert "100 Continue" not in answer and "max_body_bytes" in json.loads(body)["error"]["reason"]


def test_a_trailing_slash_is_a_404_never_a_redirect(api):
    """…/default/ is a JSON 404, not a 307 whose Location comes from the Host header."""
    for method in ("GET", "DELETE"):
        r = api.request(method, f"{BASE}/default/", headers={"host": f"localhost:{api.base_url.port}"})
        assert r.status_code == 404 and "location" not in r.headers
    assert api.get(f"{BASE}/default").status_code == 200


def test_an_http_tool_with_malformed_parameters_is_a_400(store):
    """Registering an agent whose http tool has parameters of the wrong type is a 400 at
    /tools/0, never a 500."""
    from ctxmgmt import ModelConfig, ModelsConfig

    models = ModelsConfig({"m": ModelConfig(id="m", base_url="http://127.0.0.1:9/v1", model="m")})
    with LiveServer(create_app(store, models=models)) as server, httpx.Client(base_url=server.url) as http:
        for params in ([1], "x", {"url": "http://a", "headers": [1]}, {"url": "http://a", "timeout": "1"}):
            body = {"name": "a", "llm": {"model_id": "m"}, "tools": [{"type": "http", "parameters": params}]}
            r = http.post("/_plugins/_ml/agents/_register", json=body)
            pointers = [p["pointer"] for p in r.json()["error"]["problems"]]
            assert r.status_code == 400 and all(p.startswith("/tools/0") for p in pointers), r.text


def test_a_verb_path_is_never_taken_for_a_name(api):
    """PUT or DELETE on …/_simulate, or GET on …/agents/_register, is a 405 naming the verb's
    own methods, not a definition or an agent called _simulate or _register."""
    for method, path, allowed in (
        ("PUT", f"{BASE}/_simulate", "POST"),
        ("DELETE", f"{BASE}/_simulate", "POST"),
        ("GET", "/_plugins/_ml/agents/_register", "POST"),
    ):
        r = api.request(method, path, json={})
        assert r.status_code == 405, (method, path, r.text)
        assert set(r.headers["allow"].split(", ")) == {allowed, "OPTIONS"}
        assert api.options(path).headers["allow"] == r.headers["allow"]


def test_a_name_in_the_body_is_checked_and_the_path_names_it(api):
    """A body's name must be a valid name; the path's name is the one stored, so that a
    file's name never renames a copy."""
    bad = api.post(f"{BASE}/copy1", json={**GOOD, "name": []})
    assert bad.status_code == 400 and bad.json()["error"]["problems"][0]["pointer"] == "/name"
    assert api.post(f"{BASE}/copy1", json={**GOOD, "name": "default"}).status_code == 200
    assert api.get(f"{BASE}/copy1").json()["name"] == "copy1"


def test_if_match_and_if_version_must_agree(api):
    """Both given and different is a 400; an if_version out of range is a 400 even beside a
    valid If-Match; a quoted or weak ETag is read as its number."""
    put = f"{BASE}/default"
    assert api.put(put, json=GOOD, headers={"if-match": "1"}, params={"if_version": 2}).status_code == 400
    r = api.put(put, json=GOOD, headers={"if-match": '"1"'}, params={"if_version": 2147483648})
    assert r.status_code == 400 and "2147483647" in r.text
    assert api.put(put, json=GOOD, headers={"if-match": "01"}).status_code == 400
    assert api.put(put, json=GOOD, headers={"if-match": 'W/"1"'}, params={"if_version": 1}).status_code == 200


def test_allow_names_every_method_of_a_path(api):
    """OPTIONS and a 405 on a definition name every method it takes."""
    options = api.options(f"{BASE}/default")
    assert options.status_code == 204
    assert set(options.headers["allow"].split(", ")) == {"DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT"}
    patch = api.patch(f"{BASE}/default", json={})
    assert patch.status_code == 405 and {"GET", "PUT", "DELETE"} <= set(patch.headers["allow"].split(", "))


@pytest.fixture
def impatient(store):
    """A live server with short header and body deadlines."""
    config = ServerConfig(header_timeout_seconds=0.5, body_timeout_seconds=0.5, keep_alive_seconds=5)
    with LiveServer(create_app(store, config=config)) as server:
        yield server


def test_a_body_that_trickles_in_is_cut_off_with_a_408(impatient):
    """A client that sends part of its body and stalls gets a 408, not a connection held open."""
    with socket.create_connection(("127.0.0.1", impatient.port), timeout=10) as sock:
        sock.sendall(
            f"POST {BASE}/slow HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n".encode()
        )
        sock.sendall(b'Content-Length: 100\r\n\r\n{"hooks": ')
        answer = read_response(sock)
    assert answer.startswith("HTTP/1.1 408") and "server.body_timeout_seconds" in answer


def test_the_connection_of_a_body_cut_off_with_a_408_is_closed_at_once(store):
    """After the 408 for a body that stalled, the connection is closed with it: the rest of the
    body, and a request sent after it, are never read as a request (it stayed open until the
    header deadline, and answered what came next)."""
    config = ServerConfig(header_timeout_seconds=30, body_timeout_seconds=0.5, keep_alive_seconds=30)
    with (
        LiveServer(create_app(store, config=config)) as server,
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock,
    ):
        sock.sendall(
            f"POST {BASE}/slow HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n".encode()
        )
        sock.sendall(b'Content-Length: 20\r\n\r\n{"hooks": ')
        answer = read_response(sock)
        assert answer.startswith("HTTP/1.1 408") and "connection: close" in answer.lower()
        sock.settimeout(3)
        try:
            sock.sendall(b"0123456789GET /_health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            rest = sock.recv(4096)
        except OSError:  # reset: closed
            rest = b""
    assert rest == b"", rest[:200]


def test_headers_that_trickle_in_are_cut_off_with_a_408(impatient):
    """A client that sends its headers a byte at a time, for longer than the header deadline,
    gets a 408 naming the setting, then the connection is closed."""
    with socket.create_connection(("127.0.0.1", impatient.port), timeout=10) as sock:
        started = time.monotonic()
        try:
            for byte in f"GET {BASE}/default HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ".encode() + b"a" * 100:
                sock.sendall(bytes([byte]))
                time.sleep(0.05)
        except OSError:  # closed by the server while sending
            pass
        answer = read_response(sock)
    assert answer.startswith("HTTP/1.1 408") and "server.header_timeout_seconds" in answer
    assert time.monotonic() - started < 5


def test_a_kept_alive_connection_gets_the_deadline_for_each_request(impatient):
    """After one answer on a kept-alive connection, the next request's headers have their own
    deadline: a slow second request is cut off too, and a quick one is answered."""
    with socket.create_connection(("127.0.0.1", impatient.port), timeout=10) as sock:
        sock.sendall(b"GET /_health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert read_response(sock).startswith("HTTP/1.1 200")
        time.sleep(0.3)
        sock.sendall(b"GET /_health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert read_response(sock).startswith("HTTP/1.1 200")
        sock.sendall(b"GET /_health HTTP/1.1\r\nHo")
        time.sleep(1.0)
        assert read_response(sock).startswith("HTTP/1.1 408")


def test_an_idle_connection_that_never_sends_is_closed(impatient):
    """A connection that sends nothing is closed at the header deadline, without an answer."""
    with socket.create_connection(("127.0.0.1", impatient.port), timeout=10) as sock:
        started = time.monotonic()
        assert sock.recv(100) == b""
    assert time.monotonic() - started < 5


def test_a_request_that_cannot_fit_is_a_400_naming_the_numbers(api):
    """Simulated with a window too small for its system prompt, the fit step answers 400 with
    the pointer and the numbers, not a 500 and not a context over its window."""
    context = {
        "system_prompt": "rules " * 3000,
        "messages": [{"role": "user", "content": "hi"}],
        "context_window": 2000,
    }
    r = api.post(f"{BASE}/default/_simulate", json={"context": context})
    assert r.status_code == 400
    [problem] = r.json()["error"]["problems"]
    assert problem["pointer"] == "/context_window" and "the window is 2,000" in problem["message"]
