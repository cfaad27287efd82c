"""Gymnasium spaces for text observations and actions that really contain any page or desktop text.

Gymnasium's `Text` defaults to alphanumeric characters, so an accessibility tree would not be `in` it;
`any_text(n)` accepts every printable Unicode character plus newline and tab. `text_list(n, item)` is a
list of at most n texts (a browser's tab URLs).

Both work in AsyncVectorEnv's shared memory: `UnicodeText` stores code points directly (one int32 per
character, copied with numpy, where Gymnasium's Text maps every character through a Python list), and
`TextList` has a fixed size (Gymnasium's `Sequence` has none, so AsyncVectorEnv would refuse it).
"""
from __future__ import annotations

import functools
from collections.abc import Sequence as Sequence_
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import shared_memory as shm


@functools.lru_cache(maxsize=1)
def unicode_charset() -> frozenset[str]:
    chars = {chr(c) for c in range(0x20, 0x110000) if not 0xD800 <= c <= 0xDFFF and chr(c).isprintable()}
    return frozenset(chars | {"\n", "\t", "\r", "\xa0", "\u2028", "\u2029", "\u200b", "\u200e", "\u200f"})


@functools.lru_cache(maxsize=1)
def _unicode_tables() -> dict[str, Any]:
    """Gymnasium's per-instance charset tables for `unicode_charset()`, built once per process: building them
    takes ~0.25 s of CPU (under the GIL), and every env has several text spaces."""
    return {k: v for k, v in vars(spaces.Text(1, charset=unicode_charset())).items() if k.startswith("_char")}


class UnicodeText(spaces.Text):
    """`Text` over `unicode_charset()` (short repr: the charset has ~290k characters; its tables are shared)."""

    def __init__(self, max_length: int, *, min_length: int = 0, seed=None) -> None:
        super().__init__(max_length, min_length=min_length, charset="a", seed=seed)
        vars(self).update(_unicode_tables())

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"


class TextList(spaces.Sequence):
    """A tuple of at most `max_items` texts of `item`."""

    def __init__(self, item: UnicodeText, max_items: int) -> None:
        super().__init__(item)
        self.max_items = int(max_items)

    def contains(self, x: Any) -> bool:
        return super().contains(x) and len(x) <= self.max_items

    def __repr__(self) -> str:
        return f"TextList({self.feature_space!r}, max_items={self.max_items})"


def any_text(max_length: int, min_length: int = 0) -> UnicodeText:
    return UnicodeText(max_length, min_length=min_length)


def text_list(max_items: int, max_length: int) -> TextList:
    return TextList(any_text(max_length), max_items)


def clip_text(text: str, max_length: int) -> str:
    """`text` cut to fit `any_text(max_length)`, saying so at the end."""
    if len(text) <= max_length:
        return text
    mark = f"\n[... {len(text) - max_length} characters cut]"
    return text[: max_length - len(mark)] + mark


# ---- AsyncVectorEnv shared memory (Gymnasium's registries are singledispatch functions) -------------------
@shm.create_shared_memory.register(UnicodeText)
def _create_unicode(space: UnicodeText, n: int = 1, ctx=shm.mp):
    return ctx.Array(np.dtype(np.int32).char, n * space.max_length)


def _rows(shared, width: int) -> np.ndarray:
    return np.frombuffer(shared.get_obj(), dtype=np.int32).reshape((-1, width))


def _decode(row: np.ndarray) -> str:
    end = np.flatnonzero(row == 0)
    return row[: end[0] if len(end) else len(row)].tobytes().decode("utf-32-le")  # NUL is not in the charset


def _encode_into(row: np.ndarray, text: str) -> None:
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.int32)
    row[: len(codes)] = codes
    row[len(codes):] = 0


class _LiveTexts(Sequence_):
    """What AsyncVectorEnv reads from shared memory: it reads once, at construction, and expects a view
    that the workers' writes update (as numpy arrays are). Items are decoded when accessed; a deepcopy
    (AsyncVectorEnv's copy=True, the default) is a plain tuple of what the buffer holds then."""

    def __init__(self, rows: np.ndarray, decode) -> None:
        self._rows, self._decode = rows, decode

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self)[i]
        return self._decode(self._rows[i])

    def __deepcopy__(self, memo) -> tuple:
        return tuple(self)

    def __eq__(self, other) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence_) else other)

    def __repr__(self) -> str:
        return repr(tuple(self))


@shm.read_from_shared_memory.register(UnicodeText)
def _read_unicode(space: UnicodeText, shared, n: int = 1) -> _LiveTexts:
    return _LiveTexts(_rows(shared, space.max_length)[:n], _decode)


@shm.write_to_shared_memory.register(UnicodeText)
def _write_unicode(space: UnicodeText, index: int, value: str, shared) -> None:
    _encode_into(_rows(shared, space.max_length)[index], value)


@shm.create_shared_memory.register(TextList)
def _create_text_list(space: TextList, n: int = 1, ctx=shm.mp):
    return ctx.Array(np.dtype(np.int32).char, n * (1 + space.max_items * space.feature_space.max_length))


@shm.read_from_shared_memory.register(TextList)
def _read_text_list(space: TextList, shared, n: int = 1) -> _LiveTexts:
    width = space.feature_space.max_length

    def decode(row: np.ndarray) -> tuple[str, ...]:
        items = row[1:].reshape((space.max_items, width))
        return tuple(_decode(items[i]) for i in range(int(row[0])))

    return _LiveTexts(_rows(shared, 1 + space.max_items * width)[:n], decode)


@shm.write_to_shared_memory.register(TextList)
def _write_text_list(space: TextList, index: int, value, shared) -> None:
    width = space.feature_space.max_length
    row = _rows(shared, 1 + space.max_items * width)[index]
    row[0] = len(value)
    items = row[1:].reshape((space.max_items, width))
    for i in range(space.max_items):
        _encode_into(items[i], value[i] if i < len(value) else "")
