"""The server's relay book for decentralised algorithms: each node's latest model, kept encoded,
and which version of each neighbour's model every node already holds.

Flower has no peer-to-peer transport, so neighbour exchange on a graph is emulated: the server
keeps the last accepted model of every graph vertex (a partition id) exactly as it arrived,
never averages or evaluates it, and puts into each node's message only the models of its
neighbours that changed since that node last received them. A neighbour that failed or did not
answer keeps its last model. A node that may have lost what it held gets everything again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from functions.node_models import Config, reprefixed
from functions.params import arrays_to_record, record_to_arrays
from functions.protocol import neighbour_prefix
from oracles.graphs import Graph


@dataclass(frozen=True)
class StoredModel:
    """A vertex's model as it arrived (keys without prefix) and the round that produced it."""

    config: Config
    arrays: dict[str, np.ndarray]
    version: int


class RelayBook:
    """Latest models by vertex and what each vertex was sent; vertices are partition ids."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.latest: dict[int, StoredModel] = {}
        self.delivered: dict[int, dict[int, int]] = {v: {} for v in range(graph.n)}

    def store(self, vertex: int, config: Config, arrays: dict[str, np.ndarray], prefix: str,
              version: int) -> None:
        """Keep ``vertex``'s new model (its keys under ``prefix`` in the reply)."""
        config, arrays = reprefixed(config, arrays, prefix, "")
        self.latest[vertex] = StoredModel(config, arrays, version)

    def own_version(self, vertex: int) -> int:
        """The round of ``vertex``'s last accepted model; -1 when it has none."""
        stored = self.latest.get(vertex)
        return -1 if stored is None else stored.version

    def neighbours_with_models(self, vertex: int) -> list[int]:
        return [j for j in self.graph.neighbours(vertex) if j in self.latest]

    def outgoing(self, vertex: int, everything: bool) -> tuple[dict[str, list[int]], list[int]]:
        """The neighbour listing for ``vertex`` (ids and versions of every neighbour model it
        should hold) and which of those models to send: the changed ones, or all of them."""
        listed = self.neighbours_with_models(vertex)
        held = self.delivered[vertex]
        send = [j for j in listed if everything or held.get(j) != self.latest[j].version]
        return {"ids": listed, "versions": [self.latest[j].version for j in listed]}, send

    def model_records(self, models: dict[str, StoredModel]) -> tuple[ConfigRecord, ArrayRecord]:
        """``models`` (prefix -> stored model) as one config and one array record."""
        config: Config = {}
        arrays: dict[str, np.ndarray] = {}
        for prefix, stored in models.items():
            c, a = reprefixed(stored.config, stored.arrays, "", prefix)
            config.update(c)
            arrays.update(a)
        return ConfigRecord(config), arrays_to_record(arrays)

    def neighbour_models(self, send: list[int]) -> dict[str, StoredModel]:
        return {neighbour_prefix(j): self.latest[j] for j in send}

    def mark_delivered(self, vertex: int, sent: list[int], everything: bool) -> None:
        """``vertex`` now holds the sent models (and, after a full send, nothing else)."""
        if everything:
            self.delivered[vertex] = {}
        for j in sent:
            self.delivered[vertex][j] = self.latest[j].version

    def forget_deliveries(self, vertex: int) -> None:
        """``vertex`` may hold nothing (no answer, an error): everything goes again next time."""
        self.delivered[vertex] = {}

    # -- checkpoint -----------------------------------------------------------------------------
    def to_records(self) -> RecordDict:
        out = RecordDict({"relay": ConfigRecord({
            "vertices": list(self.latest),
            "versions": [s.version for s in self.latest.values()],
            "delivered": [f"{v}:{j}:{version}" for v, held in self.delivered.items()
                          for j, version in held.items()],
        })})
        models, arrays = self.model_records({f"v{v}/": s for v, s in self.latest.items()})
        out["relay-models"], out["relay-arrays"] = models, arrays
        return out

    def load_records(self, state: RecordDict) -> None:
        relay = state["relay"]
        config = dict(state["relay-models"])
        arrays = record_to_arrays(state["relay-arrays"])
        self.latest = {}
        for vertex, version in zip(relay["vertices"], relay["versions"]):
            c, a = reprefixed(config, arrays, f"v{vertex}/", "")
            self.latest[vertex] = StoredModel(c, a, version)
        self.delivered = {v: {} for v in range(self.graph.n)}
        for entry in relay["delivered"]:
            v, j, version = (int(part) for part in entry.split(":"))
            self.delivered[v][j] = version
