"""The viewer's data, packed for a page: numbers a browser decodes with its own built-in APIs alone.

Attention is quantised to 8 bits per layer and head: q = round(255 · a / scale), scale = the head's largest
weight, so a weight reads back as q · scale / 255 (error at most scale / 510). A causal map is its lower
triangle, read column by column (key k, then its queries k .. T-1): a key's column is mostly zeros with a few
runs, which deflate compressed best of the orders tried on SmolLM2 (by row, by diagonal, by column). Then the
zeros go out: a bit mask of the nonzero entries and their values, as two streams, smaller again.

Every array travels as a *blob*: zlib-deflated bytes written in base 85 (5 characters per 4 bytes; base64
takes 6 per 4), which the page inflates with ``DecompressionStream("deflate")`` (in every current browser: no
library, no network). The alphabet is RFC 1924's with "<" written "," so that a blob sits in the page's JSON
as it is (a "<" there would be escaped to 6 characters).
"""
from __future__ import annotations

import base64
import zlib

import numpy as np
import torch

LEVEL = 6  # zlib's default: level 9 made SmolLM2's maps a few percent smaller and took several times as long
_TO_PAGE = bytes.maketrans(b"<", b",")  # RFC 1924's base 85 (Python's b85encode) -> the page's alphabet
_FROM_PAGE = bytes.maketrans(b",", b"<")


def quantise(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """a: (H, T, T) attention rows -> (q (H, T, T) uint8, scale (H,) float32), a ≈ q · scale / 255."""
    scale = a.float().amax((-1, -2)).clamp(min=torch.finfo(torch.float32).tiny)  # (H,)
    q = (a.float() / scale[:, None, None] * 255).round().clamp(0, 255).to(torch.uint8)
    return q, scale


def dequantise(q: np.ndarray, scale: float) -> np.ndarray:
    """What the page shows for stored entries q (uint8) of a head with ``scale``."""
    return q.astype(np.float64) * scale / 255


def column_order(t: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(queries, keys), each (t(t+1)/2,): the lower triangle of a (t, t) map read column by column."""
    keys, queries = torch.triu_indices(t, t)  # row-major over (key, query >= key)
    return queries, keys


def pack_heads(q: torch.Tensor) -> tuple[bytes, bytes, list[int]]:
    """q: (H, T, T) uint8 causal maps -> (mask, values, nonzeros per head). ``mask``: per head, the nonzero
    flags of its lower triangle in column order, packed 8 to a byte (most significant bit first), each head
    padded to whole bytes; ``values``: the nonzero entries, head after head, in the same order."""
    queries, keys = column_order(q.shape[-1])
    flat = q[:, queries, keys].numpy()  # (H, N)
    nonzero = flat > 0
    mask = np.packbits(nonzero, axis=-1)  # (H, ceil(N/8))
    return mask.tobytes(), flat[nonzero].tobytes(), nonzero.sum(-1).tolist()


def unpack_head(mask: bytes, values: bytes, counts: list[int], head: int, t: int) -> np.ndarray:
    """The (T, T) uint8 map of head ``head`` (a flat index over every packed head) from :func:`pack_heads`' output:
    the inverse the page computes in JavaScript, here for the tests."""
    n = t * (t + 1) // 2
    per_head = (n + 7) // 8
    bits = np.unpackbits(np.frombuffer(mask, np.uint8)[head * per_head:(head + 1) * per_head])[:n].astype(bool)
    start = sum(counts[:head])
    flat = np.zeros(n, np.uint8)
    flat[bits] = np.frombuffer(values, np.uint8)[start:start + counts[head]]
    out = np.zeros((t, t), np.uint8)
    queries, keys = column_order(t)
    out[queries.numpy(), keys.numpy()] = flat
    return out


class BlobWriter:
    """One blob written in pieces (a layer at a time: a long text's maps never sit whole in memory)."""

    def __init__(self):
        self._z = zlib.compressobj(LEVEL)
        self._parts: list[bytes] = []
        self.raw = 0  # bytes before compression

    def write(self, data: bytes) -> None:
        self.raw += len(data)
        self._parts.append(self._z.compress(data))

    def close(self) -> dict:
        """The blob: {"n": deflated bytes, "z": them in base 85, padded to whole groups of 4}."""
        self._parts.append(self._z.flush())
        data = b"".join(self._parts)
        return {"n": len(data), "z": base64.b85encode(data, pad=True).translate(_TO_PAGE).decode("ascii")}


def blob(data: bytes) -> dict:
    """One array's bytes as a blob."""
    w = BlobWriter()
    w.write(data)
    return w.close()


def unblob(b: dict) -> bytes:
    """A blob's bytes (the page's decoding, for the tests)."""
    return zlib.decompress(base64.b85decode(b["z"].encode("ascii").translate(_FROM_PAGE))[:b["n"]])


def bitsets(kept: torch.Tensor) -> bytes:
    """kept: (..., T) bool -> the flags packed 8 to a byte along T (most significant bit first), row after row."""
    return np.packbits(kept.numpy(), axis=-1).tobytes()
