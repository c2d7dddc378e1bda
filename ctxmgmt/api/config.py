"""Server settings from the ``server:`` section of the configuration file."""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConfigError, Problem

DEFAULT_MAX_BODY = 1024 * 1024
DEFAULT_PROXY_MAX_BODY = 32 * 1024 * 1024
"""A proxied request holds an agent's whole history: its own, larger limit."""
DEFAULT_BODIES_IN_FLIGHT = 256 * 1024 * 1024
"""The bytes of request bodies held at once, over all requests in progress."""


@dataclass(frozen=True, slots=True)
class ApiKey:
    name: str
    scope: str
    digest: bytes


@dataclass(frozen=True, slots=True)
class ServerConfig:
    api_keys: tuple[ApiKey, ...] = ()
    max_body_bytes: int = DEFAULT_MAX_BODY
    offload: Mapping[str, Any] = field(default_factory=dict)
    """The ``offload:`` section: backend, root, retention_days."""
    executions: Mapping[str, Any] = field(default_factory=dict)
    """The ``executions:`` section: retention_days of the execution records."""
    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 30.0
    keep_alive_seconds: float = 5.0
    allowed_hosts: tuple[str, ...] = ()
    """Host names the server answers besides its own address (see :mod:`ctxmgmt.api.origins`)."""
    allowed_origins: tuple[str, ...] = ()
    """Origins of other web pages that may call the API."""
    proxy_max_body_bytes: int = DEFAULT_PROXY_MAX_BODY
    """The limit of a request body on the proxy's routes (``/proxy/...``)."""
    bodies_in_flight_bytes: int = DEFAULT_BODIES_IN_FLIGHT
    """The bytes of request bodies held at once, over all requests in progress (a 429 past it)."""
    _digests: dict[bytes, ApiKey] = field(default_factory=dict, repr=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ServerConfig:
        """From a validated ``server:`` mapping; keys named by environment variable must be set."""
        data = data or {}
        keys = []
        for i, spec in enumerate(data.get("api_keys", ())):
            if "key_env" in spec:
                secret = os.environ.get(spec["key_env"])
                if not secret:
                    raise ConfigError(
                        [
                            Problem(
                                f"/server/api_keys/{i}/key_env",
                                f"the environment variable {spec['key_env']} is not set",
                            )
                        ]
                    )
                digest = hashlib.sha256(secret.encode()).digest()
            else:
                digest = bytes.fromhex(spec["key_sha256"])
            keys.append(ApiKey(spec["name"], spec["scope"], digest))
        in_flight = int(data.get("bodies_in_flight_bytes", DEFAULT_BODIES_IN_FLIGHT))
        body = int(data.get("max_body_bytes", DEFAULT_MAX_BODY))
        proxy_body = int(data.get("proxy_max_body_bytes", DEFAULT_PROXY_MAX_BODY))
        largest = max(body, proxy_body)
        if in_flight < largest:  # else a body within its limit is refused for ever, as if busy
            raise ConfigError(
                [
                    Problem(
                        "/server/bodies_in_flight_bytes",
                        f"must be at least the largest body limit ({largest}: max_body_bytes, "
                        "proxy_max_body_bytes), so that one body within its limit is always read",
                    )
                ]
            )
        return cls(
            tuple(keys),
            body,
            header_timeout_seconds=float(data.get("header_timeout_seconds", 10.0)),
            body_timeout_seconds=float(data.get("body_timeout_seconds", 30.0)),
            keep_alive_seconds=float(data.get("keep_alive_seconds", 5.0)),
            allowed_hosts=tuple(data.get("allowed_hosts", ())),
            allowed_origins=tuple(data.get("allowed_origins", ())),
            proxy_max_body_bytes=proxy_body,
            bodies_in_flight_bytes=in_flight,
        )

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys)

    def find(self, presented: str) -> ApiKey | None:
        """The key matching a presented secret. Compares digests in constant time."""
        digest = hashlib.sha256(presented.encode()).digest()
        found = None
        for key in self.api_keys:  # no early exit: every key is compared
            if hmac.compare_digest(digest, key.digest):
                found = key
        return found


def load_config(path: str | None) -> tuple[Any, ServerConfig]:
    """(models, server settings) from the configuration file (``--config`` or ``$CTXMGMT_CONFIG``)."""
    from ..llm import CONFIG_ENV, ModelsConfig
    from ..loader import load_document

    path = path or os.environ.get(CONFIG_ENV)
    if not path:
        return ModelsConfig(), ServerConfig()
    doc = load_document(path)
    if doc.problems:
        raise ConfigError(doc.problems)
    models = ModelsConfig.from_dict(doc.data, str(path))  # validates the whole file
    server = ServerConfig.from_dict((doc.data or {}).get("server"))
    offload = (doc.data or {}).get("offload") or {}
    executions = (doc.data or {}).get("executions") or {}
    return models, replace(server, offload=offload, executions=executions)


def open_offloader(settings: Mapping[str, Any], engine: Any) -> Any:
    """The offload store the ``offload:`` settings name (local files by default)."""
    from ..offload import LocalOffloader, SQLOffloader

    if settings.get("backend", "local") == "sql":
        return SQLOffloader(engine)
    return LocalOffloader(settings.get("root", "ctxmgmt-offload"))
