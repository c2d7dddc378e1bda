"""o200k_base built offline from the quicktok-v1 wheel, verified by tiktoken's own sha256."""

import logging

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ctxmgmt import Context, get_counter, load_definition
from ctxmgmt._o200k import load_o200k, vocab_path
from ctxmgmt.tokens import _resolve


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-5", "o3", "o4-mini"])
def test_o200k_models_are_counted_exactly_offline(monkeypatch, tmp_path, model):
    """With an empty tiktoken cache, the o200k models get the real o200k_base, exact."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    tokenizer, encoding = _resolve("auto", model)
    assert (tokenizer.name, tokenizer.source, tokenizer.exact, str(tokenizer)) == (
        "o200k_base",
        "quicktok-v1",
        True,
        "o200k_base",
    )
    assert encoding.encode_ordinary("Hello world") == [13225, 2375]


def test_the_trace_says_the_count_is_exact():
    """Every trace entry names the tokenizer, without "(estimate)" for gpt-4o."""
    definition = load_definition({"name": "t", "hooks": {"pre_llm": [{"type": "SlidingWindowManager"}]}})
    result = definition.apply(
        "pre_llm", Context(messages=[{"role": "user", "content": "hi"}], model="gpt-4o")
    )
    assert result.trace[0]["tokenizer"] == "o200k_base"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=400))
@example("  leading spaces\r\n\r\nand CRLF's, it'll do 12345 numbers  ")
@example("日本語のテキストと emoji 🎉 and العربية")
def test_counts_match_quicktoks_own_encoder(text):
    """Our o200k_base counts what quicktok's independent o200k encoder counts, token for token."""
    import quicktok

    ours = get_counter("gpt-4o")._encoding.encode_ordinary(text)
    assert ours == list(quicktok.get_encoding("o200k_base").encode(text))


def test_a_vocab_that_fails_the_hash_is_never_used(tmp_path, caplog):
    """One changed byte in the ranks file: the encoding is refused with a warning."""
    source = vocab_path()
    assert source is not None
    data = bytearray(source.read_bytes())
    data[10] ^= 0x01  # inside the first token's bytes
    tampered = tmp_path / "o200k.vocab"
    tampered.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="ctxmgmt.tokens"):
        assert load_o200k(tampered) is None
    assert "fails tiktoken's sha256" in caplog.text


@pytest.mark.parametrize(
    "content", [b"", b"\x01\x00", b"\xff\xff\xff\xff\x05\x00abc", b"\x01\x00\x00\x00\x03\x00ab"]
)
def test_a_malformed_vocab_is_refused_not_a_crash(tmp_path, content):
    """A truncated or lying file is refused (None), never an exception or a partial encoding."""
    path = tmp_path / "o200k.vocab"
    path.write_bytes(content)
    assert load_o200k(path) is None
