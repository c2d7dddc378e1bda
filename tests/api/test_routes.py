import json

import httpx
import pytest
from openapi_spec_validator import validate

from ctxmgmt.messages import is_summary
from ctxmgmt.testing import make_conversation
from tests.conftest import shipped

BASE = "/_plugins/_ml/context_management"


@pytest.fixture
def api(live):
    with httpx.Client(base_url=live.url, timeout=30) as client:
        yield client


def test_create_answers_like_opensearch(api):
    """POST answers {context_management_name, status: created}; the URL name wins."""
    body = {**shipped("default"), "name": "ignored"}
    r = api.post(f"{BASE}/mine", json=body)
    assert (r.status_code, r.json()) == (200, {"context_management_name": "mine", "status": "created"})
    assert api.get(f"{BASE}/mine").json()["name"] == "mine"
    assert api.get(f"{BASE}/ignored").status_code == 404


def test_get_returns_version_and_timestamps(api):
    """GET returns the definition with version, created_time and last_modified."""
    api.post(f"{BASE}/mine", json=shipped("default"))
    r = api.get(f"{BASE}/mine")
    data = r.json()
    assert data["version"] == 1 and data["created_time"] == data["last_modified"]
    assert data["hooks"] == shipped("default")["hooks"]
    assert r.headers["etag"] == '"1"'


def test_put_replaces_with_optimistic_concurrency(api):
    """PUT replaces the whole definition and answers the new version; a stale If-Match is 409."""
    api.post(f"{BASE}/mine", json=shipped("token-aware-truncation"))
    doc = shipped("token-aware-truncation")
    del doc["hooks"]["pre_llm"]
    r = api.put(f"{BASE}/mine", json=doc, headers={"If-Match": '"1"'})
    assert r.json() == {"context_management_name": "mine", "status": "updated", "version": 2}
    assert set(api.get(f"{BASE}/mine").json()["hooks"]) == {"post_tool"}
    stale = api.put(f"{BASE}/mine?if_version=1", json=doc)
    assert stale.status_code == 409 and stale.json()["error"]["type"] == "version_conflict_engine_exception"
    assert api.put(f"{BASE}/missing", json=doc).status_code == 404


def test_delete(api):
    """DELETE answers {status: deleted}; the name is gone."""
    api.post(f"{BASE}/mine", json=shipped("default"))
    r = api.delete(f"{BASE}/mine")
    assert r.json() == {"context_management_name": "mine", "status": "deleted"}
    assert api.get(f"{BASE}/mine").status_code == 404
    assert api.delete(f"{BASE}/mine").status_code == 404


def test_list_pages_with_real_total(api):
    """GET list answers the real total and a page sorted by name."""
    for n in ("c", "a", "b"):
        api.post(f"{BASE}/{n}", json=shipped("default"))
    r = api.get(f"{BASE}?from=1&size=1").json()
    assert r["total"] == 3 and [d["name"] for d in r["context_management"]] == ["b"]
    assert api.get(f"{BASE}?q=c").json()["total"] == 1


def test_simulate_stored_and_inline(api):
    """_simulate applies a stored or inline definition to a context and returns context and trace."""
    api.post(f"{BASE}/window", json=shipped("long-conversation"))
    context = {"system_prompt": "sys", "messages": make_conversation(40, seed=1)}
    r = api.post(f"{BASE}/window/_simulate", json={"hook": "pre_llm", "context": context}).json()
    assert len(r["context"]["messages"]) <= 6 and r["trace"][0]["activated"]
    inline = {"definition": shipped("long-conversation"), "hook": "PRE_LLM", "context": context}
    again = api.post(f"{BASE}/_simulate", json=inline).json()["context"]
    # The same messages and one summary of the rest (whose guide names each run's own archive).
    [mine, theirs] = [[m for m in c["messages"] if not is_summary(m)] for c in (r["context"], again)]
    assert mine == theirs and len(mine) == len(r["context"]["messages"]) - 1 == len(again["messages"]) - 1
    assert api.post(f"{BASE}/missing/_simulate", json={"context": context}).status_code == 404


def test_simulate_gives_an_archiving_definition_a_throwaway_store(api):
    """A definition whose manager class declares ``archives`` is simulated with a throwaway
    store, so its trace shows the archive a run with a store writes; the others get none."""
    context = {"system_prompt": "sys", "messages": make_conversation(40, seed=1)}

    def simulate(entry):
        doc = {"name": "s", "settings": {"fit": False}, "hooks": {"pre_llm": [entry]}}
        return api.post(f"{BASE}/_simulate", json={"definition": doc, "context": context}).json()

    window = simulate({"type": "SlidingWindowManager", "config": {"max_messages": 6}})
    assert window["trace"][0]["details"]["offloaded"].startswith("m-")
    cut = simulate({"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 100}})
    assert cut["trace"][0]["activated"] and "offloaded" not in cut["trace"][0]["details"]


def test_validation_errors_list_every_problem(api):
    """An invalid definition is a 400 listing each problem with its pointer."""
    r = api.post(
        f"{BASE}/bad",
        json={
            "hooks": {
                "pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 0, "pin": "x"}}]
            }
        },
    )
    assert r.status_code == 400
    pointers = {p["pointer"] for p in r.json()["error"]["problems"]}
    assert pointers == {"/hooks/pre_llm/0/config/max_messages", "/hooks/pre_llm/0/config/pin"}


def test_openapi_document_is_valid_and_uses_the_schema_files(api):
    """/openapi.json is a valid OpenAPI 3.1 document embedding schemas/definition.schema.json."""
    doc = api.get("/openapi.json").json()
    validate(doc)
    envelope = doc["components"]["schemas"]["ContextManagementDefinition"]
    assert envelope["properties"]["name"] == shipped_schema()["properties"]["name"]
    assert "SlidingWindowManagerConfig" in doc["components"]["schemas"]
    assert {"/_plugins/_ml/agents/_register", "/_plugins/_ml/agents/{agent_id}/_execute"} <= set(doc["paths"])


def shipped_schema():
    import json

    from tests.conftest import ROOT

    return json.loads((ROOT / "schemas" / "definition.schema.json").read_text())


def test_health(api):
    """/_health reports the database as reachable."""
    assert api.get("/_health").json() == {"status": "green", "database": "ok"}


def test_simulate_takes_anthropic_and_responses_contexts(api):
    """_simulate manages a context in its own format, declared or detected, and answers in it."""
    from tests.formats.test_anthropic import SYSTEM
    from tests.formats.test_anthropic import conversation as anthropic_conversation
    from tests.formats.test_openai_responses import conversation as responses_conversation

    window = {"definition": shipped("long-conversation"), "hook": "pre_llm"}
    msgs = anthropic_conversation(8)
    context = {"system_prompt": SYSTEM, "messages": msgs, "format": "anthropic"}
    out = api.post(f"{BASE}/_simulate", json={**window, "context": context}).json()["context"]
    assert out["format"] == "anthropic" and out["system_prompt"] == SYSTEM
    assert out["messages"][0] == msgs[0] and out["messages"][-2:] == msgs[-2:]
    items = responses_conversation(8)
    out = api.post(f"{BASE}/_simulate", json={**window, "context": {"messages": items}}).json()["context"]
    kept = [item for item in out["messages"] if item not in items]
    assert out["format"] is None and len(kept) == 1 and "Summary of" in json.dumps(kept[0])
    bad = {"messages": [{"role": "assistant", "content": "x"}], "format": "anthropic"}
    r = api.post(f"{BASE}/_simulate", json={**window, "context": bad})
    assert r.status_code == 400 and r.json()["error"]["problems"][0]["pointer"] == "/context/messages/0/role"


def test_a_simulations_problems_are_located_in_its_body(api):
    """The JSON pointers of a simulation's bad context and bad inline definition start at the
    request's body (``/context/...``, ``/definition/...``)."""
    context = {"messages": [{"role": "user", "content": "hi"}]}
    bad = {"hooks": {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": -1}}]}}
    r = api.post(f"{BASE}/_simulate", json={"definition": bad, "context": context})
    assert r.status_code == 400
    assert [p["pointer"] for p in r.json()["error"]["problems"]] == [
        "/definition/hooks/pre_llm/0/config/max_messages"
    ]
    r = api.post(f"{BASE}/_simulate", json={"definition": shipped("default"), "context": {"messages": "hi"}})
    assert r.status_code == 400 and r.json()["error"]["problems"][0]["pointer"] == "/context/messages"
