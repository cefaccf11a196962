"""Every docstring example in trtlade/ is a test: the worked token examples (spec, lookahead, engine,
scheduler, bench, ...) run as doctests, module by module."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import trtlade

MODULES = sorted(m.name for m in pkgutil.walk_packages(trtlade.__path__, "trtlade.")
                 if not m.name.endswith("__main__"))
#: modules whose worked examples must exist (a docstring rewrite must not drop them silently)
MUST_HAVE_EXAMPLES = {"trtlade.spec", "trtlade.lookahead.pool", "trtlade.lookahead.algorithm",
                      "trtlade.lookahead.simulate", "trtlade.reference.scheduler", "trtlade.reference.step_layout",
                      "trtlade.reference.adaptive", "trtlade.reference.native.cpu", "trtlade.reference.native.build"}


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    failures, attempted = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert failures == 0
    if name in MUST_HAVE_EXAMPLES:
        assert attempted > 0


def test_the_walk_finds_the_packages():
    assert MUST_HAVE_EXAMPLES <= set(MODULES) and len(MODULES) > 40
