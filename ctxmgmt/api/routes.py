"""The route table: every operation of the API once — path, method, handler, parameters
with their bounds, request body, responses — from which the app's routes
(:func:`ctxmgmt.api.app.create_app`), ``/openapi.json`` (:mod:`ctxmgmt.api.openapi`) and
the clients' requests (:mod:`ctxmgmt.client`) are built.

Handlers are named (``"definitions.create"``, a function of a module of this package) and
imported when the app is assembled, so the clients read this table without the server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import params as p
from .params import Param

__all__ = ["TABLE", "Operation", "by_client", "ref"]

DEFINITIONS = "/_plugins/_ml/context_management"
AGENTS = "/_plugins/_ml/agents"
EXECUTIONS = "/_plugins/_ml/executions"
MEMORY = "/_plugins/_ml/memory"
OFFLOAD = "/_plugins/_ml/offload"


def ref(name: str) -> dict[str, Any]:
    """A reference to a schema of the document's components."""
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


_INT = {"type": "integer"}
_STR = {"type": "string"}
_OBJECTS = {"type": "array", "items": {"type": "object"}}


@dataclass(frozen=True, slots=True)
class Operation:
    """One method of one path."""

    method: str
    path: str
    handler: str
    """``module.function`` in :mod:`ctxmgmt.api`, imported when the app is assembled."""
    summary: str
    ok: dict[str, Any]
    """The schema of the 200 answer's JSON."""
    params: tuple[Param, ...] = ()
    body: dict[str, Any] | None = None
    """The schema of the JSON body (required when given)."""
    errors: tuple[int, ...] = (400, 401, 403)
    """The error statuses of this operation (those of every request are added)."""
    semantic: str | None = None
    """The rules that refuse some schema-valid requests with a 400 (``x-semantic-400``)."""
    client: str | None = None
    """The method of :class:`ctxmgmt.Client` (and AsyncClient) that sends it."""
    documented: bool = True
    """In /openapi.json: every JSON operation is; the web page's files and the proxy's
    provider APIs (documented by their providers) are not."""
    raw: bool = False
    """Served as the handler answers, without the API's dispatch (its 415s and errors are the
    OpenSearch shape's; the proxy answers in the provider's)."""


_DEFINITION_RULES = (
    "a manager type that is not registered, a model or tokenizer the server does not have. "
    "A name in the body is checked, then the path's name is used."
)
_CONTEXT_RULES = (
    "messages an LLM API would reject (roles, tool calls without results, ...), or a "
    "context_window too small for what must stay (the system prompt, the task, the tools "
    "and the reply's reserve)."
)
_AGENT_RULES = (
    "context_management_name and an inline context_management together, a model the "
    "server does not have, a definition name that is not stored (the reason names the "
    "closest stored names), an invalid inline definition, a tool that is not registered."
)
_ARCHIVE = _obj(ref=_STR, kind=_STR)
_EVAL_REPORT = {
    "type": "object",
    "required": ["report_id", "created_time", "schema", "rows"],
    "properties": {
        "report_id": _STR,
        "created_time": _INT,
        "schema": _STR,
        "windows": {"type": "array", "items": _INT},
        "definitions": {"type": "array", "items": _STR},
        "conversations": _OBJECTS,
        "rows": _OBJECTS,
    },
}

TABLE: tuple[Operation, ...] = (
    # -- the service
    Operation("GET", "/_health", "service.health", "Health", {"type": "object"}, errors=(), client="health"),
    Operation("GET", "/openapi.json", "service.openapi", "This document", {"type": "object"}, errors=()),
    # -- definitions (literal paths before the {name} beside them)
    Operation(
        "GET",
        DEFINITIONS,
        "definitions.list_",
        "List definitions, sorted by name",
        _obj(total=_INT, context_management={"type": "array", "items": ref("StoredDefinition")}),
        params=(p.FROM, p.SIZE, p.Q),
        client="list",
    ),
    Operation(
        "POST",
        f"{DEFINITIONS}/_simulate",
        "definitions.simulate_inline",
        "Apply an inline definition to a context (dry run)",
        ref("SimulationResult"),
        body=ref("InlineSimulation"),
        errors=(400, 401, 403, 422, 502, 504),
        semantic=f"{_DEFINITION_RULES} {_CONTEXT_RULES} A manager with on_error: fail that fails "
        "is a 422 (context_manager_exception); a 502/504 when its model failed.",
        client="simulate",
    ),
    Operation(
        "POST",
        f"{DEFINITIONS}/_validate",
        "definitions.validate",
        "Check a definition's YAML or JSON text, with lines (an editor's check)",
        _obj(valid={"type": "boolean"}, problems=_OBJECTS, definition={"type": ["object", "null"]}),
        body={
            "type": "object",
            "required": ["text"],
            "properties": {"text": {"type": "string", "maxLength": p.MAX_TEXT, "pattern": p.NO_NUL}},
        },
        semantic=f"a text nesting over {p.MAX_NESTING} deep (anchors and aliases are problems with a line).",
        client="validate",
    ),
    Operation(
        "GET",
        DEFINITIONS + "/_eval/{report_id}",
        "evals.get",
        "Get an eval report that `ctxmgmt eval --save` stored (schema ctxmgmt.eval/1)",
        _EVAL_REPORT,
        params=(p.REPORT_ID,),
        errors=(401, 403, 404),
        client="eval_report",
    ),
    Operation(
        "POST",
        DEFINITIONS + "/{name}/_simulate",
        "definitions.simulate",
        "Apply a stored definition to a context (dry run)",
        ref("SimulationResult"),
        params=(p.DEFINITION_NAME,),
        body=ref("Simulation"),
        errors=(400, 401, 403, 404, 422, 502, 504),
        semantic=_CONTEXT_RULES + " A manager with on_error: fail that fails is a 422 "
        "(a 502/504 when its model failed).",
        client="simulate",
    ),
    Operation(
        "POST",
        DEFINITIONS + "/{name}",
        "definitions.create",
        "Create a definition",
        ref("Status"),
        params=(p.DEFINITION_NAME,),
        body=ref("DefinitionBody"),
        errors=(400, 401, 403, 409),
        semantic=_DEFINITION_RULES,
        client="create",
    ),
    Operation(
        "GET",
        DEFINITIONS + "/{name}",
        "definitions.get",
        "Get a definition",
        ref("StoredDefinition"),
        params=(p.DEFINITION_NAME,),
        errors=(400, 401, 403, 404),
        client="get",
    ),
    Operation(
        "PUT",
        DEFINITIONS + "/{name}",
        "definitions.replace",
        "Replace a definition",
        ref("Status"),
        params=(p.DEFINITION_NAME, p.IF_MATCH, p.IF_VERSION),
        body=ref("DefinitionBody"),
        errors=(400, 401, 403, 404, 409),
        semantic=_DEFINITION_RULES + " An If-Match and an if_version that disagree.",
        client="update",
    ),
    Operation(
        "DELETE",
        DEFINITIONS + "/{name}",
        "definitions.delete",
        "Delete a definition",
        ref("Status"),
        params=(p.DEFINITION_NAME, p.FORCE),
        errors=(400, 401, 403, 404, 409),
        client="delete",
    ),
    # -- agents and what their executions left
    Operation(
        "POST",
        f"{AGENTS}/_register",
        "agents.register",
        "Register an agent",
        _obj(agent_id=_STR),
        body=ref("AgentRegistration"),
        errors=(400, 401, 403, 404),
        semantic=_AGENT_RULES,
        client="register_agent",
    ),
    Operation(
        "GET",
        AGENTS,
        "agents.list_",
        "List agents",
        _obj(total=_INT, agents={"type": "array"}),
        params=(p.FROM, p.SIZE),
        client="list_agents",
    ),
    Operation(
        "POST",
        AGENTS + "/{agent_id}/_execute",
        "agents.execute",
        "Execute an agent",
        ref("ExecutionResult"),
        params=(p.AGENT_ID,),
        body=ref("Execution"),
        errors=(400, 401, 403, 404, 409, 502, 504),
        semantic="a question that is only white space. A definition name that is not "
        "stored is a 404 whose reason names the closest stored names.",
        client="execute",
    ),
    Operation(
        "POST",
        AGENTS + "/{agent_id}/_compact",
        "agents.compact",
        "Summarise a conversation now",
        {"type": "object"},
        params=(p.AGENT_ID,),
        body=ref("Compaction"),
        errors=(400, 401, 403, 404, 409, 502, 504),
        semantic="a memory id with no conversation (404).",
        client="compact",
    ),
    Operation(
        "GET",
        AGENTS + "/{agent_id}/executions",
        "records.executions",
        "List an agent's executions, newest first",
        _obj(total=_INT, executions={"type": "array", "items": ref("ExecutionSummary")}),
        params=(p.RECORDS_AGENT_ID, p.FROM, p.SIZE),
        errors=(400, 401, 403, 404),
        client="executions",
    ),
    Operation(
        "GET",
        AGENTS + "/{agent_id}",
        "agents.get",
        "Get an agent",
        {"type": "object"},
        params=(p.AGENT_ID,),
        errors=(401, 403, 404),
        client="get_agent",
    ),
    Operation(
        "PUT",
        AGENTS + "/{agent_id}",
        "agents.replace",
        "Replace an agent's registration",
        _obj(agent_id=_STR, result=_STR),
        params=(p.AGENT_ID,),
        body=ref("AgentRegistration"),
        errors=(400, 401, 403, 404),
        semantic=_AGENT_RULES,
        client="replace_agent",
    ),
    Operation(
        "DELETE",
        AGENTS + "/{agent_id}",
        "agents.delete",
        "Delete an agent",
        _obj(agent_id=_STR, result=_STR),
        params=(p.AGENT_ID,),
        errors=(401, 403, 404),
        client="delete_agent",
    ),
    Operation(
        "GET",
        EXECUTIONS + "/{execution_id}",
        "records.execution",
        "Get an execution's record",
        ref("ExecutionRecord"),
        params=(p.EXECUTION_ID,),
        errors=(401, 403, 404),
        client="execution",
    ),
    Operation(
        "GET",
        MEMORY + "/{memory_id}/messages",
        "records.memory_messages",
        "Get a conversation's complete stored record, in order",
        _obj(memory_id=_STR, total=_INT, messages=_OBJECTS),
        params=(p.MEMORY_ID, p.FROM, p.MESSAGE_SIZE),
        errors=(400, 401, 403, 404),
        client="memory_messages",
    ),
    Operation(
        "GET",
        MEMORY + "/{memory_id}",
        "records.memory",
        "Get a conversation's state and the managed messages the model saw last",
        _obj(memory_id=_STR, agent_id=_STR, state={"type": "object"}, view=_OBJECTS),
        params=(p.MEMORY_ID,),
        errors=(401, 403, 404),
        client="memory",
    ),
    # -- offloaded content, read back
    Operation(
        "GET",
        OFFLOAD,
        "offload.listing",
        "List a session's archives, oldest first",
        _obj(
            archives={"type": "array", "items": _ARCHIVE},
            damaged={"type": "integer", "description": "records torn by a crash"},
        ),
        params=(p.SESSION,),
        errors=(400, 401, 403, 404),
        client="archives",
    ),
    Operation(
        "GET",
        f"{OFFLOAD}/_search",
        "offload.search",
        "Search a session's archives (RE2 syntax, one line per hit)",
        _obj(hits=_OBJECTS, truncated={"type": "boolean"}, damaged=_INT),
        params=(p.SESSION, p.PATTERN, p.SEARCH_SIZE),
        errors=(400, 401, 403, 404),
        semantic="a pattern that is not RE2 syntax (backreferences, lookaround) or that compiles too large.",
        client="search_archives",
    ),
    Operation(
        "GET",
        OFFLOAD + "/{ref}",
        "offload.read",
        "Read archived content back",
        _obj(
            ref=_STR,
            text=_STR,
            offset=_INT,
            total=_INT,
            unit={"enum": list(p.UNIT.choices)},
            next_offset={"type": ["integer", "null"]},
            clipped={"type": "boolean", "description": "a line longer than the read's bound was cut"},
        ),
        params=(p.ARCHIVE_REF, p.SESSION, p.OFFSET, p.LIMIT, p.UNIT),
        errors=(400, 401, 403, 404),
        client="read_archive",
    ),
    # -- the web page: HTML, not in the document
    Operation("GET", "/ui", "page.page", "The web page", {}, errors=(), documented=False),
    Operation("GET", "/", "page.home", "To the web page", {}, errors=(), documented=False),
    Operation("GET", "/ui/", "page.home", "To the web page", {}, errors=(), documented=False),
    Operation(
        "GET", "/ui/{file}", "page.asset", "A file of the web page", {}, (p.UI_FILE,), documented=False
    ),
    # -- the provider-compatible proxy: the providers' own APIs (ctxmgmt.api.proxy)
    *(
        Operation(
            "POST",
            f"/proxy/{{definition}}{path}",
            f"proxy.{name}",
            f"{title}, with the definition's context management",
            {},
            documented=False,
            raw=True,
        )
        for name, path, title in (
            ("chat", "/v1/chat/completions", "OpenAI Chat Completions"),
            ("responses", "/v1/responses", "OpenAI Responses"),
            ("messages", "/v1/messages", "Anthropic Messages"),
        )
    ),
    *(
        Operation(
            "POST", f"/proxy/{{definition}}{path}", f"proxy.{name}", title, {}, documented=False, raw=True
        )
        for name, path, title in (
            ("count_tokens", "/v1/messages/count_tokens", "Anthropic's token count, by the model's upstream"),
            ("input_tokens", "/v1/responses/input_tokens", "OpenAI's token count, by the model's upstream"),
            ("compact", "/v1/responses/compact", "OpenAI's compaction, by the model's upstream"),
        )
    ),
    *(
        Operation(
            method,
            f"/proxy/{{definition}}{path}",
            "proxy.kept",
            "What OpenAI keeps by id (a stored response, a conversation), by its upstream",
            {},
            documented=False,
            raw=True,
        )
        for path, methods in (
            ("/v1/responses/{rest:path}", ("GET", "POST", "DELETE")),
            ("/v1/conversations", ("POST",)),
            ("/v1/conversations/{rest:path}", ("GET", "POST", "DELETE")),
            ("/v1/chat/completions", ("GET",)),
            ("/v1/chat/completions/{rest:path}", ("GET", "POST", "DELETE")),
        )
        for method in methods
    ),
    *(
        Operation(
            "GET",
            path,
            "proxy.base",
            "The base URL itself: the APIs served there",
            {},
            documented=False,
            raw=True,
        )
        for path in ("/proxy/{definition}", "/proxy/{definition}/v1")
    ),
    Operation(
        "GET",
        "/proxy/{definition}/v1/models",
        "proxy.models",
        "The configured models, as OpenAI or Anthropic lists them",
        {},
        documented=False,
        raw=True,
    ),
    Operation(
        "GET",
        "/proxy/{definition}/v1/models/{model:path}",
        "proxy.model",
        "One configured model, as OpenAI or Anthropic describes it",
        {},
        documented=False,
        raw=True,
    ),
)


def by_client(method: str) -> tuple[Operation, ...]:
    """The operations a client method sends (``simulate`` sends two: stored and inline)."""
    found = tuple(op for op in TABLE if op.client == method)
    if not found:
        raise KeyError(f"no operation of the route table is sent by the client method {method!r}")
    return found
