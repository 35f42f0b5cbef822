"""Communication graphs: topologies, spectra, seeding and the refusal of bad graphs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from oracles.graphs import TOPOLOGIES, Graph, format_edges, make_graph, parse_edges


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_every_topology_is_connected_with_the_right_shape(n):
    ring = make_graph("ring", n, seed=1)
    assert len(ring.edges) == (1 if n == 2 else n)
    assert {ring.degree(i) for i in range(n)} == ({1} if n == 2 else {2})
    complete = make_graph("complete", n, seed=1)
    assert len(complete.edges) == n * (n - 1) // 2
    degree = 2 if n % 2 else 3
    if degree < n:
        regular = make_graph("regular", n, seed=1, degree=degree)
        assert {regular.degree(i) for i in range(n)} == {degree}
        assert len(regular.edges) == n * degree // 2
    erdos = make_graph("erdos-renyi", n, seed=1, probability=0.4)
    for graph in [ring, complete, erdos] + ([regular] if degree < n else []):
        assert graph.is_connected()
        assert all(i < j for i, j in graph.edges) and list(graph.edges) == sorted(set(graph.edges))
        assert all(i in graph.neighbours(j) for i, j in graph.edges)


def test_ring_of_two_and_three():
    assert make_graph("ring", 2, seed=0).edges == ((0, 1),)
    assert make_graph("ring", 3, seed=0).edges == ((0, 1), (0, 2), (1, 2))


@pytest.mark.parametrize("topology", TOPOLOGIES[:-1])
def test_the_seed_fixes_the_graph(topology):
    assert make_graph(topology, 9, seed=3, degree=4) == make_graph(topology, 9, seed=3, degree=4)


def test_different_seeds_give_different_rings():
    rings = {make_graph("ring", 7, seed=s).edges for s in range(5)}
    assert len(rings) > 1


@pytest.mark.parametrize("topology", TOPOLOGIES[:-1])
def test_laplacian_and_its_spectrum(topology):
    graph = make_graph(topology, 8, seed=2, degree=3)
    lap = graph.laplacian()
    assert np.allclose(lap.sum(1), 0) and np.allclose(lap, lap.T)
    assert np.allclose(np.diag(lap), [graph.degree(i) for i in range(8)])
    assert graph.algebraic_connectivity() > 1e-9
    assert graph.spectral_norm() >= max(graph.degree(i) for i in range(8)) + 1 - 1e-9


def test_complete_and_ring_connectivity_have_closed_forms():
    assert math.isclose(make_graph("complete", 6, seed=0).algebraic_connectivity(), 6)
    for n in (3, 5, 10):
        nu = make_graph("ring", n, seed=0).algebraic_connectivity()
        assert math.isclose(nu, 2 - 2 * math.cos(2 * math.pi / n), rel_tol=1e-9)


def test_dense_regular_graph_is_the_complement_of_a_sparse_one():
    graph = make_graph("regular", 10, seed=0, degree=7)
    assert {graph.degree(i) for i in range(10)} == {7} and graph.is_connected()


def test_explicit_edges_round_trip():
    graph = make_graph("edges", 4, seed=0, edges="0-1, 2-1,3-2")
    assert graph.edges == ((0, 1), (1, 2), (2, 3))
    assert parse_edges(format_edges(graph.edges), 4) == graph.edges
    assert "nu=" in graph.describe() and "0-1,1-2,2-3" in graph.describe()


@pytest.mark.parametrize(
    "text,named",
    [
        ("0-1,1-7", "vertex 7"),
        ("0-1,2-2", "self loop at vertex 2"),
        ("0-1,1:2", "'1:2'"),
        ("0-1,1-", "'1-'"),
        ("0-1,1-0", "twice"),
        ("", "no edges"),
        ("0-1,2-3", r"components: \[0, 1\]; \[2, 3\]"),
    ],
)
def test_bad_edge_lists_are_refused_by_name(text, named):
    with pytest.raises(ValueError, match=named):
        make_graph("edges", 4, seed=0, edges=text)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="odd"):
        make_graph("regular", 5, seed=0, degree=3)
    with pytest.raises(ValueError, match="degree"):
        make_graph("regular", 4, seed=0, degree=4)
    with pytest.raises(ValueError, match="at least 2"):
        make_graph("ring", 1, seed=0)
    with pytest.raises(ValueError, match="unknown topology"):
        make_graph("star", 4, seed=0)
    with pytest.raises(ValueError, match="probability"):
        make_graph("erdos-renyi", 4, seed=0, probability=0.0)
    with pytest.raises(ValueError, match="draws"):
        make_graph("erdos-renyi", 30, seed=0, probability=1e-4)
    with pytest.raises(ValueError, match="sorted"):
        Graph(3, ((1, 2), (0, 1)))


@pytest.mark.parametrize("topology", ["erdos-renyi", "regular", "ring"])
def test_neighbours_and_degrees_equal_a_scan_of_the_edges(topology):
    graph = make_graph(topology, 40, seed=3, degree=4, probability=0.2)
    for i in range(graph.n):
        scanned = sorted(b if a == i else a for a, b in graph.edges if i in (a, b))
        assert graph.neighbours(i) == tuple(scanned) and graph.degree(i) == len(scanned)
    assert graph.spectral_norm() == float(np.linalg.eigvalsh(graph.laplacian())[-1])
