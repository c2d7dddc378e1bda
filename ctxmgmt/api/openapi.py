"""The OpenAPI 3.1 document. Its definition schema is the one in schemas/, not a copy."""

from __future__ import annotations

import copy
import json
from functools import cache
from typing import Any

from .. import __version__, _resources
from .requests import MAX_VERSION

_DEF = "#/components/schemas/ContextManagementDefinition"


def _rewrite(node: Any, base: str) -> Any:
    """Point file-relative $refs of schemas/ at OpenAPI components."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                if value.startswith("#"):
                    value = base + value[1:]
                elif value.endswith(".schema.json"):  # managers/X.schema.json, or a sibling X.schema.json
                    name = value.rsplit("/", 1)[-1].replace(".schema.json", "Config")
                    value = "#/components/schemas/" + name
                elif value.startswith("../definition.schema.json#"):
                    value = _DEF + value.split("#", 1)[1]
            out[key] = _rewrite(value, base)
        return out
    if isinstance(node, list):
        return [_rewrite(v, base) for v in node]
    return node


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _error() -> dict[str, Any]:
    return {"$ref": "#/components/responses/Error"}


_ANY_ERRORS = (400, 403, 500, 503, 507)
"""Any request may have a malformed Host (400), come from a host name or a page the server
does not answer (403, see :mod:`ctxmgmt.api.origins`), or meet a fault of the server (500),
an unreachable database (503) or a full disk (507, ``storage_full``)."""
_BODY_ERRORS = (400, 408, 413, 415)
"""A request with a body may be malformed JSON, too slow (408), too large (413) or not
``application/json`` (415)."""
SEMANTIC = (
    "A request that this schema accepts can still be refused with a 400 that names the field, "
    "for what a schema cannot say: "
)
SEMANTIC_KEY = "x-semantic-400"
"""The operations that refuse some schema-valid requests with a 400 say so here, with the
rules: a client (and the schemathesis test) reads which 400s the contract states."""


def _op(
    summary: str,
    ok: dict[str, Any],
    *,
    body: dict[str, Any] | None = None,
    params: tuple[str, ...] = (),
    errors: tuple[int, ...] = (400, 401, 403),
    semantic: str | None = None,
) -> dict[str, Any]:
    ok_response = {"description": "OK", "content": {"application/json": {"schema": ok}}}
    op: dict[str, Any] = {"summary": summary, "responses": {"200": ok_response}}
    codes = {*errors, *_ANY_ERRORS, *(_BODY_ERRORS if body is not None else ())}
    for code in sorted(codes):
        op["responses"][str(code)] = _error()
    if semantic:
        op["description"] = SEMANTIC + semantic
        op[SEMANTIC_KEY] = semantic
        op["responses"]["400"] = {
            "description": "Malformed, or refused for a rule the schema cannot state: " + semantic,
            "content": {"application/json": {"schema": ref("ErrorBody")}},
        }
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    if params:
        op["parameters"] = [{"$ref": f"#/components/parameters/{p}"} for p in params]
    return op


@cache
def openapi_document() -> dict[str, Any]:
    root = _resources.data_dir("schemas")
    envelope = _rewrite(copy.deepcopy(_resources.schema("definition.schema.json")), _DEF)
    envelope.pop("$schema", None)
    components: dict[str, Any] = {"ContextManagementDefinition": envelope}
    for path in sorted((root / "managers").glob("*.schema.json")):
        schema = _rewrite(json.loads(path.read_text()), "#")
        schema.pop("$schema", None)
        components[path.name.replace(".schema.json", "Config")] = schema
    # As stored: the definition with its metadata (the envelope allows no other keys).
    stored = copy.deepcopy(envelope)
    stored["title"] = "A stored definition"
    stored["properties"].update(
        {
            "version": {"type": "integer"},
            "created_time": {"type": "integer", "description": "epoch milliseconds"},
            "last_modified": {"type": "integer", "description": "epoch milliseconds"},
            "created_by": {"type": ["string", "null"]},
        }
    )
    components["StoredDefinition"] = stored
    # As sent to create or replace: the name may be left out (the path gives it).
    body = copy.deepcopy(envelope)
    body["title"] = "A definition to store"
    body["required"] = [key for key in body["required"] if key != "name"]
    components["DefinitionBody"] = body
    agent = _rewrite(
        copy.deepcopy(_resources.schema("agent.schema.json")), "#/components/schemas/AgentRegistration"
    )
    agent.pop("$schema", None)
    agent["properties"]["context_management"] = {"$ref": _DEF}
    # A registration names a stored definition or gives one inline, never both.
    agent["not"] = {"required": ["context_management_name", "context_management"]}
    components["AgentRegistration"] = agent
    components["Execution"] = {
        "type": "object",
        "required": ["parameters"],
        "properties": {
            "parameters": {
                "type": "object",
                "required": ["question"],
                "properties": {
                    "question": {"type": "string", "minLength": 1},
                    "context_management_name": {"type": "string", "minLength": 1},
                    "memory_id": {"type": "string", "minLength": 1},
                },
            },
            "context_management_name": {"type": "string", "minLength": 1},
            "memory_id": {"type": "string", "minLength": 1},
        },
    }
    components["ExecutionResult"] = {
        "type": "object",
        "properties": {
            "inference_results": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "output": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {"name": {"type": "string"}, "result": {}},
                            },
                        }
                    },
                },
            }
        },
    }
    components["Compaction"] = {
        "type": "object",
        "properties": {
            "memory_id": {"type": "string", "minLength": 1},
            "instruction": {"type": "string", "maxLength": 2000},
            "parameters": {
                "type": "object",
                "properties": {
                    "memory_id": {"type": "string", "minLength": 1},
                    "instruction": {"type": "string", "maxLength": 2000},
                },
            },
        },
    }
    components["Status"] = {
        "type": "object",
        "properties": {
            "context_management_name": {"type": "string"},
            "status": {"type": "string"},
            "version": {"type": "integer"},
        },
    }
    hook = {
        "type": "string",
        "description": "pre_llm, post_tool or post_memory, in any case",
        "pattern": envelope["properties"]["hooks"]["propertyNames"]["pattern"],
        "default": "pre_llm",
    }
    components["Context"] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "system_prompt": {
                "description": "a string, or (Anthropic) a list of text blocks",
                "oneOf": [
                    {"type": ["string", "null"]},
                    {"type": "array", "items": {"type": "object"}},
                ],
            },
            "messages": {
                "type": "array",
                "items": {"type": "object"},
                "description": "the provider's own messages: OpenAI chat messages, Anthropic messages "
                "or OpenAI Responses input items",
            },
            "format": {
                "type": ["string", "null"],
                "enum": ["openai_chat", "anthropic", "openai_responses", None],
                "description": "the messages' format; detected from them when left out",
            },
            "tools": {"type": "array", "items": {"type": "object"}},
            "model": {"type": ["string", "null"]},
            "context_window": {"type": ["integer", "null"], "minimum": 1},
            "state": {"type": "object"},
        },
    }
    simulation = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "hook": hook,
            "context": ref("Context"),
            "definition": ref("DefinitionBody"),
            "context_management": ref("DefinitionBody"),
        },
    }
    summary_fields = {
        "execution_id": {"type": "string"},
        "agent_id": {"type": "string"},
        "memory_id": {"type": "string"},
        "definition": {"type": ["string", "null"]},
        "definition_version": {"type": ["integer", "null"]},
        "definition_source": {"enum": ["request", "agent", "inline", "none"]},
        "started_time": {"type": "integer"},
        "ended_time": {"type": "integer"},
        "status": {"enum": ["finished", "max_iteration", "error"]},
        "llm_calls": {"type": "integer"},
        "max_request_tokens": {"type": "integer", "description": "the largest request, calibrated"},
        "context_window": {"type": ["integer", "null"]},
    }
    components["ExecutionSummary"] = {"type": "object", "properties": summary_fields}
    components["ExecutionRecord"] = {
        "type": "object",
        "properties": {
            **summary_fields,
            "model": {"type": ["string", "null"]},
            "question": {"type": ["string", "null"]},
            "error": {"type": ["string", "null"]},
            "response": {"type": ["string", "null"]},
            "calls": {
                "type": "array",
                "description": "per LLM call: tokens before and after the managers, and usage",
                "items": {"type": "object"},
            },
            "hooks": {
                "type": "array",
                "description": "per hook run: hook, iteration, call and its trace entries",
                "items": {"type": "object"},
            },
            "archived": {"type": "array", "items": {"type": "string"}},
            "thresholds": {"type": "array", "items": {"type": "object"}},
        },
    }
    components["Simulation"] = simulation
    components["InlineSimulation"] = {
        **simulation,
        "anyOf": [{"required": ["definition"]}, {"required": ["context_management"]}],
    }
    components["SimulationResult"] = {
        "type": "object",
        "properties": {
            "context": {"type": "object"},
            "trace": {"type": "array", "items": {"type": "object"}},
        },
    }
    components["ErrorBody"] = {
        "type": "object",
        "required": ["error", "status"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["type", "reason"],
                "properties": {
                    "type": {"type": "string"},
                    "reason": {"type": "string"},
                    "problems": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"pointer": {"type": "string"}, "message": {"type": "string"}},
                        },
                    },
                },
            },
            "status": {"type": "integer"},
        },
    }
    item = "/_plugins/_ml/context_management/{name}"
    agent = "/_plugins/_ml/agents/{agent_id}"
    offload = "/_plugins/_ml/offload"
    definition_rules = (
        "a manager type that is not registered, a model or tokenizer the server does not have. "
        "A name in the body is checked, then the path's name is used."
    )
    context_rules = (
        "messages an LLM API would reject (roles, tool calls without results, ...), or a "
        "context_window too small for what must stay (the system prompt, the task, the tools "
        "and the reply's reserve)."
    )
    agent_rules = (
        "context_management_name and an inline context_management together, a model the "
        "server does not have, a definition name that is not stored (the reason names the "
        "closest stored names), an invalid inline definition, a tool that is not registered."
    )
    archive = {"type": "object", "properties": {"ref": {"type": "string"}, "kind": {"type": "string"}}}
    return {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "ctxmgmt registry",
            "version": __version__,
            "description": "Context-management definitions, in OpenSearch ml-commons' shape.",
        },
        "paths": {
            "/_health": {"get": _op("Health", {"type": "object"}, errors=())},
            "/openapi.json": {"get": _op("This document", {"type": "object"}, errors=())},
            "/_plugins/_ml/context_management": {
                "get": _op(
                    "List definitions, sorted by name",
                    {
                        "type": "object",
                        "properties": {
                            "total": {"type": "integer"},
                            "context_management": {"type": "array", "items": ref("StoredDefinition")},
                        },
                    },
                    params=("from", "size", "q"),
                )
            },
            "/_plugins/_ml/context_management/_simulate": {
                "post": _op(
                    "Apply an inline definition to a context (dry run)",
                    ref("SimulationResult"),
                    body=ref("InlineSimulation"),
                    errors=(400, 401, 403, 422, 502, 504),
                    semantic=f"{definition_rules} {context_rules} A manager with on_error: fail that "
                    "fails is a 422 (context_manager_exception); a 502/504 when its model failed.",
                )
            },
            "/_plugins/_ml/context_management/_eval/{report_id}": {
                "get": _op(
                    "Get an eval report that `ctxmgmt eval --save` stored (schema ctxmgmt.eval/1)",
                    {
                        "type": "object",
                        "required": ["report_id", "created_time", "schema", "rows"],
                        "properties": {
                            "report_id": {"type": "string"},
                            "created_time": {"type": "integer"},
                            "schema": {"type": "string"},
                            "windows": {"type": "array", "items": {"type": "integer"}},
                            "definitions": {"type": "array", "items": {"type": "string"}},
                            "conversations": {"type": "array", "items": {"type": "object"}},
                            "rows": {"type": "array", "items": {"type": "object"}},
                        },
                    },
                    params=("report_id",),
                    errors=(401, 403, 404),
                )
            },
            "/_plugins/_ml/context_management/_validate": {
                "post": _op(
                    "Check a definition's YAML or JSON text, with lines (an editor's check)",
                    {
                        "type": "object",
                        "properties": {
                            "valid": {"type": "boolean"},
                            "problems": {"type": "array", "items": {"type": "object"}},
                            "definition": {"type": ["object", "null"]},
                        },
                    },
                    body={
                        "type": "object",
                        "required": ["text"],
                        "properties": {
                            "text": {"type": "string", "maxLength": 50_000, "pattern": "^[^\\x00]*$"}
                        },
                    },
                    errors=(400, 401, 403),
                    semantic="a text nesting over 32 deep (anchors and aliases are problems with a line).",
                )
            },
            item + "/_simulate": {
                "post": _op(
                    "Apply a stored definition to a context (dry run)",
                    ref("SimulationResult"),
                    body=ref("Simulation"),
                    params=("name",),
                    errors=(400, 401, 403, 404, 422, 502, 504),
                    semantic=context_rules + " A manager with on_error: fail that fails is a 422 "
                    "(a 502/504 when its model failed).",
                )
            },
            "/_plugins/_ml/agents/_register": {
                "post": _op(
                    "Register an agent",
                    {"type": "object", "properties": {"agent_id": {"type": "string"}}},
                    body=ref("AgentRegistration"),
                    errors=(400, 401, 403, 404),
                    semantic=agent_rules,
                )
            },
            "/_plugins/_ml/agents": {
                "get": _op(
                    "List agents",
                    {
                        "type": "object",
                        "properties": {"total": {"type": "integer"}, "agents": {"type": "array"}},
                    },
                    params=("from", "size"),
                )
            },
            agent: {
                "get": _op("Get an agent", {"type": "object"}, params=("agent_id",), errors=(401, 403, 404)),
                "put": _op(
                    "Replace an agent's registration",
                    {
                        "type": "object",
                        "properties": {"agent_id": {"type": "string"}, "result": {"type": "string"}},
                    },
                    body=ref("AgentRegistration"),
                    params=("agent_id",),
                    errors=(400, 401, 403, 404),
                    semantic=agent_rules,
                ),
                "delete": _op(
                    "Delete an agent", {"type": "object"}, params=("agent_id",), errors=(401, 403, 404)
                ),
            },
            agent + "/_execute": {
                "post": _op(
                    "Execute an agent",
                    ref("ExecutionResult"),
                    body=ref("Execution"),
                    params=("agent_id",),
                    errors=(400, 401, 403, 404, 409, 502, 504),
                    semantic="a question that is only white space. A definition name that is not "
                    "stored is a 404 whose reason names the closest stored names.",
                )
            },
            agent + "/executions": {
                "get": _op(
                    "List an agent's executions, newest first",
                    {
                        "type": "object",
                        "properties": {
                            "total": {"type": "integer"},
                            "executions": {"type": "array", "items": ref("ExecutionSummary")},
                        },
                    },
                    params=("agent_id", "from", "size"),
                    errors=(400, 401, 403, 404),
                )
            },
            "/_plugins/_ml/executions/{execution_id}": {
                "get": _op(
                    "Get an execution's record",
                    ref("ExecutionRecord"),
                    params=("execution_id",),
                    errors=(401, 403, 404),
                )
            },
            "/_plugins/_ml/memory/{memory_id}": {
                "get": _op(
                    "Get a conversation's state and the managed messages the model saw last",
                    {
                        "type": "object",
                        "properties": {
                            "memory_id": {"type": "string"},
                            "agent_id": {"type": "string"},
                            "state": {"type": "object"},
                            "view": {"type": "array", "items": {"type": "object"}},
                        },
                    },
                    params=("memory_id",),
                    errors=(401, 403, 404),
                )
            },
            "/_plugins/_ml/memory/{memory_id}/messages": {
                "get": _op(
                    "Get a conversation's complete stored record, in order",
                    {
                        "type": "object",
                        "properties": {
                            "memory_id": {"type": "string"},
                            "total": {"type": "integer"},
                            "messages": {"type": "array", "items": {"type": "object"}},
                        },
                    },
                    params=("memory_id", "from", "message_size"),
                    errors=(400, 401, 403, 404),
                )
            },
            agent + "/_compact": {
                "post": _op(
                    "Summarise a conversation now",
                    {"type": "object"},
                    body=ref("Compaction"),
                    params=("agent_id",),
                    errors=(400, 401, 403, 404, 409, 502, 504),
                    semantic="a memory id with no conversation (404).",
                )
            },
            item: {
                "post": _op(
                    "Create a definition",
                    ref("Status"),
                    body=ref("DefinitionBody"),
                    params=("name",),
                    errors=(400, 401, 403, 409),
                    semantic=definition_rules,
                ),
                "get": _op(
                    "Get a definition", ref("StoredDefinition"), params=("name",), errors=(400, 401, 403, 404)
                ),
                "put": _op(
                    "Replace a definition",
                    ref("Status"),
                    body=ref("DefinitionBody"),
                    params=("name", "If-Match", "if_version"),
                    errors=(400, 401, 403, 404, 409),
                    semantic=definition_rules + " An If-Match and an if_version that disagree.",
                ),
                "delete": _op(
                    "Delete a definition",
                    ref("Status"),
                    params=("name", "force"),
                    errors=(400, 401, 403, 404, 409),
                ),
            },
            offload: {
                "get": _op(
                    "List a session's archives, oldest first",
                    {
                        "type": "object",
                        "properties": {
                            "archives": {"type": "array", "items": archive},
                            "damaged": {"type": "integer", "description": "records torn by a crash"},
                        },
                    },
                    params=("session",),
                    errors=(400, 401, 403, 404),
                )
            },
            offload + "/_search": {
                "get": _op(
                    "Search a session's archives (RE2 syntax, one line per hit)",
                    {
                        "type": "object",
                        "properties": {
                            "hits": {"type": "array", "items": {"type": "object"}},
                            "truncated": {"type": "boolean"},
                            "damaged": {"type": "integer"},
                        },
                    },
                    params=("session", "pattern", "search_size"),
                    errors=(400, 401, 403, 404),
                    semantic="a pattern that is not RE2 syntax (backreferences, lookaround) or that "
                    "compiles too large.",
                )
            },
            offload + "/{ref}": {
                "get": _op(
                    "Read archived content back",
                    {
                        "type": "object",
                        "properties": {
                            "ref": {"type": "string"},
                            "text": {"type": "string"},
                            "offset": {"type": "integer"},
                            "total": {"type": "integer"},
                            "unit": {"enum": ["chars", "lines"]},
                            "next_offset": {"type": ["integer", "null"]},
                        },
                    },
                    params=("ref", "session", "offset", "limit", "unit"),
                    errors=(400, 401, 403, 404),
                )
            },
        },
        "components": {
            "schemas": components,
            "responses": {
                "Error": {
                    "description": "An error, in OpenSearch's shape",
                    "content": {"application/json": {"schema": ref("ErrorBody")}},
                }
            },
            "parameters": {
                "agent_id": {
                    "name": "agent_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                },
                "report_id": {
                    "name": "report_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                },
                "execution_id": {
                    "name": "execution_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                },
                "memory_id": {
                    "name": "memory_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                },
                "message_size": {
                    "name": "size",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
                },
                "name": {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "description": "Names starting with _ are reserved for verbs such as _simulate",
                    "schema": {"type": "string", "pattern": "^[a-z0-9-][a-z0-9_-]{0,48}$"},
                },
                "from": {
                    "name": "from",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 0, "maximum": 10**9, "default": 0},
                },
                "size": {
                    "name": "size",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 10},
                },
                "q": {
                    "name": "q",
                    "in": "query",
                    "description": "Keep names containing this text",
                    "schema": {"type": "string", "maxLength": 100, "pattern": "^[^\\x00]*$"},
                },
                "If-Match": {
                    "name": "If-Match",
                    "in": "header",
                    "description": "The expected version (1 to 2147483647), bare or as an ETag",
                    "schema": {"type": "string", "pattern": '^(W/)?("[1-9][0-9]{0,9}"|[1-9][0-9]{0,9})$'},
                },
                "if_version": {
                    "name": "if_version",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 1, "maximum": MAX_VERSION},
                },
                "force": {"name": "force", "in": "query", "schema": {"type": "boolean", "default": False}},
                "session": {
                    "name": "session",
                    "in": "query",
                    "required": True,
                    "description": "The conversation (memory id) the content belongs to",
                    "schema": {"type": "string", "minLength": 1, "maxLength": 512, "pattern": "^[^\\x00]+$"},
                },
                "pattern": {
                    "name": "pattern",
                    "in": "query",
                    "required": True,
                    "description": "A regular expression in RE2 syntax (no backreferences or lookaround)",
                    "schema": {"type": "string", "minLength": 1, "maxLength": 200},
                },
                "search_size": {
                    "name": "size",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 1, "maximum": 200, "default": 20},
                },
                "ref": {
                    "name": "ref",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "pattern": "^[tm]-[0-9a-f]{32}$"},
                },
                "offset": {
                    "name": "offset",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 0, "maximum": 10**12, "default": 0},
                },
                "limit": {
                    "name": "limit",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 1, "maximum": 10**7, "default": 20000},
                },
                "unit": {
                    "name": "unit",
                    "in": "query",
                    "schema": {"enum": ["chars", "lines"], "default": "chars"},
                },
            },
            "securitySchemes": {
                "apiKey": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Only when server.api_keys is configured",
                }
            },
        },
    }
