"""Request formats: OpenAI Chat, OpenAI Responses, Anthropic Messages and Gemini, in and out.

The engine counts and groups OpenAI-chat-shaped messages. Every other format is
converted to that internal form on the way in and back on the way out, so fit() returns
the format it was given:

- :mod:`~tokenflex.formats.base`: what a format is (:class:`~.base.RequestFormat`: its
  conversions, body, tool shape, answers and proxy routes), and
  :mod:`~tokenflex.formats.registry`: the list of them everything asks;
- :mod:`~tokenflex.formats.detect`: which format a list is (``format=`` overrides);
- :mod:`~tokenflex.formats.native`: the internal message that remembers the caller's
  items (what makes the way back lossless);
- :mod:`~tokenflex.formats.chat`, :mod:`~tokenflex.formats.anthropic`,
  :mod:`~tokenflex.formats.responses`, :mod:`~tokenflex.formats.gemini`: each format's
  object, its items to internal messages, and whole requests to and from chat;
- SDK, pydantic and LangChain message objects are read by :mod:`tokenflex.message.objects`;
- :mod:`~tokenflex.formats.tools`: tool definitions in each API's shape;
- :mod:`~tokenflex.formats.request`: the body a plan becomes for each API;

The formats know nothing of plans: :mod:`tokenflex.roundtrip` (what fit() does before and
after the engine) reads a request through them and gives a plan back through them, and
:mod:`tokenflex.plan` builds its request bodies with :mod:`~tokenflex.formats.request`.
This package's ``__init__`` imports nothing.
"""
