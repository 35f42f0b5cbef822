"""The catalogue of algorithm families and what each algorithm reads: only the chosen
algorithm's family tables are parsed (a key of another family must only be declared;
``run_config.declared`` refuses an undeclared one), and a key the run would not read is refused.

``FAMILIES`` lists every family object (``run_config.family``), in the order of
``pyproject.toml``'s ``[tool.flwr.app.config]`` and of the key reference in
docs/configuration.md (``run_config.reference`` writes both from ``tables()``). The server's and
the client's registries key on the same objects; a test checks the three agree. Everything here
reads ``FAMILIES`` when called, so a test may register a family by replacing it.
"""

from __future__ import annotations

from run_config.common import COMMON_KEYS, RunSettings
from run_config.family import Family, Table
from run_config.fedavg import FEDAVG
from run_config.feddr import FEDDR
from run_config.fedfun import FEDFUN
from run_config.fedfw import FEDFW
from run_config.fedxgb import FEDXGB
from run_config.fedxgb_hist import FEDXGB_HIST
from run_config.ffgb import FFGB
from run_config.keys import Key, read_keys
from tasks.errors import ConfigError

FAMILIES: tuple[Family, ...] = (FEDAVG, FEDFW, FEDDR, FFGB, FEDFUN, FEDXGB, FEDXGB_HIST)

COMMON = Table("Common keys", "every algorithm", COMMON_KEYS)


def algorithm_names() -> tuple[str, ...]:
    """Every registered algorithm, family by family."""
    return tuple(name for family in FAMILIES for name in family.names)


def family_of(algorithm: str) -> Family:
    """The family of ``algorithm``, or a ConfigError naming the allowed values."""
    for family in FAMILIES:
        if algorithm in family.names:
            return family
    raise ConfigError.choice("algorithm", algorithm, algorithm_names())


def tables() -> tuple[Table, ...]:
    """Every key table: the common keys, then each family's, each table once."""
    found = [COMMON]
    for family in FAMILIES:
        for name in family.names:
            found += [t for t in family.tables_of(name) if t not in found]
    return tuple(found)


def scoped() -> frozenset[str]:
    """The common keys that only some algorithms read."""
    return frozenset(k for f in FAMILIES for name in f.names for k in f.reads_of(name))


def family_settings(settings: RunSettings) -> object:
    """The chosen algorithm's family settings (``FFGBSettings``, ``FedFWSettings``, ...),
    parsed from its tables only (None for an algorithm whose family has none). ConfigError
    names the first bad key."""
    return family_of(settings.algorithm).parse(settings)


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
        for family in FAMILIES
        for name in family.names
        if (
            table in family.tables_of(name)
            if isinstance(table, Table)
            else table in family.reads_of(name)
        )
    ]


def condition(key: Key) -> str:
    """When a common key has an effect, for the key reference ("" for always)."""
    if key.name in scoped():
        return "read only by " + ", ".join(f"`{name}`" for name in readers(key.name))
    return "" if key.when is None else f"read only with `{key.when.text}`"


def inert_keys(settings: RunSettings) -> dict[str, str]:
    """{key: why it would change nothing in this run} for every key given a value other than
    its default that the run does not read: a key of a table the algorithm does not read, a
    common key only other algorithms read (``scoped()``), a key whose ``when`` does not hold (a
    ``data.*`` key with a task other than ``site``, ...). Each reason names what would make
    the key count."""
    raw, family = settings.raw, family_of(settings.algorithm)
    own_tables, reads = family.tables_of(settings.algorithm), family.reads_of(settings.algorithm)
    common, scoped_keys = read_keys(raw, COMMON_KEYS), scoped()
    algorithm = f"algorithm={settings.algorithm!r}"
    found = {}
    for table in tables():
        if table is not COMMON and table not in own_tables:
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
        if key.name in scoped_keys and key.name not in reads:
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
