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
from run_config.keys import Key, read_keys
from tasks.errors import ConfigError


@dataclass(frozen=True)
class Table:
    """A key table as docs/configuration.md shows it: a title, who reads it, its keys."""

    title: str
    note: str
    keys: tuple[Key, ...]


COMMON = Table("Common keys", "every algorithm", COMMON_KEYS)
DOMAIN = Table(
    "`fedfw.*`: the constraint set D",
    "FedFW and the baselines that solve the same constrained problem",
    DOMAIN_KEYS,
)
FEDFW = Table("`fedfw.*`: Frank-Wolfe", "FedFW's variants", FEDFW_KEYS)
FEDDR = Table("`feddr.*`", "FedDR", FEDDR_KEYS)
FFGB = Table("`ffgb.*`", "the FFGB family", FFGB_KEYS)
FEDFUN = Table("`fedfun.*`", "FedFun (FSR) and its four decentralised baselines", FEDFUN_KEYS)
FEDXGB = Table(
    "`fedxgb.*`", "the XGBoost baselines on Flower's FedXgbBagging and FedXgbCyclic", FEDXGB_KEYS
)
TABLES = (COMMON, DOMAIN, FEDFW, FEDDR, FFGB, FEDFUN, FEDXGB)


@dataclass(frozen=True)
class Family:
    """What an algorithm reads beyond the common keys: its tables, the parser that builds its
    settings from them (None: nothing beyond the common keys), and the common keys that only
    some algorithms read (``reads``, a subset of ``SCOPED``)."""

    tables: tuple[Table, ...] = ()
    parse: Callable[[RunSettings], object] | None = None
    reads: tuple[str, ...] = ()
    steps: tuple[str, ...] = ()  # the keys of its step sizes: what a diverged run names


# common keys that only some algorithms read: a torch model's, local SGD's, the sampler's
MODEL = ("model",)
LOCAL_SGD = ("local-epochs", "local-steps", "batch-size", "learning-rate")
SAMPLED = ("fraction-train",)
FEDAVG_READS = (*MODEL, *LOCAL_SGD, *SAMPLED)

SGD_STEP = ("learning-rate",)

NO_FAMILY = Family()
FAMILIES: dict[str, Family] = {
    "fedavg": Family(reads=FEDAVG_READS, steps=SGD_STEP),
    "fedprox": Family(reads=(*FEDAVG_READS, "fedprox.mu"), steps=SGD_STEP),
    "fedavg-proj": Family((DOMAIN,), constraint_set, FEDAVG_READS, SGD_STEP),
    **{
        name: Family((DOMAIN, FEDFW), fedfw_settings, MODEL, ("fedfw.schedule", "fedfw.lambda0"))
        for name in FEDFW_VARIANTS
    },
    "feddr": Family((DOMAIN, FEDDR), feddr_settings, MODEL, ("feddr.lr", "feddr.eta")),
    **{
        name: Family(
            (FFGB,), ffgb_settings, SAMPLED, ("ffgb.eta0", "ffgb.schedule", "ffgb.oracle-lr")
        )
        for name in FFGB_VARIANTS
    },
    **{
        name: Family((FEDFUN,), fedfun_settings, (), ("fedfun.lr", "fedfun.step"))
        for name in FEDFUN_ALGORITHMS
    },
    **{
        name: Family(
            (FEDXGB,), fedxgb_settings, SAMPLED if name == "fedxgb-bagging" else (), ("fedxgb.eta",)
        )
        for name in FEDXGB_ALGORITHMS
    },
}
SCOPED = ("fedprox.mu", *FEDAVG_READS)


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
    """Parse the chosen algorithm's family tables (ConfigError names the first bad key), then
    refuse every key that would have no effect (``inert_keys``)."""
    family_settings(settings)
    inert = inert_keys(settings)
    if inert:
        raise ConfigError("; ".join(inert.values()))


def readers(table: Table | str) -> list[str]:
    """The algorithms that read a table, or a scoped common key."""
    return [
        name
        for name, family in FAMILIES.items()
        if (table in family.tables if isinstance(table, Table) else table in family.reads)
    ]


def condition(key: Key) -> str:
    """When a common key has an effect, for the key reference ("" for always)."""
    if key.name in SCOPED:
        return "read only by " + ", ".join(f"`{name}`" for name in readers(key.name))
    return "" if key.when is None else f"read only with `{key.when.text}`"


def inert_keys(settings: RunSettings) -> dict[str, str]:
    """{key: why it would change nothing in this run} for every key given a value other than
    its default that the run does not read: a key of a table the algorithm does not read, a
    common key only other algorithms read (``SCOPED``), a key whose ``when`` does not hold (a
    ``data.*`` key with a task other than ``site``, ...). Each reason names what would make
    the key count."""
    raw, family = settings.raw, family_of(settings.algorithm)
    common = read_keys(raw, COMMON_KEYS)
    algorithm = f"algorithm={settings.algorithm!r}"
    found = {}
    for table in TABLES:
        if table is not COMMON and table not in family.tables:
            found.update(
                {
                    key.name: f"{key.name}={raw[key.name]!r} has no effect with "
                    f"{algorithm}: it is read only by {', '.join(readers(table))}"
                    for key in table.keys
                    if key.given(raw)
                }
            )
    for key in COMMON_KEYS:
        if not key.given(raw):
            continue
        if key.name in SCOPED and key.name not in family.reads:
            found[key.name] = (
                f"{key.name}={raw[key.name]!r} has no effect with {algorithm}: "
                f"it is read only by {', '.join(readers(key.name))}"
            )
        elif key.when is not None and not key.when.holds(common):
            found[key.name] = (
                f"{key.name}={raw[key.name]!r} has no effect in this run: it is "
                f"read only with {key.when.text}, and the run has "
                f"{key.when.on}={common[key.when.on]!r}"
            )
    return found


def all_keys() -> tuple[Key, ...]:
    """Every declared key, in ``TABLES`` order."""
    return tuple(key for table in TABLES for key in table.keys)
