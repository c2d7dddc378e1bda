"""The route table is the API's one contract: the app serves its routes, /openapi.json
states them, and each handler enforces the bounds the document states."""

import re

import httpx
import pytest
from starlette.routing import Route

from ctxmgmt.api import create_app
from ctxmgmt.api.app import handler, routes
from ctxmgmt.api.routes import TABLE, Operation
from ctxmgmt.offload import LocalOffloader
from tests.conftest import LiveServer

PAGE = {("GET", "/ui"), ("GET", "/ui/{file}"), ("GET", "/"), ("GET", "/ui/")}
"""The web page's HTML and files, and the ways to it: served, in the table, not documented."""
PROXY = {
    *(
        ("POST", f"/proxy/{{definition}}{path}")
        for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages")
    ),
    ("POST", "/proxy/{definition}/v1/messages/count_tokens"),
    ("POST", "/proxy/{definition}/v1/responses/input_tokens"),
    ("POST", "/proxy/{definition}/v1/responses/compact"),
    ("GET", "/proxy/{definition}/v1/models"),
    ("GET", "/proxy/{definition}/v1/models/{model:path}"),
    ("GET", "/proxy/{definition}"),
    ("GET", "/proxy/{definition}/v1"),
    # what OpenAI keeps by id, forwarded as asked
    *(
        (method, f"/proxy/{{definition}}/v1/{kind}/{{rest:path}}")
        for kind in ("responses", "conversations", "chat/completions")
        for method in ("GET", "POST", "DELETE")
    ),
    ("POST", "/proxy/{definition}/v1/conversations"),
    ("GET", "/proxy/{definition}/v1/chat/completions"),
}
"""The proxy's provider APIs: served, in the table, documented by their providers."""


def served(app) -> set[tuple[str, str]]:
    return {
        (method, route.path)
        for route in app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method not in ("HEAD", "OPTIONS")
    }


def test_the_app_serves_exactly_the_routes_of_the_table(store):
    """Every route of the app is an operation of the table, and every operation is served."""
    table = {(op.method, op.path) for op in TABLE}
    assert len(table) == len(TABLE), "an operation is in the table twice"
    assert served(create_app(store)) == table


def test_the_document_states_exactly_the_served_json_routes(store):
    """/openapi.json has every route the app serves but the page's files and the proxy's
    provider APIs, and no other."""
    from ctxmgmt.api.openapi import openapi_document

    document = openapi_document()
    stated = {(method.upper(), path) for path, item in document["paths"].items() for method in item}
    assert stated == served(create_app(store)) - PAGE - PROXY
    assert {(op.method, op.path) for op in TABLE if not op.documented} == PAGE | PROXY


def test_literal_paths_are_routed_before_the_parameter_beside_them():
    """A path like …/_simulate comes before …/{name} of the same prefix, so it is never a name."""
    paths = [route.path for route in routes()]
    for i, path in enumerate(paths):
        pattern = re.sub(r"\{[^}]+\}", "[^/]+", path)
        later = [p for p in paths[i + 1 :] if "{" not in p and re.fullmatch(pattern, p)]
        assert not later, f"{later} would be taken by {path}"


def test_the_methods_of_one_path_form_one_route_wherever_the_table_lists_them():
    """Two operations of one path listed apart (another path between them) are one route with
    both methods, at the place of the first; a method listed twice for a path is refused."""
    get = Operation("GET", "/things/{name}", "definitions.get", "get", {})
    other = Operation("GET", "/others", "definitions.list_", "list", {})
    put = Operation("PUT", "/things/{name}", "definitions.replace", "put", {})
    built = routes([get, other, put])
    assert [route.path for route in built] == ["/things/{name}", "/others"]
    assert {"GET", "PUT"} <= set(built[0].methods or ())
    with pytest.raises(TypeError, match=re.escape("GET /things/{name} is in the route table twice")):
        routes([get, other, get])


def test_a_handler_the_table_misnames_fails_when_the_app_is_assembled():
    """An operation naming a missing or synchronous handler is refused at assembly, naming it."""
    for name in ("definitions.nope", "requests.state"):
        op = Operation("GET", "/x", name, "x", {})
        with pytest.raises(TypeError, match=re.escape(name)):
            handler(op)


SAMPLE = {
    "name": "n",
    "agent_id": "0" * 32,
    "execution_id": "0" * 32,
    "memory_id": "0" * 32,
    "report_id": "0" * 32,
    "ref": "t-" + "0" * 32,
    "session": "s",
    "pattern": "x",
}
"""A valid value of each path parameter and required query parameter."""


def bound_cases(schema: dict) -> list[tuple[str, bool]]:
    """(a value, whether the document allows it) at the edges of a parameter's schema."""
    if schema.get("type") == "integer":
        cases = [(str(schema["maximum"]), True), (str(schema["maximum"] + 1), False), ("x", False)]
        cases.append((str(schema["minimum"]), True))
        if schema["minimum"] > 0:
            cases.append((str(schema["minimum"] - 1), False))
        return cases
    if schema.get("type") == "string":
        cases = [("y" * schema["maxLength"], True), ("y" * (schema["maxLength"] + 1), False)]
        return [*cases, ("a\x00b", False)]
    if schema.get("type") == "boolean":
        return [("true", True), ("maybe", False)]
    return [*((choice, True) for choice in schema["enum"]), ("bogus", False)]


@pytest.mark.parametrize(
    "op", [op for op in TABLE if any(p.where == "query" for p in op.params)], ids=lambda op: op.handler
)
def test_every_query_bound_the_document_states_is_the_handlers_bound(store, tmp_path, op):
    """At each edge of each query parameter's schema in /openapi.json, the handler refuses
    exactly the values the document refuses (a 400 naming the parameter)."""
    app = create_app(store, offloader=LocalOffloader(tmp_path))
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        document = http.get("/openapi.json").json()
        stated = document["paths"][op.path][op.method.lower()]["parameters"]
        params = [document["components"]["parameters"][p["$ref"].rsplit("/", 1)[1]] for p in stated]
        path = op.path.format(**{p["name"]: SAMPLE[p["name"]] for p in params if p["in"] == "path"})
        required = {p["name"]: SAMPLE[p["name"]] for p in params if p["in"] == "query" and p.get("required")}
        body = {"json": {}} if op.body is not None else {}
        for param in (p for p in params if p["in"] == "query"):
            for value, allowed in bound_cases(param["schema"]):
                query = {**required, param["name"]: value}
                r = http.request(op.method, path, params=query, **body)
                named = r.status_code == 400 and param["name"] in r.json()["error"]["reason"]
                assert named != allowed, (param["name"], value[:20], r.status_code, r.text[:300])
