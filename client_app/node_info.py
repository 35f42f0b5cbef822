"""The answer to ``query.node``: who this node is, so the server can order nodes reproducibly.

Flower's node ids are random per run; the partition id from the node config is not, so the server
sorts nodes by it and the same seed samples the same partitions on every engine. The node's
device is said too (for the run's record, not its place). A family may add its own facts (FedFW:
the node's constraint set D_i).
"""

from __future__ import annotations

from flwr.app import ConfigRecord, RecordDict

from client_app.job import ClientJob
from functions.protocol import NODE, NUM_PARTITIONS, PARTITION_ID
from tasks.devices import device_facts


def node_facts(job: ClientJob) -> dict[str, int | float | str]:
    """Partition id and number of partitions of this node, and the device it computes on
    (with its torch and CUDA versions: the run's record names every node's)."""
    return {
        PARTITION_ID: job.data.partition_id,
        NUM_PARTITIONS: job.data.num_partitions,
        **device_facts(job.device),
    }


def describe_node(job: ClientJob) -> RecordDict:
    """The ``query.node`` reply of every family without extra facts."""
    return RecordDict({NODE: ConfigRecord(node_facts(job))})
