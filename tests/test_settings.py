"""Settings from defaults, a .env file, the environment and per-call overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tokenflex.errors import ConfigError
from tokenflex.settings import Settings, get_settings
from tokenflex.summarize import ChatSummarizer, ExtractiveSummarizer

# conftest runs every test in a fresh temporary cwd with no TOKENFLEX_* variables.


def test_defaults_are_the_seeds() -> None:
    s = get_settings()
    assert s.max_input_tokens is None
    assert s.max_output_tokens == 4000
    assert s.keep_recent_messages == 6
    assert s.min_output_tokens == 500
    assert s.safety_margin == 100
    assert s.history_share == 0.8
    assert s.summary_max_tokens == 512
    assert s.tokenizer is None
    assert s.summarizer_base_url is None and s.summarizer_model is None
    assert s.summarizer_api_key is None
    assert s.summarizer_timeout == 30.0 and s.summarizer_temperature == 0.1


def test_env_vars(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKENFLEX_MAX_INPUT_TOKENS", "12000")
    monkeypatch.setenv("TOKENFLEX_KEEP_RECENT_MESSAGES", "4")
    monkeypatch.setenv("tokenflex_max_output_tokens", "2000")  # case-insensitive
    s = get_settings()
    assert (s.max_input_tokens, s.keep_recent_messages, s.max_output_tokens) == (12000, 4, 2000)


def test_dotenv_file_and_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    Path(".env").write_text(
        "TOKENFLEX_MAX_INPUT_TOKENS=10000\n"
        "TOKENFLEX_MAX_OUTPUT_TOKENS=6000\n"
        "TOKENFLEX_KEEP_RECENT_MESSAGES=4\n"
        "OPENAI_API_KEY=sk-unrelated\n"  # other programs' variables are ignored
    )
    s = get_settings()
    assert (s.max_input_tokens, s.max_output_tokens, s.keep_recent_messages) == (10000, 6000, 4)
    monkeypatch.setenv("TOKENFLEX_MAX_OUTPUT_TOKENS", "3000")  # env beats .env
    s = get_settings()
    assert (s.max_input_tokens, s.max_output_tokens) == (10000, 3000)
    s = get_settings(max_output_tokens=1000, keep_recent_messages=None)  # call beats env
    assert (s.max_output_tokens, s.keep_recent_messages) == (1000, 4)  # None: not overridden
    assert get_settings(env_file=None).max_input_tokens is None


def test_named_env_file(tmp_path: Path) -> None:
    f = tmp_path / "prod.env"
    f.write_text("TOKENFLEX_SAFETY_MARGIN=250\n")
    assert get_settings(env_file=f).safety_margin == 250
    assert get_settings(env_file=tmp_path / "missing.env").safety_margin == 100


@pytest.mark.parametrize(
    ("env", "value"),
    [
        pytest.param("TOKENFLEX_TOKENIZER", "cl100k_base", id="tokenizer"),
        pytest.param("TOKENFLEX_ENCODING", "o200k_base", id="encoding-alias"),
    ],
)
def test_tokenizer_or_encoding(monkeypatch: pytest.MonkeyPatch, env: str, value: str) -> None:
    monkeypatch.setenv(env, value)
    assert get_settings().tokenizer == value


def test_tokenizer_override_by_either_name() -> None:
    assert get_settings(tokenizer="cl100k_base").tokenizer == "cl100k_base"
    assert get_settings(encoding="o200k_base").tokenizer == "o200k_base"


@pytest.mark.parametrize(
    ("env", "value", "field"),
    [
        pytest.param("TOKENFLEX_MAX_OUTPUT_TOKENS", "0", "max_output_tokens", id="zero-output"),
        pytest.param("TOKENFLEX_MAX_INPUT_TOKENS", "lots", "max_input_tokens", id="not-int"),
        pytest.param("TOKENFLEX_HISTORY_SHARE", "1.5", "history_share", id="share>1"),
        pytest.param("TOKENFLEX_KEEP_RECENT_MESSAGES", "-1", "keep_recent_messages", id="neg"),
        pytest.param("TOKENFLEX_SUMMARIZER_TIMEOUT", "0", "summarizer_timeout", id="timeout"),
    ],
)
def test_invalid_values_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, field: str
) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(ConfigError, match=field) as info:
        get_settings()
    assert repr(value) in str(info.value) or value in str(info.value)
    assert isinstance(info.value.__cause__, ValidationError)


def test_unknown_override_suggests_the_name() -> None:
    with pytest.raises(ConfigError, match="did you mean 'keep_recent_messages'"):
        get_settings(keep_recent_mesages=3)


def test_api_key_is_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKENFLEX_SUMMARIZER_API_KEY", "sk-very-secret")
    s = get_settings()
    assert s.summarizer_api_key is not None
    assert s.summarizer_api_key.get_secret_value() == "sk-very-secret"
    assert "sk-very-secret" not in repr(s) and "sk-very-secret" not in str(s.model_dump())


def test_frozen() -> None:
    s = get_settings()
    with pytest.raises(ValidationError):
        s.max_output_tokens = 1  # type: ignore[misc]


def test_fit_options_map_to_fit_keywords() -> None:
    opts = get_settings(max_input_tokens=12000, keep_recent_messages=8).fit_options()
    assert opts == {
        "max_tokens": 4000,
        "max_input_tokens": 12000,
        "keep_recent": 8,
        "min_output_tokens": 500,
        "safety_margin": 100,
        "history_share": 0.8,
        "summary_max_tokens": 512,
    }


def test_fit_options_are_accepted_by_fit() -> None:
    import tokenflex

    plan = tokenflex.fit(
        [{"role": "user", "content": "Hi"}],
        model="gpt-4o",
        **get_settings(max_output_tokens=1000).fit_options(),
    )
    assert plan.max_tokens == 1000


def test_summarizer_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(get_settings().summarizer(), ExtractiveSummarizer)
    monkeypatch.setenv("TOKENFLEX_SUMMARIZER_BASE_URL", "http://127.0.0.1:8000/v1")
    with pytest.raises(ConfigError, match="both"):
        get_settings().summarizer()
    monkeypatch.setenv("TOKENFLEX_SUMMARIZER_MODEL", "mistral")
    monkeypatch.setenv("TOKENFLEX_SUMMARIZER_API_KEY", "sk-1")
    monkeypatch.setenv("TOKENFLEX_SUMMARIZER_TIMEOUT", "5")
    s = get_settings().summarizer()
    assert isinstance(s, ChatSummarizer)
    assert (s.base_url, s.model, s.timeout, s.temperature) == (
        "http://127.0.0.1:8000/v1",
        "mistral",
        5.0,
        0.1,
    )
    assert s._headers() == {"Authorization": "Bearer sk-1"}


def test_settings_class_direct() -> None:
    assert Settings(keep_recent_messages=2).keep_recent_messages == 2
