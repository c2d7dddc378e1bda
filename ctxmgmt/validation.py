"""Definition validation: the envelope schema first, then each manager's config.

Every problem is reported at once, each with its JSON pointer, a message that says
how to fix it, and (for files) its line.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from . import _resources
from .errors import Problem
from .loader import Document, escape
from .registry import ManagerRegistry, default_registry
from .types import HOOK_NAMES

__all__ = ["validate_definition"]

_TYPE_WORDS = {
    "integer": "a whole number",
    "number": "a number",
    "string": "a string",
    "object": "a mapping",
    "array": "a list",
    "boolean": "true or false",
}


@cache
def _schema_registry() -> Registry[Any]:
    root = _resources.data_dir("schemas")
    resources = [
        (
            path.relative_to(root).as_posix(),
            Resource.from_contents(_resources.schema(path.relative_to(root).as_posix()), DRAFT202012),
        )
        for path in sorted(root.rglob("*.schema.json"))
    ]
    return Registry().with_resources(resources)


@cache
def _validator(ref: str) -> Draft202012Validator:
    """A validator for a schema of ``schemas/``, by relative path (refs resolve between files)."""
    return Draft202012Validator({"$ref": ref}, registry=_schema_registry())


def _envelope_validator() -> Draft202012Validator:
    return _validator("definition.schema.json")


def _activation_validator() -> Draft202012Validator:
    return _validator("definition.schema.json#/$defs/activation")


def validate_definition(
    doc: Document | Mapping[str, Any] | Any,
    *,
    registry: ManagerRegistry | None = None,
    model_ids: Iterable[str] | None = None,
) -> list[Problem]:
    """Every problem of a definition (errors, and warnings such as unknown model ids)."""
    if not isinstance(doc, Document):
        doc = Document(doc, {}, [], None)
    registry = registry or default_registry
    problems = list(doc.problems)
    data = doc.data
    if doc.problems and data is None:
        return problems
    if not isinstance(data, Mapping):
        problems.append(Problem("", "a definition must be a mapping with name, description and hooks"))
        return _locate(problems, doc)
    deep = _too_deep(data)
    if deep is not None:  # before JSON Schema, whose validator recurses with the nesting
        problems.append(deep)
        return _locate(problems, doc)
    problems.extend(_schema_problems(_envelope_validator(), data, "", per_type=True))
    hooks = data.get("hooks")
    if isinstance(hooks, Mapping):
        problems.extend(_hook_problems(hooks, registry, model_ids))
    return _locate(problems, doc)


MAX_ANY_OF_DEPTH = 8


_JSON_INT = 2**63
"""Integers beyond this many are not numbers a definition holds (nor JSON's own range)."""


def _too_deep(data: Any) -> Problem | None:
    """A problem where ``any_of`` nests more than MAX_ANY_OF_DEPTH deep, or where a value is
    not plain JSON (YAML can write a timestamp, a set, binary data, NaN or a huge integer,
    which no definition holds and no answer could carry). An iterative walk."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, pointer, depth = stack.pop()
        if isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, str):
                    return Problem(pointer, f"a key must be a string (got {type(key).__name__}); quote it")
                nested = depth + 1 if key == "any_of" else depth
                if nested > MAX_ANY_OF_DEPTH:
                    return Problem(
                        f"{pointer}/{key}",
                        f"any_of may nest at most {MAX_ANY_OF_DEPTH} deep; flatten the rules",
                    )
                stack.append((item, f"{pointer}/{escape(key)}", nested))
        elif isinstance(value, list):
            stack.extend((item, f"{pointer}/{i}", depth) for i, item in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            return Problem(pointer, f"must be a finite number (got {value})")
        elif isinstance(value, int) and not isinstance(value, bool) and not -_JSON_INT < value < _JSON_INT:
            return Problem(pointer, "is too large a number; use one of at most 18 digits")
        elif not isinstance(value, (str, int, float, bool)) and value is not None:
            kind = type(value).__name__
            return Problem(pointer, f"must be a JSON value, not a YAML {kind}; quote it if it is text")
    return None


def _locate(problems: list[Problem], doc: Document) -> list[Problem]:
    located = [
        Problem(p.pointer, p.message, p.line or doc.line_of(p.pointer), doc.source, p.severity)
        for p in problems
    ]
    # One message per pointer, in file order.
    unique = {(p.pointer, p.message): p for p in located}
    return sorted(unique.values(), key=lambda p: (p.line or 0, p.pointer))


def _hook_problems(
    hooks: Mapping[Any, Any], registry: ManagerRegistry, model_ids: Iterable[str] | None
) -> list[Problem]:
    problems: list[Problem] = []
    spelled: dict[str, str] = {}
    for key, entries in hooks.items():
        key = str(key)
        lower = key.lower()
        if lower in spelled:
            problems.append(
                Problem(
                    f"/hooks/{escape(key)}",
                    f"hook {lower} is given twice (as {spelled[lower]!r} and {key!r}); "
                    "merge them into one list",
                )
            )
        spelled.setdefault(lower, key)
        if not isinstance(entries, list):
            continue
        for index, entry in enumerate(entries):
            if isinstance(entry, Mapping):
                base = f"/hooks/{escape(key)}/{index}"
                problems.extend(_entry_problems(entry, base, registry, model_ids))
    return problems


def _entry_problems(
    entry: Mapping[str, Any],
    base: str,
    registry: ManagerRegistry,
    model_ids: Iterable[str] | None,
) -> list[Problem]:
    type_name = entry.get("type")
    if not isinstance(type_name, str) or not type_name:
        return []
    config = entry.get("config", {})
    if not isinstance(config, Mapping):
        return []
    problems: list[Problem] = []
    if "activation" in config:
        # OpenSearch's place for activation; the top-level one wins, but both must be valid.
        problems.extend(
            _schema_problems(_activation_validator(), config["activation"], f"{base}/config/activation")
        )
    cls = registry.get(type_name)
    if cls is None:
        known = registry.names()
        hint = did_you_mean(type_name, known)
        loaded = registry.load_errors.get(type_name)
        reason = f"; its plugin failed to load: {loaded}" if loaded else ""
        problems.append(
            Problem(
                f"{base}/type",
                f"unknown manager type {type_name!r}{reason}{hint}; known types: {', '.join(known)}",
            )
        )
        return problems
    own = {k: v for k, v in config.items() if k != "activation"}
    if registry.is_builtin(type_name):
        validator = _validator(f"managers/{type_name}.schema.json")
    else:
        validator = Draft202012Validator(cls.config_schema)
    problems.extend(_schema_problems(validator, own, f"{base}/config"))
    check = getattr(cls, "check_config", None)
    if callable(check) and not problems:
        problems += [Problem(f"{base}/config{pointer}", message) for pointer, message in check(own)]
    model_id = own.get("summarization_model_id")
    if model_ids is not None and isinstance(model_id, str) and model_id not in set(model_ids):
        problems.append(
            Problem(
                f"{base}/config/summarization_model_id",
                f"model {model_id!r} is not in the models configuration; the offline "
                "summariser cannot stand in for it, so this manager will fail open",
                severity="warning",
            )
        )
    return problems


def _schema_problems(
    validator: Draft202012Validator, instance: Any, base: str, *, per_type: bool = False
) -> list[Problem]:
    problems = []
    for error in validator.iter_errors(instance):
        if per_type and "then" in error.schema_path:
            continue  # in the envelope: built-in configs are checked per type, with better messages
        problems.extend(_explain(error, base))
    return problems


def _pointer(base: str, path: Iterable[Any]) -> str:
    return base + "".join(f"/{escape(p)}" for p in path)


def _explain(error: ValidationError, base: str) -> list[Problem]:
    pointer = _pointer(base, error.absolute_path)
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    kind = str(error.validator)
    value: Any = error.validator_value
    instance = error.instance
    hint = schema.get("x-hint")
    if kind == "required":
        missing = [k for k in value if isinstance(instance, Mapping) and k not in instance]
        return [Problem(f"{pointer}/{escape(k)}", "is required") for k in missing]
    if kind == "additionalProperties" and isinstance(instance, Mapping):
        allowed = sorted(schema.get("properties", {}))
        extras = [k for k in instance if k not in allowed]
        return [
            Problem(
                f"{pointer}/{escape(k)}",
                f"unknown key{did_you_mean(str(k), allowed)}; allowed keys: {', '.join(allowed)}",
            )
            for k in extras
        ]
    if "propertyNames" in error.schema_path:
        # The error is about a key; jsonschema reports it on the parent object.
        key = str(instance)
        parent = pointer
        if base.endswith("/hooks") or pointer.endswith("/hooks"):
            return [
                Problem(
                    f"{parent}/{escape(key)}",
                    f"unknown hook {key!r}{did_you_mean(key.lower(), HOOK_NAMES)}; "
                    f"hooks are {', '.join(HOOK_NAMES)} (any case)",
                )
            ]
        return [Problem(f"{parent}/{escape(key)}", f"invalid key {key!r}")]
    explain: Callable[[Any, Any], str] = _MESSAGES.get(kind, _generic)
    message = explain(value, instance)
    if hint:
        message = f"{message} ({hint})"
    return [Problem(pointer, message)]


def _generic(value: Any, instance: Any) -> str:
    return f"is invalid ({value!r})"


def _type_message(value: Any, instance: Any) -> str:
    names = [value] if isinstance(value, str) else list(value)
    wanted = " or ".join(_TYPE_WORDS.get(n, n) for n in names)
    return f"must be {wanted} (got {_show(instance)})"


def _enum_message(value: Any, instance: Any) -> str:
    options = [str(v) for v in value]
    return (
        f"must be one of {', '.join(options)} (got {_show(instance)}){did_you_mean(str(instance), options)}"
    )


_MESSAGES: dict[str, Callable[[Any, Any], str]] = {
    "type": _type_message,
    "enum": _enum_message,
    "const": lambda v, i: f"must be {v!r}",
    "minimum": lambda v, i: f"must be >= {v} (got {i})",
    "maximum": lambda v, i: f"must be <= {v} (got {i})",
    "exclusiveMinimum": lambda v, i: f"must be > {v} (got {i})",
    "exclusiveMaximum": lambda v, i: f"must be < {v} (got {i})",
    "minLength": lambda v, i: "must not be empty" if v == 1 else f"must be at least {v} characters",
    "maxLength": lambda v, i: f"must be at most {v} characters",
    "minItems": lambda v, i: f"must have at least {v} item{'s' * (v != 1)}",
    "minProperties": lambda v, i: "must not be empty",
    "pattern": lambda v, i: f"{_show(i)} has a form that is not allowed",
    "not": lambda v, i: f"{_show(i)} is reserved: names starting with '_' are API verbs such as _simulate",
}


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the option closest to a mistyped word, or nothing."""
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
