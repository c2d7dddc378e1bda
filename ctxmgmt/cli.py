"""The ``ctxmgmt`` command.

Exit codes: 0 success, 1 a run-time failure (a manager with on_error: fail), 2 bad
input (an invalid definition, context or configuration, or bad arguments).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import errno
import itertools
import json
import logging
import os
import re
import shlex
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import httpx
from sqlalchemy.exc import SQLAlchemyError

from . import marks
from ._resources import data_dir
from ._version import __version__
from .api.config import load_config, open_offloader
from .cache import Pricing, ratios_for
from .client import INVALID_ANSWER, problems_of
from .context import Context
from .definitions import Definition, check_definition, load_definition, parse_hook
from .errors import ApiError, ContextError, CtxmgmtError, DefinitionError, ManagerError, Problem
from .llm import CONFIG_ENV, load_models
from .loader import MAX_INPUT_BYTES, escape, load_document, load_json
from .offload import LocalOffloader
from .store import DefinitionStore, EvalStore, connect
from .store.repository import DATABASE_ENV, DEFAULT_DATABASE_URL
from .types import HOOK_NAMES, TraceEntry

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EVAL_ROUTE = "/_plugins/_ml/context_management/_eval"
URL_ENV = "CTXMGMT_URL"
API_KEY_ENV = "CTXMGMT_API_KEY"
_SUFFIXES = (".yaml", ".yml", ".json")


class _UsageError(Exception):
    """Bad input: print the reason and exit 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, with "did you mean" for a mistyped command or choice."""

    def error(self, message: str) -> NoReturn:
        found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if found:
            choices = re.findall(r"'?([\w-]+)'?", found.group(2))
            close = difflib.get_close_matches(found.group(1), choices, n=1)
            if close:
                message += f"; did you mean {close[0]!r}?"
        super().error(message)


def main(argv: Sequence[str] | None = None) -> int:
    stdout, stderr = sys.stdout, sys.stderr
    # Whatever a server, a model, a tool or a file wrote reaches the terminal escaped.
    sys.stdout, sys.stderr = _Escaped(stdout), _Escaped(stderr)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = stdout, stderr


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="ctxmgmt: %(levelname)s: %(message)s")
    try:
        if args.run in (_apply, _eval, _serve):  # they write marks: a bad key is said first, not
            # as every summary's error (a key too short, a key file others can read)
            marks.key()
        return int(args.run(args))
    except SQLAlchemyError as exc:
        url = getattr(args, "db", None) or os.environ.get(DATABASE_ENV) or DEFAULT_DATABASE_URL
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        print(f"ctxmgmt: error: cannot use the database {_redact(url)}: {reason}", file=sys.stderr)
        return EXIT_USAGE
    except (_UsageError, CtxmgmtError) as exc:
        if isinstance(exc, ManagerError):
            print(f"ctxmgmt: error: {exc}", file=sys.stderr)
            return EXIT_FAILED
        problems = [p for p in getattr(exc, "problems", ()) if p.severity == "error"]
        if len(problems) > 1:  # every problem, each on its line, as validate prints them
            print(f"ctxmgmt: error: {_flat(_headline(exc))}: {len(problems)} problems:", file=sys.stderr)
            for problem in problems:
                print(f"  {_flat(str(problem))}", file=sys.stderr)
        else:
            print(f"ctxmgmt: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except httpx.TransportError as exc:
        url = getattr(args, "url", None)
        if isinstance(exc, httpx.TimeoutException):
            print(f"ctxmgmt: error: the server at {url} did not answer in time: {exc}", file=sys.stderr)
        else:
            print(f"ctxmgmt: error: cannot reach the server at {url}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `ctxmgmt apply ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:  # never a traceback for a user, unless asked for one
        if os.environ.get("CTXMGMT_DEBUG"):
            raise
        print(
            f"ctxmgmt: internal error: {type(exc).__name__}: {exc} (set CTXMGMT_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return EXIT_FAILED


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ctxmgmt", description="Declarative context management for LLM agents.")
    parser.add_argument("--version", action="version", version=f"ctxmgmt {__version__}")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    v = sub.add_parser("validate", help="validate definition files or folders")
    v.add_argument("paths", nargs="+", metavar="PATH", help="a YAML/JSON file or a folder of them")
    v.add_argument("--config", help=f"models configuration (default: ${CONFIG_ENV})")
    v.set_defaults(run=_validate)

    a = sub.add_parser("apply", help="apply a definition's hook to a conversation")
    a.add_argument("definition", metavar="DEFINITION", help="a file, or the name of a shipped definition")
    a.add_argument("--hook", default="pre_llm", help=f"one of {', '.join(HOOK_NAMES)} (default: pre_llm)")
    a.add_argument("--input", required=True, metavar="FILE", help="a JSON conversation, or - for stdin")
    a.add_argument("--config", help=f"models configuration (default: ${CONFIG_ENV})")
    a.add_argument("--model", help="the model name, for token counting (overrides the input's)")
    a.add_argument("--context-window", type=int, help="the model's context window in tokens")
    a.add_argument(
        "--offload", metavar="DIR", help="archive removed content in DIR (overrides the config's offload:)"
    )
    a.add_argument(
        "--session", default="default", help="the conversation the archive belongs to (default: default)"
    )
    _max_input_option(a)
    a.set_defaults(run=_apply)

    ev = sub.add_parser(
        "eval", help="replay recorded conversations through definitions: what each sends, costs and keeps"
    )
    ev.add_argument("inputs", nargs="+", metavar="PATH", help="conversation files (JSON, JSONL) or folders")
    ev.add_argument(
        "-d",
        "--definition",
        action="append",
        metavar="DEFINITION",
        help="a definition file or shipped name (repeat for several; default: default)",
    )
    ev.add_argument(
        "-w",
        "--window",
        action="append",
        metavar="TOKENS",
        help="the model's context window (repeat, or comma-separated; default: 16000)",
    )
    ev.add_argument(
        "--pricing",
        metavar="PRICES|MODEL",
        help="INPUT,OUTPUT[,CACHE_READ[,CACHE_WRITE]] per million tokens, or a model name whose "
        "provider's relative prices to use (default: each conversation's provider)",
    )
    ev.add_argument(
        "--mask-last",
        type=int,
        default=3,
        metavar="N",
        help="tool results observation masking keeps (default: 3)",
    )
    ev.add_argument("--no-baselines", action="store_true", help="measure the definitions only")
    ev.add_argument("--json", metavar="FILE", help="write the whole report as JSON (- for stdout, no table)")
    ev.add_argument("--svg", metavar="FILE", help="write a plot of tokens per call and specifics kept")
    ev.add_argument(
        "--save",
        action="store_true",
        help="store the report in the database, for the web page (prints its id and page address)",
    )
    ev.add_argument(
        "--db", help=f"with --save: database URL (default: ${DATABASE_ENV} or {DEFAULT_DATABASE_URL})"
    )
    _max_input_option(ev)
    ev.set_defaults(run=_eval)

    ls = sub.add_parser("list", help="list the shipped definitions")
    ls.set_defaults(run=_list)

    s = sub.add_parser("serve", help="run the registry server (SQLite by default)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--db", help=f"database URL (default: ${DATABASE_ENV} or {DEFAULT_DATABASE_URL})")
    s.add_argument(
        "--definitions",
        metavar="DIR",
        help="load the YAML files of DIR not yet stored (default: the shipped ones)",
    )
    s.add_argument("--config", help=f"configuration: models and server settings (default: ${CONFIG_ENV})")
    s.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="worker processes (default 1); SQLite is shared by the processes of one host",
    )
    s.set_defaults(run=_serve)

    db = sub.add_parser("db", help="database schema").add_subparsers(required=True, metavar="ACTION")
    up = db.add_parser("upgrade", help="run the migrations")
    up.add_argument("--db", help=f"database URL (default: ${DATABASE_ENV} or {DEFAULT_DATABASE_URL})")
    up.set_defaults(run=_db_upgrade)

    cp = sub.add_parser("compact", help="summarise an agent's conversation now, on a server")
    cp.add_argument("--agent", required=True, help="the agent id")
    cp.add_argument("--memory", required=True, help="the memory id of the conversation")
    cp.add_argument("--instruction", help="an extra instruction for the summariser")
    cp.add_argument("--url", default=os.environ.get(URL_ENV, "http://127.0.0.1:8000"))
    cp.add_argument("--api-key", default=os.environ.get(API_KEY_ENV))
    cp.set_defaults(run=_compact)

    off = sub.add_parser("offload", help="the offload store").add_subparsers(required=True, metavar="ACTION")
    gc = off.add_parser("gc", help="delete offloaded content older than the retention age")
    gc.add_argument("--config", help=f"configuration with an offload: section (default: ${CONFIG_ENV})")
    gc.add_argument("--db", help="database URL, for the sql backend")
    gc.add_argument("--max-age-days", type=float, help="override offload.retention_days")
    gc.set_defaults(run=_offload_gc)

    gca = sub.add_parser(
        "gc", help="delete execution records, proxy conversations and offloaded content past their retention"
    )
    gca.add_argument(
        "--config", help=f"configuration with executions: and offload: sections (default: ${CONFIG_ENV})"
    )
    gca.add_argument("--db", help=f"database URL (default: ${DATABASE_ENV} or {DEFAULT_DATABASE_URL})")
    gca.add_argument("--max-age-days", type=float, help="override both retention_days settings")
    gca.set_defaults(run=_gc)

    exe = sub.add_parser("executions", help="the execution records of a server").add_subparsers(
        required=True, metavar="ACTION"
    )
    el = exe.add_parser("list", help="an agent's executions, newest first")
    el.add_argument("agent_id")
    el.add_argument("--from", dest="from_", type=int, default=0)
    el.add_argument("--size", type=int, default=20)
    eg = exe.add_parser("get", help="print an execution's whole record")
    eg.add_argument("execution_id")
    tr = sub.add_parser("trace", help="print an execution's token timeline, per LLM call")
    tr.add_argument("execution_id")
    tr.add_argument("--width", type=int, default=40, help="the width of the bars (default 40)")
    for p in (el, eg, tr):
        _server_options(p)
    el.set_defaults(run=_executions, action="list")
    eg.set_defaults(run=_executions, action="get")
    tr.set_defaults(run=_trace)

    defs = sub.add_parser("definitions", help="manage the definitions of a server").add_subparsers(
        required=True, metavar="ACTION"
    )
    for action, helptext in (
        ("list", "list stored definitions"),
        ("get", "print one definition"),
        ("create", "store a new definition from a YAML/JSON file"),
        ("update", "replace a stored definition from a YAML/JSON file"),
        ("delete", "delete a definition"),
    ):
        p = defs.add_parser(action, help=helptext)
        _server_options(p)
        if action == "list":
            p.add_argument("--from", dest="from_", type=int, default=0)
            p.add_argument("--size", type=int, default=100)
            p.add_argument("-q", dest="q", help="keep names containing this text")
        elif action in ("create", "update"):
            p.add_argument("file", metavar="FILE", help="a YAML or JSON definition")
            p.add_argument("--name", help="the name to store it under (default: the file's name:)")
            if action == "update":
                p.add_argument("--if-version", type=int, help="only if the stored version is this one")
        else:
            p.add_argument("name")
            if action == "delete":
                p.add_argument("--force", action="store_true", help="delete even if agents use it")
        p.set_defaults(run=_definitions, action=action)
    return parser


def _max_input_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-input-mb",
        type=float,
        default=MAX_INPUT_BYTES >> 20,
        metavar="MB",
        help=f"refuse a larger input (default: {MAX_INPUT_BYTES >> 20} MiB)",
    )


def _input_limit(args: argparse.Namespace) -> int:
    """--max-input-mb in bytes, checked."""
    if not 0 < args.max_input_mb <= 4096:
        raise _UsageError(f"--max-input-mb: must be more than 0 and at most 4096 (got {args.max_input_mb:g})")
    return int(args.max_input_mb * (1 << 20))


def _server_options(p: argparse.ArgumentParser) -> None:
    """--url and --api-key, for the commands that talk to a server."""
    p.add_argument(
        "--url",
        default=os.environ.get(URL_ENV, "http://127.0.0.1:8000"),
        help=f"server URL (default: ${URL_ENV} or http://127.0.0.1:8000)",
    )
    p.add_argument(
        "--api-key", default=os.environ.get(API_KEY_ENV), help=f"API key (default: ${API_KEY_ENV})"
    )


# -- validate ----------------------------------------------------------------------
def _validate(args: argparse.Namespace) -> int:
    models = load_models(args.config)
    files = _expand(args.paths)
    errors = 0
    for path in files:
        problems = check_definition(path, model_ids=list(models))
        for p in problems:
            print(p)
        bad = [p for p in problems if p.severity == "error"]
        errors += len(bad)
        if not bad:
            print(f"{path}: ok")
    print(
        f"{len(files)} file{'s' * (len(files) != 1)} checked, {errors} error{'s' * (errors != 1)}",
        file=sys.stderr,
    )
    return EXIT_USAGE if errors else EXIT_OK


def _expand(paths: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = _definition_files(path)
            if not found:
                raise _UsageError(f"{raw}: no .yaml, .yml or .json files in this folder")
            files += found
        elif path.exists():
            files.append(path)
        else:
            raise _UsageError(f"{raw}: no such file or folder")
    return files


def _definition_files(folder: Path) -> list[Path]:
    """A folder's .yaml, .yml and .json entries; a link to a device is listed too, for the
    loader to refuse by name rather than skip in silence."""
    return sorted(p for p in folder.iterdir() if p.suffix in _SUFFIXES and not p.is_dir())


# -- apply -------------------------------------------------------------------------
def _apply(args: argparse.Namespace) -> int:
    try:
        hook = parse_hook(args.hook)
    except ContextError as exc:
        raise _UsageError(f"--hook: {exc.problems[0].message}") from None
    if args.context_window is not None and args.context_window < 1:
        raise _UsageError(f"--context-window: must be a whole number >= 1 (got {args.context_window})")
    limit = _input_limit(args)
    definition = _definition(args.definition)
    data = _read_input(args.input, limit)
    if isinstance(data, dict):
        data = dict(data)
        if args.model:
            data["model"] = args.model
        if args.context_window is not None:
            data["context_window"] = args.context_window
    elif args.model or args.context_window is not None:
        data = {"messages": data, "model": args.model, "context_window": args.context_window}
    try:
        context = Context.from_dict(data)
    except ContextError as exc:
        source = "<stdin>" if args.input == "-" else args.input
        raise ContextError([dataclasses.replace(p, source=source) for p in exc.problems]) from None
    models, server = load_config(args.config)
    offloader = None
    if args.offload:
        offloader = LocalOffloader(args.offload)
    elif server.offload:
        engine = connect(_database_url(None)) if server.offload.get("backend") == "sql" else None
        offloader = open_offloader(server.offload, engine)
    result = definition.apply(hook, context, models=models, offloader=offloader, session=args.session)
    out = result.context.to_dict()
    fields = set(data) if isinstance(data, dict) else {"messages"}
    if result.context.state:
        fields.add("state")
    _print_json({"context": {k: v for k, v in out.items() if k in fields}, "trace": list(result.trace)})
    for entry in result.trace:
        print(_describe(entry), file=sys.stderr)
    return EXIT_OK


# -- eval --------------------------------------------------------------------------
def _eval(args: argparse.Namespace) -> int:
    from .eval import evaluate

    windows: list[int] = []
    for raw in args.window or ["16000"]:
        for part in raw.split(","):
            if not part.strip().isdigit() or not 0 < int(part) <= 10_000_000:
                raise _UsageError(
                    f"--window: {part.strip()!r} is not a whole number of tokens from 1 to 10,000,000"
                )
            windows.append(int(part))
    if not 0 <= args.mask_last <= 1_000_000:
        raise _UsageError(f"--mask-last: must be a whole number from 0 to 1,000,000 (got {args.mask_last})")
    limit = _input_limit(args)
    for option, target in (("--json", args.json), ("--svg", args.svg)):
        if target and target != "-" and not Path(target).parent.is_dir():
            raise _UsageError(f"{option}: {Path(target).parent} is not a folder")
    definitions = [_definition(d) for d in args.definition or ["default"]]
    report = evaluate(
        _conversations(args.inputs, limit),
        definitions,
        windows,
        pricing=_pricing(args.pricing),
        mask_last=args.mask_last,
        baselines=not args.no_baselines,
    )
    if not report.conversations:
        raise _UsageError(f"{' '.join(args.inputs)}: no conversations found")
    if args.json == "-":
        _print_json(report.to_dict())
    else:
        print(report.table())
        if args.json:
            Path(args.json).write_text(json.dumps(report.to_dict(), indent=1, ensure_ascii=False) + "\n")
    if args.svg:
        Path(args.svg).write_text(report.svg())
    if args.save:
        store = DefinitionStore.open(_database_url(args.db))
        try:
            report_id = EvalStore(store.engine).save(report.to_dict())
        finally:
            store.engine.dispose()
        print(
            f"saved as {report_id}: GET {EVAL_ROUTE}/{report_id}, page /ui/#eval/{report_id}", file=sys.stderr
        )
    return EXIT_OK


def _conversations(paths: Sequence[str], limit: int) -> Any:
    """The conversations in the files (every format the readers know), each file within ``limit`` bytes."""
    from .eval.readers import read_conversations

    return read_conversations(paths, max_bytes=limit)


def _pricing(raw: str | None) -> Pricing | None:
    if raw is None:
        return None
    parts = raw.split(",")
    try:
        prices = [float(p) for p in parts]
    except ValueError:
        if len(parts) == 1 and re.fullmatch(r"[\w.:/-]{1,100}", raw):
            return ratios_for("anthropic" if "claude" in raw.lower() else None)
        raise _UsageError(
            f"--pricing: {raw!r} is neither INPUT,OUTPUT[,CACHE_READ[,CACHE_WRITE]] nor a model name"
        ) from None
    if not 2 <= len(prices) <= 4 or any(not 0 <= p < 1e6 for p in prices):
        raise _UsageError(
            f"--pricing: give 2 to 4 prices per million tokens, each from 0 to 1e6 (got {raw!r})"
        )
    return Pricing(*prices)


def _definition(name_or_path: str) -> Definition:
    return load_definition(name_or_path)


def _read_input(name: str, limit: int) -> Any:
    """A JSON conversation from a file or stdin, held to the loader's bounds."""
    source = sys.stdin.buffer if name == "-" else name
    doc = load_json(source, limit=limit, raise_with="--max-input-mb")
    if doc.problems:
        raise ContextError(doc.problems)
    return doc.data


def _describe(entry: TraceEntry) -> str:
    head = f"{entry['hook']}[{entry['index']}] {entry['type']}"
    if entry["error"]:
        return f"{head}: error, context unchanged: {entry['error']}"
    if not entry["activated"]:
        return f"{head}: not activated ({_reason(entry['reason'])})"
    return (
        f"{head}: activated ({_reason(entry['reason'])}): "
        f"{entry['messages_before']} -> {entry['messages_after']} messages, "
        f"{entry['tokens_before']:,} -> {entry['tokens_after']:,} tokens "
        f"[{entry['tokenizer']}]"
    )


def _reason(reason: dict[str, Any]) -> str:
    parts = []
    for rule, value in reason.items():
        if isinstance(value, dict) and value.get("note"):  # nothing to compare with: what is missing
            parts.append(f"{rule}: {value['note']} (--context-window)")
        elif isinstance(value, dict):
            op = ">" if value.get("met") else "<="
            parts.append(f"{rule}: {value.get('value')} {op} {value.get('limit')}")
        elif rule == "any_of":
            parts.append("any_of: [" + "; ".join(_reason(r) for r in value) + "]")
        else:
            parts.append(f"{rule}: {value}")
    return ", ".join(parts)


def _list(args: argparse.Namespace) -> int:
    for path in sorted(data_dir("definitions").glob("*.yaml")):
        definition = load_definition(path)
        print(f"{definition.name:28} {definition.description}")
    return EXIT_OK


# -- server ---------------------------------------------------------------------------
def _database_url(arg: str | None) -> str:
    return arg or os.environ.get(DATABASE_ENV) or DEFAULT_DATABASE_URL


def _db_upgrade(args: argparse.Namespace) -> int:
    from .store import connect, migrate

    url = _database_url(args.db)
    migrate(connect(url))
    print(f"database schema is up to date: {_redact(url)}")
    return EXIT_OK


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .api import create_app, load_config
    from .api.config import open_offloader
    from .api.server import serve_workers, uvicorn_config
    from .store import DefinitionStore

    models, server = load_config(args.config)
    if not 1 <= args.workers <= 64:
        raise _UsageError(f"--workers must be from 1 to 64, not {args.workers}")
    url = _database_url(args.db)
    folder = Path(args.definitions) if args.definitions else data_dir("definitions")
    if not folder.is_dir():
        raise _UsageError(f"{folder}: no such folder")
    # Every file is read and checked first: a bad one stops serve before it binds or migrates.
    definitions = [(path, load_definition(path)) for path in _definition_files(folder)]
    # Bind before anything else: a taken port creates no database and prints no "serving on".
    sock = _listen(args.host, args.port)
    store = DefinitionStore.open(url)
    outcomes = {path: store.seed(d.name, d.to_dict(), created_by="ctxmgmt serve") for path, d in definitions}
    loaded = sum(outcome == "created" for outcome in outcomes.values())
    offloader = open_offloader(server.offload, store.engine)
    app = create_app(store, models=models, config=server, offloader=offloader)
    print(
        f"ctxmgmt {__version__}: database {_redact(url)}; {len(definitions)} definition(s) in {folder}, "
        f"{loaded} new ({store.list(limit=1)[0]} stored)",
        flush=True,
    )
    windowless = [model_id for model_id in models if not models[model_id].context_window]
    if windowless:  # said now, not at the first proxied request
        print(
            f"models without context_window, whose proxied requests are refused until it is set: "
            f"{', '.join(windowless[:20])}"
            + (f" and {len(windowless) - 20} more" if len(windowless) > 20 else ""),
            file=sys.stderr,
            flush=True,
        )
    deleted = [path for path, outcome in outcomes.items() if outcome == "deleted"]
    if deleted:
        print(
            f"not loaded, as they were deleted: {', '.join(p.stem for p in deleted)}; to restore one, "
            f"`ctxmgmt definitions create {deleted[0]}`",
            flush=True,
        )
    print(
        f"serving on http://{args.host}:{args.port}  (API: /_plugins/_ml/context_management, /openapi.json; "
        f"proxy: /proxy/{{definition}}/v1, {_proxied(models)}; web page: /ui)",
        flush=True,
    )
    exposed = _exposed(sock, server.auth_enabled, models)
    if exposed:
        print(exposed, file=sys.stderr, flush=True)
    if args.workers > 1:
        store.engine.dispose()  # each worker opens its own pool
        serve_workers(sock, server, args.workers, url, args.config or os.environ.get(CONFIG_ENV))
    else:
        uvicorn.Server(uvicorn_config(app, server)).run(sockets=[sock])
    return EXIT_OK


def _proxied(models: Mapping[str, Any]) -> str:
    """The models a client may name in a proxied request, for the banner."""
    if not models:
        return "no models configured (--config)"
    names = sorted(models)
    more = f" and {len(names) - 20} more" if len(names) > 20 else ""
    return f"model{'s' if len(names) > 1 else ''} {', '.join(names[:20])}{more}"


def _exposed(sock: socket.socket, keys: bool, models: Mapping[str, Any]) -> str | None:
    """The warning for a keyless server bound beyond loopback: what anyone reaching it may do."""
    import ipaddress

    address = str(sock.getsockname()[0]).split("%", 1)[0]
    if keys or ipaddress.ip_address(address).is_loopback:
        return None
    spend = "spend the keys of any models configured later"
    if models:
        spend = f"spend the keys of the configured models ({', '.join(sorted(models))})"
    return (
        f"warning: serving on {address}, beyond this machine, without API keys: anyone who can "
        "reach this address can read, replace and delete definitions, register agents with tool "
        f"URLs the server then calls, and {spend}. Set server.api_keys in the configuration "
        "file (--config), or serve on 127.0.0.1. Clients that reach the server by a name need "
        "it in server.allowed_hosts."
    )


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to host:port, or a usage error that says why not."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Small writes go out at once, however the socket is handed on (the connections
        # accepted inherit it; asyncio sets it too, but only on sockets it knows are TCP):
        # uvicorn writes a response's head and body apart, and with Nagle's algorithm the
        # body of a small answer would wait ~40 ms for the client's delayed ACK of the head.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(address)
    except OSError as exc:
        taken = exc.errno == errno.EADDRINUSE
        hint = "; another server holds it: stop it, or give another --port" if taken else ""
        raise _UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}") from None
    return sock


def _compact(args: argparse.Namespace) -> int:
    from .client import Client

    with Client(args.url, api_key=args.api_key) as client:
        result = client.compact(args.agent, args.memory, instruction=args.instruction)
    _checked(result, _COMPACTION, args.url)
    _print_json(result)
    if result["compacted"]:
        print(f"compacted: {result['tokens_before']:,} -> {result['tokens_after']:,} tokens", file=sys.stderr)
    else:
        notes = [e.get("error") or (e.get("details") or {}).get("note") for e in result.get("trace", ())]
        reason = next((n for n in notes if n), "nothing to summarise")
        print(f"nothing compacted ({result['tokens_before']:,} tokens): {reason}", file=sys.stderr)
    return EXIT_OK


def _offload_gc(args: argparse.Namespace) -> int:
    from .api import load_config
    from .api.config import open_offloader
    from .store import connect

    _, server = load_config(args.config)
    settings = server.offload
    days = args.max_age_days if args.max_age_days is not None else float(settings.get("retention_days", 30))
    if days <= 0:
        raise _UsageError("--max-age-days must be > 0")
    engine = connect(_database_url(args.db)) if settings.get("backend") == "sql" else None
    report = open_offloader(settings, engine).gc(days * 86400)
    freed = f"{report.files} files, {report.rows} rows, {report.bytes:,} bytes freed"
    if report.skipped:
        freed += f"; left alone (links or foreign entries): {', '.join(report.skipped[:10])}"
    print(f"offload gc: older than {days:g} days: {freed}")
    return EXIT_OK


def _redact(url: str) -> str:
    """A database URL without its password."""
    if "://" in url and "@" in url.split("://", 1)[1]:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}" if ":" in creds else url
    return url


def _gc(args: argparse.Namespace) -> int:
    """Execution records, the proxy's conversation states (by the records' retention) and
    offloaded content past their retention."""
    from .api import load_config
    from .store import DefinitionStore, ExecutionStore
    from .store.sessions import SessionStore

    _, server = load_config(args.config)
    days = args.max_age_days
    if days is not None and days <= 0:
        raise _UsageError("--max-age-days must be > 0")
    record_days = days if days is not None else float(server.executions.get("retention_days", 30))
    store = DefinitionStore.open(_database_url(args.db))  # migrated first, as serve does
    gone = ExecutionStore(store.engine).gc(record_days * 86400)
    forgotten = SessionStore(store.engine).gc(record_days * 86400)
    store.engine.dispose()
    print(f"gc: {gone} execution records older than {record_days:g} days deleted")
    print(f"gc: {forgotten} proxy conversations not seen for {record_days:g} days forgotten")
    offload_args = argparse.Namespace(config=args.config, db=args.db, max_age_days=days)
    return _offload_gc(offload_args)


def _executions(args: argparse.Namespace) -> int:
    from .client import Client

    with Client(args.url, api_key=args.api_key) as client:
        if args.action == "list":
            result = client.executions(args.agent_id, from_=args.from_, size=args.size)
        else:
            result = client.execution(args.execution_id)
    _checked(result, _EXECUTIONS if args.action == "list" else {"type": "object"}, args.url)
    _print_json(result)
    if args.action == "list":
        for row in result["executions"]:
            window = f" of {row['context_window']:,}" if row.get("context_window") else ""
            print(
                f"{row['execution_id']}  {row['status']:13} {row['llm_calls']:>3} calls, largest request "
                f"{row['max_request_tokens']:,}{window}  {row.get('definition') or '-'}",
                file=sys.stderr,
            )
    return EXIT_OK


def _trace(args: argparse.Namespace) -> int:
    """The token timeline of an execution: per LLM call, the tokens before and after the
    managers as bars against the window, and what fired."""
    from .client import Client

    if not 10 <= args.width <= 200:
        raise _UsageError("--width must be between 10 and 200")
    with Client(args.url, api_key=args.api_key) as client:
        record = client.execution(args.execution_id)
    _checked(record, _RECORD, args.url)
    for line in trace_lines(record, args.width):
        print(line)
    return EXIT_OK


def _print_json(data: Any) -> None:
    """JSON on stdout, in one write (json.dump writes each token, and each write is escaped)."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")


def _checked(answer: Any, schema: Mapping[str, Any], url: str) -> None:
    """Check a server's answer against what the command reads from it: a malformed answer is
    a usage error naming the first thing wrong, never a crash halfway through the printing."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    # The first hundred errors at most: a huge answer can hold millions.
    error = best_match(itertools.islice(Draft202012Validator(schema).iter_errors(answer), 100))
    if error is not None:
        pointer = "".join(f"/{escape(p)}" for p in error.absolute_path) or "/"
        raise _UsageError(
            f"the server at {url} gave a malformed answer: {pointer}: {error.message[:200]}; "
            "is it a ctxmgmt server of this version?"
        )


_COUNT = {"type": "integer", "minimum": 0, "maximum": 2**53}
_TEXT = {"type": "string"}
_STORED_DEFINITION = {
    "type": "object",
    "required": ["name", "version"],
    "properties": {"name": {"type": "string"}, "version": {"type": "integer", "minimum": 1}},
}
_DEFINITION_LIST = {
    "type": "object",
    "required": ["total", "context_management"],
    "properties": {
        "total": {"type": "integer", "minimum": 0},
        "context_management": {"type": "array", "items": _STORED_DEFINITION},
    },
}
_MAYBE_TEXT = {"type": ["string", "null"]}
_MAYBE_COUNT = {"type": ["integer", "null"], "minimum": 0, "maximum": 2**53}
_NUMBER = {"type": "number", "minimum": 0}
_PREVIEW = {
    "type": "object",
    "required": ["text"],
    "properties": {
        "role": _MAYBE_TEXT,
        "text": _TEXT,
        "chars": _COUNT,
        "calls": {"type": "array", "items": _MAYBE_TEXT},
        "summary": {"type": "boolean"},
    },
}
_ENTRY = {
    "type": "object",
    "required": [
        "type",
        "hook",
        "index",
        "activated",
        "tokens_before",
        "tokens_after",
        "messages_before",
        "messages_after",
    ],
    "properties": {
        "type": _TEXT,
        "hook": _TEXT,
        "index": _COUNT,
        "activated": {"type": "boolean"},
        **{key: _COUNT for key in ("tokens_before", "tokens_after", "messages_before", "messages_after")},
        "error": _MAYBE_TEXT,
        "details": {
            "type": "object",
            "if": {"required": ["postponed"], "properties": {"postponed": {"const": "cache"}}},
            "then": {
                "required": ["cache"],
                "properties": {
                    "cache": {
                        "type": "object",
                        "required": ["freed", "saving", "rewrite_cost", "expected_calls"],
                        "properties": {
                            key: _NUMBER for key in ("freed", "saving", "rewrite_cost", "expected_calls")
                        },
                    }
                },
            },
        },
    },
}
_RECORD = {
    "type": "object",
    "required": ["execution_id", "agent_id", "memory_id", "definition_source", "status"],
    "properties": {
        **{key: _TEXT for key in ("execution_id", "agent_id", "memory_id", "definition_source", "status")},
        "definition": _MAYBE_TEXT,
        "definition_version": _MAYBE_COUNT,
        "context_window": _MAYBE_COUNT,
        "max_request_tokens": _COUNT,
        "error": _MAYBE_TEXT,
        "calls": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["call", "calibrated", "calibrated_before"],
                "properties": {
                    "call": _COUNT,
                    "calibrated": _COUNT,
                    "calibrated_before": _COUNT,
                    "reported": _MAYBE_COUNT,
                    "reusable_prefix_tokens": _MAYBE_COUNT,
                    "tokens_after": _MAYBE_COUNT,
                },
            },
        },
        "hooks": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["hook", "iteration", "entries"],
                "properties": {
                    "hook": _TEXT,
                    "iteration": _COUNT,
                    "call": _COUNT,
                    "entries": {"type": "array", "items": _ENTRY},
                    "removed": _COUNT,
                    "added": _COUNT,
                    "removed_preview": {"type": "array", "items": _PREVIEW},
                    "added_preview": {"type": "array", "items": _PREVIEW},
                },
            },
        },
        "cache": {
            "type": "object",
            "properties": {
                "input_tokens": _COUNT,
                "cached_tokens": _COUNT,
                "reusable_share": {"type": ["number", "null"], "minimum": 0},
                "estimated_cost": _NUMBER,
                "summarizer_calls": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"estimated_cost": _NUMBER}},
                },
            },
        },
    },
}
"""What ``ctxmgmt trace`` reads of an execution record."""
_EXECUTIONS = {
    "type": "object",
    "required": ["executions"],
    "properties": {
        "total": _COUNT,
        "executions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["execution_id", "status", "llm_calls", "max_request_tokens"],
                "properties": {
                    "execution_id": _TEXT,
                    "status": _TEXT,
                    "llm_calls": _COUNT,
                    "max_request_tokens": _COUNT,
                    "context_window": _MAYBE_COUNT,
                    "definition": _MAYBE_TEXT,
                },
            },
        },
    },
}
"""What ``ctxmgmt executions list`` reads of an agent's executions."""
_COMPACTION = {
    "type": "object",
    "required": ["compacted", "tokens_before", "tokens_after"],
    "properties": {
        "compacted": {"type": "boolean"},
        "tokens_before": _COUNT,
        "tokens_after": _COUNT,
        "trace": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "error": _MAYBE_TEXT,
                    "details": {"type": "object", "properties": {"note": _MAYBE_TEXT}},
                },
            },
        },
    },
}
"""What ``ctxmgmt compact`` reads of a compaction's answer."""


def trace_lines(record: Mapping[str, Any], width: int = 40) -> list[str]:
    """An execution record as a terminal timeline (``ctxmgmt trace``): per LLM call, the
    tokens before the managers and of the request, as the provider counts them (calibrated)."""
    window = record.get("context_window")
    calls = record.get("calls") or []
    top = window or max((max(c["calibrated_before"], c["calibrated"]) for c in calls), default=1) or 1
    version = f" v{record['definition_version']}" if record.get("definition_version") else ""
    lines = [
        f"execution {record['execution_id']}  agent {record['agent_id']}  memory {record['memory_id']}",
        f"definition {record.get('definition') or '-'}{version} ({record['definition_source']}), "
        f"{record['status']}, {len(calls)} LLM call{'' if len(calls) == 1 else 's'}"
        + (f", window {window:,}" if window else "")
        + f", largest request {record.get('max_request_tokens', 0):,}",
    ]
    fired: dict[int, list[str]] = {}
    for run in record.get("hooks") or []:
        for e in run["entries"]:
            details = e.get("details") if isinstance(e.get("details"), dict) else {}
            postponed = details.get("postponed") == "cache"
            changed = (e["tokens_before"], e["messages_before"]) != (e["tokens_after"], e["messages_after"])
            if e["activated"] and (changed or e.get("error") or postponed):  # not the gates that did nothing
                removed = e["messages_before"] - e["messages_after"]
                where = f"{e['type']} ({e['hook']}[{e['index']}])"
                what = f"{where}: {e['tokens_before']:,} -> {e['tokens_after']:,}"
                moved = f"{e['messages_before']} -> {e['messages_after']} messages"
                what += f", {moved}" if removed else ""
                what += f", error: {e['error']}" if e.get("error") else ""
                cache = details.get("cache")
                if postponed and isinstance(cache, dict):
                    what += (
                        f", postponed: cache (would free {cache['freed']:,} tokens: saving "
                        f"{cache['saving']:,} < rewrite {cache['rewrite_cost']:,} over "
                        f"{cache['expected_calls']} calls)"
                    )
                fired.setdefault(run.get("call", run["iteration"]), []).append(what)
    cache = record.get("cache") or {}
    if cache.get("input_tokens"):
        line = (
            f"prompt cache: {cache['input_tokens']:,} input tokens, "
            f"{cache.get('reusable_share') or 0:.0%} reusable"
        )
        if "cached_tokens" in cache:
            line += f", {cache['cached_tokens']:,} cached by the provider"
        if "estimated_cost" in cache:
            line += f"; estimated cost {cache['estimated_cost']:.4f}"
            summarizer = sum(c.get("estimated_cost", 0) for c in cache.get("summarizer_calls", ()))
            line += f" (summariser {summarizer:.4f})" if summarizer else ""
        lines.append(line)
    lines.append(
        f"{'call':>4} {'before':>9} {'after':>9} {'reused':>9} {'reported':>9}  "
        f"{'tokens (| = window)':{width + 1}}  fired"
    )
    for c in calls:
        after = int(c["calibrated"] * width / top)
        before = int(c["calibrated_before"] * width / top)
        bar = "".join("#" if i < after else ("." if i < before else " ") for i in range(width))
        bar += "|" if window else " "
        reported = f"{c['reported']:,}" if c.get("reported") is not None else "-"
        notes = fired.get(c["call"], [])
        reused = "-"
        if isinstance(c.get("reusable_prefix_tokens"), int):  # calibrated, as the columns beside it
            scale = c["calibrated"] / c["tokens_after"] if c.get("tokens_after") else 1.0
            reused = f"{round(c['reusable_prefix_tokens'] * scale):,}"
        numbers = (
            f"{c['call']:>4} {c['calibrated_before']:>9,} {c['calibrated']:>9,} {reused:>9} {reported:>9}"
        )
        lines.append(f"{numbers}  {bar}  {'; '.join(notes)}")
    for note in fired.get(0, []):
        lines.append(f"post_memory: {note}")
    for run in record.get("hooks") or []:  # what each hook run removed and added, as previews
        lines += _preview_lines(run)
    if record.get("error"):
        lines.append(f"error: {record['error']}")
    return lines


def _preview_lines(run: Mapping[str, Any]) -> list[str]:
    """What a hook run removed and added. A summary that the run rewrote (the fit step and the
    summariser merge what they remove into it) is shown once, as updated, not as removed."""
    where = f"call {run.get('call', run['iteration'])} {run['hook']}"
    removed = list(run.get("removed_preview") or [])
    added = list(run.get("added_preview") or [])
    rewritten = any(map(_is_summary, removed)) and any(map(_is_summary, added))
    lines = [f"  {where} removed {_shown(m)}" for m in removed if not (rewritten and _is_summary(m))]
    unshown = run.get("removed", len(removed)) - len(removed)
    if unshown > 0:
        lines.append(f"  {where} removed {unshown:,} more")
    for m in added:
        verb = "updated the summary" if rewritten and _is_summary(m) else "added"
        lines.append(f"  {where} {verb} {_shown(m)}")
    return lines


def _is_summary(preview: Mapping[str, Any]) -> bool:
    """The record says which previews are ctxmgmt's summaries: a preview's text alone could be
    a forgery, and is too short to check the summary's mark."""
    return preview.get("summary") is True


def _shown(m: Mapping[str, Any]) -> str:
    """A message preview on one line: its role, the tools it calls, the start of its text."""
    calls = f"(calls {', '.join(map(str, m['calls']))}) " if m.get("calls") else ""
    text = " ".join(str(m.get("text", "")).split())[:100]
    more = f" ... ({m['chars']:,} chars)" if m.get("chars", 0) > 100 else ""
    return f"[{m.get('role')}] {calls}{text}{more}".rstrip()


def _definitions(args: argparse.Namespace) -> int:
    from .client import Client

    action = args.action
    with Client(args.url, api_key=args.api_key) as client:
        if action == "list":
            result = client.list(from_=args.from_, size=args.size, q=args.q)
            _checked(result, _DEFINITION_LIST, args.url)
        elif action in ("create", "update"):
            result = _store_file(client, args)
        else:
            try:
                if action == "get":
                    result = client.get(args.name)
                    _checked(result, _STORED_DEFINITION, args.url)
                else:
                    result = client.delete(args.name, force=args.force)
            except ApiError as exc:
                if exc.status != 404:
                    raise
                raise _not_found(client, exc, args.name) from None
    _print_json(result)
    return EXIT_OK


def _store_file(client: Any, args: argparse.Namespace) -> Any:
    """definitions create|update FILE: a file, or the name of a shipped definition (to bring
    back one that was deleted). Every problem is shown with its line, the server's too."""
    from .definitions import _path

    path = _path(args.file)
    doc = load_document(path)
    if doc.problems:
        raise DefinitionError(doc.problems)
    if not isinstance(doc.data, dict):
        raise _UsageError(f"{path}: a definition must be a mapping")
    name = args.name or doc.data.get("name")
    if not isinstance(name, str):
        raise _UsageError(f"{path}: no name: add name: to the file or pass --name")
    try:
        if args.action == "create":
            return client.create(name, doc.data)
        return client.update(name, doc.data, if_version=args.if_version)
    except ApiError as exc:
        if exc.status == 404:
            raise _not_found(client, exc, name) from None
        if exc.status == 409 and args.action == "create":
            again = ["update", str(args.file), *(["--name", args.name] if args.name else [])]
            hint = f"; to replace it: ctxmgmt definitions {shlex.join(again)}"
            raise _UsageError(_one_line(exc).replace("; use PUT to replace it", "") + hint) from None
        if exc.status == 400 and not exc.problems and args.name is None:
            # The file's name refused before its body was read: every problem of the file,
            # checked by the server (its plugins' types included), not the first one alone.
            try:
                checked = client.validate(path.read_text(encoding="utf-8"))
            except (ApiError, OSError, httpx.HTTPError):
                raise exc from None  # the refusal stands as it was
            found = checked.get("problems") if isinstance(checked, dict) else None
            errors = [dataclasses.replace(p, source=str(path)) for p in problems_of(found, errors_only=True)]
            if errors:
                raise DefinitionError(errors) from None
        if not exc.problems:
            raise
        located = tuple(
            dataclasses.replace(p, source=str(path), line=doc.line_of(p.pointer)) for p in exc.problems
        )
        raise ApiError(exc.status, exc.type, exc.reason, located) from None


def _not_found(client: Any, exc: ApiError, name: str) -> _UsageError:
    """A 404 on one line, with the closest stored name (once: a server may name it itself)."""
    line = _one_line(exc)
    return _UsageError(line if "did you mean" in line else line + _close_name(client, name))


def _close_name(client: Any, name: str) -> str:
    """ "; did you mean 'x'?" for a name the server does not have, from its stored names."""
    try:
        listed = client.list(size=1000)
    except (ApiError, httpx.HTTPError):
        return ""
    rows = listed.get("context_management") if isinstance(listed, dict) else None
    names = [r["name"] for r in rows or () if isinstance(r, dict) and isinstance(r.get("name"), str)]
    close = difflib.get_close_matches(name, names, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _headline(exc: BaseException) -> str:
    """What failed, without its problems."""
    if isinstance(exc, ApiError):
        if exc.type == INVALID_ANSWER:
            return f"the server gave an invalid answer (HTTP {exc.status}): {exc.reason}"
        return f"{exc.status} {exc.type}: {exc.reason}"
    return f"invalid {getattr(exc, 'what', 'input')}"  # definition, context, configuration...


def _flat(text: str) -> str:
    """Text on one line: every run of whitespace (newlines too) one space."""
    return " ".join(text.split())


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, (DefinitionError, ContextError)) or hasattr(exc, "problems"):
        problems: tuple[Problem, ...] = getattr(exc, "problems", ())
        if isinstance(exc, ApiError):  # a server's reason never spans lines
            return _flat(_headline(exc) + (f": {problems[0]}" if problems else ""))
        return f"{_headline(exc)}: {problems[0] if problems else exc}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
"""What a terminal may act on rather than show: C0 controls but tab and newline (ESC starts
the sequences that set the title, write the clipboard or clear the screen), DEL, C1 controls
(U+009B is a one-character CSI, U+0085 a newline), the line and paragraph separators, the bidi
controls that reorder what is shown (Trojan Source), and lone surrogates, which no encoder writes."""


def terminal_safe(text: str) -> str:
    """Text with every character of :data:`_UNSAFE` written as a ``\\uXXXX`` escape: shown, not
    obeyed. Inside a JSON string the escape means the same character, so JSON stays JSON."""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class _Escaped:
    """A text stream that writes through :func:`terminal_safe`."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return int(self._stream.write(terminal_safe(text)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


if __name__ == "__main__":
    sys.exit(main())
