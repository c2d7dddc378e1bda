"""The models configuration: a YAML file with a ``models:`` mapping (see :mod:`ctxmgmt.llm.client`
for the format), found through ``--config`` or ``CTXMGMT_CONFIG``."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from .. import _resources
from ..cache import Pricing
from ..errors import ConfigError, LLMError, Problem
from ..loader import escape, load_document
from ..validation import did_you_mean

__all__ = ["CONFIG_ENV", "ModelConfig", "ModelsConfig", "load_models"]

ANTHROPIC_VERSION = "2023-06-01"

CONFIG_ENV = "CTXMGMT_CONFIG"
DEFAULT_MAX_TOKENS = 4096
"""The reply's limit sent to Anthropic when the model's configuration gives no max_tokens."""
DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
"""A model's reply is refused past this many bytes (decoded) unless its configuration says."""
DEFAULT_MAX_STREAM_BYTES = 128 * 1024 * 1024
"""A stream passed on as it arrives: its events are many times a whole answer's bytes."""


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """One chat endpoint: OpenAI-compatible, or Anthropic's Messages API."""

    id: str
    base_url: str
    model: str
    provider: str = "openai"
    """openai: ``{base_url}/chat/completions``; anthropic: ``{base_url}/messages``."""
    api_key_env: str | None = None
    context_window: int | None = None
    timeout: float = 600.0
    """Seconds for the whole call: connecting, the headers, the body, and every retry (the
    providers' SDKs' default: a long reasoning answer is not cut short)."""
    max_retries: int = 2
    max_connections: int = 10
    """Connections kept open to this endpoint at most (keep-alive, reused across calls)."""
    keep_alive_seconds: float = 30.0
    """An idle kept-alive connection is closed after this long."""
    max_tokens: int | None = None
    """The reply's limit (Anthropic: ``max_tokens``, DEFAULT_MAX_TOKENS when not given)."""
    anthropic_version: str = ANTHROPIC_VERSION
    cache_breakpoints: bool = True
    """Anthropic: mark the stable prefix with ``cache_control`` breakpoints."""
    pricing: Pricing | None = None
    """Prices per million tokens: an execution's estimated cost."""
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    """A longer reply (decoded) is refused as it arrives: it is never read whole."""
    max_stream_bytes: int = DEFAULT_MAX_STREAM_BYTES
    """A streamed answer the proxy passes on as it arrives is ended past this many bytes."""

    @property
    def reply_limit(self) -> int | None:
        """The reply's limit the client sends (None: the endpoint's own, OpenAI-compatible)."""
        return self.max_tokens or (DEFAULT_MAX_TOKENS if self.provider == "anthropic" else None)

    def api_key(self) -> str | None:
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise LLMError(
                f"the environment variable {self.api_key_env} (api_key_env) is not set; set it, or "
                "leave api_key_env out of the model's configuration for an endpoint without a key",
                model_id=self.id,
            )
        return key


_MODEL_NAME = (
    "is not a model name: 1-200 letters, digits and _ . : / @ + - "
    "(e.g. gpt-4o, anthropic/claude-sonnet-4-5, claude-sonnet-4-5@20250929)"
)
_BASE_URL = (
    "must be an http:// or https:// URL without a query or fragment, e.g. https://api.openai.com/v1 "
    "(the API's paths are appended to it; a client's query goes upstream through the proxy)"
)


def _said(error: Any) -> str:
    """A schema error as a user reads it: a base_url's pattern in words, not as a regex."""
    if error.validator == "pattern" and list(error.absolute_path)[-1:] == ["base_url"]:
        return f"{error.instance!r} {_BASE_URL}"
    if error.validator == "pattern" and "propertyNames" in error.absolute_schema_path:
        return f"{str(error.instance)[:100]!r} {_MODEL_NAME}"
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = [k for k in error.schema.get("properties") or {} if not k.startswith("$")]
        said = []
        for key in [k for k in error.instance if k not in allowed][:5]:
            said.append(f"{str(key)[:60]!r} is not a setting here{did_you_mean(str(key), allowed)}")
        if said:
            return f"{'; '.join(said)}; the settings here are {', '.join(allowed)}"
    return str(error.message)


class ModelsConfig(Mapping[str, ModelConfig]):
    """Model id -> endpoint, from the ``models:`` mapping of the configuration."""

    def __init__(self, models: Mapping[str, ModelConfig] | None = None) -> None:
        self._models = dict(models or {})

    def __getitem__(self, model_id: str) -> ModelConfig:
        try:
            return self._models[model_id]
        except KeyError:
            known = ", ".join(sorted(self._models)) or "none"
            raise LLMError(
                f"not in the models configuration (configured: {known})", model_id=model_id
            ) from None

    def __contains__(self, model_id: object) -> bool:
        return model_id in self._models

    def get(self, model_id: str, default: Any = None) -> Any:
        return self._models.get(model_id, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._models)

    def __len__(self) -> int:
        return len(self._models)

    @classmethod
    def from_dict(cls, data: Any, source: str | None = None) -> ModelsConfig:
        validator = Draft202012Validator(_resources.schema("config.schema.json"))
        problems = [
            Problem("".join(f"/{escape(p)}" for p in e.absolute_path), _said(e), None, source)
            for e in validator.iter_errors(data if data is not None else {})
        ]
        if problems:
            raise ConfigError(problems)
        models = {
            model_id: ModelConfig(
                id=model_id,
                **{k: v for k, v in spec.items() if k != "pricing"},
                pricing=Pricing.from_dict(spec["pricing"]) if "pricing" in spec else None,
            )
            for model_id, spec in (data or {}).get("models", {}).items()
        }
        return cls(models)


def load_models(path: str | Path | None = None) -> ModelsConfig:
    """The models configuration from ``path``, or ``$CTXMGMT_CONFIG``, or none."""
    path = path or os.environ.get(CONFIG_ENV)
    if not path:
        return ModelsConfig()
    doc = load_document(path)
    if doc.problems:
        raise ConfigError(doc.problems)
    return ModelsConfig.from_dict(doc.data, str(path))
