"""What the provider formats share: where an internal message came from, and the memo of
conversions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._memo import Memo, rough_size

__all__ = ["ORIGIN", "Conversion", "Origin", "estimate_tokens", "memo", "origin_of", "rough_size", "same"]

ORIGIN = "_ctxmgmt"
"""The key of an internal message that says where it came from. Managers copy unknown keys
along when they edit a message (``{**m, "content": ...}``), so an edited message still
knows its source; the key never leaves ctxmgmt: the way back rebuilds provider messages."""

CONVERSION_MEMO_BYTES = 32 * 1024 * 1024
"""What the memo of converted provider messages may hold, by the size of what it keeps alive."""


class Origin(dict[str, Any]):
    """Where an internal message came from: the provider message (Anthropic) or items
    (Responses), and the block it was made of. As JSON (an archive of the internal
    message) it is only its few plain items, never the provider's content twice."""

    __slots__ = ("block", "blocks", "group", "message")

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

    def __deepcopy__(self, memo: dict[int, Any]) -> Origin:
        return self  # an origin is a reference, and the provider message is immutable

    def __copy__(self) -> Origin:
        return self


def origin_of(m: Mapping[str, Any]) -> Origin | None:
    found = m.get(ORIGIN)
    return found if isinstance(found, Origin) else None


@dataclass(frozen=True, slots=True)
class Conversion:
    """A provider's message list in the internal form, and the way back."""

    messages: list[dict[str, Any]]
    """The internal messages (OpenAI chat, each with its origin)."""
    made: dict[int, tuple[Any, Any]]
    """id(internal message) -> (the internal message, what it was made of), for the messages
    this conversion made: one that comes back as it went is its source again, unchanged."""


def memo() -> Memo[Any]:
    """A shared, byte-bounded memo of conversions by the provider object's identity."""
    return Memo(CONVERSION_MEMO_BYTES, shared=True)


def estimate_tokens(value: Any) -> int:
    """About how many tokens a provider counts for structured content that no manager reads
    as text (a server tool's result, a screenshot's description): a token per 4 characters
    of its strings. Calibration by the provider's reports corrects the rest."""
    return -(-rough_text(value) // 4)


def rough_text(value: Any, depth: int = 0) -> int:
    """The characters of the strings in a JSON-like value."""
    if isinstance(value, str):
        return len(value)
    if depth > 16:
        return 0
    if isinstance(value, Mapping):
        return sum(rough_text(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(rough_text(v, depth + 1) for v in value)
    return 8


def same(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Whether two sequences hold the very same objects."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))
