"""The estimator's native cut (optional): built where a C compiler is, skipped elsewhere.

Everything else about the package is in pyproject.toml. Without the extension the estimator
cuts text with the stdlib ``re`` (the same pieces, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tokenflex.tokenizers._fastcut",
            ["src/tokenflex/tokenizers/_fastcut.c"],
            optional=True,
        )
    ]
)
