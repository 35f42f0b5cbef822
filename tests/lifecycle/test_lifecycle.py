"""The round lifecycle's shared parts: one seeded sampler, one slot per node moved as one, and
the book's checkpoint of any family's slots."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from functions.errors import DecodeError
from strategies.node_book import NodeBook, NodeSlot
from strategies.sampling import BERNOULLI, Sampler

NODES = [2**63 + 5, 7, 2**64 - 1, 12, 40]  # uint64 ids: drawn by position, never as floats


@pytest.mark.parametrize("fraction, size", [(0.5, 2), (0.1, 1), (0.99, 4), (1.0, 5)])
def test_the_fraction_rule_draws_int_p_n_nodes_at_least_one_in_roster_order(fraction, size):
    draws = [Sampler(fraction, seed=3).draw(NODES) for _ in range(2)]
    assert draws[0] == draws[1] and len(draws[0]) == size  # seeded
    assert draws[0] == [n for n in NODES if n in draws[0]]  # in the roster's order


def test_a_draw_of_every_node_costs_no_random_number():
    sampler = Sampler(1.0, seed=3)
    before = sampler.rng.bit_generator.state
    assert sampler.draw(NODES) == NODES and sampler.rng.bit_generator.state == before


def test_the_bernoulli_rule_keeps_each_node_with_probability_p():
    sampler = Sampler(0.3, seed=0, rule=BERNOULLI)
    counts = np.zeros(len(NODES))
    for _ in range(2000):
        picked = sampler.draw(NODES)
        assert picked == [n for n in NODES if n in picked]
        counts += [n in picked for n in NODES]
    assert np.allclose(counts / 2000, 0.3, atol=0.04)


@dataclass
class CountingSlot(NodeSlot):
    """A family's slot: an optional version, a count and a share."""

    version: int | None = None
    count: int = 0
    share: float = 0.0

    def lose(self) -> None:
        super().lose()
        self.version = None


def test_a_returning_node_takes_its_partitions_slot_in_one_operation():
    book = NodeBook(NODES, "test", CountingSlot)
    book.accept(3, [7])
    book[7].version, book[7].count = 9, 2
    book.rebind(7, 99)
    assert book.node_ids == [NODES[0], 99, *NODES[2:]] and book.position(99) == 1
    slot = book[99]
    assert (slot.last_accepted, slot.count) == (3, 2)  # kept: the partition's history
    assert (slot.needs_sync, slot.version) == (True, None)  # lost: it holds nothing
    assert 7 not in book


def test_the_book_saves_any_familys_slots_and_refuses_what_does_not_fit():
    book = NodeBook(NODES, "test", CountingSlot)
    book.accept(2, NODES[:2])
    book[NODES[1]].version, book[NODES[2]].share = 4, 0.25
    again = NodeBook.from_record(book.to_record(), "test", CountingSlot)
    assert again.node_ids == book.node_ids
    assert [again[n] for n in NODES] == [book[n] for n in NODES]
    record = book.to_record()
    record["count"] = record["count"][:-1]
    with pytest.raises(DecodeError, match="'count' is not a list of 5"):
        NodeBook.from_record(record, "test", CountingSlot)
    record = book.to_record()
    record["needs-sync"] = ["yes"] * 5
    with pytest.raises(DecodeError, match="needs-sync='yes'"):
        NodeBook.from_record(record, "test", CountingSlot)
