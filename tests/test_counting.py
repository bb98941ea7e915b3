"""Message counting: the OpenAI cookbook rows, tools, images, bad input, templates, cache."""

from __future__ import annotations

import base64
import functools
import json
import math
import struct
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _cookbook import COOKBOOK_MESSAGES, COOKBOOK_TOOL_MESSAGES, COOKBOOK_TOOLS
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tokenflex.counting import MessageCounter, count_messages, count_tokens, get_counter
from tokenflex.counting.images import image_size, image_tokens
from tokenflex.counting.messages import (
    GENERIC_BASE,
    GENERIC_BASE_BY_FAMILY,
    GENERIC_TOKENS_PER_MESSAGE,
    TOOL_CALL_OVERHEAD,
    TOOL_RESULT_OVERHEAD,
    shared_prefix,
)
from tokenflex.counting.tools import GENERIC_TOOLS_PREAMBLE
from tokenflex.errors import ConfigError, InvalidInputError, InvalidMessagesError
from tokenflex.models import Model, get_model, register_model
from tokenflex.tokenizers import get_tokenizer
from tokenflex.tokenizers._tiktoken import TiktokenTokenizer, load_encoding, token_buffer


def reference_count(
    messages: list[dict[str, str]], encoding: str, per_msg: int, per_name: int
) -> int:
    """The cookbook's num_tokens_from_messages, written out plainly (the slow reference)."""
    enc = load_encoding(encoding)
    total = 0
    for message in messages:
        total += per_msg
        for key, value in message.items():
            total += len(enc.encode(value))
            if key == "name":
                total += per_name
    return total + 3


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        # The numbers the cookbook prints, which it checked against the API's usage.
        pytest.param("gpt-3.5-turbo", 129, id="gpt-3.5-turbo"),
        pytest.param("gpt-4-0613", 129, id="gpt-4-0613"),
        pytest.param("gpt-4", 129, id="gpt-4"),
        pytest.param("gpt-4o", 124, id="gpt-4o"),
        pytest.param("gpt-4o-mini", 124, id="gpt-4o-mini"),
        pytest.param("gpt-4o-2024-08-06", 124, id="gpt-4o-2024-08-06"),
        pytest.param("gpt-3.5-turbo-0301", 127, id="gpt-3.5-turbo-0301"),
    ],
)
def test_cookbook_example_conversation(model: str, expected: int) -> None:
    assert count_messages(COOKBOOK_MESSAGES, model=model) == expected


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        pytest.param("gpt-3.5-turbo", 105, id="gpt-3.5-turbo"),
        pytest.param("gpt-4", 105, id="gpt-4"),
        pytest.param("gpt-4o", 101, id="gpt-4o"),
        pytest.param("gpt-4o-mini", 101, id="gpt-4o-mini"),
    ],
)
def test_cookbook_tools_example(model: str, expected: int) -> None:
    assert count_messages(COOKBOOK_TOOL_MESSAGES, model=model, tools=COOKBOOK_TOOLS) == expected


def test_legacy_functions_list_counts_like_tools() -> None:
    functions = [COOKBOOK_TOOLS[0]["function"]]
    counter = get_counter("gpt-4o")
    assert counter.tools(functions) == counter.tools(COOKBOOK_TOOLS)


def test_nested_schema_parts_add_tokens() -> None:
    nested = json.loads(json.dumps(COOKBOOK_TOOLS))
    nested[0]["function"]["parameters"]["properties"]["options"] = {
        "type": "object",
        "description": "Extra options.",
        "properties": {"days": {"type": "integer"}},
    }
    counter = get_counter("gpt-4o")
    assert counter.tools(nested) > counter.tools(COOKBOOK_TOOLS) + 5


text_st = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=80)
message_st = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant"]), "content": text_st},
    optional={"name": st.from_regex(r"[a-z_]{1,12}", fullmatch=True)},
)


@settings(max_examples=60, deadline=None)
@given(messages=st.lists(message_st, max_size=6))
def test_matches_the_cookbook_reference(messages: list[dict[str, str]]) -> None:
    assert count_messages(messages, model="gpt-4o") == reference_count(messages, "o200k_base", 3, 1)
    assert count_messages(messages, model="gpt-4") == reference_count(messages, "cl100k_base", 3, 1)
    assert count_messages(messages, model="gpt-3.5-turbo-0301") == reference_count(
        messages, "cl100k_base", 4, -1
    )


@settings(max_examples=60, deadline=None)
@given(
    messages=st.lists(message_st, max_size=6),
    model=st.sampled_from(["gpt-4o", "gpt-4", "llama3.2:3b", "claude-3-5-sonnet"]),
)
def test_count_is_base_plus_sum_of_messages(messages: list[dict[str, Any]], model: str) -> None:
    counter = get_counter(model)
    total = counter.count(messages, COOKBOOK_TOOLS)
    assert total == counter.base(COOKBOOK_TOOLS) + sum(counter.message(m) for m in messages)
    assert counter.count(messages) == counter.base() + sum(counter.message(m) for m in messages)


def test_tool_calls_and_tool_results() -> None:
    counter = get_counter("gpt-4o")
    tok = counter.tokenizer.count
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_abc123",
                "type": "function",
                "function": {"name": "get_current_weather", "arguments": '{"location": "Paris"}'},
            }
        ],
    }
    expected = 3 + tok("assistant") + TOOL_CALL_OVERHEAD
    expected += tok("get_current_weather") + tok('{"location": "Paris"}') + tok("call_abc123")
    assert counter.message(call) == expected
    result = {"role": "tool", "tool_call_id": "call_abc123", "content": '{"temp": 21}'}
    expected = 3 + tok("tool") + tok("call_abc123") + tok('{"temp": 21}') + TOOL_RESULT_OVERHEAD
    assert counter.message(result) == expected
    # Two calls cost more than one; dict arguments are counted as their JSON.
    two = dict(call, tool_calls=[*call["tool_calls"], call["tool_calls"][0]])
    assert counter.message(two) > counter.message(call)
    as_dict = json.loads(json.dumps(call))
    as_dict["tool_calls"][0]["function"]["arguments"] = {"location": "Paris"}
    assert counter.message(as_dict) >= counter.message(call) - 2


def test_legacy_function_call_and_function_result() -> None:
    counter = get_counter("gpt-4")
    msg = {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}}
    assert counter.message(msg) == 3 + 1 + TOOL_CALL_OVERHEAD + 1 + 1
    result = {"role": "function", "name": "f", "content": "ok"}
    assert counter.message(result) == 3 + 1 + 1 + 1 + 1 + TOOL_RESULT_OVERHEAD


def test_sdk_style_fields_with_none_or_empty_values_are_ignored() -> None:
    counter = get_counter("gpt-4o")
    plain = {"role": "assistant", "content": "Hi"}
    dumped = {**plain, "refusal": None, "audio": None, "annotations": [], "tool_calls": None}
    assert counter.message(dumped) == counter.message(plain)


# Images ------------------------------------------------------------------------------------


def png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (
        b"\x89PNG\r\n\x1a\n"
        + struct.pack(">I", len(ihdr))
        + chunk
        + struct.pack(">I", zlib.crc32(chunk))
    )


def jpeg(width: int, height: int, exif_bytes: int = 0) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    app1 = b"\xff\xe1" + struct.pack(">H", 2 + exif_bytes) + b"\x00" * exif_bytes
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + (app1 if exif_bytes else b"") + sof + b"\xff\xd9"


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00\x00\x00;"


def webp_vp8x(width: int, height: int) -> bytes:
    payload = (
        b"\x00\x00\x00\x00" + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    )
    return (
        b"RIFF"
        + struct.pack("<I", 4 + 8 + len(payload))
        + b"WEBPVP8X"
        + struct.pack("<I", 10)
        + payload
    )


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


@pytest.mark.parametrize(
    ("data", "mime", "size"),
    [
        pytest.param(png(1024, 768), "image/png", (1024, 768), id="png"),
        pytest.param(jpeg(640, 480), "image/jpeg", (640, 480), id="jpeg"),
        pytest.param(
            jpeg(4000, 3000, exif_bytes=60000), "image/jpeg", (4000, 3000), id="jpeg-exif"
        ),
        pytest.param(gif(320, 200), "image/gif", (320, 200), id="gif"),
        pytest.param(webp_vp8x(2000, 1000), "image/webp", (2000, 1000), id="webp"),
    ],
)
def test_image_size_from_data_url_header(data: bytes, mime: str, size: tuple[int, int]) -> None:
    assert image_size(data_url(data, mime)) == size


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/cat.png",
        "data:image/png;base64,!!!notbase64",
        "data:image/png,rawbytes",
        data_url(b"not an image at all"),
    ],
)
def test_image_size_unknown(url: str) -> None:
    assert image_size(url) is None


@pytest.mark.parametrize(
    ("model", "size", "detail", "expected"),
    [
        # OpenAI's worked examples (vision guide, "Calculating costs").
        pytest.param("gpt-4o", (1024, 1024), "high", 765, id="4o-1024-high"),
        pytest.param("gpt-4o", (2048, 4096), "high", 1105, id="4o-2048x4096-high"),
        pytest.param("gpt-4o", (4096, 8192), "low", 85, id="4o-low"),
        pytest.param("gpt-4o", (500, 500), "auto", 255, id="4o-small-not-upscaled"),
        pytest.param("gpt-4o", None, "high", 85 + 8 * 170, id="4o-remote-worst-case"),
        pytest.param("gpt-4o-mini", (1024, 1024), "low", 2833, id="mini-low"),
        pytest.param("gpt-4o-mini", (1024, 1024), "high", 2833 + 4 * 5667, id="mini-high"),
        pytest.param("gpt-5", (1024, 1024), "high", 70 + 4 * 140, id="gpt-5"),
        pytest.param("o1", (1024, 1024), "high", 75 + 4 * 150, id="o1"),
        pytest.param("gpt-4.1-mini", (1024, 1024), "high", 1659, id="4.1-mini-patches"),
        pytest.param("gpt-4.1-mini", None, "low", 2489, id="4.1-mini-worst"),
        pytest.param("claude-3-5-sonnet", (1000, 1000), "auto", 1334, id="claude"),
        # published unresized sizes go up to 784x1568: 1,640 tokens at most
        pytest.param("claude-3-5-sonnet", (1092, 1092), "auto", 1590, id="claude-1092"),
        pytest.param("claude-3-5-sonnet", None, "auto", 1640, id="claude-worst"),
        pytest.param("claude-3-5-sonnet", (4000, 3000), "auto", 1640, id="claude-scaled"),
        pytest.param("claude-3-5-sonnet", (2000, 400), "auto", 657, id="claude-long-edge"),
        pytest.param("gemini-2.5-flash", (300, 300), "auto", 258, id="gemini-small"),
        pytest.param("gemini-2.5-flash", (1000, 800), "auto", 258 * 4, id="gemini-tiles"),
        pytest.param("llama3.2:3b", None, "auto", 16384, id="generic-worst"),
    ],
)
def test_image_tokens(model: str, size: tuple[int, int] | None, detail: str, expected: int) -> None:
    assert image_tokens(get_model(model), size, detail) == expected


def test_patch_budget_example() -> None:
    # OpenAI's example: 1800x2400 -> 1452 patches after scaling, times the model's multiplier.
    assert image_tokens(get_model("gpt-4.1-mini"), (1800, 2400)) == math.ceil(1452 * 1.62)


def test_images_in_messages() -> None:
    counter = get_counter("gpt-4o")
    text = {"type": "text", "text": "What is in this image?"}
    image = {"type": "image_url", "image_url": {"url": data_url(png(1024, 1024)), "detail": "high"}}
    msg = {"role": "user", "content": [text, image]}
    expected = 3 + counter.tokenizer.count("user") + counter.tokenizer.count(text["text"]) + 765
    assert counter.message(msg) == expected
    low = {"type": "image_url", "image_url": {"url": "https://example.com/x.png", "detail": "low"}}
    assert counter.message({"role": "user", "content": [low]}) == 3 + 1 + 85
    bare = {"type": "image_url", "image_url": "https://example.com/x.png"}
    assert counter.message({"role": "user", "content": [bare]}) == 3 + 1 + 85 + 8 * 170


# Bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        pytest.param({"role": "user", "content": "hi"}, "must be a list", id="dict-not-list"),
        pytest.param("hello", "must be a list", id="str-not-list"),
        pytest.param(
            [{"role": "user", "content": "a"}, "b"], r"messages\[1\] is a str", id="not-dict"
        ),
        pytest.param([{"content": "a"}], r"messages\[0\] has no 'role'", id="no-role"),
        pytest.param(
            [{"role": "bot", "content": "a"}], "has role 'bot'. Use one of", id="bad-role"
        ),
        pytest.param([{"role": 1, "content": "a"}], "has role 1", id="role-not-str"),
        pytest.param([{"role": "user", "content": None}], "content None", id="none-content"),
        pytest.param([{"role": "user"}], "has no 'content'", id="missing-content"),
        pytest.param([{"role": "assistant", "content": None}], "content None", id="none-no-tools"),
        pytest.param([{"role": "user", "content": 42}], "content of type int", id="int-content"),
        pytest.param(
            [{"role": "user", "content": ["x"]}], r"content\[0\] of type str", id="bad-part"
        ),
        pytest.param(
            [{"role": "user", "content": [{"type": "input_audio"}]}], "'input_audio'", id="audio"
        ),
        pytest.param(
            [{"role": "user", "content": [{"type": "text", "text": 3}]}],
            "string 'text'",
            id="text-int",
        ),
        pytest.param(
            [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
            "without a URL",
            id="image-no-url",
        ),
        pytest.param(
            [{"role": "assistant", "content": None, "tool_calls": "x"}],
            "tool_calls",
            id="calls-str",
        ),
    ],
)
def test_bad_messages(messages: Any, match: str) -> None:
    with pytest.raises(InvalidMessagesError, match=match):
        count_messages(messages, model="gpt-4o")


def test_bad_message_alone_names_no_index() -> None:
    with pytest.raises(InvalidMessagesError, match=r"^message has role 'bot'"):
        get_counter("gpt-4o").message({"role": "bot", "content": "x"})


def test_bad_tools_and_text() -> None:
    msgs = [{"role": "user", "content": "x"}]
    with pytest.raises(InvalidInputError, match="tools must be a list"):
        count_messages(msgs, model="gpt-4o", tools={"type": "function"})  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"tools\[0\] is a str"):
        count_messages(msgs, model="gpt-4o", tools=["x"])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match="no function name"):
        count_messages(msgs, model="gpt-4o", tools=[{"type": "function", "function": {}}])
    with pytest.raises(InvalidInputError, match="as a str"):
        count_tokens(b"bytes", model="gpt-4o")  # type: ignore[arg-type]


def test_assistant_with_tool_calls_may_have_no_content() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    assert count_messages([{"role": "assistant", "tool_calls": [call]}], model="gpt-4o") > 0


# Generic format, text, counters ------------------------------------------------------------


def test_generic_format_is_conservative_envelope() -> None:
    counter = get_counter("llama3.2:3b")
    assert not counter.exact
    tok = counter.tokenizer.count
    msgs = [{"role": "user", "content": "Hello there"}]
    assert counter.count(msgs) == GENERIC_BASE + GENERIC_TOKENS_PER_MESSAGE + tok("user") + tok(
        "Hello there"
    )
    assert get_counter("gpt-oss-20b").base() == GENERIC_BASE_BY_FAMILY["gpt-oss"]
    assert counter.tools(COOKBOOK_TOOLS) > GENERIC_TOOLS_PREAMBLE


def test_count_tokens_uses_the_model_tokenizer() -> None:
    # The cookbook: "tiktoken is great!" is 6 tokens in cl100k_base.
    assert count_tokens("tiktoken is great!", model="gpt-4") == 6
    assert count_tokens("お誕生日おめでとう", model="gpt-4o") == 8
    assert count_tokens("お誕生日おめでとう", model="gpt-4") == 9


_SPECIALS = ["<|endoftext|>", "<|endofprompt|>", "<|fim_prefix|>", "<|im_start|>", "<|"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=30), st.sampled_from(_SPECIALS)), max_size=6))
def test_counts_treat_special_token_text_as_ordinary_text(parts: list[str]) -> None:
    # What the API does with message content; count() uses encode_ordinary for speed and
    # must agree with encode(disallowed_special=()) token for token.
    text = "".join(parts)
    for name in ("o200k_base", "cl100k_base"):
        enc = load_encoding(name)
        assert TiktokenTokenizer(name).count(text) == len(enc.encode(text, disallowed_special=()))
    assert count_tokens("<|endoftext|>", model="gpt-4o") > 1


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(st.characters(exclude_categories=()), max_size=30),  # lone surrogates too
            st.sampled_from([*_SPECIALS, "\ud800", " " * 40, "\n\n\n"]),
        ),
        max_size=6,
    )
)
def test_a_count_is_the_length_of_encode_ordinary(parts: list[str]) -> None:
    # count() reads the length from tiktoken's token buffer where it can (no Python int
    # per token), and falls back to encode_ordinary (which repairs lone surrogates): the
    # same number as the public call, whatever the text
    text = "".join(parts)
    for name in ("o200k_base", "cl100k_base"):
        enc = load_encoding(name)
        tokenizer, plain = TiktokenTokenizer(name), TiktokenTokenizer(name)
        plain.buffer = None  # a tiktoken without the buffer: encode_ordinary
        assert tokenizer.buffer is not None
        assert tokenizer.count(text) == plain.count(text) == len(enc.encode_ordinary(text))


def test_a_token_buffer_that_miscounts_or_is_missing_is_not_used() -> None:
    enc = load_encoding("o200k_base")

    class Core:
        def __init__(self, extra: int) -> None:
            self.extra = extra

        def encode_to_tiktoken_buffer(self, text: str, special: frozenset[str]) -> bytes:
            return bytes(4 * (len(enc.encode_ordinary(text)) + self.extra))

    class Encoding:
        def __init__(self, core: object) -> None:
            self._core_bpe = core

        def encode_ordinary(self, text: str) -> list[int]:
            return list(enc.encode_ordinary(text))

    assert token_buffer(Encoding(Core(0))) is not None  # counts as encode_ordinary does
    assert token_buffer(Encoding(Core(1))) is None  # one token too many on the probe
    assert token_buffer(Encoding(object())) is None  # no such method
    assert token_buffer(object()) is None  # no core at all


def test_counters_are_cached_and_follow_registry_changes() -> None:
    first = get_counter("gpt-4o")
    assert get_counter("gpt-4o") is first
    assert first.exact and isinstance(first, MessageCounter)
    register_model(name="gpt-4o", context_window=1000, tokenizer="o200k_base", chat_format="openai")
    second = get_counter("gpt-4o")
    assert second is not first and second.model.context_window == 1000
    model = Model(name="adhoc", context_window=2048, tokenizer="cl100k_base", chat_format="openai")
    assert get_counter(model).model is model


def test_a_kept_message_is_never_re_tokenized() -> None:
    counter = get_counter("gpt-4o")
    msgs = [{"role": "user", "content": f"message number {i} " * 10} for i in range(50)]
    counter.count(msgs)
    misses = counter.tokenizer.misses
    hits = counter.tokenizer.hits
    counter.count([*msgs, {"role": "assistant", "content": "a brand new reply"}])
    assert counter.tokenizer.misses == misses + 1
    assert counter.tokenizer.hits >= hits + 50


# Chat templates ----------------------------------------------------------------------------

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
CHATML_DEFAULT_SYSTEM = (
    "{% if messages and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}" + CHATML
)
CHATML_TOOLS = (
    "{% if tools %}{{ '<|im_start|>system\\n# Tools\\n' }}"
    "{% for tool in tools %}{{ tool | tojson }}{{ '\\n' }}{% endfor %}"
    "{{ '<|im_end|>\\n' }}{% endif %}" + CHATML
)
ALTERNATING = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant') }}"
    "{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}"
)


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|im_start|>", "<|im_end|>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [
        "system user assistant tool Hello world, how are you?",
        "You are a helpful assistant.",
    ]
    tok.train_from_iterator(corpus * 20, trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return str(path)


def template_model(path: str, template: str, name: str = "tpl", **kw: Any) -> Model:
    return Model(
        name=name,
        context_window=4096,
        tokenizer=f"hf:{path}",
        chat_format="template",
        chat_template=template,
        **kw,
    )


CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello world, how are you?"},
    {"role": "assistant", "content": "Fine."},
    {"role": "user", "content": "And now?"},
]


def test_template_count_is_exact_for_plain_chatml(tokenizer_file: str) -> None:
    counter = get_counter(template_model(tokenizer_file, CHATML))
    assert counter.exact
    rendered = (
        "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in CONVERSATION)
        + "<|im_start|>assistant\n"
    )
    exact = counter.tokenizer.count(rendered)
    assert counter.count_rendered(CONVERSATION) == exact
    assert counter.count(CONVERSATION) == exact
    assert counter.base() == counter.tokenizer.count("<|im_start|>assistant\n")


def test_template_default_system_is_counted_once_in_base(tokenizer_file: str) -> None:
    counter = get_counter(template_model(tokenizer_file, CHATML_DEFAULT_SYSTEM, "tpl-default"))
    no_system = CONVERSATION[1:]
    # Without a system message the default is rendered: additive == exact.
    assert counter.count(no_system) == counter.count_rendered(no_system)
    # With one, the default is replaced: additive is an upper bound.
    assert counter.count(CONVERSATION) >= counter.count_rendered(CONVERSATION)


def test_template_tools_and_base(tokenizer_file: str) -> None:
    counter = get_counter(template_model(tokenizer_file, CHATML_TOOLS, "tpl-tools"))
    tools = counter.tools(COOKBOOK_TOOLS)
    assert tools > 20
    assert counter.base(COOKBOOK_TOOLS) == counter.base() + tools
    assert counter.count(CONVERSATION, COOKBOOK_TOOLS) == counter.count_rendered(
        CONVERSATION, COOKBOOK_TOOLS
    )


def test_template_that_renders_no_tools_counts_them_as_nothing(tokenizer_file: str) -> None:
    # ChatML without a tools block: a server rendering it sends the model no schema
    counter = get_counter(template_model(tokenizer_file, CHATML, "tpl-no-tools"))
    assert counter.tools(COOKBOOK_TOOLS) == 0
    assert counter.tools_exact(COOKBOOK_TOOLS)
    assert counter.count(CONVERSATION, COOKBOOK_TOOLS) == counter.count_rendered(
        CONVERSATION, COOKBOOK_TOOLS
    )
    assert counter.exact_for(CONVERSATION, COOKBOOK_TOOLS)


def test_template_that_fails_with_tools_estimates_them(tokenizer_file: str) -> None:
    failing = "{% if tools %}{{ raise_exception('no tools here') }}{% endif %}" + CHATML
    counter = get_counter(template_model(tokenizer_file, failing, "tpl-tools-fail"))
    generic = GENERIC_TOOLS_PREAMBLE + counter.tokenizer.count(json.dumps(COOKBOOK_TOOLS, indent=4))
    assert counter.tools(COOKBOOK_TOOLS) == generic
    assert not counter.tools_exact(COOKBOOK_TOOLS)
    assert not counter.exact_for(CONVERSATION, COOKBOOK_TOOLS)
    assert counter.exact_for(CONVERSATION)  # without tools nothing is estimated


def test_template_default_system_makes_a_system_message_inexact(tokenizer_file: str) -> None:
    counter = get_counter(template_model(tokenizer_file, CHATML_DEFAULT_SYSTEM, "tpl-dflt-x"))
    assert counter.exact_for(CONVERSATION[1:])
    assert counter.count(CONVERSATION) > counter.count_rendered(CONVERSATION)
    assert not counter.exact_for(CONVERSATION)  # the default system text counted anyway


def test_template_media_are_estimated(tokenizer_file: str) -> None:
    counter = get_counter(template_model(tokenizer_file, CHATML, "tpl-media"))
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    msg = {"role": "user", "content": [{"type": "text", "text": "Hello"}, image]}
    assert counter.message_exact({"role": "user", "content": [{"type": "text", "text": "Hi"}]})
    assert not counter.message_exact(msg)
    assert not counter.exact_for([*CONVERSATION, msg])


PNG_URL = data_url(png(64, 64))


@pytest.mark.parametrize(
    ("message", "exact"),
    [
        pytest.param({"role": "user", "content": "Hello"}, True, id="plain"),
        pytest.param({"role": "user", "content": "Hi", "name": "ann"}, True, id="name"),
        pytest.param(
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG_URL}}]},
            True,
            id="sized-image",
        ),
        pytest.param(
            {"role": "user", "content": [{"type": "image_url", "image_url": "https://x/a.png"}]},
            False,
            id="remote-image",
        ),
        pytest.param(
            {"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1"}}]},
            False,
            id="file",
        ),
        pytest.param({"role": "tool", "tool_call_id": "c", "content": "4"}, False, id="tool"),
        pytest.param(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}],
            },
            False,
            id="tool-call",
        ),
    ],
)
def test_openai_exact_for_names_estimated_parts(message: dict[str, Any], exact: bool) -> None:
    counter = get_counter("gpt-4o")
    assert counter.message_exact(message) is exact
    assert counter.exact_for([{"role": "system", "content": "Be brief."}, message]) is exact
    assert counter.exact_for([message], COOKBOOK_TOOLS) is exact


def test_estimated_tokenizer_is_never_exact() -> None:
    counter = get_counter("claude-3-5-sonnet-20241022")
    assert not counter.exact
    assert not counter.exact_for([{"role": "user", "content": "Hello"}])


def test_template_that_rejects_messages(tokenizer_file: str) -> None:
    model = template_model(
        tokenizer_file, ALTERNATING, "tpl-alt", bos_token="<s>", eos_token="</s>"
    )
    counter = get_counter(model)
    good = [m for m in CONVERSATION if m["role"] != "system"]
    assert counter.count(good) >= counter.count_rendered(good)
    with pytest.raises(InvalidMessagesError, match="roles must alternate"):
        counter.count_rendered([{"role": "assistant", "content": "x"}])
    # Per-message counts still work (probes give each role a valid context).
    assert counter.message({"role": "assistant", "content": "Fine."}) > 0
    assert counter.base() >= 1  # BOS


def test_template_message_cache(tokenizer_file: str) -> None:
    counter = get_counter(template_model(tokenizer_file, CHATML, "tpl-cache"))
    msg = {"role": "user", "content": "Hello world"}
    first = counter.message(msg)
    misses = counter.tokenizer.misses
    assert counter.message(dict(msg)) == first
    assert counter.tokenizer.misses == misses


def test_template_model_without_template_is_a_config_error(tokenizer_file: str) -> None:
    model = Model(
        name="x", context_window=10, tokenizer=f"hf:{tokenizer_file}", chat_format="template"
    )
    with pytest.raises(ConfigError, match="no chat_template"):
        get_counter(model)
    with pytest.raises(ConfigError, match="not valid Jinja"):
        get_counter(template_model(tokenizer_file, "{% for %}", "broken"))


def test_template_from_a_registered_model(tokenizer_file: str, tmp_path: Path) -> None:
    register_model(template_model(tokenizer_file, CHATML, "my-chatml"))
    assert count_messages(CONVERSATION, model="my-chatml") == get_counter(
        "my-chatml"
    ).count_rendered(CONVERSATION)


# ---------------------------------------------------------------- fast backend, long runs

SPECIAL_TEXT = st.lists(
    st.one_of(
        st.text(max_size=20),
        # lone surrogates too: both read them as U+FFFD, neither raises
        st.sampled_from(
            [" ", "\n", "\t", "<|endoftext|>", "<|im_start|>", "😀", "1", "─", "\ud800", "\udfff"]
        ),
    ),
    max_size=30,
).map("".join)


@pytest.fixture(scope="module")
def fast_encodings() -> dict[str, Any]:
    from tokenflex.tokenizers.fast import FastTokenizer

    return {name: FastTokenizer(name) for name in ("o200k_base", "cl100k_base")}


@settings(max_examples=150, deadline=None)
@given(SPECIAL_TEXT, st.integers(0, 3), st.integers(1, 5000))
def test_fastokens_ids_equal_tiktoken(
    fast_encodings: dict[str, Any], text: str, repeat_at: int, run: int
) -> None:
    # random text incl. special-token strings (ordinary text, as tiktoken counts them) and
    # long runs of one character spliced in
    if text:
        ch = text[repeat_at % len(text)]
        text = text[:repeat_at] + ch * run + text[repeat_at:]
    for name, fast in fast_encodings.items():
        assert fast.encode(text) == TiktokenTokenizer(name).encode(text), name


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_the_fast_backend_takes_tiktokens_pattern_without_its_encoding(name: str) -> None:
    # The fast backend needs tiktoken's split pattern only: building the encoding for it
    # would hold the ranks twice more (about 110 MB for o200k_base in the proxy).
    import subprocess
    import sys

    from tokenflex.tokenizers._tiktoken import load_encoding, pattern

    assert pattern(name) == load_encoding(name)._pat_str
    probe = (
        "from tokenflex.tokenizers import _tiktoken\n"
        "from tokenflex.tokenizers.fast import FastTokenizer\n"
        f"assert FastTokenizer({name!r}).count('Hello, world!') > 0\n"
        "print(sorted(_tiktoken._encodings))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_an_encoding_without_shipped_data_is_refused_by_name() -> None:
    from tokenflex.errors import TokenizerUnavailableError
    from tokenflex.tokenizers._tiktoken import load_encoding, pattern

    for read in (pattern, load_encoding):
        with pytest.raises(TokenizerUnavailableError, match=r"'p50k_base'.*cl100k_base"):
            read("p50k_base")


def test_prefer_fast_backend_switches_existing_and_new_tokenizers(
    restore_backends: None,
) -> None:
    import tokenflex.tokenizers as toks
    from tokenflex.tokenizers.fast import FastTokenizer

    cache = toks.get_tokenizer("o200k_base")
    assert isinstance(cache.tokenizer, TiktokenTokenizer)
    before = cache.count("Prefer the fast backend.")
    assert toks.prefer_fast_backend() == ["o200k_base", "cl100k_base"]
    assert isinstance(cache.tokenizer, FastTokenizer)
    assert cache.count("Prefer the fast backend.") == before
    assert toks.get_tokenizer("o200k_base") is cache


@pytest.fixture
def restore_backends() -> Iterator[None]:
    """tiktoken for the test (an earlier proxy start may have switched to fastokens),
    the previous backends after it."""
    import tokenflex.tokenizers as toks

    cache = toks.get_tokenizer("o200k_base")
    saved = (dict(toks._factories), dict(toks._factory_sources), cache.tokenizer)
    for name in ("o200k_base", "cl100k_base"):
        toks._factories[name] = functools.partial(TiktokenTokenizer, name)
        toks._factory_sources[name] = "tokenflex (built-in)"
        toks.get_tokenizer(name).tokenizer = TiktokenTokenizer(name)
    yield
    toks._factories.clear()
    toks._factories.update(saved[0])
    toks._factory_sources.clear()
    toks._factory_sources.update(saved[1])
    cache.tokenizer = saved[2]


def proxy_health(monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    from starlette.testclient import TestClient

    import tokenflex.tokenizers as toks
    from tokenflex.server import ServerConfig, create_app

    monkeypatch.delenv("TOKENFLEX_CONFIG", raising=False)
    app = create_app(ServerConfig.load(upstream="http://127.0.0.1:9"))
    with TestClient(app) as client:  # runs the lifespan, as `tokenflex serve` does
        status = client.get("/tokenflex/health").status_code
    return status, toks._factory_sources["o200k_base"]


def test_the_proxy_counts_with_fastokens_from_startup(
    restore_backends: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tokenflex.tokenizers.fast import FastTokenizer

    status, source = proxy_health(monkeypatch)
    assert status == 200
    assert source == "fastokens (prefer_fast_backend)"
    assert isinstance(get_tokenizer("o200k_base").tokenizer, FastTokenizer)


def test_the_proxy_serves_without_fastokens(
    restore_backends: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "fastokens", None)  # `import fastokens` fails
    status, source = proxy_health(monkeypatch)
    assert status == 200
    assert "fastokens" not in source
    assert isinstance(get_tokenizer("o200k_base").tokenizer, TiktokenTokenizer)


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_a_million_spaces_never_panics_and_stays_an_upper_bound(name: str) -> None:
    # tiktoken 0.14 raises pyo3's PanicException (a BaseException) on ~1M spaces.
    tok = TiktokenTokenizer(name)
    enc = load_encoding(name)
    n = tok.count("Hi" + " " * 1_000_000 + "there")
    # the exact count of the same text, built from pieces tiktoken can take: a run of
    # 2^k spaces is a run of 128-space tokens (exact, checked on 64,000 spaces below)
    assert len(enc.encode_ordinary(" " * 64_000)) == 500
    assert 2 + 1_000_000 // 128 <= n <= 2 + 1_000_000 // 128 + 20
    assert tok.count(" " * 400_000) >= len(enc.encode_ordinary(" " * 400_000))


_SEAM_TEXT = st.lists(
    st.sampled_from(["[INST]", "ü", "]", " the", "код", "😀", "1,", " ", "\n", "x", "{json:"]),
    max_size=8,
).map("".join)


@settings(max_examples=150, deadline=None)
@example(a="код the 😀 1, [INST]", b="ü [INST] pump")
@given(a=_SEAM_TEXT, b=_SEAM_TEXT)
def test_adjacent_text_parts_cost_no_less_than_their_join(a: str, b: str) -> None:
    # A conversion to another API joins a message's adjacent text parts into one string
    # (two Responses assistant items, Anthropic text blocks); the join may cost more than
    # the parts where a piece spans the seam: "[INST]" + "ü" is 22 + 9 parts but 32 joined
    # for estimate:all (glm-4.6). Parts are counted no lower than either.
    for model in ("gpt-4o", "glm-4.6"):
        counter = get_counter(model)

        def cost(content: Any, counter: MessageCounter = counter) -> int:
            return counter.count([{"role": "assistant", "content": content}])

        parts = cost([{"type": "text", "text": a}, {"type": "output_text", "text": b}])
        assert parts >= cost(a + b), (model, a, b)
        assert parts >= cost(a) + cost(b) - cost(""), (model, a, b)


_ITEMS = st.sampled_from(
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, 1, 1.0]
)


@settings(max_examples=300, deadline=None)
@given(a=st.lists(_ITEMS, max_size=12), b=st.lists(_ITEMS, max_size=12), common=st.integers(0, 12))
def test_shared_prefix_is_the_leading_items_two_lists_share(
    a: list[Any], b: list[Any], common: int
) -> None:
    # the reference: item by item, ``is`` or ``==`` (equal copies share; the longer list
    # either one; lists that extend each other, the usual case, drawn by ``common``)
    b = a[:common] + b
    k = 0
    while k < min(len(a), len(b)) and (a[k] is b[k] or a[k] == b[k]):
        k += 1
    assert shared_prefix(a, b) == k
    assert shared_prefix(b, a) == k
