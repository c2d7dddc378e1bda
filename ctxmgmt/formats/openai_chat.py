"""OpenAI chat messages: the internal form itself, so nothing is converted."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import Problem
from ..messages import check_messages

__all__ = ["NAME", "check", "check_system", "system_text"]

NAME = "openai_chat"


def check(messages: Sequence[Any], system: Any = None, *, partial_tail: bool = False) -> list[Problem]:
    """Everything the OpenAI chat API would reject."""
    return check_system(system) + check_messages(messages, partial_tail=partial_tail)


def check_system(system: Any) -> list[Problem]:
    """What the OpenAI chat API would reject in the system prompt."""
    return (
        [] if system is None or isinstance(system, str) else [Problem("/system_prompt", "must be a string")]
    )


def system_text(system: Any) -> str | None:
    return system if isinstance(system, str) else None
