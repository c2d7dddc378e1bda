"""The OpenAPI 3.1 document: its paths and parameters from the route table
(:mod:`ctxmgmt.api.routes`), its definition schema the one in schemas/, not a copy."""

from __future__ import annotations

import copy
import json
from functools import cache
from typing import Any

from .. import _resources
from .._version import __version__
from ..formats import FORMAT_NAMES
from ..types import HOOK_NAMES
from .params import MAX_INSTRUCTION, SIMULATION_FIELDS
from .routes import TABLE, Operation, ref

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


def _op(operation: Operation) -> dict[str, Any]:
    """One operation of the document, from its entry in the route table."""
    ok_response = {"description": "OK", "content": {"application/json": {"schema": operation.ok}}}
    op: dict[str, Any] = {"summary": operation.summary, "responses": {"200": ok_response}}
    body = operation.body
    codes = {*operation.errors, *_ANY_ERRORS, *(_BODY_ERRORS if body is not None else ())}
    for code in sorted(codes):
        op["responses"][str(code)] = _error()
    if operation.semantic:
        op["description"] = SEMANTIC + operation.semantic
        op[SEMANTIC_KEY] = operation.semantic
        op["responses"]["400"] = {
            "description": "Malformed, or refused for a rule the schema cannot state: " + operation.semantic,
            "content": {"application/json": {"schema": ref("ErrorBody")}},
        }
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    if operation.params:
        op["parameters"] = [{"$ref": f"#/components/parameters/{p.key}"} for p in operation.params]
    return op


def _paths() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for operation in TABLE:
        if operation.documented:
            paths.setdefault(operation.path, {})[operation.method.lower()] = _op(operation)
    return paths


def _parameters() -> dict[str, Any]:
    """Each parameter of the table once, by its key (two bounds of one name have two keys)."""
    out: dict[str, Any] = {}
    for operation in TABLE:
        for param in operation.params if operation.documented else ():
            stated = param.openapi()
            assert out.setdefault(param.key, stated) == stated, f"two parameters {param.key!r}"
    return out


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
            "instruction": {"type": "string", "maxLength": MAX_INSTRUCTION},
            "parameters": {
                "type": "object",
                "properties": {
                    "memory_id": {"type": "string", "minLength": 1},
                    "instruction": {"type": "string", "maxLength": MAX_INSTRUCTION},
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
        "description": f"{', '.join(HOOK_NAMES[:-1])} or {HOOK_NAMES[-1]}, in any case",
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
                "enum": [*FORMAT_NAMES, None],
                "description": "the messages' format; detected from them when left out",
            },
            "tools": {"type": "array", "items": {"type": "object"}},
            "model": {"type": ["string", "null"]},
            "context_window": {"type": ["integer", "null"], "minimum": 1},
            "max_output_tokens": {
                "type": ["integer", "null"],
                "minimum": 1,
                "description": "the reply's limit (max_tokens): the fit step keeps at least this free",
            },
            "state": {"type": "object"},
        },
    }
    simulation: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "hook": hook,
            "context": ref("Context"),
            "definition": ref("DefinitionBody"),
            "context_management": ref("DefinitionBody"),
        },
    }
    assert tuple(simulation["properties"]) == SIMULATION_FIELDS, "the handler takes these fields"
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
    return {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "ctxmgmt registry",
            "version": __version__,
            "description": "Context-management definitions, in OpenSearch ml-commons' shape.",
        },
        "paths": _paths(),
        "components": {
            "schemas": components,
            "responses": {
                "Error": {
                    "description": "An error, in OpenSearch's shape",
                    "content": {"application/json": {"schema": ref("ErrorBody")}},
                }
            },
            "parameters": _parameters(),
            "securitySchemes": {
                "apiKey": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Only when server.api_keys is configured",
                }
            },
        },
    }
