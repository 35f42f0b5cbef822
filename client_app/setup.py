"""A node's setup for a run, built once per run and node instead of once per message: the parsed
settings, its family table (``FFGBSettings``, ``FedFWSettings``, ...), its local data, its torch
device and its own overrides of the run's settings (FedFW's D_i, FedFun's learner). Nothing else
in the ClientApp reads the node config.

Setups are cached in this process, keyed by (run id, node id, a digest of the run config and the
node config): in simulation a node's setup is built on its first message and reused for the rest
of the run; in deployment Flower may start a ClientApp process per message, and then it is built
once per process. A setup holds nothing of the node's ``Context.state``, only what the two configs
determine, so reusing it cannot carry one run's state into another. What fails to build (a bad
partition id, a device the machine lacks) is not cached: the next message fails the same way.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from functools import cached_property
from typing import Any, Generic, TypeVar

import torch
from flwr.app import Context

from functions.protocol import NUM_PARTITIONS, PARTITION_ID
from run_config.common import RunSettings
from run_config.families import family_of
from tasks.devices import AUTO, NODE_KEY, resolve_device
from tasks.errors import ConfigError
from tasks.federation import LocalData, local_data
from tasks.site_data import node_data
from tasks.site_schema import Schema

MAX_SETUPS = 1024  # setups kept per process (least recently used dropped first)

S = TypeVar("S")  # the family's settings
N = TypeVar("N")  # what this node's node config makes of them


def partition_of(node_config: Mapping[str, Any]) -> tuple[int, int]:
    """``partition-id`` and ``num-partitions`` from the node config (simulation, --node-config)."""
    try:
        return int(node_config[PARTITION_ID]), int(node_config[NUM_PARTITIONS])
    except KeyError as err:
        raise ConfigError(
            f"node config lacks {err.args[0]!r}; start the SuperNode with "
            '--node-config "partition-id=<i> num-partitions=<n>"'
        ) from None


class NodeSetup(Generic[S, N]):
    """What one node needs for every message of a run, for a family whose settings are ``S``;
    each part is built on first use (in the order a message needs them) and then kept."""

    def __init__(self, settings: RunSettings, node_config: Mapping[str, Any]) -> None:
        self.settings = settings
        self.node_config = dict(node_config)
        self._site_data: tuple[str, LocalData] | None = None  # (schema JSON, data)

    @cached_property
    def data(self) -> LocalData:
        """This node's partition and test shard."""
        partition_id, num_partitions = partition_of(self.node_config)
        return local_data(self.settings.data, partition_id, num_partitions)

    @property
    def site_share(self) -> float:
        """Sites' own files: the share of a node's rows held out for testing
        (``partitioning.local-test`` when > 0, else ``test-fraction``)."""
        return self.settings.local_test or self.settings.test_fraction

    def site_data(self, schema_json: str) -> LocalData:
        """This node's own file under the agreed schema (its JSON: decoded, read and
        transformed once per schema)."""
        if self._site_data is None or self._site_data[0] != schema_json:
            partition_id, num_partitions = partition_of(self.node_config)
            data = node_data(
                Schema.from_json(schema_json),
                self.node_config,
                self.settings.dataset_path,
                self.site_share,
                partition_id,
                num_partitions,
                self.settings.seed,
            )
            self._site_data = (schema_json, data)
        return self._site_data[1]

    @cached_property
    def device(self) -> torch.device:
        """The torch device of node config ``device`` (``auto``: CUDA when torch sees one)."""
        return resolve_device(self.node_config.get(NODE_KEY, AUTO))

    @cached_property
    def family(self) -> S:
        """The run's family settings, parsed from the chosen algorithm's family tables only."""
        return family_of(self.settings.algorithm).parse(self.settings)

    @cached_property
    def overrides(self) -> N:
        """This node's own values from its node config (the family's ``node_overrides``; None
        for a family whose nodes take the run's settings)."""
        return family_of(self.settings.algorithm).node_overrides(self.family, self.node_config)


def config_digest(run_config: Mapping[str, Any], node_config: Mapping[str, Any]) -> str:
    """A digest of both configs (key order aside; 1, 1.0 and True are different values)."""
    text = repr((sorted(run_config.items()), sorted(node_config.items())))
    return hashlib.sha256(text.encode()).hexdigest()


_SETUPS: OrderedDict[tuple[int, int, str], NodeSetup[Any, Any]] = OrderedDict()
_LOCK = threading.Lock()


def node_setup(context: Context) -> NodeSetup[Any, Any]:
    """The setup of this context's run and node: cached, or built now (the run config parsed,
    ConfigError naming a bad key, as on every message before)."""
    key = (context.run_id, context.node_id, config_digest(context.run_config, context.node_config))
    with _LOCK:
        setup = _SETUPS.get(key)
        if setup is not None:
            _SETUPS.move_to_end(key)
            return setup
    setup = NodeSetup(RunSettings.from_run_config(context.run_config), context.node_config)
    with _LOCK:
        setup = _SETUPS.setdefault(key, setup)
        while len(_SETUPS) > MAX_SETUPS:
            _SETUPS.popitem(last=False)
    return setup


def clear_setups() -> None:
    """Forget every cached setup (tests)."""
    with _LOCK:
        _SETUPS.clear()
