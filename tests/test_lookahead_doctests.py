"""The worked token examples in the lookahead docstrings are tests too."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["pool", "algorithm", "simulate", "oracles"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"trtlade.lookahead.{name}")
    failures, attempted = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert attempted > 0
    assert failures == 0
