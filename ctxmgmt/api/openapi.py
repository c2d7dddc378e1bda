"""The OpenAPI 3.1 document. Its definition schema is the one in schemas/, not a copy."""

from __future__ import annotations

import copy
import json
from functools import cache
from typing import Any

from .. import __version__, _resources

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


def _op(
    summary: str,
    ok: dict[str, Any],
    *,
    body: dict[str, Any] | None = None,
    params: tuple[str, ...] = (),
    errors: tuple[int, ...] = (400, 401, 403),
) -> dict[str, Any]:
    ok_response = {"description": "OK", "content": {"application/json": {"schema": ok}}}
    op: dict[str, Any] = {"summary": summary, "responses": {"200": ok_response}}
    for code in errors:
        op["responses"][str(code)] = _error()
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
    stored = {
        "allOf": [
            {"$ref": _DEF},
            {
                "type": "object",
                "properties": {
                    "version": {"type": "integer"},
                    "created_time": {"type": "integer", "description": "epoch milliseconds"},
                    "last_modified": {"type": "integer"},
                    "created_by": {"type": ["string", "null"]},
                },
            },
        ]
    }
    components["StoredDefinition"] = stored
    agent = _rewrite(
        copy.deepcopy(_resources.schema("agent.schema.json")), "#/components/schemas/AgentRegistration"
    )
    agent.pop("$schema", None)
    agent["properties"]["context_management"] = {"$ref": _DEF}
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
                    "context_management_name": {"type": "string"},
                    "memory_id": {"type": "string"},
                },
            },
            "context_management_name": {"type": "string"},
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
    components["Status"] = {
        "type": "object",
        "properties": {
            "context_management_name": {"type": "string"},
            "status": {"type": "string"},
            "version": {"type": "integer"},
        },
    }
    components["Simulation"] = {
        "type": "object",
        "required": ["context"],
        "properties": {
            "hook": {"enum": ["pre_llm", "post_tool", "post_memory"], "default": "pre_llm"},
            "context": {
                "type": "object",
                "properties": {
                    "system_prompt": {"type": ["string", "null"]},
                    "messages": {"type": "array", "items": {"type": "object"}},
                    "tools": {"type": "array", "items": {"type": "object"}},
                    "model": {"type": ["string", "null"]},
                    "context_window": {"type": ["integer", "null"]},
                    "state": {"type": "object"},
                },
            },
            "definition": {"$ref": _DEF},
        },
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
    return {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "ctxmgmt registry",
            "version": __version__,
            "description": "Context-management definitions, in OpenSearch ml-commons' shape.",
        },
        "paths": {
            "/_health": {"get": _op("Health", {"type": "object"}, errors=(503,))},
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
                    params=(
                        "from",
                        "size",
                        "q",
                    ),
                )
            },
            "/_plugins/_ml/context_management/_simulate": {
                "post": _op(
                    "Apply an inline definition to a context (dry run)",
                    ref("SimulationResult"),
                    body=ref("Simulation"),
                )
            },
            item + "/_simulate": {
                "post": _op(
                    "Apply a stored definition to a context (dry run)",
                    ref("SimulationResult"),
                    body=ref("Simulation"),
                    params=("name",),
                    errors=(400, 401, 403, 404),
                )
            },
            "/_plugins/_ml/agents/_register": {
                "post": _op(
                    "Register an agent",
                    {"type": "object", "properties": {"agent_id": {"type": "string"}}},
                    body=ref("AgentRegistration"),
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
            "/_plugins/_ml/agents/{agent_id}": {
                "get": _op(
                    "Get an agent", ref("AgentRegistration"), params=("agent_id",), errors=(401, 403, 404)
                ),
                "delete": _op(
                    "Delete an agent", {"type": "object"}, params=("agent_id",), errors=(401, 403, 404)
                ),
            },
            "/_plugins/_ml/agents/{agent_id}/_execute": {
                "post": _op(
                    "Execute an agent",
                    ref("ExecutionResult"),
                    body=ref("Execution"),
                    params=("agent_id",),
                    errors=(400, 401, 403, 404, 409, 502),
                )
            },
            item: {
                "post": _op(
                    "Create a definition",
                    ref("Status"),
                    body={"$ref": _DEF},
                    params=("name",),
                    errors=(400, 401, 403, 409),
                ),
                "get": _op(
                    "Get a definition", ref("StoredDefinition"), params=("name",), errors=(400, 401, 403, 404)
                ),
                "put": _op(
                    "Replace a definition",
                    ref("Status"),
                    body={"$ref": _DEF},
                    params=(
                        "name",
                        "If-Match",
                        "if_version",
                    ),
                    errors=(400, 401, 403, 404, 409),
                ),
                "delete": _op(
                    "Delete a definition",
                    ref("Status"),
                    params=(
                        "name",
                        "force",
                    ),
                    errors=(400, 401, 403, 404, 409),
                ),
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
                "name": {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "pattern": "^[a-z0-9_-]{1,49}$"},
                },
                "from": {
                    "name": "from",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 0, "default": 0},
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
                    "schema": {"type": "string", "maxLength": 100},
                },
                "If-Match": {
                    "name": "If-Match",
                    "in": "header",
                    "description": "The expected version",
                    "schema": {"type": "string"},
                },
                "if_version": {
                    "name": "if_version",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 0},
                },
                "force": {"name": "force", "in": "query", "schema": {"type": "boolean", "default": False}},
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
