"""What images, audio and files in a request cost: read from the request's own bytes.

Real encoders make the inputs (Pillow for PNG, JPEG, GIF, WebP and PDF; the standard
``wave`` module for WAV), so the readers are checked against files they did not write.
The Anthropic image rule is checked against the published vision page (tokens =
width * height / 750; sizes up to 1092x1092 and 784x1568 are not resized; the long edge is
scaled to 1568 px): exact where the page is exact, never below it anywhere. Audio and
files are estimates: never below the reference (32 tokens a second; 4,600 a PDF page) and
always flagged in the plan's warnings.
"""

from __future__ import annotations

import base64
import copy
import io
import math
import wave
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

import tokenflex
from tokenflex.counting.images import anthropic_image_tokens, image_size
from tokenflex.counting.media import (
    AUDIO_TOKENS_PER_SECOND,
    PDF_TOKENS_PER_PAGE,
    audio_seconds,
    audio_tokens,
    file_tokens,
    pdf_pages,
)

CLAUDE = "claude-sonnet-4-5"
PUBLISHED_MAX = math.ceil(784 * 1568 / 750)  # the largest size the page says is not resized


def encode(image: Image.Image, fmt: str) -> str:
    buf = io.BytesIO()
    image.save(buf, fmt)
    return base64.b64encode(buf.getvalue()).decode()


sizes = st.tuples(st.integers(1, 8000), st.integers(1, 8000))


@settings(max_examples=2000, deadline=None)
@given(sizes)
def test_anthropic_formula_against_the_published_rule(size: tuple[int, int]) -> None:
    w, h = size
    tokens = anthropic_image_tokens((w, h))
    if max(w, h) <= 1568 and w * h <= 1092 * 1092:
        assert tokens == math.ceil(w * h / 750), "not resized: the formula itself"
    assert tokens <= PUBLISHED_MAX
    # Never below what the API may charge under either reading of its resize limit:
    # fit 1568 px and 1.15 MP, or fit 1568 px and ~1,600 tokens.
    edge = min(1.0, 1568 / max(w, h))
    for pixels in (1_150_000, 1600 * 750):
        s = min(edge, math.sqrt(pixels / (w * h)))
        assert tokens >= math.floor(w * s) * math.floor(h * s) / 750 - 1e-9


@pytest.mark.parametrize(
    ("size", "expected"),
    [((200, 200), 54), ((1000, 1000), 1334), ((1092, 1092), 1590), ((784, 1568), 1640)],
)
def test_anthropic_published_examples(size: tuple[int, int], expected: int) -> None:
    assert anthropic_image_tokens(size) == expected
    assert anthropic_image_tokens(None) == PUBLISHED_MAX  # a URL: the most any image costs


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["PNG", "JPEG", "GIF", "WEBP"]),
    st.integers(1, 2400),
    st.integers(1, 2400),
)
def test_real_images_counted_from_their_header(fmt: str, w: int, h: int) -> None:
    data = encode(Image.new("1" if fmt != "JPEG" else "L", (w, h)), fmt)
    media = f"image/{fmt.lower()}"
    assert image_size(f"data:{media};base64,{data}") == (w, h)
    text = {"type": "text", "text": "what is this?"}
    image = {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    without = tokenflex.fit(
        [{"role": "user", "content": [text]}], model=CLAUDE, max_tokens=10, format="anthropic"
    )
    plan = tokenflex.fit([{"role": "user", "content": [text, image]}], model=CLAUDE, max_tokens=10)
    assert plan.format == "anthropic"
    assert plan.input_tokens - without.input_tokens == anthropic_image_tokens((w, h))


def _wav(rate: int, channels: int, width: int, frames: int) -> str:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(width)
        out.setframerate(rate)
        out.writeframes(bytes(frames * channels * width))
    return base64.b64encode(buf.getvalue()).decode()


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([8000, 16000, 22050, 44100]),
    st.integers(1, 2),
    st.integers(1, 2),
    st.integers(0, 60_000),
)
def test_wav_duration(rate: int, channels: int, width: int, frames: int) -> None:
    data = _wav(rate, channels, width, frames)
    assert audio_seconds(data, "wav") == pytest.approx(frames / rate)
    assert audio_tokens(data, "wav") == math.ceil(frames / rate * AUDIO_TOKENS_PER_SECOND)


def test_unknown_audio_is_assumed_slow() -> None:
    data = base64.b64encode(bytes(16_000)).decode()  # 16 kB of unknown audio
    # Assumed 8 kbit/s: 16 s, longer than any real speech codec at that size.
    assert audio_tokens(data, "ogg") == 16 * AUDIO_TOKENS_PER_SECOND


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 12))
def test_pdf_pages_from_a_real_pdf(pages: int) -> None:
    first, *rest = [Image.new("1", (20, 20)) for _ in range(pages)]
    buf = io.BytesIO()
    first.save(buf, "PDF", save_all=True, append_images=rest)
    assert pdf_pages(buf.getvalue()) == pages
    data = "data:application/pdf;base64," + base64.b64encode(buf.getvalue()).decode()
    assert file_tokens(data, len) == pages * PDF_TOKENS_PER_PAGE


def test_text_file_counted_as_text() -> None:
    text = "pump valve pressure " * 50
    data = "data:text/plain;base64," + base64.b64encode(text.encode()).decode()
    counted: list[str] = []
    assert file_tokens(data, lambda t: counted.append(t) or 7) == 7
    assert counted == [text]


@pytest.mark.parametrize("fmt", ["chat", "anthropic", "responses"])
def test_files_flagged_as_estimates_in_every_format(fmt: str) -> None:
    pdf = "JVBERi0xLjQK"  # "%PDF-1.4\n": no page objects, so one page by size
    part = {
        "chat": {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{pdf}"}},
        "anthropic": {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": pdf},
        },
        "responses": {
            "type": "input_file",
            "filename": "a.pdf",
            "file_data": f"data:application/pdf;base64,{pdf}",
        },
    }[fmt]
    msgs = [{"role": "user", "content": [part]}]
    plan = tokenflex.fit(msgs, model="gpt-4o", max_tokens=10, format=fmt)
    assert any("1 file(s) counted as an estimate" in w for w in plan.warnings)
    assert plan.input_tokens >= PDF_TOKENS_PER_PAGE


def _png_data() -> str:
    out = io.BytesIO()
    Image.new("RGB", (2, 2)).save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode()


_BLOCKS = {
    "text": {"type": "text", "text": "look at this"},
    "image by URL": {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
    "image as data": {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": _png_data()},
    },
    "document": {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"},
    },
}


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 5),
    st.lists(
        st.lists(st.sampled_from(sorted(_BLOCKS)), min_size=1, max_size=3),
        min_size=1,
        max_size=8,
    ),
)
def test_a_conversation_s_estimates_are_noted_as_a_fresh_read_notes_them(
    quiet: int, turns: list[list[str]]
) -> None:
    """A conversation fitted turn after turn (its list grown in place: the next turn
    reads only what it adds) warns of its estimated parts (files, images by URL) as a
    fit of the same messages read afresh does: from the turn that brings the first one
    (after ``quiet`` turns of text), and never where there is none."""
    messages: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"model": "gpt-4o", "max_tokens": 10, "format": "anthropic"}
    for k, blocks in enumerate(turns):
        if messages:
            messages.append({"role": "assistant", "content": "ok"})
        kinds = ["text"] if k < quiet else blocks
        messages.append({"role": "user", "content": [dict(_BLOCKS[b]) for b in kinds]})
        plan = tokenflex.fit(messages, **kwargs)
        fresh = tokenflex.fit(copy.deepcopy(messages), **kwargs)
        assert plan.warnings == fresh.warnings
        sent = [b for m in messages if isinstance(m["content"], list) for b in m["content"]]
        urls = sum(b == _BLOCKS["image by URL"] for b in sent)
        files = sum(b == _BLOCKS["document"] for b in sent)
        noted = " ".join(plan.warnings)
        assert (f"{urls} image(s) given by URL" in noted) == bool(urls)
        assert (f"{files} file(s) counted as an estimate" in noted) == bool(files)


_SMALL = tokenflex.get_model("gpt-4o").replace(name="gpt-4o-estimates", context_window=40_000)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(sorted(_BLOCKS)), min_size=16, max_size=20))
def test_a_conversation_whose_plans_keep_little_notes_its_estimates_as_a_fresh_read(
    turns: list[str],
) -> None:
    """A long conversation whose plans keep its newest few messages (under half of them:
    its first read looks at the kept ones alone) is read again, the same list and then
    grown turn after turn: each plan warns of the estimated parts it keeps as a fit of
    the same messages read afresh does, wherever they lie in the conversation."""
    kwargs: dict[str, Any] = {"model": _SMALL, "max_tokens": 10, "format": "anthropic"}
    filler = " ".join(f"w{j}" for j in range(1500))
    whole: list[dict[str, Any]] = []
    for k, block in enumerate(turns):
        if whole:
            whole.append({"role": "assistant", "content": f"answer {k} {filler}"})
        text = {"type": "text", "text": filler}
        whole.append({"role": "user", "content": [dict(_BLOCKS[block]), text]})
    messages = whole[:-4]  # first seen long, then grown in place
    for end in range(len(messages), len(whole) + 1):
        messages[len(messages) :] = whole[len(messages) : end]
        for _ in range(2):  # the list as it is, then the same list again
            plan = tokenflex.fit(messages, **kwargs)
            fresh = tokenflex.fit(copy.deepcopy(messages), **kwargs)
            assert plan.warnings == fresh.warnings
            parts = [m["content"] for m in plan.messages if isinstance(m["content"], list)]
            urls = sum(b == _BLOCKS["image by URL"] for blocks in parts for b in blocks)
            noted = " ".join(plan.warnings)
            assert (f"{urls} image(s) given by URL" in noted) == bool(urls)
        assert len(plan.messages) * 2 < len(messages)
