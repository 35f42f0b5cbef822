"""A family implements the hooks ``strategies.base.FAMILY_HOOKS`` declares, grouped, and nothing
else of the base: the lifecycle (admission, sampling, screening, failures, the checkpoint) stays
one; docs/architecture.md lists the same hooks."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import strategies
from strategies.base import FAMILY_HOOKS, FederatedStrategy
from tests import frame_algorithms
from tests.code_and_docs.test_doc_claims import ROOT

HOOKS = {name for group in FAMILY_HOOKS.values() for name in group}
ATTRIBUTES = {"__init__", "label", "State", "slot", "sampler"}  # what a family declares


def families() -> list[type]:
    found = []
    for module in [
        *(
            importlib.import_module(f"strategies.{m.name}")
            for m in pkgutil.iter_modules(strategies.__path__)
        ),
        frame_algorithms,
    ]:
        found += [
            c
            for c in vars(module).values()
            if inspect.isclass(c)
            and issubclass(c, FederatedStrategy)
            and c is not FederatedStrategy
            and c.__module__ == module.__name__
        ]
    return found


def test_families_override_declared_hooks_only():
    lifecycle = {n for n in vars(FederatedStrategy) if not n.startswith("__")} - HOOKS - ATTRIBUTES
    lifecycle -= {"_abc_impl"}
    overridden = {
        (family.__name__, name)
        for family in families()
        for name in vars(family)
        if name in lifecycle
    }
    assert overridden == set()


def test_every_declared_hook_is_the_bases_or_flowers_and_some_family_implements_it():
    implemented = {name for family in families() for name in vars(family)}
    for name in HOOKS:
        assert hasattr(FederatedStrategy, name), name
        assert name in implemented, name


def test_the_architecture_page_lists_every_hook():
    recipe = (ROOT / "docs" / "architecture.md").read_text().split("**Adding an algorithm")[1]
    recipe = recipe.split("\n\n")[0]
    assert [name for name in sorted(HOOKS) if f"`{name}`" not in recipe] == []
