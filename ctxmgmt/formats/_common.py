"""What the provider formats share: where an internal message came from, the memo of
conversions, and what a history in a provider's format knows of its own conversion."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._memo import Memo, rough_size
from ..history import History, starts_with
from ..tokens import FILE_CHARS_PER_TOKEN
from ..types import MARK_MEMBER

__all__ = [
    "BASE64_CHARS_PER_TOKEN",
    "ORIGIN",
    "Grown",
    "Known",
    "Origin",
    "estimate_tokens",
    "memo",
    "origin_of",
    "rough_size",
]

ORIGIN = MARK_MEMBER
"""The key of an internal message that says where it came from. Managers copy unknown keys
along when they edit a message (``{**m, "content": ...}``), so an edited message still
knows its source; the key never leaves ctxmgmt: the way back rebuilds provider messages."""

BASE64_CHARS_PER_TOKEN = FILE_CHARS_PER_TOKEN
"""An estimate for a base64 file or document (a PDF): about a token per 4.5 bytes of file (as
a chat file part's inline data is counted)."""

CONVERSION_MEMO_BYTES = 32 * 1024 * 1024
"""What the memo of converted provider messages may hold, by the size of what it keeps alive."""


class Origin(dict[str, Any]):
    """Where an internal message came from: the provider message (Anthropic) or items
    (Responses), and the block it was made of. As JSON (an archive of the internal
    message) it is only its few plain items, never the provider's content twice."""

    __slots__ = ("block", "blocks", "group", "made", "message", "size")

    def __init__(
        self,
        message: Any = None,
        *,
        block: Any = None,
        blocks: Sequence[Any] = (),
        group: Sequence[Any] = (),
        plain: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(plain or {})
        self.message = message
        """The provider message (or, for Responses, the main item)."""
        self.block = block
        """The content block an internal message was made of (a tool_result)."""
        self.blocks = tuple(blocks)
        """The provider's blocks an internal message stands for, in order."""
        self.group = tuple(group)
        """Responses: every item the internal message stands for (reasoning first)."""
        self.made: tuple[int, ...] = ()
        """The ids of the internal messages the conversion made of ``message``, in order (set
        once they are made): an internal message whose id is here is unchanged. They are
        alive while it is (an edited copy is made from a live one), so no id is reused."""
        self.size = -1
        """About how many bytes the source keeps alive, once the conversion has measured it
        (-1: not measured)."""

    def __deepcopy__(self, memo: dict[int, Any]) -> Origin:
        return self  # an origin is a reference, and the provider message is immutable

    def __copy__(self) -> Origin:
        return self


def origin_of(m: Mapping[str, Any]) -> Origin | None:
    found = m.get(ORIGIN)
    return found if isinstance(found, Origin) else None


def made(origin: Origin, internal: Sequence[Mapping[str, Any]]) -> None:
    """Record on an origin the internal messages made of its source."""
    origin.made = tuple(id(m) for m in internal)


def unchanged(m: Mapping[str, Any]) -> Origin | None:
    """The origin of an internal message that is as the conversion made it, else None."""
    origin = origin_of(m)
    return origin if origin is not None and id(m) in origin.made else None


@dataclass(frozen=True, slots=True)
class Grown:
    """What a history in a provider's format knows of its first ``k`` messages: they pass the
    format's check (an open turn at their end allowed) and convert to ``inner``. A history
    grown from them converts and checks only what is new: the format resumes at ``restart``
    (``k``, or for Responses the start of the last turn, which new items may still join) with
    ``inner``'s first ``inner_restart`` messages final and ``pending`` its check's state there."""

    k: int
    inner: History
    restart: int
    inner_restart: int
    pending: Mapping[str, int]
    """The check's open calls at ``restart``: call id -> the index of the message asking."""
    bytes: int
    """About how many bytes the first ``k`` messages keep alive (twice: they and ``inner``)."""


KNOWN_BYTES = 64 * 1024 * 1024
"""What the histories kept to find a grown list's start may keep alive, in all."""


class Known:
    """The last few histories converted in one format, to find one that a new list starts
    with, by the identity of every message (a framework hands a new list each call, with the
    same message objects first): such a list converts and checks only its new part. A list
    of equal but new messages starts afresh (its messages' conversions are memoised by
    identity too, so none is reused for another object). Bounded by count and by bytes."""

    def __init__(self, kept: int = 4, max_bytes: int = KNOWN_BYTES) -> None:
        self._kept = kept
        self._max_bytes = max_bytes
        self._items: list[tuple[History, Grown]] = []
        self._lock = threading.Lock()

    def prefix_of(self, seq: History) -> Grown | None:
        """What is known of the longest kept history that ``seq`` starts with."""
        with self._lock:
            items = list(self._items)
        n = len(seq)
        best: Grown | None = None
        for history, grown in items:
            k = len(history)
            if k > n or (best is not None and k <= best.k) or (k and seq[k - 1] is not history[k - 1]):
                continue
            if k == 0 or starts_with(seq, history):
                best = grown
        return best

    def add(self, history: History, grown: Grown, before: Grown | None = None) -> None:
        """Keep ``history`` (its messages known as ``grown``), in place of the newest one
        when that is the one it grew from (``before``)."""
        if grown.bytes > self._max_bytes:
            return
        with self._lock:
            kept = self._items
            if before is not None and kept and kept[0][1] is before:
                kept[0] = (history, grown)  # the newest, grown: the common case, O(1)
            else:
                kept = [(h, g) for h, g in kept if h is not history]
                kept.insert(0, (history, grown))
            total = 0
            for i, (_, g) in enumerate(kept):
                total += g.bytes
                if total > self._max_bytes or i >= self._kept:
                    del kept[i:]
                    break
            self._items = kept

    def clear(self) -> None:
        with self._lock:
            self._items = []


def memo() -> Memo[Any]:
    """A shared, byte-bounded memo of conversions by the provider object's identity."""
    return Memo(CONVERSION_MEMO_BYTES, shared=True)


def estimate_tokens(value: Any) -> int:
    """About how many tokens a provider counts for structured content that no manager reads
    as text (a server tool's result, a screenshot's description): a token per 4 characters
    of its strings. Calibration by the provider's reports corrects the rest."""
    return -(-rough_size(value, text=True) // 4)
