"""The server's relay book for decentralised algorithms: each node's latest model, kept encoded,
and which version of each neighbour's model every node already holds.

Flower has no peer-to-peer transport, so neighbour exchange on a graph is emulated: the server
keeps the last accepted model of every graph vertex (a partition id) exactly as it arrived,
never averages or evaluates it, and puts into each node's message only the models of its
neighbours that changed since that node last received them. A neighbour that failed or did not
answer keeps its last model. A node that may have lost what it held gets everything again. Its
checkpoint is a ``RelayState`` (``strategies.state_codec``), whose models are validated as replies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord

from functions.errors import DecodeError
from functions.node_models import Config, decode_node_model, reprefixed
from functions.params import arrays_to_record, record_to_arrays
from functions.protocol import neighbour_prefix
from functions.sealed_relay import check_sealed_form, is_sealed
from oracles.graphs import Graph
from strategies.state_codec import LIMITS, checks


@dataclass(frozen=True)
class StoredModel:
    """A vertex's model as it arrived (keys without prefix) and the round that produced it."""

    config: Config
    arrays: dict[str, np.ndarray]
    version: int


@dataclass(frozen=True)
class RelayModels:
    """Every vertex's latest model with its version, in the models' own wire form (a
    ``state_codec.Wire``): keys under ``v<vertex>/``, read back through the replies' decoder
    (``decode_node_model`` under the context's ``LIMITS``; a sealed model's form,
    ``functions.sealed_relay``), so a checkpoint holds only models a node could have sent."""

    RECORDS: ClassVar[dict[str, type]] = {"": ConfigRecord, "arrays": ArrayRecord}
    latest: dict[int, StoredModel]

    def to_records(self) -> dict[str, ConfigRecord | ArrayRecord]:
        config, arrays = model_records({_prefix(v): s for v, s in self.latest.items()})
        config["vertices"] = list(self.latest)
        config["versions"] = [s.version for s in self.latest.values()]
        return {"": config, "arrays": arrays}

    @classmethod
    def from_records(
        cls, records: Mapping[str, ConfigRecord | ArrayRecord], context: Mapping[str, Any]
    ) -> RelayModels:
        config, arrays = dict(records[""]), record_to_arrays(records["arrays"])
        vertices, versions = config.pop("vertices", None), config.pop("versions", None)
        if (
            not isinstance(vertices, list)
            or not isinstance(versions, list)
            or len(vertices) != len(versions)
            or len(set(vertices)) != len(vertices)
            or any(type(x) is not int or x < 0 for x in [*vertices, *versions])
        ):
            raise DecodeError(
                "relay models: vertices and versions must be lists of as many "
                "non-negative ints, the vertices distinct"
            )
        prefixes = [_prefix(v) for v in vertices]
        stray = [k for k in [*config, *arrays] if not k.startswith(tuple(prefixes))]
        if stray:
            raise DecodeError(f"relay models: keys of no listed vertex {stray[:3]}")
        latest = {}
        for vertex, version, prefix in zip(vertices, versions, prefixes):
            if is_sealed(config, prefix):
                check_sealed_form(reprefixed(config, {}, prefix, "")[0], context[LIMITS].max_bytes)
            else:
                decode_node_model(config, arrays, prefix, context[LIMITS])
            latest[vertex] = StoredModel(*reprefixed(config, arrays, prefix, ""), version)
        return cls(latest)


@dataclass
class RelayState:
    """The relay book as saved: the latest models, and who holds which neighbour model in which
    version (rows vertex, neighbour, version)."""

    models: RelayModels
    delivered: np.ndarray = field(metadata=checks("int64", shape=(None, 3)))


def _prefix(vertex: int) -> str:
    return f"v{vertex}/"


def model_records(models: dict[str, StoredModel]) -> tuple[ConfigRecord, ArrayRecord]:
    """``models`` (prefix -> stored model) as one config and one array record."""
    config: Config = {}
    arrays: dict[str, np.ndarray] = {}
    for prefix, stored in models.items():
        c, a = reprefixed(stored.config, stored.arrays, "", prefix)
        config.update(c)
        arrays.update(a)
    return ConfigRecord(config), arrays_to_record(arrays)


class RelayBook:
    """Latest models by vertex and what each vertex was sent; vertices are partition ids."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.latest: dict[int, StoredModel] = {}
        self.delivered: dict[int, dict[int, int]] = {v: {} for v in range(graph.n)}

    def store(
        self, vertex: int, config: Config, arrays: dict[str, np.ndarray], prefix: str, version: int
    ) -> None:
        """Keep ``vertex``'s new model (its keys under ``prefix`` in the reply)."""
        config, arrays = reprefixed(config, arrays, prefix, "")
        self.latest[vertex] = StoredModel(config, arrays, version)

    def own_version(self, vertex: int) -> int:
        """The round of ``vertex``'s last accepted model; -1 when it has none."""
        stored = self.latest.get(vertex)
        return -1 if stored is None else stored.version

    def outgoing(
        self, vertex: int, everything: bool, since: int = -1
    ) -> tuple[dict[str, list[int]], list[int]]:
        """The neighbour listing for ``vertex`` (ids and versions of every neighbour model of
        round ``since`` or later it should hold) and which of those models to send: the
        changed ones, or all of them."""
        listed = [
            j
            for j in self.graph.neighbours(vertex)
            if j in self.latest and self.latest[j].version >= since
        ]
        held = self.delivered[vertex]
        send = [j for j in listed if everything or held.get(j) != self.latest[j].version]
        return {"ids": listed, "versions": [self.latest[j].version for j in listed]}, send

    def neighbour_models(self, send: list[int]) -> dict[str, StoredModel]:
        return {neighbour_prefix(j): self.latest[j] for j in send}

    def mark_delivered(self, vertex: int, sent: list[int], everything: bool) -> None:
        """``vertex`` now holds the sent models (and, after a full send, nothing else)."""
        if everything:
            self.delivered[vertex] = {}
        for j in sent:
            self.delivered[vertex][j] = self.latest[j].version

    def drop(self, vertex: int) -> None:
        """``vertex``'s node left the run: its model is no longer relayed (its neighbours go on
        with the rest of their neighbourhood, as with a vertex that never had a node)."""
        self.latest.pop(vertex, None)
        self.delivered[vertex] = {}
        for held in self.delivered.values():
            held.pop(vertex, None)

    def forget_deliveries(self, vertex: int) -> None:
        """``vertex`` may hold nothing (no answer, an error): everything goes again next time."""
        self.delivered[vertex] = {}

    # -- checkpoint -----------------------------------------------------------------------------
    def state(self) -> RelayState:
        """The book as its checkpoint holds it (the graph is the run's: not saved)."""
        held = [
            (v, j, version) for v, models in self.delivered.items() for j, version in models.items()
        ]
        return RelayState(
            RelayModels(dict(self.latest)), np.array(held, dtype=np.int64).reshape(len(held), 3)
        )

    @classmethod
    def restore(cls, graph: Graph, state: RelayState) -> RelayBook:
        """The book ``state`` describes on ``graph``; ``DecodeError`` for a vertex outside it or a
        delivery of a model the book does not hold."""
        book = cls(graph)
        outside = [v for v in state.models.latest if not 0 <= v < graph.n]
        if outside:
            raise DecodeError(f"relay: models of vertices {outside} outside the graph of {graph.n}")
        book.latest = dict(state.models.latest)
        for v, j, version in state.delivered.tolist():
            if v not in book.delivered or j not in book.latest:
                raise DecodeError(f"relay: delivered ({v}, {j}) names an unknown vertex or model")
            book.delivered[v][j] = version
        return book
