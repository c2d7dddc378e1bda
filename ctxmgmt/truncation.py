"""Cutting a tool result to its limits, with ctxmgmt's signed truncation notice.

The truncation manager, compaction and the fit step cut text the same way: the head, the
tail or both kept, the notice in the middle giving the original's size (and, when it was
archived, where to read the rest), the whole within a character and a token limit. The
notice is signed for its message (see :mod:`ctxmgmt.marks`), so a second run recognises
it and never cuts again. The lines of the cut part that report a failure (a log's ERROR
line between a long head and tail, a test's traceback) follow the notice under a label, a
few of them within a quarter of the room: what an agent reads a long output for is rarely
where its head and tail are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .digest import failure_lines
from .marks import PLACEHOLDER, sign
from .messages import RECALL_LIMIT, without_escapes

if TYPE_CHECKING:
    from .tokens import TokenCounter

__all__ = ["cut", "with_text"]


def with_text(m: Mapping[str, Any], text: str) -> dict[str, Any]:
    """The message with its text replaced; other content parts (images) are kept."""
    content = m.get("content")
    if isinstance(content, list):
        others = [p for p in content if not (isinstance(p, dict) and p.get("type") == "text")]
        return {**m, "content": [{"type": "text", "text": text}, *others]}
    return {**m, "content": text}


def cut(
    text: str,
    counter: TokenCounter,
    bound: Sequence[str],
    *,
    max_chars: int,
    max_tokens: int | None = None,
    mode: str = "head_tail",
    ref: str | None = None,
    original: tuple[int, str | None] | None = None,
) -> str:
    """``text`` cut to ``max_chars`` characters and ``max_tokens`` tokens, keeping its
    head, its tail or both (``mode``), with a notice signed for the message it goes into
    (``bound``, its :func:`~ctxmgmt.marks.binding`); the result is within both limits.
    With ``ref``, the notice says which characters are stored there and how to read them.
    ``original`` is the size an earlier cut recorded (see :func:`~ctxmgmt.marks.stamp`): the notice
    keeps it, so that re-cutting never loses the real size."""
    n = len(text)
    with_tokens = max_tokens is not None
    size = _size(text, counter, with_tokens, original)
    if n <= 2 * max_chars:
        # A text near its cap: the notice could cost more tokens than the few characters cut
        # (English words are ~4 characters a token, the notice's digits and tag denser), and
        # a cut never makes a message larger.
        whole = counter.text(text)
        max_tokens = whole if max_tokens is None else min(max_tokens, whole)
    # Size the pieces against the longest notice this text can get.
    longest = _marker(size, ref, (n, n))
    chars = max_chars - len(longest)
    room = None if max_tokens is None else max_tokens - counter.text(longest) - 2
    first = _pieces(text, chars, room, mode, counter)
    said = _failures(text, *first, chars, room, counter)
    pieces: tuple[str, str] | None = first
    if said:  # the pieces shrink to make room: what they no longer hold was not in them before
        chars -= len(said)
        room = None if room is None else room - counter.text(said) - 1
        pieces = None
    marker = longest
    for _ in range(8):
        head, tail = pieces or _pieces(text, chars, room, mode, counter)
        pieces = None  # drawn once: a retry draws smaller ones
        marker = _marker(size, ref, (len(head), n - len(tail)))
        if mode == "tail":
            result = marker.lstrip("\n") + said + tail
            at = marker.lstrip("\n").index(PLACEHOLDER)
        else:
            result = head + marker + said + tail
            at = len(head) + marker.index(PLACEHOLDER)
        result = sign(result, bound, at)
        if len(result) <= max_chars and (max_tokens is None or counter.text(result) <= max_tokens):
            return result
        # Re-tokenising across the join can add a token or two; shrink and retry.
        chars = max(0, chars - max(1, chars // 20))
        if room is not None:
            room = max(0, room - max(2, room // 20))
    short = marker.strip()[:max_chars]  # a notice alone, signed when its tag fits
    return sign(short, bound, short.index(PLACEHOLDER)) if PLACEHOLDER in short else short


_FAILURES_KEPT = 5
_FAILURES_SCAN = 100_000
"""Characters of the cut part read for failures at each of its ends (a 10 MB output is not
read whole: ~0.1-0.8 us a character, more in code that names errors on every line)."""
_FAILURES_LABEL = "failure lines of the cut part:\n"


def _failures(text: str, head: str, tail: str, chars: int, tokens: int | None, counter: TokenCounter) -> str:
    """The lines of ``text``'s cut part (between ``head`` and ``tail``) that report a failure,
    one a line (the first two and the last three of more) after a label, within a
    quarter of ``chars`` and of ``tokens`` ("" when none, or none fits)."""
    if chars < 4 * (len(_FAILURES_LABEL) + 20):
        return ""
    cut_part = text[len(head) : len(text) - len(tail)]
    if len(cut_part) > 2 * _FAILURES_SCAN:  # a huge output: the cut part's ends, near the pieces
        cut_part = f"{cut_part[:_FAILURES_SCAN]}\n{cut_part[-_FAILURES_SCAN:]}"
    # The lines come without a terminal's escape sequences: so are the pieces they may repeat.
    head, tail = without_escapes(head), without_escapes(tail)
    found = [line for line in failure_lines(cut_part) if not _held(line.strip("…"), head, tail)]
    if len(found) > _FAILURES_KEPT:
        found = found[:2] + found[-(_FAILURES_KEPT - 2) :]
    while found:
        block = _FAILURES_LABEL + "".join(f"{line}\n" for line in found)
        if len(block) <= chars // 4 and (tokens is None or counter.text(block) <= tokens // 4):
            return block
        found.pop(0)  # the oldest goes first
    return ""


def _held(core: str, head: str, tail: str) -> bool:
    return core in head or core in tail


def _pieces(text: str, chars: int, tokens: int | None, mode: str, counter: TokenCounter) -> tuple[str, str]:
    """The kept head and tail."""
    if mode == "head_tail":
        head = _piece(
            text,
            chars - chars // 2,
            None if tokens is None else tokens - tokens // 2,
            counter,
            tail=False,
        )
        tail = _piece(text, chars // 2, None if tokens is None else tokens // 2, counter, tail=True)
        return head, tail
    if mode == "tail":
        return "", _piece(text, chars, tokens, counter, tail=True)
    return _piece(text, chars, tokens, counter, tail=False), ""


def _piece(text: str, chars: int, tokens: int | None, counter: TokenCounter, *, tail: bool) -> str:
    if chars <= 0 or (tokens is not None and tokens <= 0):
        return ""
    piece = text[-chars:] if tail else text[:chars]
    if tokens is not None:
        piece = counter.tail(piece, tokens) if tail else counter.head(piece, tokens)
    return piece


def _size(
    text: str,
    counter: TokenCounter,
    with_tokens: bool,
    original: tuple[int, str | None] | None,
) -> str:
    """The original's size as the notice gives it (a long text's count is memoised by its
    content: the caller's check counted it already)."""
    if original is not None:
        chars, stated = original
        return f"{chars:,} chars" + (f", {stated} tokens" if stated else "")
    size = f"{len(text):,} chars"
    if with_tokens:
        approx = "~" if counter.is_estimate(text) else ""
        size += f", {approx}{counter.text(text):,} tokens"
    return size


def _marker(size: str, ref: str | None, missing: tuple[int, int]) -> str:
    if ref is None:
        return f"\n[truncated: original {size} {PLACEHOLDER}]\n"
    start, end = missing
    return (
        f"\n[truncated: original {size}; chars {start}-{end} are stored as {ref}: "
        f'context_read(ref="{ref}", offset={start}, limit={min(end - start, RECALL_LIMIT)}) '
        f"returns them {PLACEHOLDER}]\n"
    )
