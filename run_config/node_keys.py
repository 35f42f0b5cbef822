"""The node-config keys a SuperNode may set (``--node-config``, or the simulation's), declared
once: the ClientApp reads them by these names and ``python -m run_config.reference`` lists them
in docs/configuration.md, the keys every node reads, then each family's
(``run_config.family.Family.node_keys``)."""

from __future__ import annotations

from dataclasses import dataclass

from functions.protocol import NUM_PARTITIONS, PARTITION_ID
from tasks import devices, site_data
from tasks.site_files import MAX_BYTES


@dataclass(frozen=True)
class NodeKey:
    """A node-config key: its name, its type and what it means (its default, if any, said)."""

    name: str
    kind: type
    meaning: str


COMMON_NODE_KEYS = (
    NodeKey(
        PARTITION_ID,
        int,
        "this node's partition (the simulation sets it; in deployment `--node-config "
        '"partition-id=0 num-partitions=10"`)',
    ),
    NodeKey(NUM_PARTITIONS, int, "how many partitions the data is split into (as above)"),
    NodeKey(
        devices.NODE_KEY,
        str,
        "torch device: `auto` (default: CUDA when torch sees one), `cpu`, `cuda`, `cuda:<i>` "
        "(docs/devices.md)",
    ),
    NodeKey(
        site_data.PATH_KEY,
        str,
        "`task='site'`: this node's own file or image folder (default: the run's "
        "`dataset-path` template; docs/data.md)",
    ),
    NodeKey(
        site_data.TEST_PATH_KEY,
        str,
        "`task='site'`: this node's own test file (default: a share of its file held out)",
    ),
    NodeKey(
        site_data.MAX_BYTES_KEY,
        int,
        f"`task='site'`: the largest file (or image folder) it reads, checked before reading "
        f"(default {MAX_BYTES:,} bytes)",
    ),
)
