"""A reply's body decoded as it arrives, never past a byte limit: the one reader of every
upstream answer (the summariser's calls and the proxy's, whole or streamed).

A compressed body is decompressed chunk by chunk with the output of each step bounded by
what the limit leaves, so a few KB on the wire cannot become gigabytes in memory; an
encoding whose output cannot be bounded this way (``br``, ``zstd``, several layers) is
refused, since ctxmgmt asks for ``identity`` or ``gzip`` only.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

__all__ = ["ENCODINGS", "Decoder", "TooLarge"]

ENCODINGS = ("gzip", "x-gzip", "deflate")
"""The content-encodings read (besides ``identity``): those whose output is bounded as it goes."""
MAX_MEMBERS = 64
"""gzip members read in one body: each costs a decompressor and a copy of what follows it, so
a body of many tiny members would cost seconds of CPU (a streaming writer makes a few)."""


class TooLarge(httpx.DecodingError):
    """A reply past its byte limit, or in an encoding whose size cannot be bounded."""


class Decoder:
    """A body's bytes decoded (gzip, deflate, identity) as they come, refused past ``limit``
    decoded bytes. ``setting`` names what raises the limit, in the refusal."""

    def __init__(
        self, limit: int, headers: httpx.Headers, setting: str = "max_response_bytes", what: str = "the reply"
    ) -> None:
        self.limit = limit
        self.setting = setting
        self.what = what
        """What the body is, in an error's message (a client's request body: ``the body``)."""
        self.total = 0
        length = headers.get("content-length", "")
        if length.isascii() and length.isdigit() and int(length) > limit:
            raise self.too_large()
        encoding = headers.get("content-encoding", "identity").strip().lower()
        self._zlib: Any = None
        self._sniff = False
        self._head = b""  # deflate's first byte, while the second has not come
        self._fed = False
        self._members = 1 if encoding in ("gzip", "x-gzip") else 0  # gzip: one may follow another
        if self._members:
            self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._zlib = zlib.decompressobj()
            self._sniff = True  # zlib-wrapped or raw, as servers differ: known at the first byte
        elif encoding not in ("", "identity"):
            raise TooLarge(
                f"{what}'s content-encoding {encoding[:60]!r} is not one ctxmgmt reads "
                "(gzip, deflate, identity)"
            )

    def too_large(self) -> TooLarge:
        return TooLarge(
            f"{self.what} is larger than {self.limit:,} bytes ({self.setting}); nothing more of it "
            f"was read; raise {self.setting} in the model's configuration if its answers are that large"
        )

    def feed(self, chunk: bytes) -> bytes:
        """``chunk`` (as it came on the wire) decoded; raises :class:`TooLarge` past the limit."""
        if self._zlib is not None:
            self._fed = self._fed or bool(chunk)
            if self._sniff:
                chunk = self._head + chunk
                if len(chunk) < 2:  # the two bytes that say which deflate it is: not yet here
                    self._head = chunk
                    return b""
                self._sniff, self._head = False, b""
                if chunk[0] & 0x0F != 8 or (chunk[0] << 8 | chunk[1]) % 31:
                    # no zlib header (method 8, a header check that divides by 31): raw deflate
                    self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
            try:
                chunk = self._inflate(chunk)
            except zlib.error as exc:
                raise httpx.DecodingError(f"{self.what}'s compressed data is invalid ({exc})") from None
        self.total += len(chunk)
        if self.total > self.limit:
            raise self.too_large()
        return chunk

    def _inflate(self, data: bytes) -> bytes:
        """``data`` decompressed, within what the limit leaves (one byte past it: refused).
        What follows the end of the compressed data is never held: after a gzip member,
        another member (RFC 1952; zero bytes of padding are passed over), after anything else
        an error."""
        out = b""
        while data:
            if self._zlib.eof:
                if not self._members:
                    raise httpx.DecodingError(f"{self.what} goes on after the end of its compressed data")
                data = data.lstrip(b"\x00")
                if not data:
                    break
                self._members += 1
                if self._members > MAX_MEMBERS:
                    raise httpx.DecodingError(f"{self.what} holds more than {MAX_MEMBERS} gzip members")
                self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)
            room = self.limit + 1 - self.total - len(out)
            piece = self._zlib.decompress(data, room)
            out += piece
            if len(piece) >= room or not self._zlib.eof:
                break  # past the limit (refused by the caller), or all of it read
            data = self._zlib.unused_data
        return out

    async def read(self, chunks: AsyncIterator[bytes]) -> bytes:
        """A whole body from its chunks as they come on the wire (``aiter_raw``)."""
        data = bytearray()
        async for chunk in chunks:
            data += self.feed(chunk)
        self.finish()
        return bytes(data)

    def finish(self) -> None:
        """The body ended: a compressed one must be whole (an empty one is an empty body)."""
        if self._zlib is not None and self._fed and not self._zlib.eof:
            if self._sniff and len(self._head) == 1:
                raise httpx.DecodingError(f"{self.what}'s compressed data is one byte long")
            raise httpx.DecodingError(f"{self.what}'s compressed data ends early")
