"""Deterministic coding-agent conversations with planted facts, to measure what context
management keeps.

:func:`agent_run` builds one agent run in the OpenAI chat format: a task from the user,
then assistant turns that read files, search, edit, run tests, builds and scripts and
fetch URLs, with large and noisy tool results (file views, test logs with many passing
tests, build logs, directory listings, stack traces, JSON answers, diffs). The seed picks
a project: a domain (payments, search, auth, ...) and a primary and a secondary flavour
(Python/pytest, Node/TypeScript, Rust/cargo, Go, shell/devops), and a tool dialect.

The planted facts are where real ones are: the task, constraints and numbers in user
messages, error lines inside tool results, changed files in the arguments of edit calls,
URLs in user messages, tool calls and results, and decisions in assistant text.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["CATEGORIES", "agent_run", "padded_run"]

CATEGORIES = ("task", "constraints", "numbers", "error_lines", "files_changed", "urls", "decisions")
FLAVOURS = ("python", "node", "rust", "go", "devops")
MAX_FACT = 120

# -- vocabulary -------------------------------------------------------------------------

_DOMAINS: tuple[dict[str, Any], ...] = (
    {
        "prefix": ("PAY", "BILL", "FIN"),
        "projects": ("payments-api", "billing-service", "refund-worker"),
        "nouns": (
            "refund",
            "charge",
            "payout",
            "invoice",
            "webhook",
            "ledger",
            "customer",
            "dispute",
            "currency",
            "receipt",
            "balance",
            "mandate",
        ),
        "features": (
            "idempotency keys for refund webhooks",
            "partial refunds in the v2 API",
            "retry with backoff for the Stripe client",
            "currency rounding for multi-currency invoices",
            "dispute evidence upload",
        ),
        "keys": (
            "user_id",
            "customer_id",
            "amount_cents",
            "currency",
            "idempotency_key",
            "refund_id",
            "charge_id",
            "event_type",
            "livemode",
            "payout_id",
            "invoice_number",
            "tax_rate",
        ),
        "docs": (
            "https://docs.stripe.com/api/idempotent_requests",
            "https://docs.stripe.com/webhooks#verify-events",
            "https://docs.stripe.com/api/refunds/create",
        ),
        "api_path": "/v2/refunds?status=pending&limit=50",
        "upstream": "the Stripe API",
        "endpoint": "POST /v2/refunds",
    },
    {
        "prefix": ("SRCH", "DISC", "FIND"),
        "projects": ("search-gateway", "catalog-search", "query-service"),
        "nouns": (
            "query",
            "index",
            "shard",
            "synonym",
            "ranking",
            "facet",
            "cursor",
            "document",
            "analyzer",
            "suggestion",
            "embedding",
            "highlight",
        ),
        "features": (
            "typo-tolerant product search",
            "cursor pagination for the search endpoint",
            "synonym expansion in the query parser",
            "hybrid BM25 and vector ranking",
        ),
        "keys": (
            "query",
            "page_cursor",
            "index_name",
            "shard_id",
            "doc_id",
            "boost",
            "locale",
            "facets",
            "top_k",
            "score",
            "search_after",
            "analyzer",
        ),
        "docs": (
            "https://www.elastic.co/guide/en/elasticsearch/reference/current/paginate-search-results.html",
            "https://opensearch.org/docs/latest/search-plugins/searching-data/paginate/",
            "https://lucene.apache.org/core/9_10_0/analysis/common/index.html",
        ),
        "api_path": "/v1/search?q=usb-c+hub&limit=20",
        "upstream": "the OpenSearch cluster",
        "endpoint": "GET /v1/search",
    },
    {
        "prefix": ("AUTH", "IAM", "SEC"),
        "projects": ("auth-service", "identity-api", "session-broker"),
        "nouns": (
            "session",
            "token",
            "tenant",
            "login",
            "scope",
            "credential",
            "role",
            "audit",
            "jwks",
            "device",
            "grant",
            "challenge",
        ),
        "features": (
            "refresh-token rotation",
            "per-tenant rate limiting on the login endpoint",
            "SAML single sign-on for enterprise tenants",
            "WebAuthn as a second factor",
        ),
        "keys": (
            "tenant_id",
            "sub",
            "scope",
            "refresh_token",
            "client_id",
            "kid",
            "nonce",
            "device_id",
            "exp",
            "aud",
            "session_id",
            "grant_type",
        ),
        "docs": (
            "https://datatracker.ietf.org/doc/html/rfc6749#section-6",
            "https://www.rfc-editor.org/rfc/rfc6585#section-4",
            "https://openid.net/specs/openid-connect-core-1_0.html#RefreshTokens",
        ),
        "api_path": "/oauth/v1/.well-known/jwks.json",
        "upstream": "the identity provider",
        "endpoint": "POST /v1/login",
    },
    {
        "prefix": ("NOTIF", "MSG", "COMMS"),
        "projects": ("notification-hub", "digest-mailer", "push-relay"),
        "nouns": (
            "notification",
            "digest",
            "channel",
            "template",
            "subscriber",
            "delivery",
            "mention",
            "schedule",
            "topic",
            "recipient",
            "batch",
            "bounce",
        ),
        "features": (
            "daily digest emails for unread mentions",
            "batching of push notifications",
            "webhook delivery retries with a dead-letter queue",
        ),
        "keys": (
            "recipient_id",
            "channel",
            "template_id",
            "locale",
            "topic",
            "delivery_id",
            "send_at",
            "attempt",
            "device_token",
            "digest_id",
            "unsubscribe_url",
            "priority",
        ),
        "docs": (
            "https://firebase.google.com/docs/cloud-messaging/concept-options",
            "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html",
            "https://www.rfc-editor.org/rfc/rfc8058",
        ),
        "api_path": "/v1/deliveries?state=failed&limit=100",
        "upstream": "the push gateway",
        "endpoint": "POST /v1/notifications",
    },
    {
        "prefix": ("INV", "WMS", "STOCK"),
        "projects": ("inventory-service", "warehouse-api", "stock-sync"),
        "nouns": (
            "sku",
            "stock",
            "reservation",
            "warehouse",
            "transfer",
            "supplier",
            "order",
            "shipment",
            "location",
            "pallet",
            "lot",
            "adjustment",
        ),
        "features": (
            "stock reservations with expiry",
            "bulk CSV import of SKUs",
            "an audit log for warehouse transfers",
        ),
        "keys": (
            "sku",
            "warehouse_id",
            "quantity",
            "reservation_id",
            "lot_number",
            "expires_at",
            "order_id",
            "location_code",
            "supplier_ref",
            "pallet_id",
            "reason_code",
            "batch_no",
        ),
        "docs": (
            "https://www.postgresql.org/docs/16/explicit-locking.html#ADVISORY-LOCKS",
            "https://www.postgresql.org/docs/16/sql-copy.html",
            "https://docs.sqlalchemy.org/en/20/orm/session_transaction.html",
        ),
        "api_path": "/v1/stock?warehouse=ams-2&below=10",
        "upstream": "the ERP export",
        "endpoint": "POST /v1/reservations",
    },
    {
        "prefix": ("OBS", "EDGE", "TEL"),
        "projects": ("trace-ingest", "edge-proxy", "metrics-gateway"),
        "nouns": (
            "span",
            "trace",
            "sampler",
            "exporter",
            "metric",
            "cache",
            "upstream",
            "worker",
            "buffer",
            "probe",
            "resource",
            "pipeline",
        ),
        "features": (
            "tail-based sampling for the trace exporter",
            "an LRU cache for upstream responses",
            "graceful shutdown of the ingest workers",
        ),
        "keys": (
            "trace_id",
            "span_id",
            "service_name",
            "sample_rate",
            "attributes",
            "resource",
            "exporter",
            "endpoint",
            "parent_id",
            "status_code",
            "scope_name",
            "drop_reason",
        ),
        "docs": (
            "https://opentelemetry.io/docs/specs/otel/trace/sdk/#sampling",
            "https://opentelemetry.io/docs/specs/otlp/#otlphttp",
            "https://pkg.go.dev/context#WithTimeout",
        ),
        "api_path": "/v1/traces/stats?window=15m",
        "upstream": "the OTLP collector",
        "endpoint": "POST /v1/traces",
    },
)

_COMPANIES = ("acme", "globex", "initech", "hooli", "umbrella", "vandelay", "soylent", "wayne")
_VERBS = (
    "get",
    "load",
    "parse",
    "build",
    "apply",
    "validate",
    "handle",
    "sync",
    "fetch",
    "render",
    "compute",
    "retry",
    "flush",
    "resolve",
    "emit",
    "schedule",
    "reserve",
    "release",
    "normalize",
    "encode",
    "decode",
    "merge",
    "refresh",
    "record",
    "expire",
    "prune",
)
_CONDS = (
    "when_empty",
    "with_zero_amount",
    "on_retry",
    "after_timeout",
    "with_unicode",
    "for_unknown_tenant",
    "when_duplicate",
    "with_expired_token",
    "on_conflict",
    "in_dry_run",
    "with_large_payload",
    "without_permissions",
    "on_second_call",
    "with_trailing_slash",
    "when_disabled",
    "with_null_fields",
)
_VARS = (
    "result",
    "payload",
    "items",
    "entry",
    "resp",
    "record",
    "batch",
    "opts",
    "rows",
    "row",
    "state",
    "total",
    "value",
    "data",
    "req",
    "headers",
    "body",
    "cursor",
    "buf",
    "pending",
    "seen",
    "parts",
    "out",
    "current",
    "attempts",
    "deadline",
    "chunk",
    "meta",
)
_SUBS = {
    "python": ("api", "services", "clients", "models", "utils", "tasks", "db"),
    "node": ("routes", "services", "lib", "middleware", "models", "jobs"),
    "rust": ("api", "store", "parser", "net", "config", "codec"),
    "go": ("httpapi", "store", "cache", "worker", "config", "auth"),
    "devops": ("deploy", "scripts", "terraform", "ansible"),
}
_RUNTIME = {
    "python": (
        "Keep compatibility with Python 3.9",
        "Keep compatibility with Python 3.9, the batch hosts still run it.",
    ),
    "node": (
        "keep working on Node 18",
        "Everything has to keep working on Node 18, that is what Lambda runs.",
    ),
    "rust": (
        "compatibility with Rust 1.70",
        "Keep compatibility with Rust 1.70, our MSRV for the embedded build.",
    ),
    "go": ("compatible with Go 1.21", "Stay compatible with Go 1.21; the build image is pinned to it."),
    "devops": (
        "bash 4.2 on the old CentOS runners",
        "The scripts must keep running on bash 4.2 on the old CentOS runners.",
    ),
}
_LEGACY = {
    "python": "vendor/legacy/",
    "node": "src/legacy/",
    "rust": "third_party/",
    "go": "internal/legacy/",
    "devops": "terraform/modules/legacy-vpc/",
}
_SECONDARY_ROOT = {"python": "tools/", "node": "web/", "rust": "native/", "go": "agent/", "devops": ""}

_CONSTRAINTS = (
    (
        "Please do not modify anything under {legacy}; another team owns that code.",
        "do not modify anything under {legacy}",
    ),
    ("{runtime_sentence}", "{runtime}"),
    ("Don't add any new third-party dependencies for this.", "any new third-party dependencies"),
    (
        "The public signature of {public} must not change, the mobile clients call it.",
        "public signature of {public} must not change",
    ),
    (
        "Never run the migrations against the staging database from here.",
        "migrations against the staging database",
    ),
    (
        "Keep the log format unchanged because the SIEM parses it.",
        "log format unchanged because the SIEM parses it",
    ),
    ("Open the PR against release/{release}, not main.", "against release/{release}, not main"),
    ("Every new endpoint needs an integration test.", "new endpoint needs an integration test"),
    ("All timestamps must stay in UTC in the database.", "timestamps must stay in UTC"),
    ("Leave the feature flag {flag} off by default in every environment.", "flag {flag} off by default"),
)
_NUMBERS = (
    ("Requests to {upstream} must time out after {n} seconds.", "{n} seconds", (20, 45, 75, 90)),
    ("Retry at most {n} times before giving up.", "{n} times", (3, 4, 6, 7)),
    ("The p99 latency of {endpoint} has to stay under {n} ms.", "{n} ms", (120, 180, 250, 350)),
    ("The in-process cache may use at most {n} MB.", "{n} MB", (64, 96, 192, 384)),
    ("Allow {n} requests per minute per API key.", "{n} requests per minute", (60, 120, 300, 600)),
    ("Keep the audit records for {n} days.", "{n} days", (30, 90, 180, 400)),
    ("Import batches should be at most {n} rows.", "{n} rows", (500, 2500, 5000, 20000)),
    ("The error budget is {n}% of requests per month.", "{n}%", (0.1, 0.2, 0.5)),
)
_DECISIONS = (
    (
        "I'll use a token bucket instead of a fixed window because bursts must be allowed.",
        "token bucket instead of a fixed window",
    ),
    (
        (
            "I'll enforce the idempotency key with a unique index rather than an in-memory set, so retries "
            "that land on another worker are caught too."
        ),
        "unique index rather than an in-memory set",
        ("PAY", "NOTIF", "INV"),
    ),
    (
        "Decision: exponential backoff with full jitter instead of a fixed delay, capped by the retry limit.",
        "exponential backoff with full jitter",
    ),
    (
        "I'll keep the old endpoint as a thin wrapper around the new one so existing clients keep working.",
        "thin wrapper around the new one",
    ),
    (
        "I'm going to verify the signature in middleware rather than in each handler.",
        "in middleware rather than in each handler",
        ("PAY", "AUTH", "NOTIF"),
    ),
    (
        "I'll pin {dep} to {dep_version} instead of upgrading the whole lockfile, to keep the diff small.",
        "pin {dep} to {dep_version} instead of upgrading the whole lockfile",
    ),
    (
        (
            "Rather than mocking the HTTP client, I'll run these tests against a local fake server on port "
            "{port}."
        ),
        "local fake server on port {port}",
    ),
    (
        "I'll put the new behaviour behind the {flag2} feature flag so it can be rolled out per tenant.",
        "behind the {flag2} feature flag",
    ),
    (
        (
            "I'll write the migration in steps (add a nullable column, backfill, then add the constraint) "
            "so it "
            "never locks the table."
        ),
        "add a nullable column, backfill, then add the constraint",
    ),
    (
        "I'll read the limits from environment variables instead of hard-coding them.",
        "environment variables instead of hard-coding them",
    ),
    (
        "I'll switch to cursor-based pagination instead of OFFSET, which gets slow on deep pages.",
        "cursor-based pagination instead of OFFSET",
        ("SRCH", "INV", "NOTIF", "PAY"),
    ),
    (
        "Failed deliveries go to a dead-letter queue after the last retry instead of being dropped.",
        "dead-letter queue after the last retry",
        ("NOTIF", "PAY", "OBS"),
    ),
    (
        "I'll keep the parser hand-written rather than switching to a parser generator.",
        "hand-written rather than switching to a parser generator",
        ("SRCH", "OBS"),
    ),
    (
        (
            "I'll keep sampling decisions in the collector rather than in each SDK, so they can change "
            "without a "
            "redeploy."
        ),
        "in the collector rather than in each SDK",
        ("OBS",),
    ),
    (
        "I'll rotate the refresh token on every use and revoke the whole family when an old one comes back.",
        "revoke the whole family when an old one comes back",
        ("AUTH",),
    ),
    (
        "I'll apply the synonyms at query time instead of at index time, so no reindex is needed.",
        "at query time instead of at index time",
        ("SRCH",),
    ),
    (
        "I'll round with banker's rounding only at the invoice total, never per line item.",
        "banker's rounding only at the invoice total",
        ("PAY",),
    ),
    (
        "I'll expire reservations with a sweeper job instead of a database trigger.",
        "sweeper job instead of a database trigger",
        ("INV",),
    ),
    (
        "I'll take a Postgres advisory lock per {noun} instead of SELECT ... FOR UPDATE on the whole table.",
        "advisory lock per {noun}",
    ),
)
_DEPS = {
    "python": (("httpx", "0.27.2"), ("pydantic", "2.7.4"), ("sqlalchemy", "2.0.31"), ("structlog", "24.2.0")),
    "node": (("fastify", "4.28.1"), ("zod", "3.23.8"), ("ioredis", "5.4.1"), ("pino", "9.2.0")),
    "rust": (("tokio", "1.38.0"), ("serde", "1.0.203"), ("reqwest", "0.12.5"), ("axum", "0.7.5")),
    "go": (
        ("golang.org/x/sync", "v0.7.0"),
        ("github.com/jackc/pgx/v5", "v5.6.0"),
        ("github.com/redis/go-redis/v9", "v9.5.3"),
    ),
    "devops": (("terraform-provider-aws", "5.54.1"), ("helm", "3.15.2"), ("kubectl", "1.30.2")),
}


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(w.capitalize() for w in rest)


def _pascal(snake: str) -> str:
    return "".join(w.capitalize() for w in snake.split("_"))


@dataclass
class _Err:
    fact: str
    kind: str  # test, build, run, deps, shell, http
    flavour: str
    lines: list[str]
    summary: str | None = None
    command: str | None = None
    test: str | None = None


# -- the generator ----------------------------------------------------------------------


class _Run:
    def __init__(self, turns: int, seed: int) -> None:
        pick = random.Random(f"ctxmgmt-agent-run/project/{seed}")
        self.r = r = random.Random(f"ctxmgmt-agent-run/{seed}/{turns}")
        self.turns = max(1, turns)
        self.primary = FLAVOURS[seed % len(FLAVOURS)]
        self.secondary = pick.choice([f for f in FLAVOURS if f != self.primary])
        d = self.domain = pick.choice(_DOMAINS)
        self.company = pick.choice(_COMPANIES)
        self.project = pick.choice(d["projects"])
        self.pkg = self.project.replace("-", "_")
        self.nouns: tuple[str, ...] = d["nouns"]
        self.key = f"{pick.choice(d['prefix'])}-{pick.randint(120, 9899)}"
        self.feature: str = pick.choice(d["features"])
        self.workdir = pick.choice(("/workspace/", "/home/agent/src/", "/repo/", "/srv/work/")) + self.project
        # Tool dialect.
        self.read_tool = pick.choice(
            (
                ("read_file", "path"),
                ("view", "path"),
                ("cat", "file_path"),
                ("read_file", "filename"),
                ("view", "file_path"),
            )
        )
        self.run_tool = pick.choice(
            (("run_command", "command"), ("bash", "command"), ("shell", "cmd"), ("run_command", "cmd"))
        )
        self.test_tool = pick.random() < 0.4
        self.search_tool = pick.choice(("search", "grep"))
        self.http_tool = pick.choice(("http_get", "fetch_url"))
        self.create_tool = pick.choice(("write_file", "create_file"))
        self.edit_tools = [pick.choice(("edit_file", "str_replace", "apply_patch"))]
        if pick.random() < 0.35:
            self.edit_tools.append(
                pick.choice(
                    [t for t in ("edit_file", "str_replace", "apply_patch") if t not in self.edit_tools]
                )
            )
        self.path_key = pick.choice(("path", "file_path", "filename"))
        self.numbered = pick.random() < 0.6
        self.id_style = pick.choice(("call_", "toolu_01", "fc_"))
        self.used_ids: set[str] = set()
        self.ts = [2024, pick.randint(1, 12), pick.randint(1, 27), 9, pick.randint(0, 59), 0]
        # Project files and test suites: from the seed only, the same for every length.
        self.r = pick
        self.files: list[str] = []
        self.flavour_of: dict[str, str] = {}
        self._make_files(self.primary, "")
        self._make_files(self.secondary, _SECONDARY_ROOT[self.secondary], few=True)
        self.cache: dict[str, list[str]] = {}
        self.tests = {f: self._make_suite(f) for f in (self.primary, self.secondary)}
        self.r = r
        self.facts: dict[str, list[str]] = {c: [] for c in CATEGORIES}
        self.used_facts: set[str] = set()
        self.open_errors: list[_Err] = []
        self.edits: list[tuple[str, list[str], list[str]]] = []
        self.msgs: list[dict[str, Any]] = []
        self.mentions: list[str] = []
        dep, dep_version = pick.choice(_DEPS[self.primary])
        self.fill = {
            "legacy": _LEGACY[self.primary],
            "runtime": _RUNTIME[self.primary][0],
            "runtime_sentence": _RUNTIME[self.primary][1],
            "public": self._func(self.primary),
            "release": f"{pick.randint(2, 7)}.{pick.randint(0, 19)}",
            "flag": f"{self.pkg}_{pick.choice(self.nouns)}_v2".upper(),
            "flag2": f"{pick.choice(self.nouns)}-{pick.choice(('rollout', 'beta', 'v2', 'strict'))}",
            "upstream": d["upstream"],
            "endpoint": d["endpoint"],
            "dep": dep,
            "dep_version": dep_version,
            "port": str(pick.choice((18080, 18443, 19090, 28080, 4010))),
            "noun": pick.choice(self.nouns),
        }

    # -- small helpers ------------------------------------------------------------------
    def fact(self, category: str, text: str) -> str:
        assert len(text) <= MAX_FACT, text
        if text not in self.facts[category]:
            self.facts[category].append(text)
        return text

    def call_id(self) -> str:
        r = self.r
        alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        while True:
            if self.id_style == "fc_":
                cid = f"fc_{r.getrandbits(96):024x}"
            else:
                cid = self.id_style + "".join(r.choices(alphabet, k=22))
            if cid not in self.used_ids:
                self.used_ids.add(cid)
                return cid

    def stamp(self) -> str:
        t = self.ts
        t[5] += self.r.randint(1, 40)
        t[4] += t[5] // 60
        t[5] %= 60
        t[3] += t[4] // 60
        t[4] %= 60
        return f"{t[0]}-{t[1]:02d}-{t[2]:02d} {t[3] % 24:02d}:{t[4]:02d}:{t[5]:02d}"

    def hexid(self, n: int = 7) -> str:
        return f"{self.r.getrandbits(4 * n):0{n}x}"

    def _func(self, flavour: str) -> str:
        name = f"{self.r.choice(_VERBS)}_{self.r.choice(self.nouns)}"
        return _camel(name) if flavour in ("node", "go") else name

    def func(self, flavour: str | None = None) -> str:
        return self._func(flavour or self.primary)

    def files_of(self, flavour: str, *, tests: bool | None = None, source: bool = False) -> list[str]:
        out = [p for p in self.files if self.flavour_of[p] == flavour]
        if tests is not None:
            out = [p for p in out if self._is_test(p) == tests]
        if source:
            out = [p for p in out if p.endswith((".py", ".ts", ".rs", ".go", ".sh", ".tf", ".yml", ".yaml"))]
        return out or [p for p in self.files if self.flavour_of[p] == flavour]

    @staticmethod
    def _is_test(path: str) -> bool:
        name = path.rsplit("/", 1)[-1]
        return (
            name.startswith("test_")
            or name.endswith(("_test.go", ".test.ts", ".bats", "conftest.py"))
            or path.startswith(("tests/", "test/"))
            or "/tests/" in path
        )

    # -- project layout -----------------------------------------------------------------
    def _make_files(self, flavour: str, root: str, *, few: bool = False) -> None:
        r, nouns = self.r, self.nouns
        subs = r.sample(_SUBS[flavour], 2 if few else 4)
        per = (1, 2) if few else (2, 3)
        paths: list[str] = []
        if flavour == "python":
            pkg = self.pkg if not root else f"{self.pkg}_tools"
            base = f"{root}src/{pkg}/"
            paths += [
                f"{root}pyproject.toml",
                f"{base}__init__.py",
                f"{base}config.py",
                f"{root}tests/conftest.py",
            ]
            for sub in subs:
                paths += [f"{base}{sub}/{n}.py" for n in r.sample(nouns, r.randint(*per))]
            paths += [f"{root}tests/test_{n}.py" for n in r.sample(nouns, 2 if few else 5)]
            if not few:
                paths += [f"{base}main.py", "README.md", f"vendor/legacy/{r.choice(nouns)}_compat.py"]
        elif flavour == "node":
            paths += [
                f"{root}package.json",
                f"{root}tsconfig.json",
                f"{root}src/index.ts",
                f"{root}src/config.ts",
            ]
            for sub in subs:
                for n in r.sample(nouns, r.randint(*per)):
                    paths += [f"{root}src/{sub}/{_camel(n)}.ts", f"{root}src/{sub}/{_camel(n)}.test.ts"]
            if not few:
                paths += ["README.md", f"src/legacy/{_camel(r.choice(nouns))}Adapter.ts"]
        elif flavour == "rust":
            paths += [f"{root}Cargo.toml", f"{root}src/lib.rs", f"{root}src/error.rs"]
            for sub in subs:
                paths += [f"{root}src/{sub}/mod.rs"]
                paths += [f"{root}src/{sub}/{n}.rs" for n in r.sample(nouns, r.randint(*per))]
            paths += [f"{root}tests/{n}.rs" for n in r.sample(nouns, 1 if few else 3)]
            if not few:
                paths += ["src/main.rs", "README.md", f"third_party/{r.choice(nouns)}-sys/src/lib.rs"]
        elif flavour == "go":
            paths += [f"{root}go.mod", f"{root}cmd/{self.project}/main.go"]
            for sub in subs:
                for n in r.sample(nouns, r.randint(*per)):
                    paths += [f"{root}internal/{sub}/{n}.go", f"{root}internal/{sub}/{n}_test.go"]
            if not few:
                paths += ["Makefile", "README.md", f"internal/legacy/{r.choice(nouns)}.go"]
        else:
            svc = self.project
            paths += [
                "Dockerfile",
                "docker-compose.yml",
                ".github/workflows/ci.yml",
                ".github/workflows/deploy.yml",
                f"deploy/k8s/{svc}-deployment.yaml",
                f"deploy/k8s/{svc}-service.yaml",
                "scripts/deploy.sh",
                f"scripts/{r.choice(_VERBS)}_{r.choice(nouns)}.sh",
                "tests/deploy.bats",
            ]
            if not few:
                paths += [
                    "Makefile",
                    "terraform/main.tf",
                    "terraform/variables.tf",
                    "terraform/outputs.tf",
                    f"scripts/{r.choice(_VERBS)}_{r.choice(nouns)}.sh",
                    "tests/scripts.bats",
                    "README.md",
                    "terraform/modules/legacy-vpc/main.tf",
                    f"ansible/roles/{svc}/tasks/main.yml",
                ]
        for p in paths:
            if p not in self.flavour_of:
                self.flavour_of[p] = flavour
                self.files.append(p)

    def _make_suite(self, flavour: str) -> list[str]:
        """Test ids as the flavour's runner prints them."""
        r = self.r
        out: list[str] = []
        tests = [p for p in self.files if self.flavour_of[p] == flavour and self._is_test(p)]
        tests = [p for p in tests if not p.endswith("conftest.py")] or [f"tests/test_{self.nouns[0]}.py"]
        for path in tests:
            for _ in range(r.randint(8, 30)):
                verb, noun, cond = r.choice(_VERBS), r.choice(self.nouns), r.choice(_CONDS)
                if flavour == "python":
                    name = f"{path}::test_{verb}_{noun}_{cond}"
                    if r.random() < 0.2:
                        name += (
                            f"[{r.choice(('EUR', 'USD', 'JPY', 'empty', 'unicode', 'large', 'v1', 'v2'))}]"
                        )
                elif flavour == "node":
                    name = f"{path}\t{noun} {verb}s {noun} {cond.replace('_', ' ')}"
                elif flavour == "rust":
                    mod = path.rsplit("/", 1)[-1].removesuffix(".rs")
                    name = f"{mod}::tests::{verb}_{noun}_{cond}"
                elif flavour == "go":
                    name = f"{path}\tTest{_pascal(verb)}{_pascal(noun)}{_pascal(cond)}"
                else:
                    name = f"{path}\t{verb} {noun} {cond.replace('_', ' ')}"
                if name not in out:
                    out.append(name)
        return out

    # -- file contents ------------------------------------------------------------------
    def content(self, path: str) -> list[str]:
        lines = self.cache.get(path)
        if lines is None:
            lines = self.cache[path] = self._generate(path)
        return lines

    def _names(self, flavour: str) -> dict[str, Any]:
        r = self.r
        v, v2, i = r.sample(_VARS, 3)
        f = f"{r.choice(_VERBS)}_{r.choice(self.nouns)}"
        f2 = f"{r.choice(_VERBS)}_{r.choice(self.nouns)}"
        if flavour in ("node", "go"):
            v, v2, f, f2 = _camel(v), _camel(v2), _camel(f), _camel(f2)
        k = r.choice(self.domain["keys"])
        return {
            "v": v,
            "v2": v2,
            "i": i[0],
            "f": f,
            "f2": f2,
            "k": k,
            "K": _pascal(k),
            "w": r.choice(self.nouns),
            "n": r.choice((2, 3, 5, 10, 16, 30, 64, 100, 128, 1000, 4096)),
            "verb": r.choice(_VERBS),
            "Verb": _pascal(r.choice(_VERBS)),
            "C": _pascal(r.choice(self.nouns))
            + r.choice(
                ("Service", "Client", "Repository", "Store", "Handler", "Policy", "Config", "Record", "")
            ),
            "exc": r.choice(("ValueError", "LookupError", "RuntimeError", "PermissionError", "TimeoutError")),
        }

    def _body(self, flavour: str, indent: str, count: int) -> list[str]:
        templates = _STMTS[flavour]
        lines: list[str] = []
        for _ in range(count):
            names = self._names(flavour)
            for line in self.r.choice(templates):
                lines.append(indent + line.format_map(names))
        return lines

    def _generate(self, path: str) -> list[str]:
        r = self.r
        flavour = self.flavour_of.get(path, self.primary)
        name = path.rsplit("/", 1)[-1]
        if name in _STATIC:
            return _STATIC[name](self, path)
        test = self._is_test(path)
        if path.endswith(".py"):
            return self._py_test(path) if test else self._py_source()
        if path.endswith(".ts"):
            return self._ts_test(path) if test else self._ts_source()
        if path.endswith(".rs"):
            return self._rs_source(test)
        if path.endswith(".go"):
            return self._go_test(path) if test else self._go_source(path)
        if path.endswith(".sh"):
            return self._sh_source()
        if path.endswith(".bats"):
            return self._bats(path)
        if path.endswith(".tf"):
            return self._tf_source()
        if path.endswith((".yml", ".yaml")):
            return self._yaml(path)
        if path.endswith(".md"):
            return self._readme()
        return [f"# {path}", *self._body(flavour, "", r.randint(5, 12))]

    def _py_source(self) -> list[str]:
        r = self.r
        n = self._names("python")
        lines = [
            f'"""{n["w"].capitalize()} {r.choice(_DOCS)}."""',
            "",
            "from __future__ import annotations",
            "",
        ]
        lines += sorted(["import logging", *r.sample(_PY_IMPORTS, r.randint(2, 5))])
        lines.append("")
        lines += sorted(
            {
                f"from {self.pkg}.{r.choice(('models', 'db', 'config', 'errors', 'utils.retry'))} "
                f"import {self._names('python')['C']}"
                for _ in range(r.randint(1, 3))
            }
        )
        lines += ["", "log = logging.getLogger(__name__)", ""]
        for _ in range(r.randint(1, 3)):
            lines.append(
                f"{r.choice(self.domain['keys']).upper()}_{r.choice(('LIMIT', 'TTL', 'MAX', 'BATCH'))} "
                f"= {r.choice((5, 30, 100, 250, 1000, 3600))}"
            )
        for _ in range(r.randint(6, 16)):
            lines += ["", ""]
            if r.random() < 0.35:
                c = self._names("python")
                lines += [
                    f"class {c['C']}:",
                    f'    """{r.choice(_DOCS).capitalize()}."""',
                    "",
                    f"    def __init__(self, client: {c['C']}Client, *, timeout: float = {c['n']}) -> None:",
                    "        self._client = client",
                    "        self.timeout = timeout",
                ]
                for _ in range(r.randint(1, 3)):
                    m = self._names("python")
                    lines += [
                        "",
                        f"    def {m['f']}(self, {m['v2']}: dict[str, Any]) -> {m['C']} | None:",
                        f'        """{m["verb"].capitalize()} the {m["w"]} {r.choice(_DOCS)}."""',
                        *self._body("python", "        ", r.randint(2, 6)),
                        f"        return {m['v2']}",
                    ]
            else:
                m = self._names("python")
                lines += [
                    (
                        f"def {m['f']}({m['v2']}: {r.choice(('dict[str, Any]', 'list[str]', 'int', 'str'))}, "
                        f"*, {m['k']}: str | None = None) -> {m['C']}:"
                    ),
                    f'    """{m["verb"].capitalize()} {r.choice(_DOCS)}."""',
                    *self._body("python", "    ", r.randint(3, 9)),
                    f"    return {m['v']}",
                ]
        return lines

    def _py_test(self, path: str) -> list[str]:
        r = self.r
        lines = [
            '"""Tests for the ' + r.choice(self.nouns) + ' flow."""',
            "",
            "import pytest",
            "",
            (
                f"from {self.pkg}.{r.choice(_SUBS['python'])}.{r.choice(self.nouns)} import "
                f"{self._func('python')}"
            ),
            "",
        ]
        suite = (
            [t for t in self.tests.get("python", ()) if t.startswith(path + "::")]
            if hasattr(self, "tests")
            else []
        )
        names = [t.split("::")[1].split("[")[0] for t in suite] or [
            f"test_{r.choice(_VERBS)}_{r.choice(self.nouns)}_{r.choice(_CONDS)}" for _ in range(6)
        ]
        for name in dict.fromkeys(names):
            k = r.choice(self.domain["keys"])
            code = r.choice((200, 201, 204, 400, 402, 404, 409, 422))
            lines += [
                "",
                f"def {name}(client, {r.choice(self.nouns)}_factory):",
                f"    obj = {r.choice(self.nouns)}_factory({k}={r.choice(('None', '0', '42', repr('x-1')))})",
                f'    resp = client.post("/v1/{r.choice(self.nouns)}s", json={{"{k}": obj.{k}}})',
                f"    assert resp.status_code == {code}",
            ]
            if r.random() < 0.6:
                lines.append(f'    assert resp.json()["{k}"] == obj.{k}')
        return lines

    def _ts_source(self) -> list[str]:
        r = self.r
        lines = [
            f'import {{ {", ".join(r.sample(_TS_IMPORTS, 2))} }} from "../lib/{r.choice(self.nouns)}";',
            'import { logger } from "../lib/logger";',
            'import type { FastifyRequest } from "fastify";',
            "",
        ]
        for _ in range(r.randint(1, 2)):
            n = self._names("node")
            lines += [
                f"export interface {n['C']}Options {{",
                f"  {_camel(n['k'])}: string;",
                "  timeoutMs?: number;",
                "  retries?: number;",
                "}",
                "",
            ]
        for _ in range(r.randint(6, 16)):
            m = self._names("node")
            if r.random() < 0.3:
                lines += [
                    f"export class {m['C']} {{",
                    (
                        "  constructor(private readonly http: HttpClient, "
                        f"private readonly opts: {m['C']}Options) {{}}"
                    ),
                ]
                for _ in range(r.randint(1, 3)):
                    mm = self._names("node")
                    lines += [
                        "",
                        f"  async {mm['f']}({mm['v2']}: FastifyRequest): Promise<{mm['C']} | undefined> {{",
                        *self._body("node", "    ", r.randint(2, 6)),
                        f"    return {mm['v2']} as never;",
                        "  }",
                    ]
                lines += ["}", ""]
            else:
                lines += [
                    f"export async function {m['f']}({m['v2']}: {m['C']}Options): Promise<{m['C']}> {{",
                    *self._body("node", "  ", r.randint(3, 9)),
                    f"  return {m['v']};",
                    "}",
                    "",
                ]
        return lines

    def _ts_test(self, path: str) -> list[str]:
        r = self.r
        lines = [
            'import { describe, expect, it, vi } from "vitest";',
            "",
            f'import {{ {self._func("node")} }} from "./{path.rsplit("/", 1)[-1].split(".")[0]}";',
            "",
            f'describe("{r.choice(self.nouns)}", () => {{',
        ]
        for _ in range(r.randint(4, 10)):
            k = _camel(r.choice(self.domain["keys"]))
            lines += [
                (
                    f'  it("{r.choice(_VERBS)}s {r.choice(self.nouns)} '
                    f'{r.choice(_CONDS).replace("_", " ")}", '
                    "async () => {"
                ),
                (
                    f'    const res = await app.inject({{ method: "POST", '
                    f'url: "/v1/{r.choice(self.nouns)}s", '
                    f'payload: {{ {k}: "x" }} }});'
                ),
                f"    expect(res.statusCode).toBe({r.choice((200, 201, 400, 401, 404, 409))});",
                f"    expect(res.json().{k}).toBeDefined();",
                "  });",
                "",
            ]
        return [*lines, "});"]

    def _rs_source(self, test: bool) -> list[str]:
        r = self.r
        lines = [
            "use std::collections::HashMap;",
            "use std::time::Duration;",
            "",
            "use serde::{Deserialize, Serialize};",
            "use crate::error::Error;",
            "",
        ]
        for _ in range(r.randint(1, 2)):
            n = self._names("rust")
            lines += [
                "#[derive(Debug, Clone, Serialize, Deserialize)]",
                f"pub struct {n['C']} {{",
                f"    pub {n['k']}: String,",
                "    pub timeout: Duration,",
                "    pub retries: u32,",
                "}",
                "",
            ]
        n = self._names("rust")
        lines += [f"impl {n['C']} {{"]
        for _ in range(r.randint(6, 14)):
            m = self._names("rust")
            lines += [
                f"    pub async fn {m['f']}(&self, {m['v2']}: &{m['C']}) -> Result<{m['C']}, Error> {{",
                *self._body("rust", "        ", r.randint(2, 7)),
                f"        Ok({m['v']})",
                "    }",
                "",
            ]
        lines += ["}", ""]
        if test or r.random() < 0.6:
            lines += ["#[cfg(test)]", "mod tests {", "    use super::*;", ""]
            for _ in range(r.randint(2, 6)):
                lines += [
                    "    #[tokio::test]",
                    f"    async fn {r.choice(_VERBS)}_{r.choice(self.nouns)}_{r.choice(_CONDS)}() {{",
                    f"        let store = {n['C']}::for_tests().await;",
                    (
                        f"        let got = store.{self._func('rust')}"
                        f'(&fixture("{r.choice(self.nouns)}")).await;'
                    ),
                    f"        assert_eq!(got.unwrap().retries, {r.randint(0, 5)});",
                    "    }",
                    "",
                ]
            lines.append("}")
        return lines

    def _go_source(self, path: str) -> list[str]:
        r = self.r
        pkg = path.split("/")[-2] if "/" in path else "main"
        lines = [
            f"package {pkg.replace('-', '')}",
            "",
            "import (",
            '\t"context"',
            '\t"fmt"',
            '\t"log/slog"',
            '\t"time"',
            "",
            f'\t"github.com/{self.company}/{self.project}/internal/config"',
            ")",
            "",
        ]
        n = self._names("go")
        lines += [
            f"type {n['C']} struct {{",
            "\tlog     *slog.Logger",
            "\tclient  *http.Client",
            "\ttimeout time.Duration",
            "\tmu      sync.Mutex",
            f"\titems   map[string]*{_pascal(n['w'])}",
            "}",
            "",
        ]
        for _ in range(r.randint(6, 16)):
            m = self._names("go")
            lines += [
                (
                    f"func (s *{n['C']}) {_pascal(m['f'])}(ctx context.Context, {m['v2']} string) "
                    f"(*{_pascal(m['w'])}, error) {{"
                ),
                *self._body("go", "\t", r.randint(2, 7)),
                f"\treturn {m['v']}, nil",
                "}",
                "",
            ]
        return lines

    def _go_test(self, path: str) -> list[str]:
        r = self.r
        pkg = path.split("/")[-2] if "/" in path else "main"
        lines = [f"package {pkg}", "", "import (", '\t"context"', '\t"testing"', ")", ""]
        suite = (
            [t.split("\t")[1] for t in self.tests.get("go", ()) if t.startswith(path + "\t")]
            if hasattr(self, "tests")
            else []
        )
        for name in suite or [f"Test{_pascal(r.choice(_VERBS))}" for _ in range(5)]:
            lines += [
                f"func {name}(t *testing.T) {{",
                "\tctx := context.Background()",
                f'\tgot, err := newTestStore(t).{_pascal(self._func("go"))}(ctx, "{r.choice(self.nouns)}-1")',
                "\tif err != nil {",
                '\t\tt.Fatalf("unexpected error: %v", err)',
                "\t}",
                f'\tif got.{_pascal(r.choice(self.domain["keys"]))} == "" {{',
                '\t\tt.Errorf("expected a value, got %+v", got)',
                "\t}",
                "}",
                "",
            ]
        return lines

    def _sh_source(self) -> list[str]:
        r = self.r
        lines = [
            "#!/usr/bin/env bash",
            "set -euo pipefail",
            "",
            f'NAMESPACE="${{NAMESPACE:-{self.project}}}"',
            'ENVIRONMENT="${1:?usage: $0 <environment>}"',
            f'IMAGE="ghcr.io/{self.company}/{self.project}:${{GIT_SHA:-$(git rev-parse --short HEAD)}}"',
            "",
        ]
        for _ in range(r.randint(6, 14)):
            fn = f"{r.choice(_VERBS)}_{r.choice(self.nouns)}"
            lines += [
                f"{fn}() {{",
                "  local attempt=0",
                f'  echo "==> {fn} in ${{ENVIRONMENT}}" >&2',
                r.choice(
                    (
                        '  kubectl -n "$NAMESPACE" rollout status deploy/"$1" --timeout=120s',
                        '  helm upgrade --install "$1" ./helm/"$1" -f "values/${ENVIRONMENT}.yaml"',
                        '  aws s3 cp "build/$1.tar.gz" "s3://artifacts-${ENVIRONMENT}/$1/"',
                        '  curl -fsS "https://${ENVIRONMENT}.internal/healthz" | jq -r .status',
                        '  docker push "$IMAGE"',
                    )
                ),
                "  while (( attempt < 5 )); do",
                "    attempt=$((attempt + 1))",
                '    sleep "$attempt"',
                "  done",
                "}",
                "",
            ]
        return [*lines, "main() {", "  require_env KUBECONFIG", '  deploy_service "$@"', "}", "", 'main "$@"']

    def _bats(self, path: str) -> list[str]:
        lines = [
            "#!/usr/bin/env bats",
            "",
            "setup() {",
            '  export PATH="$BATS_TEST_DIRNAME/stubs:$PATH"',
            "}",
            "",
        ]
        for t in self.tests.get("devops", ()) if hasattr(self, "tests") else ():
            if t.startswith(path + "\t"):
                lines += [
                    f'@test "{t.split(chr(9))[1]}" {{',
                    "  run ./scripts/deploy.sh staging",
                    '  [ "$status" -eq 0 ]',
                    '  [[ "$output" == *"rolled out"* ]]',
                    "}",
                    "",
                ]
        return lines

    def _tf_source(self) -> list[str]:
        r = self.r
        lines = [
            "terraform {",
            '  required_version = ">= 1.6"',
            "  required_providers {",
            '    aws = { source = "hashicorp/aws", version = "~> 5.54" }',
            "  }",
            "}",
            "",
        ]
        for _ in range(r.randint(10, 24)):
            noun = r.choice(self.nouns)
            kind = r.choice(
                (
                    "aws_s3_bucket",
                    "aws_sqs_queue",
                    "aws_iam_role",
                    "aws_security_group",
                    "aws_cloudwatch_metric_alarm",
                    "aws_db_instance",
                )
            )
            lines += [
                f'resource "{kind}" "{noun}" {{',
                f'  name = "${{var.environment}}-{self.project}-{noun}"',
                "  tags = {",
                f'    Service     = "{self.project}"',
                "    Environment = var.environment",
                "  }",
                "}",
                "",
            ]
        return lines

    def _yaml(self, path: str) -> list[str]:
        r = self.r
        if ".github/workflows" in path:
            return [
                "name: ci",
                "on:",
                "  push:",
                "    branches: [main]",
                "  pull_request:",
                "jobs:",
                "  test:",
                "    runs-on: ubuntu-22.04",
                "    steps:",
                "      - uses: actions/checkout@v4",
                "      - uses: actions/setup-python@v5",
                "        with:",
                "          python-version: '3.11'",
                "      - run: make lint test",
                "      - run: ./scripts/deploy.sh staging",
                "        if: github.ref == 'refs/heads/main'",
                "        env:",
                "          KUBECONFIG: ${{ secrets.STAGING_KUBECONFIG }}",
            ]
        if "compose" in path:
            return [
                "services:",
                f"  {self.project}:",
                "    build: .",
                "    ports:",
                '      - "8080:8080"',
                "    environment:",
                f"      DATABASE_URL: postgres://app:app@db:5432/{self.pkg}",
                "    depends_on: [db, redis]",
                "  db:",
                "    image: postgres:16",
                "  redis:",
                "    image: redis:7-alpine",
            ]
        return [
            "apiVersion: apps/v1",
            "kind: Deployment",
            "metadata:",
            f"  name: {self.project}",
            f"  labels: {{app: {self.project}}}",
            "spec:",
            f"  replicas: {r.randint(2, 6)}",
            "  template:",
            "    spec:",
            "      containers:",
            f"        - name: {self.project}",
            f"          image: ghcr.io/{self.company}/{self.project}:{self.hexid()}",
            "          resources:",
            "            limits: {cpu: 500m, memory: 512Mi}",
            "          readinessProbe:",
            "            httpGet: {path: /healthz, port: 8080}",
            "          env:",
            *[
                x
                for k in r.sample(self.domain["keys"], 8)
                for x in (f"            - name: {k.upper()}", f'              value: "{self.hexid(6)}"')
            ],
            "---",
            "apiVersion: v1",
            "kind: Service",
            "metadata:",
            f"  name: {self.project}",
            "spec:",
            f"  selector: {{app: {self.project}}}",
            "  ports:",
            "    - port: 80",
            "      targetPort: 8080",
            "---",
            "apiVersion: v1",
            "kind: ConfigMap",
            "metadata:",
            f"  name: {self.project}-config",
            "data:",
            *[
                f'  {k}: "{r.choice(self.nouns)}-{r.randint(1, 99)}"'
                for k in r.sample(self.domain["keys"], 6)
            ],
        ]

    def _readme(self) -> list[str]:
        r = self.r
        lines = [
            f"# {self.project}",
            "",
            (f"Service of the {self.company} platform that handles {', '.join(r.sample(self.nouns, 3))}."),
            "",
            "## Development",
            "",
            "```sh",
        ]
        lines += {
            "python": ["uv sync", "pytest -q"],
            "node": ["npm ci", "npm test"],
            "rust": ["cargo test"],
            "go": ["go test ./..."],
            "devops": ["make lint", "bats tests/"],
        }[self.primary]
        return [*lines, "```", "", "## Layout", "", *[f"- `{p}`" for p in self.files[:12]]]

    # -- tool results -------------------------------------------------------------------
    def view(self, path: str, lines: list[str], start: int = 1) -> str:
        if self.numbered:
            return "\n".join(f"{i:6}\t{line}" for i, line in enumerate(lines, start))
        return "\n".join(lines)

    def listing(self) -> tuple[str, str]:
        r = self.r
        style = r.randrange(3)
        if style == 0:
            tops = sorted({p.split("/", 1)[0] + ("/" if "/" in p else "") for p in self.files} | {".git/"})
            rows = ["total " + str(r.randint(60, 400))]
            for name in tops:
                d = name.endswith("/")
                rows.append(
                    f"{'drwxr-xr-x' if d else '-rw-r--r--'}  {r.randint(1, 12):2d} agent agent "
                    f"{r.randint(96, 48000):6d} {r.choice(('Mar', 'Apr', 'May', 'Jun'))} "
                    f"{r.randint(1, 28):2d} {r.randint(8, 18):02d}:{r.randint(0, 59):02d} {name.rstrip('/')}"
                )
            return "ls -la", "\n".join(rows)
        if style == 1:
            return "git ls-files", "\n".join(sorted(self.files))
        ext = {"python": "*.py", "node": "*.ts", "rust": "*.rs", "go": "*.go", "devops": "*.sh"}[self.primary]
        found = [f"./{p}" for p in sorted(self.files) if p.endswith(ext[1:])]
        return f"find . -name '{ext}' -not -path './node_modules/*' | sort", "\n".join(found)

    def grep(self, word: str) -> str:
        r = self.r
        rows = []
        code = [p for p in self.files if p.endswith((".py", ".ts", ".rs", ".go", ".sh", ".bats"))]
        for path in r.sample(code, min(len(code), r.randint(4, 12))):
            flavour = self.flavour_of[path]
            for _ in range(r.randint(1, 6)):
                for _ in range(5):
                    line = r.choice(self._body(flavour, "    ", 1))
                    if word in line:
                        break
                    var = next((v for v in _VARS if re.search(rf"\b{v}\b", line)), None)
                    if var:
                        line = re.sub(rf"\b{var}\b", word, line, count=1)
                        break
                else:
                    continue
                rows.append(f"{path}:{r.randint(3, 400)}:{line.rstrip()}")
        return "\n".join(rows)

    def git_log(self) -> str:
        r = self.r
        rows = []
        for _ in range(r.randint(12, 30)):
            rows.append(
                f"{self.hexid()} {r.choice(('fix', 'feat', 'chore', 'refactor', 'test', 'docs'))}"
                f"({r.choice(self.nouns)}): {r.choice(_VERBS)} {r.choice(self.nouns)} "
                f"{r.choice(_CONDS).replace('_', ' ')}"
            )
        return "\n".join(rows)

    def git_status(self) -> str:
        changed = sorted({p for p, _, _ in self.edits})
        rows = [
            f"On branch {self.key.lower()}-{self.feature.split()[0].lower()}",
            "Changes not staged for commit:",
            '  (use "git add <file>..." to update what will be committed)',
            "",
        ]
        rows += [f"\tmodified:   {p}" for p in changed[:40]] or ["nothing to commit, working tree clean"]
        return "\n".join(rows)

    def git_diff(self) -> str:
        rows: list[str] = []
        for path, old, new in self.edits[-6:]:
            rows += [
                f"diff --git a/{path} b/{path}",
                f"index {self.hexid()}..{self.hexid()} 100644",
                f"--- a/{path}",
                f"+++ b/{path}",
                (f"@@ -{self.r.randint(1, 300)},{len(old)} +{self.r.randint(1, 300)},{len(new)} @@"),
            ]
            rows += [f"-{x}" for x in old] + [f"+{x}" for x in new]
        return "\n".join(rows) or ""

    def api_json(self, url: str) -> str:
        r = self.r
        keys = self.domain["keys"]
        items = []
        for _ in range(r.randint(6, 25)):
            item: dict[str, Any] = {"id": f"{r.choice(self.nouns)[:3]}_{self.hexid(14)}"}
            for k in r.sample(keys, 6):
                item[k] = r.choice(
                    (
                        r.randint(0, 50000),
                        self.hexid(10),
                        None,
                        True,
                        f"{r.choice(self.nouns)}-{r.randint(1, 99)}",
                    )
                )
            item["created_at"] = self.stamp().replace(" ", "T") + "Z"
            items.append(item)
        return json.dumps(
            {
                "object": "list",
                "url": url.split("?")[0].split(".dev", 1)[-1],
                "data": items,
                "has_more": r.random() < 0.5,
            },
            indent=2,
        )

    def docs_page(self, url: str) -> str:
        r = self.r
        out = [f"Source: {url}", "", f"# {r.choice(self.nouns).capitalize()} {r.choice(_DOCS)}", ""]
        for _ in range(r.randint(4, 9)):
            out += [f"## {r.choice(_VERBS).capitalize()} {r.choice(self.nouns)}s", ""]
            out.append(
                " ".join(
                    f"The {r.choice(self.nouns)} {r.choice(_DOC_VERBS)} the {r.choice(self.nouns)} "
                    f"{r.choice(_DOC_TAILS)}."
                    for _ in range(r.randint(3, 7))
                )
            )
            out.append("")
            if r.random() < 0.5:
                k = r.choice(self.domain["keys"])
                out += [
                    "```",
                    f"curl -X POST https://api.example.com/v1/{r.choice(self.nouns)}s \\",
                    f'  -H "Authorization: Bearer $TOKEN" -d {k}={self.hexid(8)}',
                    "```",
                    "",
                ]
        return "\n".join(out)

    # -- logs ---------------------------------------------------------------------------
    def test_log(self, flavour: str, errors: list[_Err]) -> tuple[str, str]:
        """(command, output) of the flavour's test runner with these failures (test errors)."""
        r = self.r
        suite = self.tests[flavour]
        failing = [e for e in errors if e.kind == "test"]
        failed = {e.test: e for e in failing if e.test}
        total = len(suite)
        root = _SECONDARY_ROOT[flavour] if flavour == self.secondary else ""
        out: list[str] = []
        if flavour == "python":
            cmd = r.choice(
                (
                    "pytest -q",
                    "python -m pytest -x -vv",
                    "pytest tests/ -v",
                    "uv run pytest -v",
                    "pytest -q -p no:cacheprovider",
                )
            )
            out += [
                "=" * 29 + " test session starts " + "=" * 30,
                "platform linux -- Python 3.11.9, pytest-8.3.2, pluggy-1.5.0",
                f"rootdir: {self.workdir}",
                "configfile: pyproject.toml",
                "plugins: anyio-4.4.0, cov-5.0.0, asyncio-0.23.8, mock-3.14.0",
                f"collected {total} items",
                "",
            ]
            if "-v" in cmd:
                for i, t in enumerate(suite):
                    out.append(
                        f"{t} {'FAILED' if t in failed else 'PASSED'}".ljust(71)
                        + f" [{(i + 1) * 100 // total:3d}%]"
                    )
            else:
                done = 0
                for f in dict.fromkeys(t.split("::")[0] for t in suite):
                    tests = [t for t in suite if t.startswith(f + "::")]
                    done += len(tests)
                    dots = "".join("F" if t in failed else "." for t in tests)
                    out.append(f"{f} {dots}".ljust(71) + f" [{done * 100 // total:3d}%]")
            if failing:
                out += ["", "=" * 35 + " FAILURES " + "=" * 35]
                for e in failing:
                    out += e.lines
                out += ["=" * 28 + " short test summary info " + "=" * 27]
                out += [e.summary or e.fact for e in failing]
            status = f"{len(failing)} failed, {total - len(failed)} passed" if failing else f"{total} passed"
            out.append(f"{'=' * 20} {status} in {r.uniform(2, 60):.2f}s {'=' * 20}")
        elif flavour == "node":
            cmd = r.choice(("npm test", "npx vitest run", "npm run test -- --reporter=verbose", "pnpm test"))
            out += [
                f"> {self.project}@1.4.2 test",
                "> vitest run",
                "",
                f" RUN  v1.6.0 {self.workdir}/{root}".rstrip("/"),
                "",
            ]
            by_file: dict[str, list[str]] = {}
            for t in suite:
                by_file.setdefault(t.split("\t")[0], []).append(t)
            for f, tests in by_file.items():
                bad = sum(t in failed for t in tests)
                mark = "\u276f" if bad else "✓"
                out.append(
                    f" {mark} {f} ({len(tests)} tests{f' | {bad} failed' if bad else ''}) "
                    f"{r.randint(20, 900)}ms"
                )
                if "verbose" in cmd or bad:
                    out += [
                        f"   {_CROSS if t in failed else '✓'} {t.split(chr(9))[1]} {r.randint(1, 40)}ms"
                        for t in tests
                    ]
            if failing:
                out += ["", "⎯" * 20 + f" Failed Tests {len(failing)} " + "⎯" * 20]
                for e in failing:
                    out += e.lines
            files_bad = len({t.split("\t")[0] for t in failed})
            out += [
                "",
                (
                    f" Test Files  {f'{files_bad} failed | ' if files_bad else ''}"
                    f"{len(by_file) - files_bad} passed ({len(by_file)})"
                ),
                (
                    f"      Tests  {f'{len(failed)} failed | ' if failed else ''}"
                    f"{total - len(failed)} passed ({total})"
                ),
                f"   Duration  {r.uniform(1, 30):.2f}s",
            ]
        elif flavour == "rust":
            cmd = r.choice(("cargo test", "cargo test --all-features", "cargo test -- --nocapture"))
            out += self.cargo_compiling(r.randint(10, 40))
            out += [
                f"    Finished `test` profile [unoptimized + debuginfo] target(s) in {r.uniform(3, 60):.2f}s",
                f"     Running unittests src/lib.rs (target/debug/deps/{self.pkg}-{self.hexid(16)})",
                "",
                f"running {total} tests",
            ]
            out += [f"test {t} ... {'FAILED' if t in failed else 'ok'}" for t in suite]
            if failing:
                out += ["", "failures:", ""]
                for e in failing:
                    out += e.lines
                out += ["", "failures:", *[f"    {t}" for t in failed]]
            status = "FAILED" if failing else "ok"
            out += [
                "",
                (
                    f"test result: {status}. {total - len(failed)} passed; {len(failed)} failed; 0 ignored; "
                    f"0 measured; 0 filtered out; finished in {r.uniform(0.1, 9):.2f}s"
                ),
            ]
        elif flavour == "go":
            cmd = r.choice(
                ("go test ./...", "go test -race ./...", "go test -v ./...", "go test -count=1 ./...")
            )
            pkgs: dict[str, list[str]] = {}
            for t in suite:
                pkgs.setdefault(t.split("\t")[0].rsplit("/", 1)[0], []).append(t)
            for pkg, tests in pkgs.items():
                broken = any(t in failed for t in tests)
                for t in tests:
                    if t in failed:
                        out += failed[t].lines
                    elif "-v" in cmd:
                        name = t.split("\t")[1]
                        out += [f"=== RUN   {name}", f"--- PASS: {name} ({r.randint(0, 30) / 100:.2f}s)"]
                full = f"github.com/{self.company}/{self.project}/{pkg}"
                out.append(
                    f"FAIL\t{full}\t{r.uniform(0.1, 3):.3f}s"
                    if broken
                    else f"ok  \t{full}\t{r.uniform(0.01, 3):.3f}s"
                )
            if failing:
                out.append("FAIL")
        else:
            cmd = r.choice(("bats tests/", "make test", "bats --tap tests/"))
            out.append(f"1..{total}")
            for i, t in enumerate(suite, 1):
                if t in failed:
                    out += failed[t].lines
                else:
                    out.append(f"ok {i} {t.split(chr(9))[1]}")
        for e in errors:  # failures of tests this runner does not list
            if e.kind == "test" and e.test not in suite and flavour != "python":
                out += e.lines
        return (f"cd {root} && {cmd}" if root else cmd), "\n".join(out)

    def cargo_compiling(self, n: int) -> list[str]:
        r = self.r
        crates = r.sample(_CRATES, min(n, len(_CRATES)))
        return [f"   Compiling {c} v{r.randint(0, 2)}.{r.randint(0, 40)}.{r.randint(0, 30)}" for c in crates]

    def build_log(self, flavour: str, errors: list[_Err]) -> tuple[str, str]:
        r = self.r
        root = _SECONDARY_ROOT[flavour] if flavour == self.secondary else ""
        out: list[str] = []
        blocks = [line for e in errors for line in e.lines]
        if flavour == "python":
            cmd = r.choice(("mypy src/", "ruff check . && mypy src/", "pip install -e '.[dev]'", "make lint"))
            if cmd.startswith("pip"):
                out += [f"Obtaining file://{self.workdir}", "  Installing build dependencies ... done"]
                out += [f"Collecting {c}>={r.randint(0, 9)}.{r.randint(0, 9)}" for c in r.sample(_PYPI, 12)]
                out += [
                    f"  Using cached {c}-{r.randint(0, 9)}.{r.randint(0, 30)}.0-py3-none-any.whl "
                    f"({r.randint(20, 900)} kB)"
                    for c in r.sample(_PYPI, 12)
                ]
            else:
                out += [
                    f"{p}: note: By default the bodies of untyped functions are not checked"
                    for p in r.sample(self.files_of("python"), 2)
                ]
            out += blocks
            out.append(
                f"Found {len(errors)} error(s) in {len(errors)} file(s) (checked {r.randint(30, 140)} source "
                "files)"
                if errors
                else f"Success: no issues found in {r.randint(30, 140)} source files"
            )
        elif flavour == "node":
            cmd = r.choice(
                ("npm run build", "npx tsc --noEmit -p tsconfig.json", "npm run lint && npm run build")
            )
            out += [
                f"> {self.project}@1.4.{r.randint(0, 9)} build",
                "> tsc -p tsconfig.json && vite build",
                "",
            ]
            out += blocks
            if not errors:
                out += [
                    "vite v5.2.11 building for production...",
                    "transforming...",
                    f"✓ {r.randint(200, 900)} modules transformed.",
                    "rendering chunks...",
                ]
                out += [
                    f"dist/assets/{r.choice(self.nouns)}-{self.hexid(8)}.js".ljust(52)
                    + f"{r.uniform(0.5, 300):8.2f} kB │ gzip: {r.uniform(0.3, 90):7.2f} kB"
                    for _ in range(r.randint(10, 40))
                ]
                out.append(f"✓ built in {r.uniform(1, 9):.2f}s")
            else:
                out.append(f"Found {len(errors)} error(s).")
        elif flavour == "rust":
            cmd = r.choice(("cargo build", "cargo clippy --all-targets", "cargo build --release"))
            out += self.cargo_compiling(r.randint(20, 60))
            out.append(
                f"   Compiling {self.project} v0.{r.randint(1, 9)}.0 ({self.workdir}/{root})".replace(
                    "/)", ")"
                )
            )
            out += blocks
            if errors:
                out.append(
                    f"error: could not compile `{self.project}` (lib) due to {len(errors)} previous error(s)"
                )
            else:
                out.append(
                    "    Finished `dev` profile [unoptimized + debuginfo] target(s) in "
                    f"{r.uniform(3, 90):.2f}s"
                )
        elif flavour == "go":
            cmd = r.choice(("go build ./...", "go vet ./...", "go build -v ./..."))
            out += [f"github.com/{self.company}/{self.project}/internal/{s}" for s in _SUBS["go"]]
            out += (
                ["# " + f"github.com/{self.company}/{self.project}/internal/{r.choice(_SUBS['go'])}"]
                if errors
                else []
            )
            out += blocks
        else:
            cmd = r.choice(
                (f"docker build -t {self.project}:dev .", "terraform plan -out=tfplan", "make image")
            )
            if cmd.startswith("terraform"):
                out += ["Refreshing state..."] + [
                    f"aws_{r.choice(('s3_bucket', 'sqs_queue', 'iam_role'))}.{n}: Refreshing state... "
                    f"[id={self.project}-{n}]"
                    for n in self.nouns
                ]
                for n in r.sample(self.nouns, r.randint(2, 6)):
                    kind = r.choice(("aws_s3_bucket", "aws_sqs_queue", "aws_cloudwatch_metric_alarm"))
                    out += [
                        f"  # {kind}.{n} will be updated in-place",
                        f'  ~ resource "{kind}" "{n}" {{',
                        f'        id   = "{self.project}-{n}"',
                        f'        name = "{self.project}-{n}"',
                        "      ~ tags = {",
                        f'          ~ "Revision" = "{self.hexid()}" -> "{self.hexid()}"',
                        "        }",
                        "    }",
                        "",
                    ]
                out += blocks or [f"Plan: 0 to add, {r.randint(2, 6)} to change, 0 to destroy."]
                return cmd, "\n".join(out)
            out += [
                '#0 building with "default" instance using docker driver',
                "",
                "#1 [internal] load build definition from Dockerfile",
                f"#1 transferring dockerfile: {r.uniform(0.5, 3):.2f}kB done",
                "#1 DONE 0.0s",
            ]
            for step in range(2, r.randint(8, 16)):
                out += [
                    (f"#{step} [{r.choice(('builder', 'runtime'))} {step}/14] {r.choice(_DOCKER_STEPS)}"),
                    f"#{step} DONE {r.uniform(0, 40):.1f}s",
                ]
            out += blocks
        return (f"cd {root} && {cmd}" if root else cmd), "\n".join(out)

    def run_log(self, flavour: str, errors: list[_Err]) -> tuple[str, str]:
        r = self.r
        out: list[str] = []
        if flavour == "python":
            cmd = r.choice(
                (
                    f"python -m {self.pkg}.main",
                    f"uvicorn {self.pkg}.main:app --port 8080",
                    f"python scripts/backfill_{r.choice(self.nouns)}.py --dry-run",
                )
            )
            out += [
                f"INFO:     Started server process [{r.randint(1000, 40000)}]",
                "INFO:     Waiting for application startup.",
                "INFO:     Application startup complete.",
                "INFO:     Uvicorn running on http://127.0.0.1:8080 (Press CTRL+C to quit)",
            ]
            for _ in range(r.randint(5, 25)):
                out.append(
                    f'INFO:     127.0.0.1:{r.randint(40000, 65000)} - "{r.choice(("GET", "POST"))} '
                    f'/v1/{r.choice(self.nouns)}s HTTP/1.1" {r.choice((200, 200, 201, 204))}'
                )
        elif flavour == "node":
            cmd = r.choice(("node dist/index.js", "npm run dev", "npx tsx src/index.ts"))
            for _ in range(r.randint(5, 25)):
                out.append(
                    json.dumps(
                        {
                            "level": 30,
                            "time": 1715600000000 + r.randint(0, 10**7),
                            "pid": 4121,
                            "reqId": f"req-{r.randint(1, 999)}",
                            "msg": "request completed",
                            "url": f"/v1/{r.choice(self.nouns)}s",
                            "statusCode": 200,
                            "responseTime": round(r.uniform(0.4, 40), 3),
                        }
                    )
                )
        elif flavour == "rust":
            cmd = "cargo run -- --config config/dev.toml"
            out += [
                f"    Finished `dev` profile [unoptimized + debuginfo] target(s) in {r.uniform(0.1, 5):.2f}s",
                f"     Running `target/debug/{self.project} --config config/dev.toml`",
            ]
            for _ in range(r.randint(5, 20)):
                out.append(
                    f"{self.stamp().replace(' ', 'T')}.{r.randint(0, 999):03d}Z  INFO {self.pkg}::"
                    f"{r.choice(_SUBS['rust'])}: {r.choice(_VERBS)} {r.choice(self.nouns)} "
                    f"{r.choice(self.domain['keys'])}={self.hexid(6)}"
                )
        elif flavour == "go":
            cmd = f"go run ./cmd/{self.project}"
            for _ in range(r.randint(5, 20)):
                out.append(
                    f'time={self.stamp().replace(" ", "T")}Z level=INFO msg="{r.choice(_VERBS)} '
                    f'{r.choice(self.nouns)}" {r.choice(self.domain["keys"])}={self.hexid(6)}'
                )
        else:
            cmd = r.choice(
                (
                    "./scripts/deploy.sh staging",
                    "bash -x scripts/deploy.sh staging",
                    "make deploy ENV=staging",
                )
            )
            out += [
                f"+ kubectl -n {self.project} get deploy",
                "NAME" + " " * 20 + "READY   UP-TO-DATE   AVAILABLE   AGE",
            ]
            out += [
                f"{self.project}-{n}".ljust(24)
                + f"{r.randint(1, 4)}/4     4            4           {r.randint(1, 90)}d"
                for n in r.sample(self.nouns, 4)
            ]
        for e in errors:
            out += e.lines
        return cmd, "\n".join(out)

    # -- errors -------------------------------------------------------------------------
    def new_error(self, flavour: str | None = None) -> _Err:
        r = self.r
        for _ in range(200):
            which = flavour or (
                self.primary if r.random() < 0.65 else self.secondary if r.random() < 0.6 else "generic"
            )
            err = r.choice(_ERRORS[which])(self)
            if err.fact not in self.used_facts and len(err.fact) <= MAX_FACT:
                self.used_facts.add(err.fact)
                assert any(err.fact in line for line in [*err.lines, err.summary or ""]), err
                return err
        raise RuntimeError("could not find a new distinct error line")

    def test_id(self, flavour: str) -> str:
        return self.r.choice(self.tests[flavour])

    def src(self, flavour: str) -> str:
        files = [p for p in self.files_of(flavour, tests=False, source=True) if not p.endswith("__init__.py")]
        return self.r.choice(files or self.files_of(flavour))

    # -- messages -----------------------------------------------------------------------
    def tool_call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": self.call_id(),
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
        }

    def emit(self, content: str | None, calls: list[tuple[dict[str, Any], str]]) -> None:
        """One assistant message with these (call, result) pairs, results in any order."""
        if not calls:
            self.msgs.append({"role": "assistant", "content": content or "Done."})
            return
        self.msgs.append({"role": "assistant", "content": content, "tool_calls": [c for c, _ in calls]})
        results = list(calls)
        if len(results) > 1 and self.r.random() < 0.3:
            self.r.shuffle(results)
        for c, out in results:
            self.msgs.append({"role": "tool", "tool_call_id": c["id"], "content": out})

    def narrate(self, call: dict[str, Any]) -> str:
        """What an agent says before a call, about that call."""
        r = self.r
        name = call["function"]["name"]
        args = json.loads(call["function"]["arguments"])
        path = next((args[k] for k in ("path", "file_path", "filename") if k in args), None)
        if name == "apply_patch":
            patch = args.get("patch") or args.get("input") or ""
            path = patch.split("+++ b/", 1)[-1].split("\n", 1)[0]
        if name == self.read_tool[0]:
            pool: tuple[str, ...] = (
                "Let me look at {path}.",
                "Opening {path} to see how it is wired.",
                "I want to see the whole of {path} before changing it.",
                "Reading {path}.",
            )
        elif name in ("write_file", "create_file"):
            pool = ("Creating {path}.", "Adding {path} for the new code.", "Writing {path}.")
        elif name in ("edit_file", "str_replace", "apply_patch"):
            pool = (
                "Now updating {path}.",
                "Making the change in {path}.",
                "Fixing {path}.",
                "Applying the fix to {path}.",
            )
        elif name == "run_tests":
            pool = (
                "Running the tests again.",
                "Re-running the test suite.",
                "Let's see if the suite passes now.",
            )
        elif name in ("search", "grep"):
            pool = ("Searching for `{q}`.", "Looking for other uses of `{q}`.", "Where else is `{q}` used?")
        elif name in ("http_get", "fetch_url"):
            pool = ("Let me see what {url} returns.", "Fetching {url}.", "Checking {url}.")
        else:
            cmd = str(args.get(self.run_tool[1], ""))
            if cmd.startswith("git"):
                pool = ("Checking the git state before I continue.", "Let me see what changed so far.")
            elif "test" in cmd or "bats" in cmd:
                pool = (
                    "Running the tests again.",
                    "Re-running the focused tests.",
                    "Let's see where the suite stands.",
                )
            else:
                pool = ("Running `{cmd}`.", "Let me check the output of `{cmd}`.", "Trying `{cmd}`.")
            cmd = cmd.split("&&")[-1].strip()
            return r.choice(pool).format(cmd=cmd if len(cmd) <= 60 else " ".join(cmd.split()[:3]))
        return r.choice(pool).format(
            path=path, q=args.get("pattern") or args.get("query"), url=args.get("url")
        )

    def user(self, text: str) -> None:
        self.msgs.append({"role": "user", "content": text})

    # -- actions (each returns a (call, result) pair) ------------------------------------
    def a_read(self, path: str | None = None) -> tuple[dict[str, Any], str]:
        path = path or self.r.choice(self.files)
        lines = self.content(path)
        name, key = self.read_tool
        args: dict[str, Any] = {key: path}
        start, chunk = 1, lines
        if len(lines) > 120 and self.r.random() < 0.4:
            start = self.r.randint(1, len(lines) - 60)
            chunk = lines[start - 1 : start + 119]
            args["view_range" if name == "view" else "offset"] = (
                [start, start + len(chunk) - 1] if name == "view" else start
            )
        return self.tool_call(name, args), self.view(path, chunk, start)

    def a_run(self, command: str, output: str, exit_code: int | None = None) -> tuple[dict[str, Any], str]:
        name, key = self.run_tool
        args: dict[str, Any] = {key: command}
        if self.r.random() < 0.3:
            args["timeout"] = self.r.choice((60, 120, 300, 600))
        if exit_code is not None and self.r.random() < 0.5:
            output = f"{output}\n[exit code: {exit_code}]"
        return self.tool_call(name, args), output

    def a_tests(self, flavour: str, errors: list[_Err]) -> tuple[dict[str, Any], str]:
        cmd, out = self.test_log(flavour, errors)
        if self.test_tool and flavour == self.primary and self.r.random() < 0.7:
            args: dict[str, Any] = {"path": self.r.choice(("tests/", ".", "./..."))}
            if self.r.random() < 0.5:
                args["args"] = self.r.choice(("-x", "-q", "--verbose", "--no-cache"))
            return self.tool_call("run_tests", args), out
        return self.a_run(cmd, out, 1 if errors else 0)

    def a_search(self) -> tuple[dict[str, Any], str]:
        r = self.r
        word = r.choice((self.func(), r.choice(self.domain["keys"]), r.choice(self.nouns), "TODO", "timeout"))
        if self.search_tool == "grep":
            args: dict[str, Any] = {"pattern": word, "path": r.choice((".", "src", "src/", "internal"))}
            if r.random() < 0.5:
                args["include"] = {
                    "python": "*.py",
                    "node": "*.ts",
                    "rust": "*.rs",
                    "go": "*.go",
                    "devops": "*.sh",
                }[self.primary]
        else:
            args = {"query": word}
            if r.random() < 0.5:
                args["path"] = r.choice((".", "src"))
        return self.tool_call(self.search_tool, args), self.grep(word)

    def a_http(self, url: str, body: str | None = None) -> tuple[dict[str, Any], str]:
        if body is None:
            body = (
                self.docs_page(url)
                if "/docs" in url or "rfc" in url or "spec" in url or "guide" in url
                else self.api_json(url)
            )
        args: dict[str, Any] = {"url": url}
        if self.http_tool == "fetch_url" and self.r.random() < 0.5:
            args["max_length"] = 20000
        return self.tool_call(self.http_tool, args), body

    def a_edit(self, path: str) -> tuple[dict[str, Any], str]:
        r = self.r
        flavour = self.flavour_of.get(path, self.primary)
        kind = "yaml" if path.endswith((".yml", ".yaml")) else "tf" if path.endswith(".tf") else flavour
        new_file = path not in self.cache and path not in self.flavour_of
        self.fact("files_changed", path)
        if new_file:
            self.flavour_of[path] = flavour
            self.files.append(path)
            lines = self._generate(path)
            self.cache[path] = lines
            self.edits.append((path, [], lines[:12]))
            tool = (
                self.create_tool
                if r.random() < 0.8 or "apply_patch" not in self.edit_tools
                else "apply_patch"
            )
            if tool == "apply_patch":
                diff = "\n".join(
                    [
                        "--- /dev/null",
                        f"+++ b/{path}",
                        f"@@ -0,0 +1,{len(lines)} @@",
                        *[f"+{x}" for x in lines],
                    ]
                )
                return self.tool_call(
                    "apply_patch", {r.choice(("patch", "input")): diff}
                ), f"Applied patch\nA {path}\n1 file changed, {len(lines)} insertions(+)"
            key = "file_text" if tool == "create_file" and r.random() < 0.5 else "content"
            text = "\n".join(lines) + "\n"
            return self.tool_call(tool, {self.path_key: path, key: text}), r.choice(
                (
                    f"File created successfully at: {path}",
                    f"Wrote {len(text.encode()):,} bytes to {path}",
                    f"Created {path} ({len(lines)} lines)",
                )
            )
        lines = self.content(path)

        def simple(x: str) -> bool:
            return (
                x[:1] in (" ", "\t")
                and x.strip() not in _CLOSERS
                and not x.rstrip().endswith(("{", ":", "(", ","))
            )

        inner = [i for i, x in enumerate(lines) if simple(x)]
        at = r.choice(inner) if inner else r.randint(0, max(0, len(lines) - 1))
        indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())] if lines else ""
        old = [lines[at]] if lines else [""]
        for x in lines[at + 1 : at + r.randint(1, 3)]:
            if not simple(x) or not x.startswith(indent) or x[len(indent) :][:1] in (" ", "\t"):
                break
            old.append(x)
        added = self._body(kind, indent, r.randint(1, 4))
        new = [*old, *added] if r.random() < 0.6 else [*added, *old]
        lines[at : at + len(old)] = new
        self.edits.append((path, old, new))
        tool = r.choice(self.edit_tools)
        if tool == "apply_patch":
            extra = ""
            if r.random() < 0.25:  # sometimes a patch touches a second file
                other = self.r.choice(self.files_of(flavour, tests=True))
                if not other.startswith(_LEGACY[self.primary]):
                    self.fact("files_changed", other)
                    more = self._body(kind, "    ", 2)
                    self.content(other).extend(more)
                    extra = "\n" + "\n".join(
                        [
                            f"--- a/{other}",
                            f"+++ b/{other}",
                            f"@@ -{len(self.content(other))},0 +{len(self.content(other))},2 @@",
                            *[f"+{x}" for x in more],
                        ]
                    )
            diff = (
                "\n".join(
                    [
                        f"--- a/{path}",
                        f"+++ b/{path}",
                        f"@@ -{at + 1},{len(old)} +{at + 1},{len(new)} @@",
                        *[f"-{x}" for x in old],
                        *[f"+{x}" for x in new],
                    ]
                )
                + extra
            )
            return self.tool_call(
                "apply_patch", {r.choice(("patch", "input")): diff}
            ), f"Applied patch\nM {path}" + (f"\nM {extra.split()[1][2:]}" if extra else "")
        if tool == "edit_file":
            args = {self.path_key: path, "old_string": "\n".join(old), "new_string": "\n".join(new)}
        else:
            args = {self.path_key: path, "old_str": "\n".join(old), "new_str": "\n".join(new)}
        lo = max(0, at - 4)
        snippet = self.view(path, lines[lo : at + len(new) + 4], lo + 1)
        return self.tool_call(tool, args), r.choice(
            (
                f"The file {path} has been edited. "
                f"Here's the result of running `cat -n` on a snippet of {path}:\n" + snippet,
                f"Edited {path}: 1 replacement.",
                f"OK: replaced {len(old)} line(s) with {len(new)} in {path}",
            )
        )

    # -- the whole run ------------------------------------------------------------------
    def build(self) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
        r, T, d = self.r, self.turns, self.domain
        fill = self.fill
        # What to plant.
        constraints = r.sample(_CONSTRAINTS, r.randint(2, 4))
        numbers = r.sample(_NUMBERS, r.randint(2, 4))
        fitting = [x for x in _DECISIONS if len(x) == 2 or d["prefix"][0] in x[2]]
        decisions = r.sample(fitting, r.randint(2, min(6, 2 + T // 40)))
        n_err = min(80, max(10, round(T / 3.7)))
        n_files = min(30, max(5, round(T / 8) + 3))
        issue_url = r.choice(
            (
                f"https://github.com/{self.company}/{self.project}/issues/{self.key.split('-')[1]}",
                f"https://{self.company}.atlassian.net/browse/{self.key}",
                f"https://linear.app/{self.company}/issue/{self.key}",
            )
        )
        docs_url = r.choice(d["docs"])
        api_url = f"https://{self.project}.staging.{self.company}.dev{d['api_path']}"
        dash_url = f"https://grafana.{self.company}.dev/d/{self.hexid(9)}/{self.project}-overview?orgId=1"
        ci_url = f"https://github.com/{self.company}/{self.project}/actions/runs/{r.randint(10**9, 10**10)}"
        pr_url = f"https://github.com/{self.company}/{self.project}/pull/{r.randint(100, 4000)}"
        n_urls = r.randint(2, min(6, 2 + T // 40))
        extra_urls = r.sample((docs_url, api_url, dash_url, ci_url, pr_url), n_urls - 1)
        self.fact("urls", issue_url)
        for u in extra_urls:
            self.fact("urls", u)
        # Targets of edits: existing sources and tests, and new files.
        legacy = _LEGACY[self.primary]
        editable = [
            p
            for p in self.files
            if not p.startswith(legacy)
            and p.endswith((".py", ".ts", ".rs", ".go", ".sh", ".bats", ".tf", ".yml", ".yaml"))
            and not p.endswith("__init__.py")
        ]
        r.shuffle(editable)
        targets = editable[: max(1, n_files - max(1, n_files // 4))]
        slug = "_".join(self.feature.split()[:2]).replace("-", "_").lower()
        new_candidates = {
            "python": [
                f"src/{self.pkg}/services/{slug}.py",
                f"tests/test_{slug}.py",
                f"alembic/versions/{self.hexid(12)}_{slug}.py",
                f"src/{self.pkg}/utils/{slug}_policy.py",
            ],
            "node": [
                f"src/lib/{_camel(slug)}.ts",
                f"src/lib/{_camel(slug)}.test.ts",
                f"src/middleware/{_camel(slug)}Guard.ts",
                f"migrations/{self.hexid(8)}_{slug}.sql",
            ],
            "rust": [f"src/{slug}.rs", f"tests/{slug}.rs", f"src/{slug}/policy.rs", f"benches/{slug}.rs"],
            "go": [
                f"internal/{slug.replace('_', '')}/{slug}.go",
                f"internal/{slug.replace('_', '')}/{slug}_test.go",
                f"migrations/{self.hexid(6)}_{slug}.up.sql",
                f"pkg/{slug.replace('_', '')}/doc.go",
            ],
            "devops": [
                f"scripts/{slug}.sh",
                f"deploy/k8s/{slug.replace('_', '-')}-cronjob.yaml",
                f"tests/{slug}.bats",
                f"terraform/{slug}.tf",
            ],
        }[self.primary]
        targets += r.sample(new_candidates, min(len(new_candidates), n_files - len(targets)))
        n_edit = len(targets) + r.randint(len(targets) // 3, len(targets))

        # Schedule: follow-ups (text turn + user message), then errors and edits on other turns.
        tiny = T < 6  # too short for follow-ups: the user says everything up front
        rest_c = constraints[r.randint(1, 2) :] if len(constraints) > 1 and not tiny else []
        first_c = constraints[: len(constraints) - len(rest_c)]
        rest_n = numbers[r.randint(1, 2) :] if len(numbers) > 1 and not tiny else []
        first_n = numbers[: len(numbers) - len(rest_n)]
        items: list[tuple[str, Any]] = [("c", c) for c in rest_c] + [("n", n) for n in rest_n]
        user_urls = [u for u in extra_urls if u in (docs_url, dash_url)]
        if not tiny:
            items += [("u", u) for u in user_urls]
        r.shuffle(items)
        n_follow = max(1 if items else 0, (len(items) + 1) // 2) + max(0, T // 60)
        slots = [] if tiny else list(range(2, T - 1))
        follow_turns = sorted(r.sample(slots, min(n_follow, len(slots))))
        follow: dict[int, list[tuple[str, Any]]] = {t: [] for t in follow_turns}
        for i, item in enumerate(items):
            follow[follow_turns[i % len(follow_turns)]].append(item)
        busy = set(follow_turns)
        free = [t for t in range(1, T) if t not in busy]
        err_turns = _spread(r, free, n_err)
        free_edit = [t for t in free if t not in err_turns and t >= 2] or free
        edit_turns = _spread(r, free_edit, n_edit)
        # Decisions go with edit turns (said before making the change) or with text turns.
        dec_turns = _spread(r, sorted({t for t in set(edit_turns) | busy if t < T}) or [0], len(decisions))
        decision_at: dict[int, list[str]] = {}
        for t, (sentence, frag, *_) in zip(dec_turns, decisions, strict=True):
            text = sentence.format_map(fill)
            self.fact("decisions", frag.format_map(fill))
            decision_at.setdefault(t, []).append(text)
        late = [t for t in range(max(1, T // 5), T) if t not in busy] or [T - 1]
        url_turns: dict[str, int] = {}
        for u in extra_urls:
            if u == pr_url:  # the pull request comes at the end, after the push
                url_turns[u] = late[-min(len(late), 3)]
            elif u == ci_url:
                url_turns[u] = late[len(late) * 3 // 4]
            elif u not in user_urls:
                url_turns[u] = r.choice(late)
        edit_queue = list(targets) + [r.choice(targets) for _ in range(n_edit - len(targets))]
        r.shuffle(edit_queue)

        # The task.
        self.fact("task", self.key)
        self.fact("task", self.feature)
        c_text = " ".join(c[0].format_map(fill) for c in first_c)
        for c in first_c:
            self.fact("constraints", c[1].format_map(fill))
        n_text = " ".join(self._number(n) for n in first_n)
        test_hint = self.test_id(self.primary).replace("\t", " ")
        task = r.choice(
            (
                (
                    f"Please pick up {self.key}: {self.feature}. The details are in {issue_url}.\n\n"
                    f"{c_text} {n_text}\n\nStart by reproducing the failing test ({test_hint}), "
                    "then implement it and get the whole suite green."
                ),
                (
                    f"We need {self.feature} in {self.project} ({self.key}, see {issue_url}). "
                    f"Constraints: {c_text}\n"
                    f"Requirements from product: {n_text}\nThe repo is checked out at {self.workdir}."
                ),
                (
                    f"Ticket {self.key} — {self.feature}.\n{issue_url}\n\n"
                    f"Context: {d['upstream']} has been flaky and {d['endpoint']} is on the hot path. "
                    f"{n_text}\n\nRules: {c_text}\nRun the tests before you finish."
                ),
            )
        )
        if tiny and user_urls:
            task += "\n\nReferences: " + " ".join(user_urls)
        self.user(task)

        for t in range(T):
            if t in follow:
                self._followup(t, follow[t], decision_at.get(t, []), issue_url)
                continue
            calls: list[tuple[dict[str, Any], str]] = []
            content_parts: list[str] = [*self.mentions, *decision_at.get(t, [])]
            self.mentions.clear()
            if t == 0:
                cmd, out = self.listing()
                calls += [
                    self.a_run(cmd, out),
                    self.a_read(r.choice(self.files_of(self.primary, tests=False))),
                ]
            for _ in range(err_turns.count(t)):
                calls.append(self._error_call())
            for _ in range(edit_turns.count(t)):
                if edit_queue:
                    calls.append(self.a_edit(edit_queue.pop()))
                    if self.open_errors and r.random() < 0.5:
                        self.open_errors.pop(r.randrange(len(self.open_errors)))
            for u, ut in url_turns.items():
                if ut == t:
                    calls.append(self._url_call(u, api_url, ci_url, pr_url, issue_url))
            if not calls:
                calls.append(self._noise(t))
                x = r.random()
                if x < 0.25:  # parallel calls: a read or two beside it
                    calls.append(self.a_read())
                if x < 0.07:
                    calls.append(self.a_search() if r.random() < 0.5 else self.a_read())
            calls = calls[:3] if len(calls) <= 3 else self._merge(calls)
            if not content_parts and r.random() < 0.6:
                content_parts.append(self.narrate(calls[0][0]))
            self.emit(" ".join(content_parts) or None, calls)
        return self.msgs, {c: list(v) for c, v in self.facts.items()}

    def _merge(self, calls: list[tuple[dict[str, Any], str]]) -> list[tuple[dict[str, Any], str]]:
        """More than three calls in one turn: the extra ones become earlier turns."""
        head, tail = calls[:-3], calls[-3:]
        for i in range(0, len(head), 3):
            self.emit(None, head[i : i + 3])
        return tail

    def _number(self, spec: tuple[str, str, tuple[Any, ...]]) -> str:
        sentence, unit, values = spec
        n = self.r.choice(values)
        self.fact("numbers", unit.format(n=n))
        return sentence.format_map({**self.fill, "n": n})

    def _followup(self, t: int, items: list[tuple[str, Any]], decisions: list[str], issue_url: str) -> None:
        r = self.r
        passed = r.randint(1, 9)
        status = r.choice(
            (
                (
                    f"Quick status: I reproduced the failure and traced it to {self.src(self.primary)}. "
                    f"{passed} of the failing tests pass now."
                ),
                (
                    f"Progress on {self.key}: the core change is in place in {self.src(self.primary)}; "
                    "I'm working through the remaining test failures."
                ),
                f"Update: the build is green again, and I'm now wiring {self.func()} into the request path.",
            )
        )
        parts = [status, *decisions]
        if r.random() < 0.4:
            parts.append(f"(Tracking this against {issue_url}.)")
        parts.append(
            r.choice(
                (
                    "Anything else I should keep in mind?",
                    "I'll continue unless you object.",
                    "Next I'll update the tests.",
                )
            )
        )
        self.msgs.append({"role": "assistant", "content": " ".join(parts)})
        said: list[str] = [
            r.choice(
                (
                    "Thanks, keep going.",
                    "Sounds good.",
                    "OK.",
                    "Good progress.",
                    "One more thing before you continue:",
                )
            )
        ]
        for kind, item in items:
            if kind == "c":
                said.append(item[0].format_map(self.fill))
                self.fact("constraints", item[1].format_map(self.fill))
            elif kind == "n":
                said.append(self._number(item))
            else:
                said.append(
                    r.choice(
                        (
                            f"The dashboard we watch for this is {item}",
                            (f"Follow the docs at {item} for the exact semantics."),
                            f"See {item} for reference.",
                        )
                    )
                )
        if not items:
            said.append(
                r.choice(("No, just keep going.", "Make sure the tests pass before you stop.", "Fine by me."))
            )
        self.user(" ".join(said))

    def _error_call(self) -> tuple[dict[str, Any], str]:
        r = self.r
        err = self.new_error()
        self.fact("error_lines", err.fact)
        flavour = err.flavour if err.flavour in FLAVOURS else self.primary
        if err.kind == "test":
            repeats = [e for e in self.open_errors if e.flavour == flavour and e.kind == "test"][:3]
            self.open_errors.append(err)
            return self.a_tests(flavour, [*repeats, err])
        if err.kind == "http":
            url = err.command or f"https://{self.project}.staging.{self.company}.dev/healthz"
            return self.a_http(url, "\n".join(err.lines))
        if err.kind == "deps" and err.command:
            prelude = {
                "python": [f"Collecting {c}" for c in r.sample(_PYPI, r.randint(3, 9))],
                "node": [
                    f"npm WARN deprecated {c}@1.{r.randint(0, 9)}.0: no longer supported"
                    for c in r.sample(
                        ("glob", "inflight", "rimraf", "npmlog", "gauge", "are-we-there-yet"), 3
                    )
                ],
            }.get(err.flavour, [])
            tail = {
                "node": [
                    (
                        f"npm ERR! A complete log of this run can be found in: /root/.npm/_logs/"
                        f"{self.stamp().replace(' ', 'T').replace(':', '_')}Z-debug-0.log"
                    )
                ]
            }.get(err.flavour, [])
            return self.a_run(err.command, "\n".join([*prelude, *err.lines, *tail]), 1)
        if err.kind == "shell" and err.command:
            return self.a_run(err.command, "\n".join(err.lines), r.choice((1, 2, 127)))
        if err.kind == "run":
            cmd, out = self.run_log(flavour, [err])
            return self.a_run(err.command or cmd, out, 1)
        cmd, out = self.build_log(flavour, [err])
        return self.a_run(err.command or cmd, out, 1)

    def _url_call(
        self, url: str, api_url: str, ci_url: str, pr_url: str, issue_url: str
    ) -> tuple[dict[str, Any], str]:
        r = self.r
        if url == ci_url:
            self.mentions.append(r.choice(("CI is running at {}.", "Pushed; the CI run is {}.")).format(url))
        elif url == pr_url:
            self.mentions.append(r.choice(("Opened {} for review.", "The PR is up: {}.")).format(url))
        if url == ci_url:
            out = (
                f"Enumerating objects: {r.randint(9, 90)}, done.\nWriting objects: 100% done.\n"
                f"To github.com:{self.company}/{self.project}.git\n   {self.hexid()}..{self.hexid()}  "
                f"HEAD -> {self.key.lower()}\nremote: CI started: {ci_url}\n"
            )
            return self.a_run(f"git push -u origin HEAD:{self.key.lower()}", out)
        if url == pr_url:
            out = (
                f"Creating pull request for {self.key.lower()} into main in {self.company}/{self.project}\n\n"
                f"{pr_url}\n"
            )
            return self.a_run(
                f'gh pr create --title "{self.key}: {self.feature}" --body "Closes {issue_url}"', out
            )
        return self.a_http(url)

    def _noise(self, t: int) -> tuple[dict[str, Any], str]:
        r = self.r
        x = r.random()
        if t < self.turns * 0.15 and x < 0.6:
            return self.a_read() if x < 0.4 else self.a_search()
        if x < 0.30:
            return self.a_read()
        if x < 0.42:
            return self.a_search()
        if x < 0.47:
            cmd, out = self.listing()
            return self.a_run(cmd, out)
        if x < 0.58:
            which = r.randrange(3)
            if which == 0:
                return self.a_run("git status", self.git_status())
            if which == 1:
                return self.a_run("git log --oneline -n 30", self.git_log())
            return self.a_run("git diff", self.git_diff() or "")
        if x < 0.82:  # rerun tests: open failures repeat
            flavour = self.primary if r.random() < 0.75 else self.secondary
            repeats = [e for e in self.open_errors if e.flavour == flavour and e.kind == "test"][:3]
            return self.a_tests(flavour, repeats)
        if x < 0.92:
            cmd, out = self.build_log(self.primary if r.random() < 0.7 else self.secondary, [])
            return self.a_run(cmd, out, 0)
        return self.a_http(r.choice(self.domain["docs"]))


def _spread(r: random.Random, slots: list[int], n: int) -> list[int]:
    """``n`` turns from ``slots``, spread evenly with jitter (repeats when n > len(slots))."""
    if not slots or n <= 0:
        return []
    out = []
    for i in range(n):
        lo = i * len(slots) // n
        hi = max(lo + 1, (i + 1) * len(slots) // n)
        out.append(slots[r.randrange(lo, hi) % len(slots)])
    return out


# -- code templates ---------------------------------------------------------------------

_DOCS = (
    "helpers shared by the API and the workers",
    "handling for the public endpoints",
    "persistence layer",
    "client with retries and timeouts",
    "validation of incoming payloads",
    "background jobs",
    "policy checks",
    "serialisation to and from the wire format",
)
_DOC_VERBS = (
    "references",
    "replaces",
    "is validated against",
    "is stored next to",
    "expires with",
    "is returned with",
    "is grouped by",
    "must match",
)
_DOC_TAILS = (
    "before the response is sent",
    "when the request is retried",
    "for every tenant separately",
    "unless the caller opts out",
    "and is never reused",
    "in the order they were created",
    "within the same transaction",
    "once the previous one is acknowledged",
)
_PY_IMPORTS = (
    "import asyncio",
    "import json",
    "import time",
    "import hashlib",
    "import uuid",
    "from collections.abc import Iterable, Mapping",
    "from dataclasses import dataclass, field",
    "from datetime import datetime, timedelta, timezone",
    "from typing import Any",
    "import httpx",
    "from sqlalchemy import select",
    "from sqlalchemy.orm import Session",
)
_CROSS = "\u00d7"  # vitest's mark of a failed test
_DOCKER_STEPS = (
    "RUN apt-get update",
    "COPY . .",
    "RUN pip install --no-cache-dir -r requirements.txt",
    "RUN npm ci",
    "WORKDIR /app",
)
_CLOSERS = frozenset(("}", "})", "});", ")", "]", "};", "fi", "done", "end"))
_TS_IMPORTS = ("HttpClient", "withRetry", "RedisCache", "parseId", "assertNever", "toCents", "Clock")
_PYPI = (
    "httpx",
    "pydantic",
    "sqlalchemy",
    "alembic",
    "structlog",
    "uvicorn",
    "fastapi",
    "anyio",
    "pytest",
    "pytest-cov",
    "freezegun",
    "respx",
    "psycopg",
    "redis",
    "orjson",
    "tenacity",
    "typer",
    "rich",
)
_CRATES = (
    "proc-macro2",
    "unicode-ident",
    "quote",
    "syn",
    "libc",
    "cfg-if",
    "autocfg",
    "once_cell",
    "memchr",
    "serde",
    "serde_json",
    "itoa",
    "ryu",
    "bytes",
    "pin-project-lite",
    "tokio",
    "mio",
    "socket2",
    "tracing",
    "tracing-core",
    "log",
    "futures-core",
    "futures-util",
    "http",
    "hyper",
    "tower",
    "axum",
    "reqwest",
    "smallvec",
    "parking_lot",
    "hashbrown",
    "indexmap",
    "thiserror",
    "anyhow",
    "regex",
    "aho-corasick",
    "percent-encoding",
    "url",
    "time",
    "uuid",
    "rand",
    "getrandom",
)

_STMTS: dict[str, tuple[tuple[str, ...], ...]] = {
    "python": (
        ('{v} = {v2}.get("{k}")',),
        ("if {v} is None:", '    raise {exc}(f"missing {k}: {{{v2}!r}}")'),
        ('log.info("{f}: %s", {v})',),
        ("for {i} in {v2}:", "    {v}.append({f2}({i}))"),
        ('{v} = self._client.{verb}(f"/{w}s/{{{v2}}}", timeout=self.timeout)',),
        ("{v}: dict[str, Any] = {{}}",),
        (
            "try:",
            "    {v} = {f2}({v2})",
            "except {exc} as exc:",
            '    log.warning("{f} failed: %s", exc)',
            "    raise",
        ),
        ('{v} = int({v2}["{k}"]) * {n}',),
        ("if not {v2}:", "    return None"),
        ("{v} = [{i} for {i} in {v2} if {i}.{k} is not None]",),
        ("session.add({v})", "session.flush()"),
        ("{v} = datetime.now(timezone.utc) - timedelta(seconds={n})",),
        ('metrics.increment("{w}.{verb}", tags={{"{k}": {v}}})',),
        ("{v} = hashlib.sha256({v2}.encode()).hexdigest()[:{n}]",),
    ),
    "node": (
        ("const {v} = {v2}.{k} ?? {n};",),
        ("if (!{v}) {{", "  throw new HttpError(400, `missing {k} for ${{{v2}}}`);", "}}"),
        ('logger.info({{ {k}: {v} }}, "{f}");',),
        ("for (const {i} of {v2}) {{", "  {v}.push(await {f2}({i}));", "}}"),
        ("const {v} = await this.http.{verb}(`/{w}s/${{{v2}}}`, {{ timeoutMs: {n} }});",),
        ("const {v}: Record<string, unknown> = {{}};",),
        (
            "try {{",
            "  {v} = await {f2}({v2});",
            "}} catch (err) {{",
            '  logger.warn({{ err }}, "{f} failed");',
            "  throw err;",
            "}}",
        ),
        ('const {v} = Number({v2}["{k}"]) * {n};',),
        ("if ({v2}.length === 0) return undefined;",),
        ("const {v} = {v2}.filter(({i}) => {i}.{k} !== undefined);",),
        ('await redis.set(`{w}:${{{v}}}`, JSON.stringify({v2}), "EX", {n});',),
    ),
    "rust": (
        ('let {v} = {v2}.get("{k}").cloned().unwrap_or_default();',),
        ("if {v}.is_empty() {{", '    return Err(Error::Missing("{k}"));', "}}"),
        ('tracing::info!({k} = ?{v}, "{f}");',),
        ("for {i} in &{v2} {{", "    {v}.push({f2}({i})?);", "}}"),
        ('let {v} = self.client.{verb}(&format!("/{w}s/{{}}", {v2})).await?;',),
        ("let mut {v}: HashMap<String, u64> = HashMap::new();",),
        (
            "let {v} = match {f2}(&{v2}) {{",
            "    Ok(x) => x,",
            "    Err(e) => {{",
            '        tracing::warn!(error = %e, "{f} failed");',
            "        return Err(e.into());",
            "    }}",
            "}};",
        ),
        ("let {v} = {v2}.{k} as u64 * {n};",),
        ("let {v}: Vec<_> = {v2}.iter().filter(|{i}| {i}.{k}.is_some()).collect();",),
        ("tokio::time::sleep(Duration::from_millis({n})).await;",),
    ),
    "go": (
        ('{v} := {v2}.Get("{k}")',),
        ("if {v} == nil {{", '\treturn nil, fmt.Errorf("missing {k} for %s", {v2})', "}}"),
        ('s.log.Info("{f}", "{k}", {v})',),
        ("for _, {i} := range {v2} {{", "\t{v} = append({v}, {f2}({i}))", "}}"),
        (
            "{v}, err := s.client.{Verb}(ctx, {v2})",
            "if err != nil {{",
            '\treturn nil, fmt.Errorf("{f}: %w", err)',
            "}}",
        ),
        ("{v} := make(map[string]int, {n})",),
        ("ctx, cancel := context.WithTimeout(ctx, {n}*time.Millisecond)", "defer cancel()"),
        ("{v} := {v2}.{K} * {n}",),
        ("s.mu.Lock()", "defer s.mu.Unlock()"),
    ),
    "devops": (
        ('kubectl -n "$NAMESPACE" annotate deploy/{w} {k}="{n}" --overwrite',),
        ('echo "{f}: ${{{K}:-unset}}" >&2',),
        ("helm upgrade --install {w} ./helm/{w} --set {k}={n}",),
        ('if [[ -z "${{{K}:-}}" ]]; then', '  echo "missing {K}" >&2', "  exit 1", "fi"),
        ('aws sqs get-queue-attributes --queue-url "$QUEUE_URL" --attribute-names All',),
    ),
    "yaml": (
        ("- name: {K}", '  value: "{n}"'),
        ('{k}: "{w}-{n}"',),
        ("- {w}-{verb}",),
        ("{k}:", "  enabled: true", "  limit: {n}"),
    ),
    "tf": (
        ('{k} = "${{var.environment}}-{w}"',),
        ("tags = {{", '  Owner = "{w}"', "}}"),
        ("lifecycle {{", "  prevent_destroy = true", "}}"),
        ("{k} = {n}",),
    ),
}


def _static_pyproject(run: _Run, path: str) -> list[str]:
    deps = run.r.sample(_PYPI, 8)
    return [
        "[project]",
        f'name = "{run.project}"',
        'version = "0.14.2"',
        'requires-python = ">=3.9"',
        "dependencies = [",
        *[f'    "{d}>={run.r.randint(0, 9)}.{run.r.randint(0, 30)}",' for d in deps],
        "]",
        "",
        "[tool.pytest.ini_options]",
        'testpaths = ["tests"]',
        'addopts = "-ra --strict-markers"',
        "",
        "[tool.ruff]",
        "line-length = 110",
        'target-version = "py39"',
        "",
        "[tool.mypy]",
        "strict = true",
    ]


def _static_package(run: _Run, path: str) -> list[str]:
    deps = {
        "fastify": "^4.28.1",
        "zod": "^3.23.8",
        "ioredis": "^5.4.1",
        "pino": "^9.2.0",
        "undici": "^6.19.2",
    }
    return [
        "{",
        f'  "name": "{run.project}",',
        '  "version": "1.4.2",',
        '  "private": true,',
        '  "type": "module",',
        '  "scripts": {',
        '    "build": "tsc -p tsconfig.json && vite build",',
        '    "test": "vitest run",',
        '    "lint": "eslint . --max-warnings 0"',
        "  },",
        '  "dependencies": {',
        ",\n".join(f'    "{k}": "{v}"' for k, v in deps.items()),
        "  },",
        '  "engines": { "node": ">=18" }',
        "}",
    ]


def _static_tsconfig(run: _Run, path: str) -> list[str]:
    return [
        "{",
        '  "compilerOptions": {',
        '    "target": "ES2022",',
        '    "module": "NodeNext",',
        '    "strict": true,',
        '    "outDir": "dist",',
        '    "noUncheckedIndexedAccess": true',
        "  },",
        '  "include": ["src"]',
        "}",
    ]


def _static_cargo(run: _Run, path: str) -> list[str]:
    return [
        "[package]",
        f'name = "{run.project}"',
        'version = "0.7.0"',
        'edition = "2021"',
        'rust-version = "1.70"',
        "",
        "[dependencies]",
        'tokio = { version = "1.38", features = ["full"] }',
        'serde = { version = "1.0.203", features = ["derive"] }',
        'reqwest = { version = "0.12", default-features = false }',
        'tracing = "0.1"',
        'thiserror = "1"',
        "",
        "[dev-dependencies]",
        'wiremock = "0.6"',
    ]


def _static_gomod(run: _Run, path: str) -> list[str]:
    return [
        f"module github.com/{run.company}/{run.project}",
        "",
        "go 1.21",
        "",
        "require (",
        "\tgithub.com/jackc/pgx/v5 v5.6.0",
        "\tgithub.com/redis/go-redis/v9 v9.5.3",
        "\tgolang.org/x/sync v0.7.0",
        ")",
    ]


def _static_make(run: _Run, path: str) -> list[str]:
    return [
        ".PHONY: lint test image deploy",
        "",
        "lint:",
        "\tshellcheck scripts/*.sh",
        "\tgolangci-lint run ./...",
        "",
        "test:",
        "\tbats tests/",
        "\tgo test ./...",
        "",
        "image:",
        f"\tdocker build -t ghcr.io/{run.company}/{run.project}:$(GIT_SHA) .",
        "",
        "deploy: image",
        "\t./scripts/deploy.sh $(ENV)",
    ]


def _static_docker(run: _Run, path: str) -> list[str]:
    return [
        "FROM python:3.11-slim AS builder",
        "WORKDIR /app",
        "COPY pyproject.toml .",
        "RUN pip install --no-cache-dir .",
        "COPY . .",
        "",
        "FROM gcr.io/distroless/python3-debian12",
        "COPY --from=builder /app /app",
        "USER 65532",
        'ENTRYPOINT ["python", "-m", "app"]',
    ]


def _static_init(run: _Run, path: str) -> list[str]:
    return [f'"""{run.project}."""', "", '__version__ = "0.14.2"']


def _static_conftest(run: _Run, path: str) -> list[str]:
    r = run.r
    lines = [
        "import pytest",
        "from fastapi.testclient import TestClient",
        "",
        f"from {run.pkg}.main import app",
        "",
    ]
    for noun in r.sample(run.nouns, 4):
        lines += [
            "",
            "@pytest.fixture",
            f"def {noun}_factory(db_session):",
            "    def make(**overrides):",
            f"        obj = {_pascal(noun)}(**{{**DEFAULTS, **overrides}})",
            "        db_session.add(obj)",
            "        return obj",
            "    return make",
        ]
    return [*lines, "", "@pytest.fixture", "def client():", "    return TestClient(app)"]


_STATIC: dict[str, Callable[[_Run, str], list[str]]] = {
    "pyproject.toml": _static_pyproject,
    "package.json": _static_package,
    "tsconfig.json": _static_tsconfig,
    "Cargo.toml": _static_cargo,
    "go.mod": _static_gomod,
    "Makefile": _static_make,
    "Dockerfile": _static_docker,
    "__init__.py": _static_init,
    "conftest.py": _static_conftest,
}


# -- error templates --------------------------------------------------------------------
# Each returns an _Err whose lines contain the fact verbatim where the tool prints it.


def _py_frames(run: _Run, src: str, stmt: str) -> list[str]:
    r = run.r
    lib = r.choice(
        (
            ("starlette/routing.py", 74, "app", "response = await func(request)"),
            ("fastapi/routing.py", 301, "app", "raw_response = await run_endpoint_function("),
            ("sqlalchemy/orm/session.py", 2113, "_execute_internal", "result = conn.execute("),
            (
                "httpx/_client.py",
                1015,
                "_send_single_request",
                "response = transport.handle_request(request)",
            ),
        )
    )
    return [
        "Traceback (most recent call last):",
        f'  File "{run.workdir}/.venv/lib/python3.11/site-packages/{lib[0]}", line {lib[1]}, in {lib[2]}',
        f"    {lib[3]}",
        f'  File "{run.workdir}/{src}", line {r.randint(20, 400)}, in {run.func("python")}',
        f"    {stmt}",
    ]


def _e_py_keyerror(run: _Run) -> _Err:
    r = run.r
    key = r.choice(run.domain["keys"] + ("user_id", "X-Request-Id", "data", "metadata", "items"))
    fact = f"KeyError: '{key}'"
    src = run.src("python")
    if r.random() < 0.5:
        return _Err(
            fact,
            "run",
            "python",
            [
                "ERROR:    Exception in ASGI application",
                *_py_frames(run, src, f'{r.choice(_VARS)} = payload["{key}"]'),
                fact,
            ],
        )
    test = run.test_id("python")
    tfile, tname = test.split("::")
    return _Err(
        fact,
        "test",
        "python",
        [
            f"{'_' * 20} {tname} {'_' * 20}",
            "",
            f"    def {tname.split('[')[0]}(client):",
            f'>       resp = client.post("/v1/{r.choice(run.nouns)}s", json=body)',
            "",
            f"{tfile}:{r.randint(10, 300)}: ",
            "_ " * 30,
            f"{src}:{r.randint(20, 400)}: in {run.func('python')}",
            f'    value = payload["{key}"]',
            f"E   {fact}",
        ],
        summary=f"FAILED {test} - {fact}",
        test=test,
    )


def _e_py_assert(run: _Run) -> _Err:
    r = run.r
    test = run.test_id("python")
    a, b = r.sample((200, 201, 204, 400, 401, 402, 403, 404, 409, 422, 429, 500, 502), 2)
    fact = f"FAILED {test} - AssertionError: assert {a} == {b}"
    tfile, tname = test.split("::")
    return _Err(
        fact,
        "test",
        "python",
        [
            f"{'_' * 20} {tname} {'_' * 20}",
            "",
            f">       assert resp.status_code == {b}",
            f"E       assert {a} == {b}",
            f"E        +  where {a} = <Response [{a}]>.status_code",
            "",
            f"{tfile}:{r.randint(10, 300)}: AssertionError",
        ],
        summary=fact,
        test=test,
    )


def _e_py_module(run: _Run) -> _Err:
    r = run.r
    mod = r.choice(
        (
            "stripe_mock",
            "freezegun",
            "respx",
            "fakeredis",
            "moto",
            "factory_boy",
            "hypothesis",
            "pytest_httpx",
            "testcontainers",
            "time_machine",
            f"{run.pkg}.compat",
            f"{run.pkg}.legacy_api",
        )
    )
    fact = f"ModuleNotFoundError: No module named '{mod}'"
    tfile = run.test_id("python").split("::")[0]
    return _Err(
        fact,
        "test",
        "python",
        [
            f"{'_' * 15} ERROR collecting {tfile} {'_' * 15}",
            (f"ImportError while importing test module '{run.workdir}/{tfile}'."),
            "Hint: make sure your test modules/packages have valid Python names.",
            "Traceback:",
            f"{tfile}:{r.randint(1, 12)}: in <module>",
            f"    import {mod}",
            f"E   {fact}",
        ],
        summary=f"ERROR {tfile} - {fact}",
    )


def _e_py_attr(run: _Run) -> _Err:
    r = run.r
    attr = r.choice(run.domain["keys"] + ("amount_cents", "headers", "status", "expires_at"))
    fact = f"AttributeError: 'NoneType' object has no attribute '{attr}'"
    src = run.src("python")
    return _Err(fact, "run", "python", [*_py_frames(run, src, f"return {r.choice(_VARS)}.{attr}"), fact])


def _e_py_typeerror(run: _Run) -> _Err:
    r = run.r
    fn, kw = (
        run.func("python"),
        r.choice(
            (
                "reason",
                "timeout",
                "idempotency_key",
                "metadata",
                "dry_run",
                "tenant",
                "retries",
                "page_size",
                "currency",
                "strict",
            )
        ),
    )
    fact = f"TypeError: {fn}() got an unexpected keyword argument '{kw}'"
    test = run.test_id("python")
    return _Err(
        fact,
        "test",
        "python",
        [
            f"{'_' * 20} {test.split('::')[1]} {'_' * 20}",
            f">       {fn}(obj, {kw}=True)",
            f"E       {fact}",
            "",
            f"{test.split('::')[0]}:{r.randint(10, 300)}: TypeError",
        ],
        summary=f"FAILED {test} - {fact}",
        test=test,
    )


def _e_py_import(run: _Run) -> _Err:
    r = run.r
    sub = r.choice(("models", "errors", "config", "schemas"))
    name = _pascal(r.choice(run.nouns)) + r.choice(("Status", "Error", "Schema", "Kind", "Policy"))
    fact = f"ImportError: cannot import name '{name}' from '{run.pkg}.{sub}'"
    return _Err(
        fact,
        "run",
        "python",
        [
            *_py_frames(run, run.src("python"), f"from {run.pkg}.{sub} import {name}"),
            f"{fact} ({run.workdir}/src/{run.pkg}/{sub}.py)",
        ],
    )


def _e_py_mypy(run: _Run) -> _Err:
    r = run.r
    src = run.src("python")
    t = r.choice(("str", "int", "Decimal", "datetime", "dict[str, Any]"))
    fact = (
        f"{src}:{r.randint(10, 400)}: error: Incompatible return value type "
        f'(got "{t} | None", expected "{t}")'
    )
    return _Err(fact, "build", "python", [f"{fact}  [return-value]"], command="mypy src/")


def _e_py_ruff(run: _Run) -> _Err:
    r = run.r
    v = r.choice(_VARS)
    fact = (
        f"{run.src('python')}:{r.randint(5, 400)}:{r.randint(5, 30)}: "
        f"F841 Local variable `{v}` is assigned to "
        "but never used"
    )
    return _Err(
        fact,
        "build",
        "python",
        [
            fact,
            "Found 1 error.",
            ("No fixes available (1 hidden fix can be enabled with the `--unsafe-fixes` option)."),
        ],
        command="ruff check .",
    )


def _e_py_integrity(run: _Run) -> _Err:
    r = run.r
    table, col = r.choice(run.nouns) + "s", r.choice(run.domain["keys"])
    fact = (
        f"sqlalchemy.exc.IntegrityError: (psycopg.errors.UniqueViolation) duplicate key value violates "
        f'unique constraint "{table}_{col}_key"'
    )
    if len(fact) > MAX_FACT:
        fact = (
            "psycopg.errors.UniqueViolation: duplicate key value violates unique constraint "
            f'"{table}_{col}_key"'
        )
    return _Err(
        fact,
        "run",
        "python",
        [
            *_py_frames(run, run.src("python"), "session.flush()"),
            fact,
            f"DETAIL:  Key ({col})=({run.hexid(12)}) already exists.",
        ],
    )


def _e_py_value(run: _Run) -> _Err:
    val = run.r.choice(("12.50", "N/A", "", "1e3", "0x1F", "NaN", "twelve", "42 ", "—"))
    fact = f"ValueError: invalid literal for int() with base 10: '{val}'"
    return _Err(fact, "run", "python", [*_py_frames(run, run.src("python"), "qty = int(row[3])"), fact])


def _e_py_pip(run: _Run) -> _Err:
    r = run.r
    pkg = r.choice(_PYPI)
    ver = f"{r.randint(0, 9)}.{r.randint(0, 40)}.{r.randint(0, 9)}"
    fact = f"ERROR: Could not find a version that satisfies the requirement {pkg}=={ver}"
    return _Err(
        fact,
        "deps",
        "python",
        [f"{fact} (from versions: 0.1.0, 0.2.0)", f"ERROR: No matching distribution found for {pkg}=={ver}"],
        command="pip install -r requirements.txt",
    )


def _version(r: random.Random) -> str:
    return f"{r.randint(1, 9)}.{r.randint(0, 20)}.{r.randint(0, 9)}"


def _e_c_undeclared(run: _Run) -> _Err:
    r = run.r
    ident = r.choice(
        ("buf_len", "n_items", "key_size", "out_cap", "hdr_len", "rc", "fd", "nbytes", "tok_end")
    )
    f = r.choice(("parse", "codec", "speedups", "hash", "scan"))
    fact = f"src/{f}.c:{r.randint(20, 400)}:{r.randint(3, 30)}: error: use of undeclared identifier '{ident}'"
    return _Err(
        fact,
        "build",
        "generic",
        [
            f"building '{run.pkg}._{f}' extension",
            f"clang -Wall -O2 -fPIC -Isrc -c src/{f}.c -o build/{f}.o",
            fact,
            f"    memcpy(out, src, {ident});",
            "                     ^",
            "1 error generated.",
            "error: command '/usr/bin/clang' failed with exit code 1",
        ],
    )


def _e_ts_type(run: _Run) -> _Err:
    r = run.r
    a, b = r.sample(("string", "number", "boolean", "undefined", "null", "bigint", "Date", "string[]"), 2)
    src = run.src("node")
    fact = (
        f"{src}({r.randint(5, 300)},{r.randint(3, 40)}): "
        f"error TS2322: Type '{a}' is not assignable to type '{b}'."
    )
    return _Err(fact, "build", "node", [fact])


def _e_ts_prop(run: _Run) -> _Err:
    r = run.r
    prop = _camel(r.choice(run.domain["keys"]))
    fact = (
        f"{run.src('node')}({r.randint(5, 300)},{r.randint(3, 40)}): "
        f"error TS2339: Property '{prop}' does not "
        f"exist on type '{_pascal(r.choice(run.nouns))}'."
    )
    return _Err(fact, "build", "node", [fact])


def _e_ts_module(run: _Run) -> _Err:
    r = run.r
    mod = r.choice(
        (
            "@fastify/rate-limit",
            "undici",
            "./config/redis",
            "../lib/clock",
            "@acme/signer",
            "p-retry",
            "ioredis-mock",
            "@types/express",
        )
    )
    fact = (
        f"{run.src('node')}({r.randint(1, 20)},{r.randint(1, 30)}): error TS2307: Cannot find module '{mod}' "
        "or its corresponding type declarations."
    )
    return _Err(fact, "build", "node", [fact])


def _e_npm_eresolve(run: _Run) -> _Err:
    r = run.r
    dep, other = r.sample(("react", "eslint", "typescript", "vitest", "fastify", "@types/node", "vite"), 2)
    v2 = f"{r.randint(3, 19)}.{r.randint(0, 9)}.0"
    fact = (
        "npm ERR! code ERESOLVE"
        if "npm ERR! code ERESOLVE" not in run.used_facts
        else f'npm ERR! peer {dep}@"^{v2}" from {other}@{_version(r)}'
    )
    lines = [
        "npm ERR! code ERESOLVE",
        "npm ERR! ERESOLVE unable to resolve dependency tree",
        "npm ERR! ",
        f"npm ERR! While resolving: {run.project}@1.4.2",
        f"npm ERR! Found: {dep}@{v2.split('.')[0]}.0.1",
        "npm ERR! Could not resolve dependency:",
    ]
    lines.append(
        fact if fact.startswith("npm ERR! peer") else f'npm ERR! peer {dep}@"^{v2}" from {other}@2.0.0'
    )
    lines += [
        "npm ERR! ",
        "npm ERR! Fix the upstream dependency conflict, or retry",
        "npm ERR! this command with --force or --legacy-peer-deps",
    ]
    return _Err(fact, "deps", "node", lines, command="npm install")


def _e_npm_404(run: _Run) -> _Err:
    name = run.r.choice(("signer", "ratelimit", "idem", "clock", "retry-kit", "config-loader"))
    fact = f"npm ERR! 404 Not Found - GET https://registry.npmjs.org/@{run.company}%2f{name} - Not found"
    return _Err(
        fact,
        "deps",
        "node",
        [
            "npm ERR! code E404",
            fact,
            f"npm ERR! 404  '@{run.company}/{name}@^1.2.0' is not in this registry.",
        ],
        command=f"npm install @{run.company}/{name}",
    )


def _e_node_undefined(run: _Run) -> _Err:
    r = run.r
    prop = r.choice(("headers", "id", "length", "status", "body", "tenantId", "split", "map", "token"))
    fact = f"TypeError: Cannot read properties of undefined (reading '{prop}')"
    src = run.src("node")
    return _Err(
        fact,
        "run",
        "node",
        [
            fact,
            (f"    at {run.func('node')} ({run.workdir}/{src}:{r.randint(5, 300)}:{r.randint(3, 40)})"),
            ("    at processTicksAndRejections (node:internal/process/task_queues:95:5)"),
        ],
    )


def _e_node_jest(run: _Run) -> _Err:
    r = run.r
    t = run.test_id("node")
    f, name = t.split("\t")
    a, b = r.sample((200, 201, 400, 401, 403, 404, 409, 422, 500), 2)
    fact = f"FAIL  {f} > {name}"
    return _Err(
        fact,
        "test",
        "node",
        [
            "",
            f" {fact}",
            f"AssertionError: expected {a} to be {b} // Object.is equality",
            "",
            f" \u276f {f}:{r.randint(5, 200)}:{r.randint(3, 30)}",
        ],
        test=t,
    )


def _e_node_addr(run: _Run) -> _Err:
    port = run.r.choice((3000, 3001, 4000, 5173, 8080, 9229))
    fact = f"Error: listen EADDRINUSE: address already in use :::{port}"
    return _Err(
        fact, "run", "node", [fact, "    at Server.setupListenHandle [as _listen2] (node:net:1872:16)"]
    )


def _e_node_module(run: _Run) -> _Err:
    mod = run.r.choice(
        ("./config/redis", "../lib/clock", "./routes/health", "../middleware/auth", "./db/pool")
    )
    fact = f"Error: Cannot find module '{mod}'"
    return _Err(fact, "run", "node", [fact, "Require stack:", f"- {run.workdir}/dist/index.js"])


def _e_eslint(run: _Run) -> _Err:
    r = run.r
    v = _camel(r.choice(_VARS))
    fact = (
        f"{r.randint(2, 300)}:{r.randint(3, 30)}  error  '{v}' is assigned a value but never used  "
        "@typescript-eslint/no-unused-vars"
    )
    return _Err(
        fact,
        "build",
        "node",
        [f"{run.workdir}/{run.src('node')}", f"  {fact}", "", "✖ 1 problem (1 error, 0 warnings)"],
        command="npx eslint . --max-warnings 0",
    )


def _rs_loc(run: _Run) -> str:
    return f"{run.src('rust')}:{run.r.randint(5, 400)}:{run.r.randint(3, 40)}"


def _e_rs_moved(run: _Run) -> _Err:
    v = run.r.choice(("cfg", "req", "buf", "state", "opts", "conn", "span", "batch", "client", "key"))
    fact = f"error[E0382]: borrow of moved value: `{v}`"
    return _Err(
        fact,
        "build",
        "rust",
        [
            fact,
            f"  --> {_rs_loc(run)}",
            "   |",
            (
                f"   = note: move occurs because `{v}` "
                "has type `Config`, which does not implement the `Copy` trait"
            ),
        ],
    )


def _e_rs_method(run: _Run) -> _Err:
    r = run.r
    m = r.choice(
        ("as_secs_f32", "try_into_u64", "into_inner", "get_mut", "split_once", "retain_mut", "as_str")
    )
    s = r.choice(("Instant", "Bytes", "Duration", "HeaderMap", "Uri", _pascal(r.choice(run.nouns))))
    fact = f"error[E0599]: no method named `{m}` found for struct `{s}` in the current scope"
    return _Err(fact, "build", "rust", [fact, f"  --> {_rs_loc(run)}"])


def _e_rs_value(run: _Run) -> _Err:
    v = run.r.choice(run.domain["keys"] + ("retry_budget", "deadline", "max_inflight"))
    fact = f"error[E0425]: cannot find value `{v}` in this scope"
    return _Err(
        fact,
        "build",
        "rust",
        [fact, f"  --> {_rs_loc(run)}", "   |", ("   = help: a local variable with a similar name exists")],
    )


def _e_rs_crate(run: _Run) -> _Err:
    m = run.r.choice(
        ("tower_http", "governor", "dashmap", "metrics", "opentelemetry", "bytes", "futures", "chrono")
    )
    fact = f"error[E0433]: failed to resolve: use of undeclared crate or module `{m}`"
    return _Err(fact, "build", "rust", [fact, f"  --> {_rs_loc(run)}"])


def _e_rs_trait(run: _Run) -> _Err:
    t = _pascal(run.r.choice(run.nouns)) + run.r.choice(("Record", "Event", "Key", "Config", ""))
    tr = run.r.choice(("Serialize", "Deserialize<'_>", "Send", "Clone", "Hash"))
    fact = f"error[E0277]: the trait bound `{t}: {tr}` is not satisfied"
    return _Err(fact, "build", "rust", [fact, f"  --> {_rs_loc(run)}"])


def _e_rs_panic(run: _Run) -> _Err:
    r = run.r
    t = run.test_id("rust")
    fact = f"thread '{t}' panicked at {_rs_loc(run)}:"
    return _Err(
        fact,
        "test",
        "rust",
        [
            f"---- {t} stdout ----",
            fact,
            "assertion `left == right` failed",
            f"  left: {r.randint(0, 9)}",
            f" right: {r.randint(10, 99)}",
            "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
        ],
        test=t,
    )


def _e_rs_unwrap(run: _Run) -> _Err:
    fact = f"thread 'main' panicked at {_rs_loc(run)}:"
    return _Err(
        fact,
        "run",
        "rust",
        [
            fact,
            (
                "called `Result::unwrap()` on an `Err` value: Os { code: 2, kind: "
                'NotFound, message: "No such file or directory" }'
            ),
        ],
    )


def _e_go_index(run: _Run) -> _Err:
    r = run.r
    n = r.randint(0, 64)
    fact = f"panic: runtime error: index out of range [{n}] with length {r.randint(0, n)}"
    return _Err(
        fact,
        "run",
        "go",
        [
            fact,
            "",
            "goroutine 1 [running]:",
            (
                f"github.com/{run.company}/{run.project}/internal/{r.choice(_SUBS['go'])}."
                f"(*Store).{_pascal(run.func('go'))}(...)"
            ),
            f"\t{run.workdir}/{run.src('go')}:{r.randint(10, 300)} +0x1d4",
            "exit status 2",
        ],
    )


def _e_go_nil(run: _Run) -> _Err:
    fact = "panic: runtime error: invalid memory address or nil pointer dereference"
    return _Err(
        fact,
        "run",
        "go",
        [
            fact,
            (f"[signal SIGSEGV: segmentation violation code=0x1 addr=0x{run.hexid(2)} pc=0x{run.hexid(6)}]"),
            "",
            "goroutine 17 [running]:",
        ],
    )


def _e_go_undefined(run: _Run) -> _Err:
    r = run.r
    ident = r.choice(
        (
            "ctxTimeout",
            "errNotFound",
            "defaultTTL",
            "maxRetries",
            "newLimiter",
            "parseCursor",
            "tenantKey",
            "metricsRegistry",
        )
    )
    fact = f"{run.src('go')}:{r.randint(5, 300)}:{r.randint(2, 30)}: undefined: {ident}"
    return _Err(fact, "build", "go", [fact])


def _e_go_cannot_use(run: _Run) -> _Err:
    r = run.r
    v = _camel(r.choice(_VARS))
    a, b = r.sample(("int", "int64", "string", "time.Duration", "[]byte", "*Config", "float64"), 2)
    fact = (
        f"{run.src('go')}:{r.randint(5, 300)}:{r.randint(2, 30)}: "
        f"cannot use {v} (variable of type {a}) as {b} value"
    )
    return _Err(fact, "build", "go", [f"{fact} in argument to {_camel(run.func('go'))}"])


def _e_go_fail(run: _Run) -> _Err:
    r = run.r
    t = run.test_id("go")
    f, name = t.split("\t")
    fact = f"--- FAIL: {name} ({r.randint(0, 300) / 100:.2f}s)"
    a, b = r.sample((200, 400, 404, 409, 429, 500, 504), 2)
    return _Err(
        fact,
        "test",
        "go",
        [
            f"=== RUN   {name}",
            (f"    {f.rsplit('/', 1)[-1]}:{r.randint(10, 200)}: expected status {a}, got {b}"),
            fact,
        ],
        test=t,
    )


def _e_go_sum(run: _Run) -> _Err:
    mod = run.r.choice(
        (
            "github.com/prometheus/client_golang",
            "go.opentelemetry.io/otel",
            "golang.org/x/time",
            "github.com/google/uuid",
            "github.com/stretchr/testify",
        )
    )
    fact = f"missing go.sum entry for module providing package {mod}"
    return _Err(
        fact,
        "build",
        "go",
        [
            (
                f"{run.src('go')}:{run.r.randint(3, 12)}:2: {fact} (imported by "
                f"github.com/{run.company}/{run.project}/internal/{run.r.choice(_SUBS['go'])})"
            )
        ],
    )


def _e_go_deadlock(run: _Run) -> _Err:
    fact = "fatal error: all goroutines are asleep - deadlock!"
    return _Err(fact, "run", "go", [fact, "", "goroutine 1 [chan receive]:", "main.main()"])


def _e_go_dial(run: _Run) -> _Err:
    port = run.r.choice((5432, 6379, 4317, 9000, 8081, 9092))
    fact = f"dial tcp 127.0.0.1:{port}: connect: connection refused"
    return _Err(
        fact,
        "run",
        "go",
        [
            (f'time={run.stamp().replace(" ", "T")}Z level=ERROR msg="startup failed" err="{fact}"'),
            "exit status 1",
        ],
    )


def _e_bats(run: _Run) -> _Err:
    r = run.r
    t = run.test_id("devops")
    f, name = t.split("\t")
    fact = f"not ok {run.tests['devops'].index(t) + 1} {name}"
    return _Err(
        fact,
        "test",
        "devops",
        [fact, f"# (in test file {f}, line {r.randint(5, 200)})", '#   `[ "$status" -eq 0 ]\' failed'],
        test=t,
    )


def _e_git(run: _Run) -> _Err:
    fact = "fatal: not a git repository (or any of the parent directories): .git"
    return _Err(fact, "shell", "generic", [fact], command="cd /tmp/build && git rev-parse --short HEAD")


def _e_cmd_missing(run: _Run) -> _Err:
    cmd = run.r.choice(
        ("jq", "yq", "shellcheck", "helm", "psql", "aws", "envsubst", "gh", "kubectl", "terraform")
    )
    fact = f"bash: {cmd}: command not found"
    return _Err(fact, "shell", "generic", [fact], command=f"{cmd} --version")


def _e_unbound(run: _Run) -> _Err:
    r = run.r
    var = r.choice(
        ("KUBECONFIG", "AWS_PROFILE", "GIT_SHA", "REGISTRY", "DATABASE_URL", "ENVIRONMENT", "QUEUE_URL")
    )
    script = r.choice([p for p in run.files if p.endswith(".sh")] or ["scripts/deploy.sh"])
    fact = f"{script}: line {r.randint(5, 120)}: {var}: unbound variable"
    return _Err(fact, "shell", "generic", ["==> deploying to staging", fact], command=f"./{script} staging")


def _e_perm(run: _Run) -> _Err:
    r = run.r
    script = r.choice([p for p in run.files if p.endswith(".sh")] or ["scripts/migrate.sh"])
    fact = r.choice((f"bash: ./{script}: Permission denied", f"/bin/sh: 1: ./{script}: Permission denied"))
    return _Err(fact, "shell", "generic", [fact], command=f"./{script}")


def _e_ssh(run: _Run) -> _Err:
    host = f"{run.r.choice(('bastion', 'deploy', 'build'))}-{run.r.randint(1, 9)}.{run.company}.internal"
    fact = f"{run.r.choice(('git', 'deploy', 'ci'))}@{host}: Permission denied (publickey)."
    return _Err(
        fact,
        "shell",
        "generic",
        [fact, "fatal: Could not read from remote repository."],
        command=f"ssh -T {host}",
    )


def _e_kubectl(run: _Run) -> _Err:
    name = f"{run.project}-{run.r.choice(run.nouns)}"
    fact = f'Error from server (NotFound): deployments.apps "{name}" not found'
    return _Err(
        fact, "shell", "generic", [fact], command=f"kubectl -n {run.project} rollout status deploy/{name}"
    )


def _e_docker(run: _Run) -> _Err:
    r = run.r
    cmd = r.choice(
        (
            "npm ci",
            "pip install --no-cache-dir -r requirements.txt",
            "cargo build --release",
            "go build -o /out/app ./cmd/app",
            "apt-get install -y libpq-dev",
        )
    )
    fact = (
        f'ERROR: failed to solve: process "/bin/sh -c {cmd}" did not complete successfully: exit code: '
        f"{r.choice((1, 2, 100, 101, 127))}"
    )
    return _Err(fact, "build", "devops", [fact])


def _e_http(run: _Run) -> _Err:
    r = run.r
    code, reason = r.choice(
        (
            (503, "Service Unavailable"),
            (502, "Bad Gateway"),
            (429, "Too Many Requests"),
            (401, "Unauthorized"),
            (504, "Gateway Timeout"),
            (500, "Internal Server Error"),
            (403, "Forbidden"),
            (404, "Not Found"),
        )
    )
    fact = f"HTTP/1.1 {code} {reason}"
    path = r.choice(("/healthz", "/v1/" + r.choice(run.nouns) + "s", "/readyz", "/metrics"))
    url = f"https://{run.project}.staging.{run.company}.dev{path}"
    body = json.dumps(
        {"error": {"code": reason.lower().replace(" ", "_"), "request_id": run.hexid(16)}}, indent=2
    )
    return _Err(
        fact,
        "http",
        "generic",
        [
            fact,
            "content-type: application/json",
            f"date: {run.stamp()} GMT",
            f"x-request-id: {run.hexid(16)}",
            f"retry-after: {r.randint(1, 30)}",
            "",
            body,
        ],
        command=url,
    )


def _e_curl(run: _Run) -> _Err:
    r = run.r
    port = r.choice((8080, 8443, 9090, 3000, 5000, 15672))
    host = r.choice(("localhost", "127.0.0.1", f"{run.project}.svc"))
    fact = (
        f"curl: (7) Failed to connect to {host} port {port} after {r.randint(0, 3)} ms: "
        "Couldn't connect to server"
    )
    return _Err(fact, "shell", "generic", [fact], command=f"curl -fsS http://{host}:{port}/healthz")


def _e_java(run: _Run) -> _Err:
    r = run.r
    cls = r.choice(("String", "Map", "List", _pascal(r.choice(run.nouns))))
    m = r.choice(("length()", "get(Object)", "size()", "getId()", "trim()"))
    v = _camel(r.choice(_VARS))
    fact = (
        'Exception in thread "main" java.lang.NullPointerException: '
        f'Cannot invoke "{cls}.{m}" because "{v}" is null'
    )
    if len(fact) > MAX_FACT:
        fact = 'Exception in thread "main" java.lang.NullPointerException'
    return _Err(
        fact,
        "shell",
        "generic",
        [
            fact,
            (f"\tat com.{run.company}.tools.SchemaMigrator.main(SchemaMigrator.java:{r.randint(20, 300)})"),
        ],
        command="java -jar tools/schema-migrator.jar --dry-run",
    )


def _e_make(run: _Run) -> _Err:
    r = run.r
    fact = (
        f"make: *** [Makefile:{r.randint(5, 80)}: "
        f"{r.choice(('test', 'lint', 'image', 'deploy', 'migrate'))}] "
        f"Error {r.choice((1, 2))}"
    )
    return _Err(fact, "shell", "generic", ["make[1]: Leaving directory", fact], command="make ci")


def _e_tf(run: _Run) -> _Err:
    r = run.r
    name = f"{run.company}-{run.project}-{r.choice(('artifacts', 'logs', 'exports', 'backups'))}"
    fact = f"Error: creating S3 Bucket ({name}): BucketAlreadyExists"
    return _Err(
        fact,
        "build",
        "devops",
        [
            f"aws_s3_bucket.{r.choice(run.nouns)}: Creating...",
            "",
            f"│ {fact}",
            "│ ",
            f"│   with aws_s3_bucket.{r.choice(run.nouns)},",
        ],
        command="terraform apply -auto-approve tfplan",
    )


def _e_apt(run: _Run) -> _Err:
    pkg = run.r.choice(("libpq5-dev", "python3.11-venv", "shellcheck-0.9", "libssl1.1", "chromium-driver"))
    fact = f"E: Unable to locate package {pkg}"
    return _Err(
        fact,
        "shell",
        "generic",
        ["Reading package lists... Done", "Building dependency tree... Done", fact],
        command=f"apt-get install -y {pkg}",
    )


_ERRORS: dict[str, tuple[Callable[[_Run], _Err], ...]] = {
    "python": (
        _e_py_keyerror,
        _e_py_assert,
        _e_py_module,
        _e_py_attr,
        _e_py_typeerror,
        _e_py_import,
        _e_py_mypy,
        _e_py_ruff,
        _e_py_integrity,
        _e_py_value,
        _e_py_pip,
        _e_py_assert,
        _e_py_keyerror,
    ),
    "node": (
        _e_ts_type,
        _e_ts_prop,
        _e_ts_module,
        _e_npm_eresolve,
        _e_npm_404,
        _e_node_undefined,
        _e_node_jest,
        _e_node_addr,
        _e_node_module,
        _e_eslint,
        _e_node_jest,
    ),
    "rust": (
        _e_rs_moved,
        _e_rs_method,
        _e_rs_value,
        _e_rs_crate,
        _e_rs_trait,
        _e_rs_panic,
        _e_rs_unwrap,
        _e_rs_panic,
    ),
    "go": (
        _e_go_index,
        _e_go_nil,
        _e_go_undefined,
        _e_go_cannot_use,
        _e_go_fail,
        _e_go_sum,
        _e_go_deadlock,
        _e_go_dial,
        _e_go_fail,
    ),
    "devops": (_e_bats, _e_docker, _e_tf, _e_unbound, _e_perm, _e_kubectl, _e_cmd_missing, _e_make, _e_bats),
    "generic": (
        _e_git,
        _e_cmd_missing,
        _e_unbound,
        _e_perm,
        _e_ssh,
        _e_kubectl,
        _e_http,
        _e_http,
        _e_curl,
        _e_java,
        _e_make,
        _e_apt,
        _e_c_undeclared,
    ),
}


def agent_run(turns: int = 40, *, seed: int = 0) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """A coding-agent conversation in the OpenAI chat format (list of message dicts: user / assistant with
    tool_calls / tool results with tool_call_id), about `turns` assistant turns long, and the planted facts by
    category: "task", "constraints", "numbers", "error_lines", "files_changed", "urls", "decisions".
    Each fact is a short string (<= 120 chars) that appears verbatim in the conversation."""
    return _Run(turns, seed).build()


def padded_run(
    turns: int = 40, *, seed: int = 0, low: int = 1_500, high: int = 6_000
) -> list[dict[str, Any]]:
    """:func:`agent_run` with every tool result sized to ``low``-``high`` tokens (gpt-4o's
    count): its own text (its head when longer), then passing-test log lines."""
    from ctxmgmt.tokens import get_counter

    rng = random.Random(seed)
    counter = get_counter("gpt-4o")
    line = counter.text("[00000] ok   tests/unit/test_module_0.py::test_case_0 PASSED\n")
    out = []
    for m in agent_run(turns, seed=seed)[0]:
        if m.get("role") == "tool":
            target = rng.randint(low, high)
            text = counter.head(str(m["content"]), target)
            lines = [text]
            for n in range(max(0, target - counter.text(text)) // line):
                lines.append(f"[{n:05d}] ok   tests/unit/test_module_{n % 37}.py::test_case_{n} PASSED")
            m = {**m, "content": "\n".join(lines)}
        out.append(m)
    return out


def conversation_text(messages: list[dict[str, Any]]) -> str:
    """Every text of a conversation: contents, tool-call arguments (raw and decoded)."""
    parts: list[str] = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [p.get("text", "") for p in content if isinstance(p, dict)]
        for c in m.get("tool_calls") or ():
            args = c["function"]["arguments"]
            parts.append(args)
            try:
                decoded = json.loads(args)
            except ValueError:
                continue
            if isinstance(decoded, dict):
                parts += [v for v in decoded.values() if isinstance(v, str)]
    return "\n".join(parts)


if __name__ == "__main__":
    import time

    from ctxmgmt.testing import assert_valid_messages
    from ctxmgmt.tokens import get_counter

    counter = get_counter("gpt-4o-mini")
    for turns in (40, 100, 300):
        for seed in range(5):
            t0 = time.perf_counter()
            msgs, facts = agent_run(turns, seed=seed)
            took = time.perf_counter() - t0
            assert (msgs, facts) == agent_run(turns, seed=seed), "not deterministic"
            assert_valid_messages(msgs)
            text = conversation_text(msgs)
            for category, items in facts.items():
                assert category in CATEGORIES
                for fact in items:
                    assert len(fact) <= MAX_FACT, fact
                    assert fact in text, (category, fact)
            assert set(facts) == set(CATEGORIES)
            n_assistant = sum(m["role"] == "assistant" for m in msgs)
            tokens = counter.messages(msgs)[0]
            sizes = " ".join(f"{c}={len(v)}" for c, v in facts.items())
            run = _Run(turns, seed)
            print(
                f"turns={turns:3d} seed={seed} {run.primary + '+' + run.secondary:13s} "
                f"messages={len(msgs):4d} "
                f"assistant={n_assistant:3d} tokens={tokens:7,d} gen={took * 1000:5.0f} ms  {sizes}"
            )
