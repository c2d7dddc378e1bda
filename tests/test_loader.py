"""The loader's JSON bounds: the one depth count used for files, request bodies and model
replies."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ctxmgmt.loader import json_depth

_TEXT = st.text(alphabet='[]{}"\\ab\n\u00e9\ud7ff', max_size=8)
_VALUES = st.recursive(
    st.none() | st.integers() | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=30,
)


def _walked(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_walked, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_walked, value), default=0)
    return 0


@given(_VALUES)
@example({"a": ["[[[", {"]": '\\"]]'}]})
@example([[[[[[[]]]]]], {}])
@example('"}}}"')
def test_the_depth_of_a_json_text_is_its_values_nesting(value):
    """The one depth count (files, bodies, model replies) gives the depth a walk of the parsed
    value gives, whatever brackets, quotes and escapes its strings hold."""
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False, indent=1)):
        assert json_depth(text) == _walked(value)


def test_a_stray_quote_in_invalid_json_counts_as_no_bracket():
    """Invalid JSON with unmatched quotes nests as deep as its brackets, so a malformed model
    reply is named as not JSON, never as nested too deep."""
    from ctxmgmt._reply import ReplyError, parse

    text = '"' + '\\"' * 100
    assert json_depth(text) == 0 and json_depth('["x"" ]') == 1
    with pytest.raises(ReplyError, match="is not JSON"):
        parse(text, "/reply")


def test_a_lone_surrogate_is_found_in_python_values_and_its_pointer_can_be_written():
    """The finder looks in document order (the first of two surrogates), walks tuples and
    mappings and each shared or self-holding value once (a bounded walk), and writes a key's own
    lone surrogate in a pointer as its escape."""
    from ctxmgmt.loader import _SURROGATE, _find, escape, lone_surrogate

    loop: list = []
    loop.append(loop)
    shared: list = ["a"]
    for _ in range(60):  # 2**60 paths through 60 values
        shared = [shared, shared]
    looked = 0

    def bad(value, depth):
        nonlocal looked
        looked += 1
        assert looked < 10_000, "the walk does not end"
        return isinstance(value, str) and _SURROGATE.search(value) is not None

    data = {"a": [loop, shared], "b": ("ok", {"k": "x\ud800"}), "c": "y\ud800"}
    assert _find(data, bad) == "/b/1/k"
    assert lone_surrogate(data) == "/b/1/k"
    assert lone_surrogate({"a": loop, "b": ("ok",)}) is None
    assert lone_surrogate({"a": {"k\udc00y": 1}}) == "/a"  # the key itself
    assert escape("k\udc00y/z") == "k\\udc00y~1z"
