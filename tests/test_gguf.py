"""GGUF vocabularies: exact counts that equal the llama.cpp server's, and a Model built
from the file's metadata whose chat counts equal the server's ``usage.prompt_tokens``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_server import LlamaServer, smollm2_path

from tokenflex.counting import get_counter
from tokenflex.errors import ConfigError, TokenizerUnavailableError
from tokenflex.models.gguf import model_from_gguf
from tokenflex.tokenizers import get_tokenizer
from tokenflex.tokenizers.gguf import GGUFTokenizer

GGUF = smollm2_path()


@pytest.fixture(scope="module")
def tok() -> Iterator[GGUFTokenizer]:
    t = GGUFTokenizer(GGUF)
    yield t
    t.close()


TEXTS = [
    "",
    "Hello world",
    "  leading and trailing spaces  ",
    "héllo wörld — ünïcödé",
    "日本語のテキストと中文",
    "emoji 🎉🚀 and ZWJ 👩‍👩‍👧",
    "code: def f(x):\n    return x ** 2  # comment\n",
    '{"json": [1, 2.5, null, true], "nested": {"k": "v"}}',
    "numbers 1234567890 3.14159 -42",
    "tabs\tand\r\nnewlines\n\n\n",
    "<|im_start|>user\nspecial tokens<|im_end|>",
    "x" * 3000,
]


# -- the vocabulary -------------------------------------------------------------------------


def test_loads_vocabulary_and_metadata(tok: GGUFTokenizer) -> None:
    assert tok.vocab_size == 49152
    assert (tok.bos_token, tok.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert tok.add_bos is False
    assert tok.context_length == 8192
    assert tok.chat_template is not None and "<|im_start|>" in tok.chat_template
    assert tok.metadata["general.architecture"] == "llama"
    assert tok.exact is True and tok.name == f"gguf:{GGUF}"


def test_counts_and_special_tokens(tok: GGUFTokenizer) -> None:
    assert tok.encode("Hello world") == [19556, 905]
    assert tok.count("Hello world") == 2
    assert tok.count("") == 0
    # special-token strings are the special tokens, as servers tokenize a prompt
    assert tok.encode("<|im_start|>") == [1]
    assert len(tok.encode("<|im_start|>", special=False)) > 1
    assert tok.encode("Hi", add_bos=True) == tok.encode("Hi")  # SmolLM2 adds no BOS


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_decode_round_trip(tok: GGUFTokenizer, text: str) -> None:
    assert tok.decode(tok.encode(text)) == text
    assert tok.count(text) == len(tok.encode(text))


@given(
    st.text(
        # SmolLM2's byte-level vocabulary lacks tokens for some bytes (most C0 controls,
        # the UTF-8 lead byte 0xF1 of planes 4+): llama.cpp drops them, the server too
        # (the count-parity property below covers every character).
        alphabet=st.characters(
            exclude_categories=("Cs", "Cc"), max_codepoint=0x3FFFF, include_characters="\n\t"
        ),
        max_size=300,
    )
)
@settings(max_examples=200, deadline=None)
def test_round_trip_property(text: str) -> None:
    t = get_tokenizer(f"gguf:{GGUF}").tokenizer
    assert isinstance(t, GGUFTokenizer)
    assert t.decode(t.encode(text, special=False)) == text


def test_registry_scheme() -> None:
    cache = get_tokenizer(f"gguf:{GGUF}")
    assert cache.exact and cache.name == f"gguf:{GGUF}"
    assert cache.count("Hello world") == 2
    assert get_tokenizer(f"gguf:{GGUF}") is cache


def test_load_is_fast_and_quiet(capfd: pytest.CaptureFixture[str]) -> None:
    import time

    t0 = time.perf_counter()
    t = GGUFTokenizer(GGUF)
    elapsed = time.perf_counter() - t0
    t.close()
    t.close()  # idempotent
    with pytest.raises(TokenizerUnavailableError, match="closed"):
        t.count("x")
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    assert elapsed < 2.0


@pytest.mark.parametrize(
    ("make", "match"),
    [
        pytest.param(lambda p: p / "missing.gguf", "does not exist", id="missing"),
        pytest.param(
            lambda p: (p / "bad.gguf").write_bytes(b"GGUF" + b"\0" * 64) and p / "bad.gguf",
            "could not read",
            id="corrupt",
        ),
        pytest.param(
            lambda p: (p / "text.gguf").write_text("hello") and p / "text.gguf",
            "could not read",
            id="not-gguf",
        ),
    ],
)
def test_bad_files(tmp_path: Path, make: Any, match: str) -> None:
    with pytest.raises(TokenizerUnavailableError, match=match):
        GGUFTokenizer(make(tmp_path))


def test_missing_llama_cpp_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(TokenizerUnavailableError, match=r"pip install 'tokenflex\[gguf\]'"):
        GGUFTokenizer(GGUF)


# -- the model from the file ------------------------------------------------------------------


def test_model_from_gguf() -> None:
    m = model_from_gguf(GGUF)
    assert m.name == "SmolLM2-135M-Instruct.Q4_1"
    assert m.context_window == 8192  # the training window, by default
    assert m.tokenizer == f"gguf:{GGUF}"
    assert m.chat_format == "template" and m.chat_template is not None
    assert (m.bos_token, m.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert m.source == "gguf" and m.max_output_tokens is None
    m = model_from_gguf(GGUF, name="smollm2", context_window=2048, max_output_tokens=512)
    assert (m.name, m.context_window, m.max_output_tokens) == ("smollm2", 2048, 512)


def test_model_from_gguf_counts_offline() -> None:
    counter = get_counter(model_from_gguf(GGUF, context_window=2048))
    assert counter.exact
    # the same 27 the server reports for this conversation (tests/test_llama_server.py)
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi there, what is 2+2?"},
    ]
    assert counter.count_rendered(msgs) == 27


def test_model_without_window_needs_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(GGUFTokenizer, "context_length", property(lambda self: None))
    with pytest.raises(ConfigError, match="context_window="):
        model_from_gguf(GGUF)
    assert model_from_gguf(GGUF, context_window=1024).context_window == 1024


# -- against the real server ------------------------------------------------------------------

CONVERSATIONS = [
    pytest.param([{"role": "user", "content": "Hello"}], id="one-user"),
    pytest.param(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi there, what is 2+2?"},
        ],
        id="system-user",
    ),
    pytest.param(
        [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Name three colors."},
            {"role": "assistant", "content": "Red, green, blue."},
            {"role": "user", "content": "And héllo 日本語 — more?"},
        ],
        id="multi-turn-unicode",
    ),
    pytest.param(
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c\n\nd  "},
        ],
        id="whitespace",
    ),
    pytest.param(
        [
            {"role": "user", "content": "Write JSON."},
            {"role": "assistant", "content": '{"k": [1, 2, 3], "s": "x"}'},
            {"role": "user", "content": "def f():\n    return 1\n\nNow in Rust?"},
        ],
        id="code-json",
    ),
    pytest.param(
        [
            {"role": "system", "content": "S"},
            {"role": "system", "content": "Previous conversation summary: they chose blue."},
            {"role": "user", "content": "And then?" + " more" * 200},
        ],
        id="summary-and-long",
    ),
]


def _prompt_tokens(server: LlamaServer, messages: list[dict[str, Any]]) -> int:
    r = httpx.post(
        f"{server.base_url}/chat/completions",
        json={"messages": messages, "max_tokens": 1, "temperature": 0},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    return int(r.json()["usage"]["prompt_tokens"])


@pytest.mark.server
@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_chat_counts_equal_the_servers_prompt_tokens(
    llama_server: LlamaServer, messages: list[dict[str, Any]]
) -> None:
    counter = get_counter(model_from_gguf(llama_server.model_path, context_window=2048))
    server = _prompt_tokens(llama_server, messages)
    assert counter.count_rendered(messages) == server
    # The additive count the solver uses is never below, and above only by the default
    # system prompt the template drops when the conversation has its own.
    additive = counter.count(messages)
    assert server <= additive <= server + 21
    if messages[0]["role"] != "system":
        assert additive == server


@pytest.mark.server
@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_counts_equal_the_servers_tokenize(
    llama_server: LlamaServer, tok: GGUFTokenizer, text: str
) -> None:
    r = httpx.post(f"{llama_server.root_url}/extras/tokenize", json={"input": text}, timeout=30)
    assert tok.encode(text) == r.json()["tokens"]


@pytest.mark.server
@given(text=st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=200))
@settings(max_examples=40, deadline=None)
def test_counts_equal_the_servers_tokenize_property(llama_server: LlamaServer, text: str) -> None:
    t = get_tokenizer(f"gguf:{llama_server.model_path}")
    r = httpx.post(
        f"{llama_server.root_url}/extras/tokenize/count", json={"input": text}, timeout=30
    )
    assert t.count(text) == r.json()["count"]
