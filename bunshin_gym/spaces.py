"""Gymnasium spaces for text observations and actions that really contain any page or desktop text.

Gymnasium's `Text` defaults to alphanumeric characters, so an accessibility tree would not be `in` it;
`any_text(n)` accepts every printable Unicode character plus newline and tab.
"""
from __future__ import annotations

import functools

from gymnasium import spaces


@functools.lru_cache(maxsize=1)
def unicode_charset() -> frozenset[str]:
    chars = {chr(c) for c in range(0x20, 0x110000) if not 0xD800 <= c <= 0xDFFF and chr(c).isprintable()}
    return frozenset(chars | {"\n", "\t", "\r", "\xa0", "\u2028", "\u2029", "\u200b", "\u200e", "\u200f"})


def any_text(max_length: int, min_length: int = 0) -> spaces.Text:
    return spaces.Text(max_length=max_length, min_length=min_length, charset=unicode_charset())
