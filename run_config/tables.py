"""Every key table, and which tables each algorithm reads: only the chosen algorithm's family
table is parsed (a key of another family must only be declared; ``run_config.declared`` refuses
an undeclared one).

``TABLES`` is the order of ``pyproject.toml``'s ``[tool.flwr.app.config]`` and of the key
reference in docs/configuration.md (``run_config.reference`` writes both). ``FAMILIES`` maps an
algorithm name to its family: the tables it reads and the parser that builds its settings. It
names the algorithms of ``strategies.registry`` without importing it (imports point down); a test
checks the two agree. An algorithm without an entry (the frame tests' test-only algorithms) reads
the common keys only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from run_config.common import COMMON_KEYS, RunSettings
from run_config.feddr import FEDDR_KEYS, feddr_settings
from run_config.fedfun import ALGORITHMS as FEDFUN_ALGORITHMS
from run_config.fedfun import FEDFUN_KEYS, fedfun_settings
from run_config.fedfw import DOMAIN_KEYS, FEDFW_KEYS, constraint_set, fedfw_settings
from run_config.fedfw import VARIANTS as FEDFW_VARIANTS
from run_config.fedxgb import ALGORITHMS as FEDXGB_ALGORITHMS
from run_config.fedxgb import FEDXGB_KEYS, fedxgb_settings
from run_config.ffgb import FFGB_KEYS, ffgb_settings
from run_config.ffgb import VARIANTS as FFGB_VARIANTS
from run_config.keys import Key


@dataclass(frozen=True)
class Table:
    """A key table as docs/configuration.md shows it: a title, who reads it, its keys."""

    title: str
    note: str
    keys: tuple[Key, ...]


COMMON = Table("Common keys", "every algorithm", COMMON_KEYS)
DOMAIN = Table("`fedfw.*`: the constraint set D",
               "FedFW and the baselines that solve the same constrained problem",
               DOMAIN_KEYS)
FEDFW = Table("`fedfw.*`: Frank-Wolfe", "FedFW's variants", FEDFW_KEYS)
FEDDR = Table("`feddr.*`", "FedDR", FEDDR_KEYS)
FFGB = Table("`ffgb.*`", "the FFGB family", FFGB_KEYS)
FEDFUN = Table("`fedfun.*`", "FedFun (FSR) and its four decentralised baselines", FEDFUN_KEYS)
FEDXGB = Table("`fedxgb.*`", "the XGBoost baselines on Flower's FedXgbBagging and FedXgbCyclic",
               FEDXGB_KEYS)
TABLES = (COMMON, DOMAIN, FEDFW, FEDDR, FFGB, FEDFUN, FEDXGB)


@dataclass(frozen=True)
class Family:
    """What an algorithm reads beyond the common keys: its tables, and the parser that builds
    its settings from them (None: nothing beyond the common keys)."""

    tables: tuple[Table, ...] = ()
    parse: Callable[[RunSettings], object] | None = None


NO_FAMILY = Family()
FAMILIES: dict[str, Family] = {
    "fedavg": NO_FAMILY,
    "fedprox": NO_FAMILY,
    "fedavg-proj": Family((DOMAIN,), constraint_set),
    **{name: Family((DOMAIN, FEDFW), fedfw_settings) for name in FEDFW_VARIANTS},
    "feddr": Family((DOMAIN, FEDDR), feddr_settings),
    **{name: Family((FFGB,), ffgb_settings) for name in FFGB_VARIANTS},
    **{name: Family((FEDFUN,), fedfun_settings) for name in FEDFUN_ALGORITHMS},
    **{name: Family((FEDXGB,), fedxgb_settings) for name in FEDXGB_ALGORITHMS},
}


def family_of(algorithm: str) -> Family:
    """The family of ``algorithm`` (none beyond the common keys for an unlisted name)."""
    return FAMILIES.get(algorithm, NO_FAMILY)


def family_settings(settings: RunSettings) -> object | None:
    """The chosen algorithm's family settings (``FFGBSettings``, ``FedFWSettings``, ...), parsed
    from its tables only; None for an algorithm that reads only the common keys. ConfigError
    names the first bad key."""
    parse = family_of(settings.algorithm).parse
    return None if parse is None else parse(settings)


def validate_tables(settings: RunSettings) -> None:
    """Parse the chosen algorithm's family tables; ConfigError names the first bad key."""
    family_settings(settings)


def all_keys() -> tuple[Key, ...]:
    """Every declared key, in ``TABLES`` order."""
    return tuple(key for table in TABLES for key in table.keys)
