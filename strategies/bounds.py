"""The federation's bounding box, agreed from the nodes' coarsened ranges (FedFun's domain).

FedFun measures disagreement over a box domain and scales it to the unit cube (appendix B). The
paper computes the box from pooled data up front; here each node reports, in one
``query.bounds`` round, each feature's range widened to the signed powers of two (or 0) just
outside it (``tasks.site_facts.outside``, as the sites' facts) and its sample count, and the
server takes the union. What a node reveals is exactly that: per feature, a power-of-two
interval that holds its values with neither end a row's value, and its size. The box holds
every training row, and each of its ends is within a factor of two of the pooled data's (an end
under 2^-30 in magnitude becomes 0 or ±2^-30), so the data fill part of the unit cube, not all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid

from functions.errors import DecodeError
from functions.params import record_to_arrays
from functions.protocol import BOUNDS, METRICS, QUERY_BOUNDS, TRAIN_EXAMPLES
from strategies.evaluation import checked_count, checked_metrics
from strategies.screening import exact_records, screen_replies


@dataclass(frozen=True)
class NodeBounds:
    """One node's answer: its coarsened range per feature and its sample count."""

    lower: np.ndarray
    upper: np.ndarray
    samples: int


@dataclass(frozen=True)
class AgreedBounds:
    """The union box of the answers and the total number of training samples."""

    lower: np.ndarray
    upper: np.ndarray
    samples: int


def decode_bounds(reply: Message, n_features: int, max_examples: int) -> NodeBounds:
    """A node's bounds: finite float64 vectors of the task's width with lower <= upper."""
    records = exact_records(reply.content, {BOUNDS: ArrayRecord, METRICS: MetricRecord})
    arrays = record_to_arrays(records[BOUNDS], max_bytes=2 * 8 * n_features)
    if set(arrays) != {"lower", "upper"}:
        raise DecodeError(f"bounds: expected arrays lower and upper, got {sorted(arrays)}")
    lower, upper = arrays["lower"], arrays["upper"]
    for name, array in (("lower", lower), ("upper", upper)):
        if array.dtype != np.float64 or array.shape != (n_features,):
            raise DecodeError(f"bounds {name}: expected float64 of shape ({n_features},)")
        if not np.all(np.isfinite(array)):
            raise DecodeError(f"bounds {name}: NaN or inf")
    if np.any(lower > upper):
        raise DecodeError("bounds: lower > upper")
    samples = checked_count(
        checked_metrics(records[METRICS], [TRAIN_EXAMPLES]), TRAIN_EXAMPLES, max_examples, 1
    )
    return NodeBounds(lower, upper, samples)


def query_bounds(
    grid: Grid,
    label: str,
    server_round: int,
    node_ids: list[int],
    n_features: int,
    max_examples: int,
) -> tuple[AgreedBounds, int]:
    """Ask ``node_ids`` for their bounds; the union box and how many answers were unusable.
    ``RuntimeError`` when no node answered usably (there is no domain to train on)."""
    questions = [
        Message(RecordDict(), node, QUERY_BOUNDS, group_id=str(server_round)) for node in node_ids
    ]
    screened = screen_replies(
        label,
        server_round,
        grid.send_and_receive(questions),
        lambda r: decode_bounds(r, n_features, max_examples),
        node_ids,
    )
    answers = list(screened.in_order(node_ids).values())
    if not answers:
        raise RuntimeError(f"{label}: no node reported its data bounds; cannot fix the domain")
    agreed = AgreedBounds(
        np.min([a.lower for a in answers], axis=0),
        np.max([a.upper for a in answers], axis=0),
        sum(a.samples for a in answers),
    )
    return agreed, screened.rejected
