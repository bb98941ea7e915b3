"""Templates as the model runs them: a role the chat template leaves out of the prompt
costs nothing (and is logged as unseen); a role it refuses makes the count refuse too,
with the fix. Real templates: the ones llama.cpp's vocabulary GGUFs carry (``make vocab``).
"""

from __future__ import annotations

import itertools
import logging

import family_texts
import pytest

from tokenflex import fit
from tokenflex.counting import get_counter
from tokenflex.counting.template import TemplateRejected, alternating_roles
from tokenflex.models import Model, get_model
from tokenflex.tokenizers import get_tokenizer
from tokenflex.tokenizers.gguf import GGUFTokenizer

SYSTEM = {"role": "system", "content": "You are a pirate. " * 60}
USER = {"role": "user", "content": "What is the capital of France?"}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "geo", "arguments": "{}"}}
    ],
}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "Paris"}


def gguf_model(vocab: str) -> Model:
    path = family_texts.VOCAB_DIR / f"ggml-vocab-{vocab}.gguf"
    if not path.exists():
        pytest.skip("llama.cpp's vocabularies are not extracted (make vocab)")
    tok = get_tokenizer(f"gguf:{path}").tokenizer
    assert isinstance(tok, GGUFTokenizer) and tok.chat_template
    return Model(
        name=f"gguf-template-{vocab}",
        context_window=4096,
        tokenizer=f"gguf:{path}",
        chat_format="template",
        chat_template=tok.chat_template,
        bos_token=tok.bos_token,
        eos_token=tok.eos_token,
    )


def test_a_dropped_system_prompt_costs_nothing_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counter = get_counter(gguf_model("phi-3"))  # its template renders user/assistant only
    with caplog.at_level(logging.WARNING, logger="tokenflex"):
        assert counter.message(SYSTEM) == 0
    assert "renders no 'system' message" in caplog.text
    # the count follows the render: the system prompt's 360 tokens are not in it
    assert counter.count([SYSTEM, USER]) == counter.count([USER])
    assert counter.count([SYSTEM, USER]) >= counter.count_rendered([SYSTEM, USER])
    assert counter.count([SYSTEM, USER]) < counter.count_rendered([USER]) + 20


def test_a_dropped_tool_result_costs_nothing() -> None:
    counter = get_counter(gguf_model("phi-3"))
    assert counter.message(RESULT) == 0


def test_a_refused_tool_message_raises_with_the_fix() -> None:
    counter = get_counter(gguf_model("command-r"))  # roles must alternate user/assistant
    with pytest.raises(TemplateRejected, match="cannot render a 'tool' message") as info:
        counter.count([USER, CALL, RESULT])
    assert "Send tool results as user messages" in str(info.value)
    assert counter.count([USER]) > 0  # a conversation it renders still counts


def test_the_plan_says_what_the_model_will_not_see() -> None:
    import tokenflex

    model = gguf_model("phi-3")
    plan = tokenflex.fit([SYSTEM, USER], model=model, max_tokens=100)
    assert any("renders no 'system' message" in w for w in plan.warnings), plan.warnings
    assert plan.input_tokens == tokenflex.fit([USER], model=model, max_tokens=100).input_tokens
    seen = tokenflex.fit([SYSTEM, USER], model="gpt-4o", max_tokens=100)
    assert not any("renders no" in w for w in seen.warnings)


# -- templates that demand alternating roles (issue 26 item 5) ----------------------------


def _chat(turns: int) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": "Be brief."}]
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        msgs.append({"role": role, "content": f"turn {i}: " + "the quick brown fox " * 30})
    return msgs


def _template_model(name: str, vocab: str, bos: str, eos: str) -> Model:
    source = family_texts.VOCAB_DIR / "templates" / f"{name}.jinja"
    if not source.exists():
        pytest.skip("llama.cpp's templates are not extracted (make vocab)")
    return Model(
        name=f"template-{name}",
        context_window=2048,
        tokenizer=f"gguf:{family_texts.VOCAB_DIR / f'ggml-vocab-{vocab}.gguf'}",
        chat_format="template",
        chat_template=source.read_text(encoding="utf-8"),
        bos_token=bos,
        eos_token=eos,
    )


NEMO = ("mistralai-Mistral-Nemo-Instruct-2407", "llama-spm", "<s>", "</s>")


@pytest.mark.parametrize("registry", [False, True], ids=["template-model", "registry-entry"])
def test_a_cut_keeps_the_roles_alternating_where_the_template_demands_it(
    registry: bool,
) -> None:
    # Mistral Nemo's template raises "roles must alternate": a cut after the pinned
    # question used to send user, user (35 of 40 cut chats in scripts/check_windows.py)
    real = _template_model(*NEMO)
    assert alternating_roles(real)
    # the registry's mistral-nemo counts with an estimate (no template): its entry says so
    model = get_model("mistral-nemo").replace(context_window=2048) if registry else real
    assert alternating_roles(model)
    msgs = _chat(41)
    plan = fit(msgs, model=model, max_tokens=200, cut_note=False)
    assert plan.dropped, "the chat is cut"
    roles = [m["role"] for m in plan.messages if m["role"] != "system"]
    assert all(a != b for a, b in itertools.pairwise(roles)), roles
    # the pinned question and its answer open the plan; the template renders it
    assert plan.messages[1:3] == msgs[1:3]
    assert get_counter(real).count_rendered(plan.messages) + 200 <= 2048


def test_a_template_that_accepts_user_after_user_pins_the_question_alone() -> None:
    qwen = _template_model("Qwen-Qwen2.5-7B-Instruct", "qwen2", "", "<|im_end|>")
    assert not alternating_roles(qwen)
    assert not alternating_roles(get_model("qwen2.5:7b"))
    msgs = _chat(41)
    plan = fit(msgs, model=qwen, max_tokens=200, cut_note=False)
    assert plan.messages[1] == msgs[1] and plan.messages[2]["role"] == "user"


def test_an_agent_loop_keeps_its_task_pinned_where_the_template_demands_alternation() -> None:
    # only the plain answers after the pinned question are pinned with it: an agent
    # loop's tool rounds are not (a cut opens on a call, after the task's user turn)
    model = get_model("mistral-nemo").replace(context_window=4096)
    assert alternating_roles(model)
    task = {"role": "user", "content": "Fix the failing test in the repository."}
    msgs: list[dict[str, object]] = [SYSTEM, task]
    for k in range(40):
        call = {**CALL, "tool_calls": [{**CALL["tool_calls"][0], "id": f"c{k}"}]}
        msgs += [call, {**RESULT, "tool_call_id": f"c{k}", "content": "a line of code\n" * 20}]
    plan = fit(msgs, model=model, max_tokens=500)
    assert plan.dropped, "the loop is cut"
    assert plan.messages[1] == task
    assert plan.messages[2]["role"] == "assistant" and plan.messages[2]["tool_calls"]
    assert not any("pinned opening" in w for w in plan.warnings)
