"""Calibration from the wire: the factor logic against an independent reference, and the
real proxy in front of the real llama.cpp server with a deliberately under-counting entry."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_server import LlamaServer
from test_server import ServerThread

from tokenflex.calibration import (
    MAX_FACTOR,
    Calibration,
    factor_of,
    scaled_tokenizer,
)
from tokenflex.counting import get_counter
from tokenflex.models import Model, get_model, register_model
from tokenflex.server import ServerConfig, create_app
from tokenflex.tokenizers import get_tokenizer, register_tokenizer

# -- the factor -------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(1, 100_000), st.floats(0.2, 6.0)), min_size=1, max_size=12)
)
def test_factor_rises_to_cover_every_undercount_and_never_falls(
    pairs: list[tuple[int, float]],
) -> None:
    cal = Calibration()
    previous = 1.0
    for predicted, ratio in pairs:
        reported = max(0, round(predicted * ratio))
        used = cal.factor("m")
        obs = cal.observe("m", predicted, reported)
        factor = cal.factor("m")
        assert obs.factor == factor and obs.factor_before == used == previous
        assert previous <= factor <= MAX_FACTOR  # monotone and bounded
        if reported > predicted:
            assert obs.under
            # the reference: the new factor scales this prediction to at least the report
            needed = used * reported / predicted
            assert factor >= min(needed, MAX_FACTOR)
            # capped: what it wanted (2% headroom, rounded up to hundredths) is over the cap
            assert obs.capped == (math.ceil(needed * 1.02 * 100) / 100 > MAX_FACTOR)
        else:
            assert not obs.under and factor == previous
        previous = factor
    figures = cal.snapshot()["m"]
    assert figures["observations"] == len(pairs)
    assert figures["predicted_tokens"] == sum(p for p, _ in pairs)


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=300), factor=st.floats(1.01, 4.0))
def test_scaled_tokenizer_is_the_base_times_the_factor_rounded_up(text: str, factor: float) -> None:
    factor = round(factor, 2)
    name = scaled_tokenizer("o200k_base", factor)
    assert factor_of(name) == factor
    base = get_tokenizer("o200k_base").count(text)
    assert get_tokenizer(name).count(text) == math.ceil(base * factor)
    assert not get_tokenizer(name).exact


def test_apply_scales_the_models_counts() -> None:
    cal = Calibration()
    model = get_model("gpt-4o")
    assert cal.apply(model) is model
    cal.observe("gpt-4o", 100, 150)
    scaled = cal.apply(model)
    assert scaled.tokenizer == f"o200k_base#x{cal.factor('gpt-4o'):g}"
    messages = [{"role": "user", "content": "word " * 500}]
    assert get_counter(scaled).count(messages) >= 1.5 * get_counter(model).count(messages) - 10
    # a plan made with the scaled model is judged with the factor it used
    assert cal.factor("gpt-4o") == 1.53  # 1.5, and 2% headroom
    cal.observe("gpt-4o", 100, 100, factor_used=1.0)
    assert cal.factor("gpt-4o") == 1.53  # never falls
    cal.observe("gpt-4o", 100, 110, factor_used=1.53)
    assert cal.factor("gpt-4o") == pytest.approx(math.ceil(1.53 * 1.1 * 1.02 * 100) / 100)


def test_the_fixed_envelope_is_not_scaled_so_the_text_covers_it() -> None:
    cal = Calibration(headroom=1.0)
    # 100 predicted = 60 text + 40 envelope; the upstream counted 200: the text must
    # carry 160, a factor of 160 / 60, not 200 / 100
    cal.observe("m", 100, 200, text_tokens=60, scaled_text_tokens=60)
    assert cal.factor("m") == pytest.approx(math.ceil(160 / 60 * 100) / 100)
    assert 60 * cal.factor("m") + 40 >= 200


def test_bounded_in_models_and_factor(caplog: pytest.LogCaptureFixture) -> None:
    cal = Calibration(max_models=2)
    for name in ("a", "b", "c"):
        cal.observe(name, 10, 10)
    assert list(cal.snapshot()) == ["b", "c"]
    with caplog.at_level(logging.WARNING, logger="tokenflex"):
        obs = cal.observe("c", 100, 10_000)
    assert obs.capped and cal.factor("c") == MAX_FACTOR
    assert "capped" in caplog.text and "tokenflex models --check" in caplog.text
    with pytest.raises(ValueError, match="max_factor"):
        Calibration(max_factor=0.5)


# -- through the real proxy --------------------------------------------------------------------


class UnderCounter:
    """A deliberately wrong tokenizer: a third of the words."""

    name, exact = "undercount", False

    def count(self, text: str) -> int:
        return len(text.split()) // 3


@pytest.fixture
def proxy(llama_server: LlamaServer) -> Iterator[ServerThread]:
    register_tokenizer("undercount", UnderCounter, replace=True)
    register_model(
        Model(
            name="smol-under",
            context_window=llama_server.n_ctx,
            tokenizer="undercount",
            chat_format="generic",
        )
    )
    config = ServerConfig.load(upstream=llama_server.base_url, discover=False)
    with ServerThread(create_app(config)) as p:
        yield p


@pytest.mark.server
def test_an_undercount_raises_the_factor_and_the_next_plan_holds(
    proxy: ServerThread, llama_server: LlamaServer, caplog: pytest.LogCaptureFixture
) -> None:
    words = "the budget window token model answer question context " * 40
    body = {
        "model": "smol-under",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": words},
        ],
        "max_tokens": 4,
        "temperature": 0,
    }
    with httpx.Client(timeout=120, trust_env=False) as client:
        with caplog.at_level(logging.WARNING, logger="tokenflex"):
            first = client.post(f"{proxy.url}/v1/chat/completions", json=body)
        assert first.status_code == 200, first.text
        predicted = int(first.headers["x-tokenflex-input-tokens"])
        reported = first.json()["usage"]["prompt_tokens"]
        assert reported > predicted  # the entry under-counts: the bound did not hold
        assert "undercount" in first.headers["x-tokenflex-calibration"]
        assert f"{reported:,}" in first.headers["x-tokenflex-calibration"]
        assert "undercount: predicted" in caplog.text

        figures = client.get(f"{proxy.url}/tokenflex/calibration").json()["models"]
        factor = figures["smol-under"]["factor"]
        assert factor >= reported / predicted
        assert figures["smol-under"]["under"] == 1

        second = client.post(f"{proxy.url}/v1/chat/completions", json=body)
        assert second.status_code == 200, second.text
        # the next plan holds: the upstream's count is within the prediction
        assert second.json()["usage"]["prompt_tokens"] <= int(
            second.headers["x-tokenflex-input-tokens"]
        )
        assert "x-tokenflex-calibration" not in second.headers
        figures = client.get(f"{proxy.url}/tokenflex/calibration").json()["models"]
        assert figures["smol-under"]["factor"] == factor
        assert figures["smol-under"]["observations"] == 2


def test_calibration_can_be_turned_off() -> None:
    on = create_app(ServerConfig.load(upstream="http://127.0.0.1:9"))
    off = create_app(ServerConfig.load(upstream="http://127.0.0.1:9", calibrate=False))
    assert on.state.proxy.fitter.calibration is on.state.proxy.calibration
    assert off.state.proxy.fitter.calibration is None
