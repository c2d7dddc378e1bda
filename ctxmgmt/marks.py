"""ctxmgmt's own marks, which content cannot forge.

ctxmgmt writes marks into the messages the model reads: the truncation and clearing notices
(with the offload reference ``stored as t-...``) and the summary's ``[ctxmgmt:summary ...]``
marker. Managers recognise them to stay idempotent (a cut output is never cut again, a
summary is pinned and merged, the runner offers recall). Content can say anything, so a
mark is believed only when it carries a tag that content cannot make: ``#k=`` and 16
decimal digits of HMAC-SHA256 (16 hex digits before, still believed), keyed by this
installation's secret, over

- what the mark is bound to: the message's role and, for a tool result, its tool_call_id;
- the message's whole text, with every tag in it replaced by a fixed placeholder.

So a mark inside a tool output, a model reply or a user message is plain text to every
manager, and so is a verbatim echo of a real mark in another message (another role, another
tool_call_id, other text around it). The marks stay in the content (the model must read
them, and every format and framework carries content as it is); the tag is what makes them
ctxmgmt's own. Marks written before tags existed are plain text now: an old notice within
its limits stays as it is, an old summary message is summarised like any message (the
running summary in the state is kept).

The key: ``CTXMGMT_MARK_KEY`` when set (the same value on every machine that shares a store);
otherwise a key file made once, mode 0600, at ``$CTXMGMT_STATE_DIR/mark.key`` (by default
``$XDG_STATE_HOME/ctxmgmt`` or ``~/.local/state/ctxmgmt``), read by every process of the
installation, so that a memory stored by one process is recognised by another.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import re
import secrets
import stat
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from .errors import CtxmgmtError

__all__ = [
    "KEY_ENV",
    "OFFLOADED",
    "STAMP",
    "STATE_DIR_ENV",
    "MarkKeyError",
    "binding",
    "find",
    "key",
    "key_file",
    "offloaded",
    "sign",
    "stamp",
    "verified_tag",
]

KEY_ENV = "CTXMGMT_MARK_KEY"
STATE_DIR_ENV = "CTXMGMT_STATE_DIR"
KEY_FILE = "mark.key"
TAG_CHARS = 16
TAG = re.compile(r"#k=([0-9a-f]{16})")
PLACEHOLDER = "#k=0a1b2c3d4e5f6a7b"
"""A tag before it is signed, and every tag in a text when it is signed or checked. Notices
and summaries are sized with it: as long as a tag, and as many tokens as a tag can take (one
a byte in o200k), so that the signed text is never over the limit it was sized for."""
_MIN_KEY = 16
_MAX_KEY_BYTES = 4096
_lock = threading.Lock()
_keys: dict[str, bytes] = {}


class MarkKeyError(CtxmgmtError):
    """The key that signs ctxmgmt's marks cannot be read or made."""


def key_file() -> Path:
    """Where this installation's mark key lives (when ``CTXMGMT_MARK_KEY`` is not set)."""
    given = os.environ.get(STATE_DIR_ENV)
    if given:
        return Path(given) / KEY_FILE
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "ctxmgmt" / KEY_FILE


def key() -> bytes:
    """The secret that signs marks: ``CTXMGMT_MARK_KEY``, or the key file (made on first use)."""
    given = os.environ.get(KEY_ENV)
    if given:
        if len(given) < _MIN_KEY:
            raise MarkKeyError(f"{KEY_ENV} must be at least {_MIN_KEY} characters (a random secret)")
        return given.encode("utf-8", "surrogatepass")
    path = key_file()
    found = _keys.get(str(path))
    if found is not None:
        return found
    with _lock:
        found = _keys.get(str(path))
        if found is None:
            found = _keys[str(path)] = _load(path)
    return found


def _load(path: Path) -> bytes:
    fix = f"set {KEY_ENV} to a secret, or {STATE_DIR_ENV} to a writable directory"
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not path.exists():
            # Written whole under a temporary name, then linked into place: another process
            # never reads a partial key, and the first link wins (the others read it).
            tmp = path.with_name(f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(secrets.token_hex(32) + "\n")
                    f.flush()
                    os.fsync(f.fileno())
                with contextlib.suppress(FileExistsError):
                    os.link(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
        mode = path.stat().st_mode
        with open(path, "rb") as f:
            raw = f.read(_MAX_KEY_BYTES + 1)
        text = raw.decode("ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise MarkKeyError(f"the mark key {path} cannot be read or made ({exc}); {fix}") from None
    if len(raw) > _MAX_KEY_BYTES:
        raise MarkKeyError(f"the mark key {path} is longer than {_MAX_KEY_BYTES} bytes; {fix}")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise MarkKeyError(f"the mark key {path} is readable by others; chmod 600 it, or {fix}")
    if len(text) < _MIN_KEY:
        raise MarkKeyError(f"the mark key {path} is too short; delete it to make a new one, or {fix}")
    return text.encode("ascii")


def _tags(binding: Sequence[str], normalized: str) -> tuple[str, str]:
    """The tag of a text: as ctxmgmt signs now, and as it signed before (still believed).

    Now 16 decimal digits (53 bits of the MAC): a tokenizer splits digits in threes whatever
    they are, so every tag takes the same tokens and a signed text's size never depends on
    its tag (16 hex digits took 8 to 17 tokens in o200k)."""
    data = "\x1f".join([*binding, normalized]).encode("utf-8", "surrogatepass")
    mac = hmac.new(key(), data, hashlib.sha256).digest()
    return f"{int.from_bytes(mac[:8], 'big') % 10**TAG_CHARS:0{TAG_CHARS}d}", mac.hex()[:TAG_CHARS]


def sign(text: str, binding: Sequence[str], at: int) -> str:
    """``text`` with the placeholder tag at ``at`` (where ctxmgmt wrote its mark) signed."""
    assert text.startswith(PLACEHOLDER, at)
    tag, _ = _tags(binding, TAG.sub(PLACEHOLDER, text))
    return f"{text[:at]}#k={tag}{text[at + len(PLACEHOLDER) :]}"


def verified_tag(text: str, binding: Sequence[str]) -> str | None:
    """The tag ctxmgmt signed ``text`` with, bound to ``binding``; None when the text has no
    valid tag (content that writes a mark of its own, or copies one, has none)."""
    if "#k=" not in text:
        return None
    now, before = _tags(binding, TAG.sub(PLACEHOLDER, text))
    for found in TAG.finditer(text):
        tag = found.group(1)
        if hmac.compare_digest(tag, now) or hmac.compare_digest(tag, before):
            return tag
    return None


def find(pattern: re.Pattern[str], text: str, binding: Sequence[str]) -> re.Match[str] | None:
    """The mark of ``pattern`` (its group ``tag``) that ctxmgmt wrote in ``text``, or None."""
    tag = verified_tag(text, binding)
    if tag is None:
        return None
    return next((m for m in pattern.finditer(text) if m.group("tag") == tag), None)


def binding(m: Mapping[str, object]) -> tuple[str, str]:
    """What a mark in a message is bound to: its role and, for a tool result, its call id."""
    role = m.get("role")
    call = m.get("tool_call_id") if role == "tool" else None
    return str(role), "" if call is None else str(call)


# A notice of an earlier offloading truncation (or clearing), signed by ctxmgmt (see
# :mod:`ctxmgmt.marks`): ``ref`` is where the original is stored.
OFFLOADED = re.compile(
    r"\[(?:truncated|cleared): original [\d,]{1,20} chars[^\]\n]{0,320}stored as (?P<ref>t-[0-9a-f]{32})"
    r"[^\]\n]{0,300} #k=(?P<tag>[0-9a-f]{16})\]"
)
# A truncation notice (the stamp of content cut before): the original's size in chars,
# and in tokens when a token limit applied.
STAMP = re.compile(
    r"\[truncated: original (?P<chars>[\d,]{1,20}) chars(?:, (?P<tokens>~?[\d,]{1,20}) tokens)?"
    r"(?:; [^\]\n]{0,400})? #k=(?P<tag>[0-9a-f]{16})\]"
)


def stamp(text: str, bound: Sequence[str]) -> tuple[int, str | None] | None:
    """The original size recorded by an earlier cut: (chars, tokens as written), or None.

    A notice counts only when ctxmgmt wrote it for this very message (its tag verifies
    against ``bound``, the message's :func:`binding`): a tool output, a model
    reply or a user message that writes or copies a notice is plain content, cut like any
    other, and its stated size is not believed."""
    found = find(STAMP, text, bound)
    if found is None:
        return None
    return int(found.group("chars").replace(",", "")), found.group("tokens")


def offloaded(text: str, bound: Sequence[str]) -> str | None:
    """The archive reference of ctxmgmt's own notice in a message's text, or None."""
    found = find(OFFLOADED, text, bound)
    return None if found is None else found.group("ref")
