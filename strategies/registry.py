"""The server half of every algorithm family: its strategy builder, keyed by the family object.

A family is declared once (``run_config.family``) and listed in ``run_config.families``; the
client half registers its handlers under the same object in ``client_app.registry``, and a test
checks that the three agree. Nothing here imports the client half.
"""

from __future__ import annotations

from collections.abc import Callable

from run_config.common import RunSettings
from run_config.families import family_of
from run_config.family import Family
from run_config.fedavg import FEDAVG
from run_config.feddr import FEDDR
from run_config.fedfun import FEDFUN
from run_config.fedfw import FEDFW
from run_config.fedxgb import FEDXGB
from run_config.fedxgb_hist import FEDXGB_HIST
from run_config.ffgb import FFGB
from strategies.base import FederatedStrategy
from strategies.fedavg import build_fedavg_family
from strategies.feddr import build_feddr
from strategies.fedfun import build_fedfun
from strategies.fedfw import build_fedfw
from strategies.fedxgb import build_fedxgb
from strategies.fedxgb_hist import build_fedxgb_hist
from strategies.ffgb import build_ffgb
from tasks.datasets import TaskData
from tasks.errors import ConfigError
from tasks.federation import task_for

# parses the family's keys (``settings``) and returns its strategy for the task (bundled, or
# agreed with the sites); raises ConfigError before any node trains
StrategyBuilder = Callable[[RunSettings, TaskData], FederatedStrategy]

STRATEGIES: dict[Family, StrategyBuilder] = {
    FEDAVG: build_fedavg_family,
    FEDFW: build_fedfw,
    FEDDR: build_feddr,
    FFGB: build_ffgb,
    FEDFUN: build_fedfun,
    FEDXGB: build_fedxgb,
    FEDXGB_HIST: build_fedxgb_hist,
}


def strategy_for(settings: RunSettings, task: TaskData | None = None) -> FederatedStrategy:
    """The strategy of the run's algorithm for ``task``, by default the run's bundled task;
    ConfigError for an unknown algorithm or a family without a server half."""
    family = family_of(settings.algorithm)
    build = STRATEGIES.get(family)
    if build is None:
        raise ConfigError(
            f"algorithm={settings.algorithm!r}: family {family.name!r} has no server half"
        )
    return build(settings, task_for(settings.data) if task is None else task)
