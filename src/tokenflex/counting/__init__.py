"""How many tokens a chat request costs: messages, names, tool calls, tool schemas, images.

A :class:`MessageCounter` counts for one model. Its total is additive, which is what lets
the solver drop one message and know the new size without re-counting the rest::

    counter.count(messages, tools)
        == counter.base(tools) + sum(counter.message(m) for m in messages)

Rules per ``Model.chat_format``:

``openai`` (exact for gpt-4o, gpt-4o-mini, gpt-4, gpt-3.5-turbo)
    The OpenAI cookbook "How to count tokens with tiktoken": 3 tokens per message, every
    string value of the message encoded (role included), +1 per ``name``, +3 to prime the
    reply; ``openai-0301`` is 4 per message and -1 per name. Tool schemas follow the
    cookbook's ``num_tokens_for_tools`` constants for the model's family.
``generic`` (models counted with the estimator, or without a known template)
    The same shape with a conservative 8 tokens per message and a 32-token base (reply
    priming, BOS and the default system text templates add: Llama 3.1's date header,
    Qwen's default system prompt); gpt-oss reserves 96 for the harmony system message.
``template`` (open models with a Jinja chat template and their own tokenizer)
    A message costs the tokens of its rendered segment; the base is the generation prompt
    plus whatever the template adds around a lone message (BOS, default system text).
    :meth:`MessageCounter.count_rendered` renders the whole conversation for the exact
    total; the additive count is at least that on the real templates tested
    (tests/test_templates.py; the template's default text is counted once even when a
    system message replaces it).
``mistral`` (Mistral models with a ``mistral:`` tokenizer, extra ``[mistral]``)
    mistral-common's own encoder: a message costs what it adds to a probe conversation;
    :meth:`MessageCounter.count_rendered` encodes the whole conversation
    (``encode_chat_completion``), and the additive count is at least that
    (tests/test_mistral.py). Registry models with ``exact_tokenizer = "mistral:..."``
    count this way when mistral-common is installed, else with their estimate.

Where each part lives:

- :mod:`~tokenflex.counting.registry`: which counter counts for a model
  (:func:`get_counter`, cached), and the one-call :func:`count_messages` /
  :func:`count_tokens`;
- :mod:`~tokenflex.counting.messages`: the :class:`MessageCounter` interface and the
  per-message envelope rules (``openai``, ``openai-0301``, ``generic``), with the rules
  beyond the cookbook (tool calls, tool results);
- :mod:`~tokenflex.counting.template`: rendering a chat template, and counting through
  it (``template``);
- :mod:`~tokenflex.counting.mistral`: counting through mistral-common (``mistral``);
- :mod:`~tokenflex.counting.provider`: counts from a provider's count endpoint
  (Anthropic ``count_tokens``, OpenAI ``input_tokens``), on when the operator asks
  (:func:`provider_counts`);
- :mod:`~tokenflex.counting.tools`: what tool schemas add;
- :mod:`~tokenflex.counting.images`: what an image costs (size read from a data URL's
  header, never fetched; remote URLs cost the model's worst case);
- what makes a message well formed (and the error that says what is wrong with one) is
  :mod:`tokenflex.message`'s, below both counting and the formats.
"""

from __future__ import annotations

from ..message.checks import ROLES
from .messages import MessageCounter
from .provider import ProviderCounts, provider_counts
from .registry import count_messages, count_tokens, get_counter

__all__ = [
    "ROLES",
    "MessageCounter",
    "ProviderCounts",
    "count_messages",
    "count_tokens",
    "get_counter",
    "provider_counts",
]
