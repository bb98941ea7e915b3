"""The Hugging Face tokenizer.json backend (built here with the tokenizers library)."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import pytest

from tokenflex.errors import TokenizerUnavailableError
from tokenflex.tokenizers import get_tokenizer
from tokenflex.tokenizers.hf import HFTokenizer


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(
        special_tokens=["[UNK]", "<|im_start|>", "<|im_end|>"], show_progress=False
    )
    tok.train_from_iterator(["hello world", "the quick brown fox", "hello fox"], trainer)
    folder = tmp_path_factory.mktemp("hf")
    tok.save(str(folder / "tokenizer.json"))
    return folder


def test_counts_encodes_and_decodes(tokenizer_dir: Path) -> None:
    tok = HFTokenizer.from_file(tokenizer_dir / "tokenizer.json")
    assert tok.exact is True
    assert tok.name == f"hf:{tokenizer_dir / 'tokenizer.json'}"
    assert tok.count("hello world") == 2
    assert tok.count("hello unknownword") == 2  # [UNK]
    ids = tok.encode("hello fox")
    assert len(ids) == 2
    assert tok.decode(ids) == "hello fox"


def test_special_tokens_in_text_are_single_tokens(tokenizer_dir: Path) -> None:
    tok = HFTokenizer.from_file(tokenizer_dir)  # the folder works too
    assert tok.count("<|im_start|>hello<|im_end|>") == 3


def test_through_the_registry_and_cache(tokenizer_dir: Path) -> None:
    cache = get_tokenizer(f"hf:{tokenizer_dir / 'tokenizer.json'}")
    assert cache.exact
    assert isinstance(cache.tokenizer, HFTokenizer)
    assert cache.count("the quick brown fox") == 4
    assert cache.count("the quick brown fox") == 4
    assert cache.hits == 1


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TokenizerUnavailableError, match="No tokenizer file"):
        HFTokenizer.from_file(tmp_path / "nope.json")
    with pytest.raises(TokenizerUnavailableError, match="No tokenizer file"):
        HFTokenizer.from_file(tmp_path)  # a folder without tokenizer.json


@pytest.mark.parametrize("content", ["not json", '{"version": "1.0"}', ""])
def test_bad_file(tmp_path: Path, content: str) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text(content)
    with pytest.raises(TokenizerUnavailableError, match="Cannot load"):
        HFTokenizer.from_file(path)


def test_missing_extra_gives_an_install_hint(
    monkeypatch: pytest.MonkeyPatch, tokenizer_dir: Path
) -> None:
    real_import = builtins.__import__

    def no_tokenizers(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "tokenizers" or name.startswith("tokenizers."):
            raise ImportError("No module named 'tokenizers'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tokenizers)
    with pytest.raises(TokenizerUnavailableError, match=r"pip install 'tokenflex\[hf\]'"):
        HFTokenizer.from_file(tokenizer_dir)
