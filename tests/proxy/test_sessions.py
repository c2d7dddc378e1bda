"""A conversation continues across requests: its managed state is kept in the store, shared by
every `ctxmgmt serve` process on it."""

from __future__ import annotations

import itertools
import json
import os
import re

import httpx
import pytest
import yaml

from ctxmgmt.agents.conversation import Conversation
from ctxmgmt.api import create_app
from ctxmgmt.definitions import load_definition

from ..conftest import PG_ENV, LiveServer, serve, shipped
from .conftest import models_for, post_text
from .test_proxy import SYSTEM, TASK, _tool_output
from .upstream import Reply, Upstream, input_tokens


def _loop(post, upstream: Upstream, steps: int, **headers: str) -> list[dict]:
    """Drive a tool loop through ``post`` (one callable per request); the requests upstream saw."""
    messages: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    first = len(upstream.seen)
    for step in range(steps):
        upstream.replies.append(Reply(calls=[("bash", {"cmd": f"cat /var/data/in/{step}.log"})]))
        r = post(step, {"model": "gpt-test", "messages": messages}, headers)
        assert r.status_code == 200, r.text
        assert r.content, (r.status_code, dict(r.headers))
        message = r.json()["choices"][0]["message"]
        messages.append({k: v for k, v in message.items() if v is not None})
        call = message["tool_calls"][0]
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": _tool_output(step, 60)})
    return [s.body for s in upstream.seen[first:]]


def _unref(bodies: list[dict]) -> str:
    text = json.dumps(bodies)
    return re.sub(r"#k=[0-9a-f]{16}", "#k=TAG", re.sub(r"\b([tm])-[0-9a-f]{32}", r"\1-REF", text))


def test_the_proxy_sends_what_the_conversation_engine_makes(store):
    """Request by request, the proxy sends upstream what one conversation engine, carried from
    call to call, makes of the growing history: the state continues across requests."""
    with Upstream() as upstream, LiveServer(create_app(store, models=models_for(upstream, 6000))) as proxy:
        url = f"{proxy.url}/proxy/default/v1/chat/completions"
        sent = _loop(lambda _, body, h: httpx.post(url, json=body, headers=h, timeout=30), upstream, 30)
        reported = [input_tokens(s.body) for s in upstream.seen]  # the usage the upstream reported
    engine = Conversation(load_definition("default"))
    for body in sent:
        assert body["messages"][0] == {"role": "system", "content": SYSTEM}
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    summaries = 0
    for step, body in enumerate(sent):
        turn = engine.prepare(messages, model="gpt-upstream", context_window=6000, tools=[])
        assert turn.messages == body["messages"], step
        engine.observe(reported[step])  # calibrated as the proxy was, on the upstream's report
        summaries += any(str(m.get("content")).startswith("[ctxmgmt:summary]") for m in turn.messages)
        call = {
            "id": f"call_{step + 1}_0",
            "type": "function",
            "function": {"name": "bash", "arguments": f'{{"cmd": "cat /var/data/in/{step}.log"}}'},
        }
        messages += [
            {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": _tool_output(step, 60)},
        ]
    assert summaries >= 10  # the window filled: most requests went on from a summary


def test_a_session_header_keeps_conversations_apart(store):
    """Two conversations with the same start, told apart by X-Ctxmgmt-Session, keep their own state."""
    from sqlalchemy import func, select

    from ctxmgmt.store.models import proxy_sessions

    with Upstream() as upstream, LiveServer(create_app(store, models=models_for(upstream))) as proxy:
        url = f"{proxy.url}/proxy/default/v1/chat/completions"
        for session in ("run-a", "run-b"):
            _loop(
                lambda _, b, h: httpx.post(url, json=b, headers=h, timeout=30),
                upstream,
                2,
                **{"x-ctxmgmt-session": session},
            )
        r = httpx.post(
            url,
            json={"model": "gpt-test", "messages": [{"role": "user", "content": "x"}]},
            headers={"x-ctxmgmt-session": "bad key!"},
            timeout=30,
        )
        assert r.status_code == 400 and "x-ctxmgmt-session" in r.json()["error"]["message"]
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(proxy_sessions)).scalar_one() == 2


@pytest.mark.postgres
def test_two_serve_processes_on_postgresql_send_what_one_does(tmp_path, database_url):
    """Two `ctxmgmt serve` processes on one PostgreSQL store, taking turns on one conversation,
    send upstream the same requests as one process does."""
    if database_url.startswith("sqlite"):
        pytest.skip("PostgreSQL only")
    assert os.environ.get(PG_ENV)
    with Upstream() as upstream:
        config = tmp_path / "config.yaml"
        models = {
            "gpt-test": {"base_url": upstream.base_url, "model": "gpt-upstream", "context_window": 6000}
        }
        config.write_text(yaml.safe_dump({"models": models}))
        with serve(tmp_path, database_url, "--config", str(config)) as one:
            alone = _loop(
                lambda _, b, h: httpx.post(
                    f"{one}/proxy/default/v1/chat/completions", json=b, headers=h, timeout=30
                ),
                upstream,
                24,
                **{"x-ctxmgmt-session": "alone"},
            )
        upstream.reset()
        with (
            serve(tmp_path, database_url, "--config", str(config)) as a,
            serve(tmp_path, database_url, "--config", str(config)) as b,
        ):
            urls = (a, b)
            shared = _loop(
                lambda step, body, h: httpx.post(
                    f"{urls[step % 2]}/proxy/default/v1/chat/completions", json=body, headers=h, timeout=30
                ),
                upstream,
                24,
                **{"x-ctxmgmt-session": "shared"},
            )
    # The same requests, but for the archive references (random by design: never derived from
    # a request) and the tags over the text that names them.
    assert _unref(shared) == _unref(alone)
    assert re.search(r"\bm-[0-9a-f]{32}", json.dumps(alone))  # the processes archive: refs differ
    assert any(
        m.get("content", "").startswith("[ctxmgmt:summary]")
        for m in alone[-1]["messages"]
        if isinstance(m.get("content"), str)
    )


def _reads(monkeypatch) -> tuple[list[int], list[int]]:
    """Counters of the JSON values the proxy parses and the messages it counts (reset by
    setting ``[0] = 0``)."""
    from ctxmgmt.api.proxy import body as body_module
    from ctxmgmt.tokens import TokenCounter

    parsed, counted = [0], [0]
    value, count_message = body_module._value, TokenCounter._count_message

    def parsing(text, at):
        parsed[0] += 1
        return value(text, at)

    def counting(self, m, index):
        counted[0] += 1
        return count_message(self, m, index)

    monkeypatch.setattr(body_module, "_value", parsing)
    monkeypatch.setattr(TokenCounter, "_count_message", counting)
    return parsed, counted


def test_interleaved_conversations_sharing_a_long_prompt_read_only_what_is_new(proxy, upstream, monkeypatch):
    """Six conversations interleaved, all with the same 2 KB system prompt: each request parses
    and counts only its new messages, not the whole history again."""
    parsed, counted = _reads(monkeypatch)
    system = "You are a careful agent. " * 90  # over 2 KB, the same for every conversation
    conversations = [
        [{"role": "system", "content": system}, {"role": "user", "content": f"task {c}"}] for c in range(6)
    ]
    url = f"{proxy.url}/proxy/default/v1/chat/completions"
    per_request: list[tuple[int, int]] = []
    with httpx.Client(timeout=60) as client:
        for turn in range(8):
            for c, messages in enumerate(conversations):
                parsed[0] = counted[0] = 0
                upstream.replies.append(Reply(f"answer {c}.{turn}"))
                r = client.post(url, json={"model": "gpt-test", "messages": messages})
                assert r.status_code == 200, r.text
                per_request.append((parsed[0], counted[0]))
                messages += [
                    {"role": "assistant", "content": f"answer {c}.{turn}"},
                    {"role": "user", "content": f"go on {c}.{turn}"},
                ]
    late = per_request[6:]  # every conversation past its first request: 2 new messages each
    assert max(p for p, _ in late) <= 6, per_request  # the new messages and a few top-level keys
    assert max(n for _, n in late) <= 4, per_request


def test_a_kept_conversation_is_sized_by_what_it_holds(proxy, upstream):
    """A conversation kept in memory counts the bytes of the messages it holds, not an estimate
    from its managed token count (a long history managed into a small window is large)."""
    messages = [{"role": "system", "content": SYSTEM}] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{i} " + "lorem ipsum " * 800}
        for i in range(41)
    ]
    text = json.dumps({"model": "gpt-test", "messages": messages})
    r = post_text(proxy.url, text)
    assert r.status_code == 200, r.text
    live = proxy.server.config.app.state.proxy_live
    assert live._bytes >= len(text)


def test_gc_forgets_the_conversations_not_seen_past_the_retention(store, tmp_path, capsys):
    """`ctxmgmt gc` forgets the proxy conversations not seen for the records' retention, keeps
    the others, and says how many went."""
    from sqlalchemy import update

    from ctxmgmt.cli import main
    from ctxmgmt.store.models import proxy_sessions
    from ctxmgmt.store.repository import now_ms
    from ctxmgmt.store.sessions import SessionStore

    sessions = SessionStore(store.engine)
    for key in ("old", "recent", "new"):
        sessions.put(key, {"conversation": key})
    ages = {"old": 40, "recent": 5}
    with store.engine.begin() as conn:
        for key, days in ages.items():
            stamp = now_ms() - days * 86_400_000
            conn.execute(
                update(proxy_sessions).where(proxy_sessions.c.session_key == key).values(updated_time=stamp)
            )
    url = store.engine.url.render_as_string(hide_password=False)
    config = tmp_path / "config.yaml"
    config.write_text(f"offload:\n  backend: local\n  root: {tmp_path / 'offload'}\n")
    assert main(["gc", "--db", url, "--config", str(config)]) == 0
    assert "gc: 1 proxy conversations not seen for 30 days forgotten" in capsys.readouterr().out
    assert sorted(sessions.get_many(["old", "recent", "new"])) == ["new", "recent"]
    assert main(["gc", "--db", url, "--config", str(config), "--max-age-days", "1"]) == 0
    assert "gc: 1 proxy conversations not seen for 1 days forgotten" in capsys.readouterr().out
    assert sessions.get_many(["new"])["new"][0] == {"conversation": "new"}


def test_a_state_is_written_as_json_once_and_read_back_as_it_was(store, monkeypatch):
    """SessionStore.put dumps a state once (the text it measures is the text stored, never
    dumped again by the column's type), reads back equal, in its own transaction or the
    caller's; a state over the bound is refused and its key forgotten."""
    from ctxmgmt.store import sessions as module

    dumped: list[object] = []
    original = store.engine.dialect._json_serializer or json.dumps

    def counting(value, *args, **kwargs):
        dumped.append(value)
        return original(value, *args, **kwargs)

    monkeypatch.setattr(store.engine.dialect, "_json_serializer", counting)
    sessions = module.SessionStore(store.engine)
    state = {"generation": 3, "view": [{"role": "user", "content": 'héllo \u2028 [{"}]'}], "n": None}
    assert sessions.put("k", state) is True
    with store.engine.begin() as conn:
        assert sessions.put("c", {**state, "generation": 4}, conn=conn) is True
    assert dumped == []
    read = {k: v[0] for k, v in sessions.get_many(["k", "c", "absent"]).items()}
    assert read == {"k": state, "c": {**state, "generation": 4}}
    monkeypatch.setattr(module, "MAX_SESSION_BYTES", 40)
    assert sessions.put("k", state) is False
    with store.engine.begin() as conn:
        assert sessions.put("c", state, conn=conn) is False
    assert sessions.get_many(["k", "c"]) == {}


def _interleaved(url: str, upstream: Upstream, runs: list[str], steps: int) -> dict[str, list[dict]]:
    """Tool loops with the same start (system prompt and task), one request of each in turn;
    the requests upstream saw, by loop."""
    histories = {
        run: [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}] for run in runs
    }
    sent: dict[str, list[dict]] = {run: [] for run in runs}
    for step in range(steps):
        for run, messages in histories.items():
            upstream.replies.append(Reply(calls=[("bash", {"cmd": f"cat /var/{run}/{step}.log"})]))
            r = httpx.post(url, json={"model": "gpt-test", "messages": messages}, timeout=30)
            assert r.status_code == 200, r.text
            sent[run].append(upstream.seen[-1].body)
            call = {**r.json()["choices"][0]["message"]["tool_calls"][0], "id": f"c{step}"}  # as alone
            messages.append({"role": "assistant", "tool_calls": [call]})
            out = _tool_output(step, 60).replace("/var/data", f"/var/{run}")
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": out})
    return sent


def test_conversations_with_the_same_start_keep_their_own_state(store, tmp_path):
    """Parallel agents with one prompt and one task (one key) keep a state each: interleaved,
    each one's upstream requests are what it gets alone. They took each other's place on every
    request, each starting anew (its whole history summarised and archived again)."""
    from ctxmgmt.offload import LocalOffloader

    store.seed("long-running-agent", shipped("long-running-agent"))

    def run(runs: list[str], folder: str) -> tuple[dict[str, list[dict]], int]:
        archive = tmp_path / folder
        with Upstream() as upstream:
            app = create_app(store, models=models_for(upstream, 6000), offloader=LocalOffloader(archive))
            with LiveServer(app) as proxy:
                url = f"{proxy.url}/proxy/long-running-agent/v1/chat/completions"
                sent = _interleaved(url, upstream, runs, 14)
        return sent, sum(f.stat().st_size for f in archive.rglob("*") if f.is_file())

    alone, alone_bytes = run(["a"], "alone")
    together, together_bytes = run(["a", "b"], "together")
    assert any("[ctxmgmt:summary]" in json.dumps(b) for b in alone["a"])  # the window filled
    # As alone, but for where a cut falls (sized with its archive's random reference).
    assert [len(b["messages"]) for b in together["a"]] == [len(b["messages"]) for b in alone["a"]]
    assert together_bytes < 3 * alone_bytes


def test_a_fifth_look_alike_takes_the_slot_used_longest_ago_and_the_others_go_on(store, proxy, upstream):
    """Past four conversations with the same start, a new one takes the slot used longest ago:
    the three used since go on with their own state, and the one whose slot was taken gets a
    new view on its next request (it never continues another's). The new one's state, made
    from the start alone, covers the start of every other: each took it (the newest) in place
    of its own, and was managed anew from its whole history."""
    from sqlalchemy import select

    from ctxmgmt.store.models import proxy_sessions

    url = f"{proxy.url}/proxy/default/v1/chat/completions"
    histories: dict[str, list[dict]] = {}

    def step(run: str) -> str:
        """One request of ``run``'s loop; the conversation its state was written to."""
        messages = histories.setdefault(
            run, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
        )
        n = len(messages)
        upstream.replies.append(Reply(calls=[("bash", {"cmd": f"cat /var/{run}/{n}.log"})]))
        r = httpx.post(url, json={"model": "gpt-test", "messages": messages}, timeout=30)
        assert r.status_code == 200, r.text
        call = {**r.json()["choices"][0]["message"]["tool_calls"][0], "id": f"c{n}"}
        messages.append({"role": "assistant", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": f"{run}: {n} lines"})
        with store.engine.connect() as conn:
            rows = conn.execute(select(proxy_sessions.c.state, proxy_sessions.c.updated_time)).all()
        assert len(rows) <= 4
        return max(rows, key=lambda row: row.updated_time).state["conversation"]

    for _ in range(3):
        used = {run: step(run) for run in "abcd"}
    assert len(set(used.values())) == 4  # a state each
    step("e")  # a fifth: a's slot, used longest ago
    for run in "bcd":
        assert step(run) == used[run], run  # continued, their own state
    assert step("a") not in used.values()  # a new view, never another's state


def _breakpoints(value: object) -> int:
    """How many ``cache_control`` members ``value`` holds, at any depth."""
    return json.dumps(value).count('"cache_control"')


def test_a_client_that_moves_its_cache_breakpoint_continues_its_conversation(store):
    """A client that puts its prompt-cache breakpoint on its newest message at every request
    (Claude Code does) continues one conversation: one archive namespace, upstream requests
    as one engine carried from call to call makes them, so they share a long prefix. A cut
    result made in an earlier request goes without the breakpoint it was made with: every
    request holds the client's own breakpoints, never more than four."""
    from ctxmgmt.messages import without_cache_control
    from ctxmgmt.store.executions import ExecutionStore

    mark = {"type": "ephemeral"}
    system = [{"type": "text", "text": SYSTEM, "cache_control": mark}]
    history: list[dict] = [{"role": "user", "content": [{"type": "text", "text": TASK}]}]
    sent: list[dict] = []
    with Upstream() as upstream, LiveServer(create_app(store, models=models_for(upstream, 6000))) as proxy:
        for step in range(30):
            upstream.replies.append(Reply(calls=[("bash", {"cmd": f"cat /var/data/in/{step}.log"})]))
            messages = json.loads(json.dumps(history))
            messages[-1]["content"][-1]["cache_control"] = mark  # moved to the newest message
            body = {"model": "claude-test", "max_tokens": 500, "system": system, "messages": messages}
            r = httpx.post(f"{proxy.url}/proxy/default/v1/messages", json=body, timeout=30)
            assert r.status_code == 200, r.text
            sent.append(upstream.seen[-1].body)
            uses = [b for b in r.json()["content"] if b["type"] == "tool_use"]
            history.append({"role": "assistant", "content": r.json()["content"]})
            results = [
                {"type": "tool_result", "tool_use_id": b["id"], "content": _tool_output(step, 60)}
                for b in uses
            ]
            history.append({"role": "user", "content": results})
        reported = [input_tokens(s.body) for s in upstream.seen]
    _, records = ExecutionStore(store.engine).list("proxy-default", limit=100)
    assert len(records) == 30 and len({r["memory_id"] for r in records}) == 1  # one conversation
    assert any("[ctxmgmt:summary]" in json.dumps(b["messages"]) for b in sent)  # the window filled
    for body in sent:
        assert _breakpoints(body) <= 4 and _breakpoints(body["messages"]) == 1
        assert "cache_control" in body["messages"][-1]["content"][-1]  # the client's own
    # Successive requests share a long prefix (the provider's cache reads it): the view goes
    # on, not made anew from a fingerprint chain the moved breakpoint broke.
    texts = [json.dumps(without_cache_control(b["messages"])) for b in sent]
    shared = [
        next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        for a, b in itertools.pairwise(texts)
    ]
    assert sorted(shared)[len(shared) // 2] > 2000, shared
    engine = Conversation(load_definition("default"), format="anthropic")
    for step, body in enumerate(sent):
        messages = json.loads(json.dumps(history[: 2 * step + 1]))
        messages[-1]["content"][-1]["cache_control"] = mark
        turn = engine.prepare(messages, system_prompt=system, model="claude-upstream", context_window=6000)
        got = without_cache_control(body["messages"])
        assert _unref([without_cache_control(turn.messages)]) == _unref([got]), step
        engine.observe(reported[step])


def test_a_cut_result_keeps_the_breakpoint_the_client_still_puts_on_it(store):
    """A client that marks its last two user messages (Anthropic's multi-turn pattern) keeps
    both breakpoints upstream: a result cut in an earlier request, carried in the view, takes
    the breakpoint the client puts now on the result it stands for (and not a stale one)."""
    mark = {"type": "ephemeral"}
    history: list[dict] = [{"role": "user", "content": [{"type": "text", "text": TASK}]}]
    with Upstream() as upstream, LiveServer(create_app(store, models=models_for(upstream, 200_000))) as proxy:
        for step in range(6):
            upstream.replies.append(Reply(calls=[("bash", {"cmd": f"cat /var/data/in/{step}.log"})]))
            messages = json.loads(json.dumps(history))
            users = [i for i, m in enumerate(messages) if m["role"] == "user"]
            for i in users[-2:]:
                messages[i]["content"][-1]["cache_control"] = mark
            body = {"model": "claude-test", "max_tokens": 500, "system": SYSTEM, "messages": messages}
            r = httpx.post(f"{proxy.url}/proxy/default/v1/messages", json=body, timeout=30)
            assert r.status_code == 200, r.text
            sent = upstream.seen[-1].body["messages"]
            assert len(sent) == len(messages)  # nothing removed: each message stands for its own
            marked = [i for i, m in enumerate(sent) if _breakpoints(m)]
            assert marked == users[-2:], (step, marked, users[-2:])
            assert all(_breakpoints(m) == 1 for m in (sent[i] for i in marked))
            if step >= 2:  # the second-to-last result was cut in the request before
                assert len(json.dumps(sent[users[-2]])) < len(json.dumps(messages[users[-2]])) // 2
            uses = [b for b in r.json()["content"] if b["type"] == "tool_use"]
            history.append({"role": "assistant", "content": r.json()["content"]})
            output = "\n".join(f"row {i} " + "x" * 80 for i in range(3000))
            history.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": b["id"], "content": output} for b in uses
                    ],
                }
            )


def test_a_client_that_moves_its_breakpoint_has_only_what_is_new_read_and_counted(
    proxy, upstream, monkeypatch
):
    """A client that moves its breakpoint to its newest message at every request (Claude Code)
    has each request read and counted at the cost of what changed (its last messages), as a
    client whose breakpoint stays put: its conversation goes on from the same objects."""
    parsed, counted = _reads(monkeypatch)
    mark = {"type": "ephemeral"}
    system = "You are a careful agent. " * 90  # over the 1 KB that groups bodies
    history: list[dict] = [{"role": "user", "content": [{"type": "text", "text": TASK}]}]
    per_request = []
    for step in range(25):
        upstream.replies.append(Reply(calls=[("bash", {"cmd": f"cat {step}.log"})]))
        messages = json.loads(json.dumps(history))
        messages[-1]["content"][-1]["cache_control"] = mark
        body = {"model": "claude-test", "max_tokens": 500, "system": system, "messages": messages}
        parsed[0] = counted[0] = 0
        r = httpx.post(f"{proxy.url}/proxy/default/v1/messages", json=body, timeout=30)
        assert r.status_code == 200, r.text
        per_request.append((parsed[0], counted[0]))
        sent = upstream.seen[-1].body["messages"]
        assert sent == messages  # nothing to manage: the client's messages, its breakpoint with them
        uses = [b for b in r.json()["content"] if b["type"] == "tool_use"]
        history.append({"role": "assistant", "content": r.json()["content"]})
        history.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": b["id"], "content": f"line {step}"} for b in uses
                ],
            }
        )
    late = per_request[2:]  # the first two share no message the client left unchanged
    assert max(p for p, _ in late) <= 8, str(per_request)  # the changed and new messages, a few keys
    assert max(n for _, n in late) <= 4, str(per_request)
