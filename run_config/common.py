"""The common run-config keys of DESIGN.md section 3, typed and validated.

Shared by the ServerApp, the ClientApp and the preflight check; family tables (``fedfw.*``,
``feddr.*``, ...) are parsed by the sibling modules of this package.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tasks.datasets import IMAGE_SCALINGS
from tasks.devices import check_device_name
from tasks.errors import ConfigError
from tasks.federation import DataSpec

Scalar = int | float | str | bool


def read_key(raw: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    """Read ``key`` as ``kind`` (ints are accepted for floats); ConfigError names the key."""
    value = raw.get(key, default)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ConfigError.bound(key, value, f"of type {kind.__name__}")
    return value


def require(condition: bool, key: str, value: object, requirement: str) -> None:
    """Raise a one-line ConfigError for ``key`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError.bound(key, value, requirement)


@dataclass(frozen=True)
class RunSettings:
    """The common run-config keys, validated; ``raw`` keeps every key for the family parsers."""

    algorithm: str = "ffgb"
    task: str = "digits"
    model: str = ""
    partitioning: str = "iid"
    partitioning_s: float = 0.1
    partitioning_alpha: float = 0.5
    labels_per_client: int = 3
    local_test: float = 0.0  # > 0: each node tests on this share of its own partition
    image_scaling: str = "unit"  # image tasks' pixels: "unit" [0, 1] or "centred" [-1, 1]
    num_rounds: int = 20
    seed: int = 0
    test_fraction: float = 0.2  # offline tasks: share of the data held out for testing
    min_nodes: int = 2
    min_replies: int = 0  # a round's training needs this many answers, or the run stops
    output_dir: str = ""
    run_name: str = ""
    resume_from: str = ""  # a results folder whose checkpoint the run continues
    git_commit: str = ""
    central_evaluation: bool = True
    central_device: str = "auto"  # torch device of the ServerApp's central evaluation
    reply_timeout: float = 600.0  # seconds a round waits for replies (Flower's default: 3600)
    node_partitions: str = ""  # "NODE_ID:PARTITION,...": who may serve which partition
    fraction_train: float = 1.0
    local_epochs: int = 1
    local_steps: int = 0
    batch_size: int = 16
    learning_rate: float = 0.3
    fedprox_mu: float = 0.01
    synthetic_alpha: float = 1.0
    synthetic_beta: float = 1.0
    synthetic_samples: int = 6000
    raw: Mapping[str, Scalar] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_run_config(cls, raw: Mapping[str, Any]) -> RunSettings:
        """Parse and validate a Flower run config; raise ConfigError naming the bad key."""
        d = cls()
        settings = cls(
            algorithm=read_key(raw, "algorithm", str, d.algorithm),
            task=read_key(raw, "task", str, d.task),
            model=read_key(raw, "model", str, d.model),
            partitioning=read_key(raw, "partitioning", str, d.partitioning),
            partitioning_s=read_key(raw, "partitioning.s", float, d.partitioning_s),
            partitioning_alpha=read_key(raw, "partitioning.alpha", float, d.partitioning_alpha),
            labels_per_client=read_key(raw, "partitioning.labels-per-client", int, d.labels_per_client),
            local_test=read_key(raw, "partitioning.local-test", float, d.local_test),
            image_scaling=read_key(raw, "image-scaling", str, d.image_scaling),
            num_rounds=read_key(raw, "num-server-rounds", int, d.num_rounds),
            seed=read_key(raw, "seed", int, d.seed),
            test_fraction=read_key(raw, "test-fraction", float, d.test_fraction),
            min_nodes=read_key(raw, "min-nodes", int, d.min_nodes),
            min_replies=read_key(raw, "min-replies", int, d.min_replies),
            output_dir=read_key(raw, "output-dir", str, d.output_dir),
            run_name=read_key(raw, "run-name", str, d.run_name),
            resume_from=read_key(raw, "resume-from", str, d.resume_from),
            git_commit=read_key(raw, "git-commit", str, d.git_commit),
            central_evaluation=read_key(raw, "central-evaluation", bool, d.central_evaluation),
            central_device=read_key(raw, "central-device", str, d.central_device),
            reply_timeout=read_key(raw, "reply-timeout", float, d.reply_timeout),
            node_partitions=read_key(raw, "node-partitions", str, d.node_partitions),
            fraction_train=read_key(raw, "fraction-train", float, d.fraction_train),
            local_epochs=read_key(raw, "local-epochs", int, d.local_epochs),
            local_steps=read_key(raw, "local-steps", int, d.local_steps),
            batch_size=read_key(raw, "batch-size", int, d.batch_size),
            learning_rate=read_key(raw, "learning-rate", float, d.learning_rate),
            fedprox_mu=read_key(raw, "fedprox.mu", float, d.fedprox_mu),
            synthetic_alpha=read_key(raw, "synthetic.alpha", float, d.synthetic_alpha),
            synthetic_beta=read_key(raw, "synthetic.beta", float, d.synthetic_beta),
            synthetic_samples=read_key(raw, "synthetic.samples", int, d.synthetic_samples),
            raw=dict(raw),
        )
        settings.validate()
        return settings

    @property
    def data(self) -> DataSpec:
        """What ``tasks`` needs to load the task and partition it."""
        return DataSpec(
            task=self.task, seed=self.seed, test_fraction=self.test_fraction,
            synthetic_alpha=self.synthetic_alpha,
            synthetic_beta=self.synthetic_beta, synthetic_samples=self.synthetic_samples,
            partitioning=self.partitioning, partitioning_s=self.partitioning_s,
            partitioning_alpha=self.partitioning_alpha, labels_per_client=self.labels_per_client,
            local_test=self.local_test, image_scaling=self.image_scaling,
        )

    @property
    def pinned_partitions(self) -> dict[int, int]:
        """``node-partitions`` as {node id: partition id} (empty: any node may claim any)."""
        pinned = {}
        for pair in filter(None, (p.strip() for p in self.node_partitions.split(","))):
            node, sep, partition = pair.partition(":")
            require(sep == ":" and node.strip().isdigit() and partition.strip().isdigit(),
                    "node-partitions", self.node_partitions,
                    "comma-separated NODE_ID:PARTITION_ID pairs of non-negative integers")
            require(int(node) not in pinned, "node-partitions", self.node_partitions,
                    f"one partition per node id (node {int(node)} is listed twice)")
            pinned[int(node)] = int(partition)
        return pinned

    def validate(self) -> None:
        """Range checks that do not need the task or the registry."""
        _ = self.pinned_partitions  # parses, or names the key
        require(self.num_rounds >= 1, "num-server-rounds", self.num_rounds, ">= 1")
        check_device_name(self.central_device, "central-device")
        require(0 < self.reply_timeout < float("inf"), "reply-timeout", self.reply_timeout,
                "finite and > 0 seconds")
        require(0.0 < self.test_fraction < 1.0, "test-fraction", self.test_fraction,
                "strictly between 0 and 1")
        require(self.min_nodes >= 1, "min-nodes", self.min_nodes, ">= 1")
        require(self.min_replies >= 0, "min-replies", self.min_replies, ">= 0 (0: no quorum)")
        require(0.0 <= self.partitioning_s <= 1.0, "partitioning.s", self.partitioning_s, "in [0, 1]")
        require(self.partitioning_alpha > 0.0, "partitioning.alpha", self.partitioning_alpha, "> 0")
        require(0.0 <= self.local_test < 1.0, "partitioning.local-test", self.local_test,
                "in [0, 1) (0: nodes test on shards of the task's test set)")
        require(self.image_scaling in IMAGE_SCALINGS, "image-scaling", self.image_scaling,
                f"one of {IMAGE_SCALINGS}")
        require(self.labels_per_client >= 1, "partitioning.labels-per-client", self.labels_per_client, ">= 1")
        require(0.0 < self.fraction_train <= 1.0, "fraction-train", self.fraction_train, "in (0, 1]")
        require(self.local_epochs >= 0, "local-epochs", self.local_epochs, ">= 0")
        require(self.local_steps >= 0, "local-steps", self.local_steps, ">= 0")
        require(self.local_epochs > 0 or self.local_steps > 0, "local-epochs", self.local_epochs,
                "> 0 when local-steps is 0")
        require(self.batch_size >= 1, "batch-size", self.batch_size, ">= 1")
        require(self.learning_rate > 0.0, "learning-rate", self.learning_rate, "> 0")
        require(self.fedprox_mu >= 0.0, "fedprox.mu", self.fedprox_mu, ">= 0")
        require(self.synthetic_alpha >= 0.0, "synthetic.alpha", self.synthetic_alpha, ">= 0")
        require(self.synthetic_beta >= 0.0, "synthetic.beta", self.synthetic_beta, ">= 0")
        require(self.synthetic_samples >= 10, "synthetic.samples", self.synthetic_samples, ">= 10")
