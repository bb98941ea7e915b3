"""Exact Mistral counts through mistral-common (``mistral:NAME``, chat format ``mistral``).

The references are mistral-common's own objects, built here without tokenflex: its
tokenizers loaded from the files it ships, and ``encode_chat_completion`` over its own
message classes (not the OpenAI dicts tokenflex converts).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

mistral_common = pytest.importorskip("mistral_common")

from mistral_common.protocol.instruct.messages import (  # noqa: E402
    AssistantMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from mistral_common.protocol.instruct.request import ChatCompletionRequest  # noqa: E402
from mistral_common.protocol.instruct.tool_calls import (  # noqa: E402
    Function,
    FunctionCall,
    Tool,
    ToolCall,
)
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer  # noqa: E402

import tokenflex  # noqa: E402
from tokenflex.counting import get_counter  # noqa: E402
from tokenflex.errors import ConfigError, TokenizerUnavailableError  # noqa: E402
from tokenflex.models import Model, reset_registry  # noqa: E402
from tokenflex.tokenizers import get_tokenizer, tokenizer_available  # noqa: E402

DATA = Path(mistral_common.__file__).parent / "data"
FILES = {
    "tekken": "tekken_240911.json",
    "tekken-240718": "tekken_240718.json",
    "v7": "mistral_instruct_tokenizer_241114.model.v7",
    "v3": "mistral_instruct_tokenizer_240323.model.v3",
    "v2": "mistral_instruct_tokenizer_240216.model.v2",
    "v1": "tokenizer.model.v1",
}
_REFERENCES: dict[str, Any] = {}


def reference(name: str) -> Any:
    if name not in _REFERENCES:
        _REFERENCES[name] = MistralTokenizer.from_file(str(DATA / FILES[name]))
    return _REFERENCES[name]


def reference_count(name: str, text: str) -> int:
    raw = reference(name).instruct_tokenizer.tokenizer
    return len(raw.encode(text, bos=False, eos=False)) if text else 0


# Text that stresses tokenizers: non-ASCII scripts, emoji (with ZWJ and variation
# selectors), whitespace runs, code punctuation, and special-token look-alikes.
ALPHABET = st.sampled_from(
    [*"aZ09 \t\n\r.,;:{}[]()\"'\\/<>_-+*#@", "é", "ß", "ж", "中", "文", "日本", "한",
     "ع", "ह", "🙂", "👍🏽", "👨‍👩‍👧", "❤️", "\u200b", "\u00a0", "  ", "\n\n", "    ",
     "[INST]", "</s>", "<s>", "[/INST]", "▁"]
)  # fmt: skip
TEXT = st.lists(ALPHABET, max_size=60).map("".join) | st.text(max_size=80)


@pytest.mark.parametrize("name", ["tekken", "v3"])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXT)
def test_text_counts_equal_mistral_common(name: str, text: str) -> None:
    assert get_tokenizer(f"mistral:{name}").count(text) == reference_count(name, text)


@pytest.mark.parametrize("name", ["tekken-240718", "v7", "v2", "v1"])
def test_every_named_tokenizer_loads_and_counts(name: str) -> None:
    text = "Grüße, 世界! 🙂\n\n    def f(x): return x  # [INST]"
    tok = get_tokenizer(f"mistral:{name}")
    assert tok.exact and tok.count(text) == reference_count(name, text) > 0


def test_a_path_names_a_tokenizer_file() -> None:
    tok = get_tokenizer(f"mistral:{DATA / FILES['v3']}")
    assert tok.count("Hello, world!") == reference_count("v3", "Hello, world!")


def test_an_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(TokenizerUnavailableError, match=r"tekken, tekken-240718, v7, v3"):
        get_tokenizer("mistral:no-such-tokenizer")


def test_a_file_that_is_no_tokenizer_says_so(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{}")
    with pytest.raises(TokenizerUnavailableError, match="cannot load"):
        get_tokenizer(f"mistral:{bad}")


# -- conversations --------------------------------------------------------------------

WORDS = st.lists(ALPHABET, min_size=1, max_size=25).map("".join)
ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
IDS = st.text(alphabet=ALNUM, min_size=9, max_size=9)  # mistral-common's tool call ids
ARGS = st.dictionaries(
    st.sampled_from(["city", "q", "n", "ключ"]), WORDS | st.integers(), max_size=3
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "City name"}},
                "required": ["city"],
            },
        },
    }
]


@st.composite
def conversations(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[Any], bool]:
    """An OpenAI-style conversation, the same conversation as mistral-common messages,
    and whether it uses tools. System first (maybe), then turns; it ends on a user or
    tool message, as mistral-common requires."""
    oai: list[dict[str, Any]] = []
    ref: list[Any] = []
    if draw(st.booleans()):
        text = draw(WORDS)
        oai.append({"role": "system", "content": text})
        ref.append(SystemMessage(content=text))
    with_tools = draw(st.booleans())
    turns = draw(st.integers(1, 4))
    for turn in range(turns):
        text = draw(WORDS)
        oai.append({"role": "user", "content": text})
        ref.append(UserMessage(content=text))
        last = turn == turns - 1 or draw(st.booleans())
        if with_tools and draw(st.booleans()):
            call_id, args = draw(IDS), draw(ARGS)
            arguments = json.dumps(args, ensure_ascii=False)
            oai.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": arguments},
                        }
                    ],
                }
            )
            ref.append(
                AssistantMessage(
                    tool_calls=[
                        ToolCall(
                            id=call_id, function=FunctionCall(name="get_weather", arguments=args)
                        )
                    ]
                )
            )
            result = draw(WORDS)
            oai.append({"role": "tool", "tool_call_id": call_id, "content": result})
            ref.append(ToolMessage(content=result, tool_call_id=call_id))
            if last:
                break
        elif last:
            break
        else:
            text = draw(WORDS)
            oai.append({"role": "assistant", "content": text})
            ref.append(AssistantMessage(content=text))
    return oai, ref, with_tools


def reference_chat(name: str, messages: list[Any], with_tools: bool) -> int:
    tools = None
    if with_tools:
        fn = TOOLS[0]["function"]
        tools = [Tool(function=Function(**fn))]
    request = ChatCompletionRequest(messages=messages, tools=tools)
    return len(reference(name).encode_chat_completion(request).tokens)


@pytest.mark.parametrize("name", ["tekken", "v3", "v7"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=conversations())
def test_conversation_counts_equal_encode_chat_completion(
    name: str, case: tuple[list[dict[str, Any]], list[Any], bool]
) -> None:
    messages, ref, with_tools = case
    counter = get_counter(Model("m", 128_000, tokenizer=f"mistral:{name}", chat_format="mistral"))
    tools = TOOLS if with_tools else None
    exact = reference_chat(name, ref, with_tools)
    assert counter.count_rendered(messages, tools) == exact
    # the additive count the solver works with never undercounts, for any subset it keeps
    assert counter.count(messages, tools) >= exact
    assert counter.base(tools) + sum(counter.message(m) for m in messages) >= exact


def test_nemo_system_prompt_moves_into_the_last_user_turn() -> None:
    """The case the generic template counter undercounts: Nemo's system prompt goes into
    the last user turn, joined by a blank line."""
    messages = [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Bonjour"},
        {"role": "user", "content": "How are you?"},
    ]
    ref = [
        SystemMessage(content="Answer in French."),
        UserMessage(content="Hi"),
        AssistantMessage(content="Bonjour"),
        UserMessage(content="How are you?"),
    ]
    counter = get_counter("mistral-nemo")
    exact = reference_chat("tekken", ref, False)
    assert counter.count_rendered(messages) == exact
    assert exact <= counter.count(messages) <= exact + 2


def test_a_joined_system_prompt_is_not_exact_in_a_plain_conversation() -> None:
    """Nemo's joined system prompt is charged a margin: a conversation of plain text
    messages that has one is not counted exactly, though each message is plain (the
    base counter's fast pass over plain messages must not answer for this one), and one
    without it is."""
    counter = get_counter("mistral-nemo")
    system = {"role": "system", "content": "Answer in French."}
    turns = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Bonjour"}]
    turns.append({"role": "user", "content": "How are you?"})
    assert counter.exact
    for messages in ([system, *turns], turns, [*turns, system]):
        expected = all(counter.message_exact(m) for m in messages)
        assert counter.exact_for(list(messages)) is expected
    assert not counter.exact_for([system, *turns]) and counter.exact_for(turns)


def test_rejected_conversation_falls_back_to_the_additive_count() -> None:
    counter = get_counter("mistral-nemo")
    ends_on_assistant = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
    assert counter.count_rendered(ends_on_assistant) == counter.count(ends_on_assistant)
    openai_ids = [
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_0", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "sunny"},
    ]
    # mistral-common refuses "call_0" (9 letters or digits): the generic rule counts them
    with_valid_ids = [
        openai_ids[0],
        {**openai_ids[1], "tool_calls": [{**openai_ids[1]["tool_calls"][0], "id": "abcdefghi"}]},
        {**openai_ids[2], "tool_call_id": "abcdefghi"},
    ]
    assert counter.count(openai_ids) >= counter.count_rendered(with_valid_ids)


def test_images_are_not_given_to_mistral_common() -> None:
    counter = get_counter("mistral-nemo")
    image = {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}}
    text = {"type": "text", "text": "What is this?"}
    with_image = [{"role": "user", "content": [text, image]}]
    without = [{"role": "user", "content": [text]}]
    extra = counter.count_rendered(with_image) - counter.count_rendered(without)
    assert extra > 0 and extra == counter.message(with_image[0]) - counter.message(without[0])


def test_mistral_format_needs_a_mistral_tokenizer() -> None:
    with pytest.raises(ConfigError, match="needs a mistral: tokenizer"):
        get_counter(Model("m", 8192, tokenizer="o200k_base", chat_format="mistral"))


# -- the registry ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "tokenizer"),
    [
        pytest.param("mistral:7b", "mistral:v3", id="mistral-7b"),
        pytest.param("mistral:7b-instruct-v0.3-q4_K_M", "mistral:v3", id="mistral-7b-tag"),
        pytest.param("mixtral:8x7b", "mistral:v1", id="mixtral"),
        pytest.param("mistral-nemo", "mistral:tekken", id="nemo"),
        pytest.param("mistral-small", "mistral:tekken", id="small"),
        pytest.param("mistral-small3.2", "mistral:tekken", id="small-3.2"),
        pytest.param("mistralai/Mistral-Small-24B-Instruct-2501", "mistral:tekken", id="small-24b"),
    ],
)
def test_registry_counts_exactly_when_installed(model: str, tokenizer: str) -> None:
    counter = get_counter(model)
    assert counter.exact and counter.tokenizer.name == tokenizer
    assert counter.model.chat_format == "mistral"
    text = "Ünïcödé 🙂 and code: {x: [1, 2]}"
    name = tokenizer.partition(":")[2]
    assert tokenflex.count_tokens(text, model=model) == reference_count(name, text)


@pytest.mark.parametrize(
    ("model", "estimate"),
    [
        pytest.param("mistral:7b", "estimate:mistral-spm", id="mistral-7b"),
        pytest.param("mistral-nemo", "estimate:tekken", id="nemo"),
        pytest.param("mistral-small", "estimate:tekken", id="small"),
    ],
)
def test_registry_falls_back_to_the_estimate_without_the_extra(
    monkeypatch: pytest.MonkeyPatch, model: str, estimate: str
) -> None:
    get_counter(model)  # loaded and cached while installed: must not hide the removal
    monkeypatch.setitem(sys.modules, "mistral_common", None)  # import now raises
    reset_registry()
    assert not tokenizer_available("mistral:tekken")
    counter = get_counter(model)
    assert not counter.exact and counter.tokenizer.name == estimate
    assert counter.model.chat_format == "generic"


def test_missing_extra_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "mistral_common", None)
    with pytest.raises(TokenizerUnavailableError) as info:
        get_tokenizer(f"mistral:{tmp_path / 'tekken.json'}")  # never loaded: not cached
    assert "pip install 'tokenflex[mistral]'" in str(info.value)
    assert isinstance(info.value, tokenflex.TokenflexError)


def test_models_without_a_known_tokenizer_keep_their_bound() -> None:
    for name in ("mistral-large", "mistral-medium", "codestral"):
        counter = get_counter(name)
        assert not counter.exact and counter.tokenizer.name == "estimate:all"


def test_lone_surrogates_are_counted_not_raised() -> None:
    # SentencePiece raises a pybind RuntimeError on them (found by tests/test_fuzz.py)
    tok = get_tokenizer("mistral:v3")
    assert tok.count("a\ud800b") == tok.count("a\ufffdb")
