"""The server's global ensemble and every node's copy of it, kept current with deltas.

Each message to a node carries what that node lacks since the version it holds (different for
every node): learners it has not seen, the common rescaling, and, instead of the node's own
learners of its last accepted round, the factor with which they entered the average (the FFGB
paper's (N - 1) K learners down, not N K). A node that holds nothing, or whose last reply was an
error, gets the whole ensemble. Each learner is packed for the wire once (``PackCache``), however
many nodes receive it.

Used by FFGB (its boosting rounds, its distillation and its one-shot FFGB.L) and by the frame
tests' boosted trees: the sync is written once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flwr.app import ArrayRecord, ConfigRecord

from functions.ensembles import Delta, Ensemble, PackCache, average, pack_delta
from functions.learners import Learner
from functions.params import arrays_to_record
from strategies.node_book import NodeSlot


@dataclass
class SyncSlot(NodeSlot):
    """What a node holds: the ensemble's version (None: nothing), and its own learners of its
    last accepted round, which its next delta leaves out: appended at the update starting at
    ``own_version``, sequence numbers ``own_first`` .. + ``own_count`` - 1 (0: none), averaged
    with ``own_fraction``."""

    version: int | None = None
    own_version: int = 0
    own_first: int = 0
    own_count: int = 0
    own_fraction: float = 0.0

    def lose(self) -> None:
        super().lose()
        self.version = None
        self.forget_own()

    def forget_own(self) -> None:
        self.own_version = self.own_first = self.own_count = 0
        self.own_fraction = 0.0


class EnsembleSync:
    """The global ensemble, and the delta each node's slot says it lacks."""

    def __init__(self, ensemble: Ensemble) -> None:
        self.ensemble = ensemble
        self.packs = PackCache()

    def delta_for(self, slot: SyncSlot) -> Delta:
        """What the node lacks: everything after a failure, else since the version it holds,
        without its own learners of its last accepted round."""
        own = (slot.own_version, slot.own_first, slot.own_count, slot.own_fraction)
        slot.forget_own()  # sent now, or never again
        since = slot.version
        if slot.needs_sync or since is None or since < self.ensemble.offset:
            return self.ensemble.snapshot()
        version, first, count, fraction = own
        if count and since <= version:
            factor = fraction * self.ensemble.scales_after(version)
            return self.ensemble.delta(since, omit=(first, count), own_factor=factor)
        return self.ensemble.delta(since)

    def records_for(self, slot: SyncSlot) -> tuple[ConfigRecord, ArrayRecord, int]:
        """The node's delta as records, and its number of learners; from now on the slot says
        the node holds the current version (an error reply sets ``needs_sync`` again)."""
        delta = self.delta_for(slot)
        config, arrays = pack_delta(delta, self.packs)
        slot.version, slot.needs_sync = self.ensemble.version, False
        return ConfigRecord(config), arrays_to_record(arrays), len(delta.learners)

    def average(self, pairs: Sequence[tuple[SyncSlot, Delta]], keep_own: bool = True) -> int:
        """The plain average of the contributors' functions (each an increment on the current
        version, in the given order); with ``keep_own`` each contributor's slot records where
        its learners went, so its next delta leaves them out. Returns the version before."""
        before, fraction = self.ensemble.version, 1.0 / len(pairs)
        first = before + 1
        for slot, delta in pairs:
            count = len(delta.learners)
            if keep_own:
                slot.own_version, slot.own_first, slot.own_count = before, first, count
                slot.own_fraction = fraction
            first += count
        self.ensemble = average(self.ensemble, [d for _, d in pairs], [fraction] * len(pairs))
        return before

    def replace(self, learner: Learner, slots: Sequence[SyncSlot]) -> int:
        """The function becomes ``learner`` alone (scale 0: a distilled ensemble); no node
        holds own learners of it any more. Returns the version before."""
        before = self.ensemble.version
        self.ensemble = self.ensemble.extend([learner], [1.0], scale=0.0)
        for slot in slots:
            slot.forget_own()
        self.packs.keep(self.ensemble.learners)
        return before

    def rebuild(self, learners: Sequence[Learner], weights: Sequence[float]) -> None:
        """The function becomes base + sum_k weights[k] learners[k], a new version with no
        history (a node at any earlier version gets it whole); learners keep their packs."""
        old = self.ensemble
        self.ensemble = Ensemble(old.base, old.n_features, tuple(learners),
                                 tuple(float(w) for w in weights), offset=old.version)
        self.packs.keep(self.ensemble.learners)

    def restore(self, ensemble: Ensemble) -> None:
        """Continue from a checkpoint's ensemble."""
        self.ensemble, self.packs = ensemble, PackCache()
