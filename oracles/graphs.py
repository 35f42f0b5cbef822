"""Communication graphs of decentralised learning: vertices are partition ids 0..n-1.

FedFun's theory needs a connected graph (Assumption 2: the Laplacian's second-smallest
eigenvalue nu > 0) and a step gamma < 1/(lam ||L||) (Assumption 3), so a ``Graph`` reports both.
``make_graph`` builds every topology from a seed (numpy's ``default_rng``), so a run's graph is
reproducible, and refuses a disconnected graph.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

TOPOLOGIES = ("ring", "regular", "complete", "erdos-renyi", "edges")
MAX_TRIES = 1000  # resamples of a random graph before giving up

Edge = tuple[int, int]


@dataclass(frozen=True)
class Graph:
    """An undirected simple graph on vertices 0..n-1; ``edges`` sorted pairs (i, j), i < j.

    Construction checks the form (``ValueError``); connectivity is ``make_graph``'s check.
    """

    n: int
    edges: tuple[Edge, ...]

    def __post_init__(self) -> None:
        if type(self.n) is not int or self.n < 2:
            raise ValueError(f"a graph needs at least 2 vertices, got n={self.n!r}")
        edges = tuple((int(i), int(j)) for i, j in self.edges)
        if any(not 0 <= i < j < self.n for i, j in edges):
            raise ValueError(
                f"edges must be pairs i < j of vertices in [0, {self.n}), got "
                f"{[e for e in edges if not 0 <= e[0] < e[1] < self.n]}"
            )
        if list(edges) != sorted(set(edges)):
            raise ValueError("edges must be sorted and without duplicates")
        object.__setattr__(self, "edges", edges)

    @cached_property
    def _adjacency(self) -> tuple[tuple[int, ...], ...]:
        """Each vertex's neighbours, sorted: built once, in one pass over the edges (a server
        asks for a vertex's neighbours in every message of every round)."""
        joined: list[list[int]] = [[] for _ in range(self.n)]
        for i, j in self.edges:
            joined[i].append(j)
            joined[j].append(i)
        return tuple(tuple(sorted(vertices)) for vertices in joined)

    @cached_property
    def _spectrum(self) -> np.ndarray:
        """L's eigenvalues, ascending: computed once per graph (O(n^3))."""
        return np.linalg.eigvalsh(self.laplacian())

    def neighbours(self, i: int) -> tuple[int, ...]:
        """The vertices joined to ``i``, sorted."""
        return self._adjacency[i]

    def degree(self, i: int) -> int:
        return len(self._adjacency[i])

    def laplacian(self) -> np.ndarray:
        """L with L_ii = degree of i and L_ij = -1 for each edge (float64, (n, n))."""
        lap = np.zeros((self.n, self.n))
        for i, j in self.edges:
            lap[i, j] = lap[j, i] = -1.0
        lap[np.diag_indices(self.n)] = -lap.sum(axis=1)
        return lap

    def algebraic_connectivity(self) -> float:
        """nu, the second-smallest eigenvalue of L (Assumption 2: > 0 iff connected)."""
        return float(self._spectrum[1])

    def spectral_norm(self) -> float:
        """||L||, its largest eigenvalue (Assumption 3: gamma < 1 / (lam ||L||))."""
        return float(self._spectrum[-1])

    def components(self) -> list[list[int]]:
        """The connected components, each sorted, ordered by their smallest vertex."""
        parent = list(range(self.n))

        def root(v: int) -> int:
            while parent[v] != v:
                parent[v] = parent[parent[v]]
                v = parent[v]
            return v

        for i, j in self.edges:
            parent[root(i)] = root(j)
        groups: dict[int, list[int]] = {}
        for v in range(self.n):
            groups.setdefault(root(v), []).append(v)
        return sorted(groups.values())

    def is_connected(self) -> bool:
        return len(self.components()) == 1

    def describe(self) -> str:
        """One line for logs; the edge list, in ``parse_edges`` syntax, reproduces the graph."""
        degrees = [self.degree(i) for i in range(self.n)]
        return (
            f"n={self.n}, {len(self.edges)} edges, degree {min(degrees)}..{max(degrees)}, "
            f"nu={self.algebraic_connectivity():.4g}, ||L||={self.spectral_norm():.4g}, "
            f"edges {format_edges(self.edges)}"
        )


def format_edges(edges: tuple[Edge, ...]) -> str:
    """Edges as text, "0-1,1-2" (the inverse of ``parse_edges``)."""
    return ",".join(f"{i}-{j}" for i, j in edges)


def parse_edges(text: str, n: int) -> tuple[Edge, ...]:
    """Sorted edges (i < j) from text like "0-1,1-2,2-3"; ``ValueError`` on a malformed pair, a
    vertex outside [0, n), a self loop or an edge listed twice."""
    if not text.strip():
        raise ValueError("no edges given: expected text like '0-1,1-2'")
    edges: set[Edge] = set()
    for item in text.split(","):
        parts = item.strip().split("-")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            raise ValueError(f"malformed edge {item.strip()!r} in {text!r}: expected 'i-j'")
        i, j = (int(p) for p in parts)
        for v in (i, j):
            if v >= n:
                raise ValueError(f"edge {item.strip()!r}: vertex {v} is not in [0, {n})")
        if i == j:
            raise ValueError(f"edge {item.strip()!r}: self loop at vertex {i}")
        edge = (min(i, j), max(i, j))
        if edge in edges:
            raise ValueError(f"edge {item.strip()!r} is listed twice")
        edges.add(edge)
    return tuple(sorted(edges))


def make_graph(
    topology: str, n: int, seed: int, degree: int = 3, probability: float = 0.5, edges: str = ""
) -> Graph:
    """The connected graph of ``topology`` on n vertices, the same for the same seed.

    ring: a random cycle (a seeded permutation joined end to end; n = 2 gives one edge);
    regular: a random ``degree``-regular graph; complete; erdos-renyi: G(n, probability)
    resampled until connected; edges: the explicit list ``edges`` (``parse_edges``).
    ``ValueError`` on bad arguments or a disconnected result, naming the components.
    """
    if topology not in TOPOLOGIES:
        raise ValueError(f"unknown topology {topology!r}; known: {TOPOLOGIES}")
    if type(n) is not int or n < 2:
        raise ValueError(f"a communication graph needs at least 2 vertices, got n={n!r}")
    rng = np.random.default_rng(seed)
    if topology == "ring":
        order = rng.permutation(n).tolist()
        graph = _graph(n, zip(order, order[1:] + order[:1]))
    elif topology == "regular":
        graph = _random_regular(n, degree, rng)
    elif topology == "complete":
        graph = _graph(n, ((i, j) for i in range(n) for j in range(i + 1, n)))
    elif topology == "erdos-renyi":
        graph = _erdos_renyi(n, probability, rng)
    else:
        graph = Graph(n, parse_edges(edges, n))
    components = graph.components()
    if len(components) > 1:
        raise ValueError(
            f"the {topology} graph is disconnected; components: "
            + "; ".join(str(c) for c in components)
        )
    return graph


def _graph(n: int, pairs: Iterable[tuple[int, int]]) -> Graph:
    """A graph from (i, j) pairs in any order, duplicates dropped."""
    return Graph(n, tuple(sorted({(min(i, j), max(i, j)) for i, j in pairs})))


def _erdos_renyi(n: int, probability: float, rng: np.random.Generator) -> Graph:
    """G(n, probability), resampled until connected (at most ``MAX_TRIES`` draws)."""
    if not 0 < probability <= 1:
        raise ValueError(f"edge probability must be in (0, 1], got {probability!r}")
    upper = np.triu_indices(n, 1)
    for _ in range(MAX_TRIES):
        keep = rng.random(len(upper[0])) < probability
        graph = _graph(n, zip(upper[0][keep].tolist(), upper[1][keep].tolist()))
        if graph.is_connected():
            return graph
    raise ValueError(
        f"no connected G({n}, {probability}) graph in {MAX_TRIES} draws; raise the probability"
    )


def _random_regular(n: int, degree: int, rng: np.random.Generator) -> Graph:
    """A random connected ``degree``-regular graph (pairing model, retried until simple and
    connected). Above degree (n-1)/2 it is the complement of a random (n-1-degree)-regular
    graph, which is simpler to pair; such a dense regular graph is always connected."""
    if type(degree) is not int or not 1 <= degree < n:
        raise ValueError(
            f"a regular graph on {n} vertices needs degree in [1, {n - 1}], got {degree!r}"
        )
    if n * degree % 2:
        raise ValueError(f"no {degree}-regular graph on {n} vertices: n * degree is odd")
    if degree == 1 and n > 2:
        raise ValueError(f"a 1-regular graph on {n} > 2 vertices is disconnected")
    dense = 2 * degree > n - 1
    for _ in range(MAX_TRIES):
        adjacency = _pairing(n, n - 1 - degree if dense else degree, rng)
        if adjacency is None:
            continue
        if dense:
            adjacency = ~adjacency & ~np.eye(n, dtype=bool)
        graph = _graph(n, zip(*np.nonzero(np.triu(adjacency)), strict=True))
        if graph.is_connected():
            return graph
    raise ValueError(f"no connected {degree}-regular graph on {n} vertices in {MAX_TRIES} tries")


def _pairing(n: int, degree: int, rng: np.random.Generator) -> np.ndarray | None:
    """One try of the pairing model that only pairs stubs of distinct, not yet joined vertices
    (Steger & Wormald, 1999): the adjacency matrix, or None where it got stuck."""
    residual = np.full(n, degree)
    adjacency = np.zeros((n, n), dtype=bool)
    for _ in range(n * degree // 2):
        weight = np.triu(np.outer(residual, residual), 1) * ~adjacency
        total = weight.sum()
        if total == 0:
            return None
        i, j = divmod(int(rng.choice(n * n, p=weight.ravel() / total)), n)
        adjacency[i, j] = adjacency[j, i] = True
        residual[[i, j]] -= 1
    return adjacency
