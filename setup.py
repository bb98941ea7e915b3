"""The optional C extension; everything else is declared in pyproject.toml.

``tokenflex.tokenizers._fastcut`` cuts ASCII text for the estimator. It is optional: where
no C compiler exists the build goes on without it and the estimator cuts with the stdlib
``re`` (the same pieces, slower).
"""

from __future__ import annotations

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
