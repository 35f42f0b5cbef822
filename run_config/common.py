"""The common run-config keys (docs/configuration.md), declared once (``COMMON_KEYS``: name, type,
default, check, help) and parsed into ``RunSettings``.

Shared by the ServerApp, the ClientApp and the preflight check; family tables (``fedfw.*``,
``feddr.*``, ...) are declared and parsed by the sibling modules of this package.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from run_config.keys import (
    Check,
    Key,
    OneOf,
    Scalar,
    When,
    above,
    at_least,
    build,
    finite_above,
    finite_at_least,
    read_key,
    read_keys,
    require,
    within,
)
from tasks.datasets import IMAGE_SCALINGS, IMAGE_TASKS, ONLINE_TASKS, REGRESSION_TASKS, SITE_TASK
from tasks.devices import check_device_name
from tasks.federation import DataSpec
from tasks.site_data import PARTITION_TEMPLATE
from tasks.site_schema import CLASSIFICATION, KINDS, REGRESSION, SCALE_FACTOR, SiteSpec

__all__ = ["COMMON_KEYS", "RunSettings", "Scalar", "parse_node_partitions", "read_key", "require"]


def parse_node_partitions(text: str, key: str = "node-partitions") -> dict[int, int]:
    """``"NODE_ID:PARTITION,..."`` as {node id: partition id} (empty: any node may claim any)."""
    pinned = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        node, sep, partition = pair.partition(":")
        require(
            sep == ":" and node.strip().isdigit() and partition.strip().isdigit(),
            key,
            text,
            "comma-separated NODE_ID:PARTITION_ID pairs of non-negative integers",
        )
        require(
            int(node) not in pinned,
            key,
            text,
            f"one partition per node id (node {int(node)} is listed twice)",
        )
        pinned[int(node)] = int(partition)
    return pinned


SITES = When("task", (SITE_TASK,))  # the keys of a site's own files
BUNDLED = When("task", (SITE_TASK,), unless=True)  # the keys of the bundled tasks' split

# The keys a resumed run may change: what enters neither the maths nor the state (how many
# rounds, where the results go, how long a round waits, the quorum, the central evaluation's
# device); ``server_app.resume`` refuses any other change, and the key reference and
# docs/results.md list these (``run_config.reference``).
MAY_CHANGE = (
    "num-server-rounds",
    "output-dir",
    "run-name",
    "resume-from",
    "git-commit",
    "reply-timeout",
    "reply-poll-interval",
    "min-replies",
    "min-nodes",
    "join-timeout",
    "central-device",
)


def listed(names: Iterable[str]) -> str:
    """``a``, ``b`` and ``c``, as the docs list keys."""
    quoted = [f"`{name}`" for name in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} and {quoted[-1]}"


COMMON_KEYS = (
    Key(
        "algorithm",
        str,
        "ffgb",
        "which algorithm runs: see the algorithms table of "
        "docs/algorithms.md (the family catalogue `run_config/families.py` checks the name)",
        field="algorithm",
    ),
    Key(
        "task",
        str,
        "digits",
        "`digits`, `iris`, `wine`, `breast-cancer`, `diabetes` "
        "(regression), `mnist-5k`, `synthetic`, `lipschitz` (regression); online: `mnist`, "
        "`cifar10` (need a network; torchvision is not used); `site`: every node's own file "
        "(node config `dataset-path`, or the `dataset-path` template below) under the schema "
        "of the `data.*` keys (see docs/data.md)",
        field="task",
    ),
    Key(
        "data.kind",
        str,
        CLASSIFICATION,
        "`task='site'`: `classification` or `regression`",
        OneOf(KINDS),
        field="data_kind",
        when=SITES,
    ),
    Key(
        "data.label",
        str,
        "",
        "`task='site'`: the label column (required)",
        field="data_label",
        when=SITES,
    ),
    Key(
        "data.features",
        str,
        "",
        "`task='site'`: comma-separated feature columns, in this "
        "order; empty = every other column that more than half the sites report (by name)",
        field="data_features",
        when=SITES,
    ),
    Key(
        "data.categorical",
        str,
        "",
        "`task='site'`: comma-separated categorical columns "
        "(one-hot over the union of the sites' values); a text column not named here is "
        "categorical too",
        field="data_categorical",
        when=SITES,
    ),
    Key(
        "data.label-counts",
        bool,
        False,
        "`task='site'`: nodes also disclose how often each "
        "label occurs (off: only which labels occur)",
        field="data_label_counts",
        when=SITES,
    ),
    Key(
        "data.strict",
        bool,
        False,
        "`task='site'`: refuse a site that looks mistaken (a "
        "numeric column more than `data.scale-factor` times the other sites' magnitude, a "
        "label no other site holds) instead of warning of it",
        field="data_strict",
        when=SITES,
    ),
    Key(
        "data.scale-factor",
        float,
        SCALE_FACTOR,
        "`task='site'`: how many times a site's "
        "median absolute value of a numeric column may differ from the sites' median before "
        "it is reported (another unit?)",
        above(1),
        field="data_scale_factor",
        when=SITES,
    ),
    Key(
        "dataset-path",
        str,
        "",
        "`task='site'`: the file every node reads when its node config "
        "has no `dataset-path`, with `{partition-id}` replaced by the node's partition id "
        "(`'/data/sites/{partition-id}.csv'`: per-site files in simulation)",
        Check(
            "a path that holds no '{' other than '{partition-id}'",
            lambda v: "{" not in v.replace(PARTITION_TEMPLATE, ""),
        ),
        field="dataset_path",
        when=SITES,
    ),
    Key(
        "server-test-path",
        str,
        "",
        "`task='site'`: a file on the ServerApp's machine for "
        "central evaluation under the agreed schema; empty = no central evaluation (sites "
        "evaluate on their own held-out rows)",
        field="server_test_path",
        when=SITES,
    ),
    Key(
        "model",
        str,
        "",
        "`mclr`, `mlp`, `mlp32` (the FFGB paper's 32-32 leaky-ReLU MLP, for "
        "FedAvg at FFGB's architecture), `dnn`, `cnn`; empty = the task's default (`mlp`; `mclr` "
        "for synthetic; `cnn` for cifar10)",
        field="model",
    ),
    Key(
        "partitioning",
        str,
        "iid",
        "`iid`, `label-sort`, `labels-per-client`, "
        "`shifted-labels`, `dirichlet`, `kmeans`, `by-class` (see docs/data.md)",
        field="partitioning",
        when=BUNDLED,
    ),
    Key(
        "partitioning.s",
        float,
        0.1,
        "label-sort: fraction spread iid, the rest sorted by label (FFGB paper)",
        within(0, 1),
        field="partitioning_s",
        when=When("partitioning", ("label-sort",)),
    ),
    Key(
        "partitioning.alpha",
        float,
        0.5,
        "dirichlet concentration",
        above(0),
        field="partitioning_alpha",
        when=When("partitioning", ("dirichlet",)),
    ),
    Key(
        "partitioning.labels-per-client",
        int,
        3,
        "labels-per-client, shifted-labels: labels per client (FedFW paper)",
        at_least(1),
        field="labels_per_client",
        when=When("partitioning", ("labels-per-client", "shifted-labels")),
    ),
    Key(
        "partitioning.local-test",
        float,
        0.0,
        "> 0: every node holds out this share of its "
        "own partition as its test shard (the FedFW authors' per-user 75/25 split: `0.25`), so "
        "federated evaluation (`federated_test_*`) scores each node on its own distribution; 0: "
        "nodes test on iid shards of the task's test set",
        within(0, 1, "[)", "(0: nodes test on shards of the task's test set)"),
        field="local_test",
    ),
    Key(
        "image-scaling",
        str,
        "unit",
        "image tasks (`mnist-5k`, `mnist`, `cifar10`): pixels in "
        "[0, 1] (`unit`) or [−1, 1] (`centred`, torchvision's `Normalize(0.5, 0.5)`, as the "
        "FedFW authors' code)",
        Check(f"one of {IMAGE_SCALINGS}", lambda v: v in IMAGE_SCALINGS),
        field="image_scaling",
        when=When("task", IMAGE_TASKS),
    ),
    Key("num-server-rounds", int, 20, "rounds, ≥ 1", at_least(1), field="num_rounds"),
    Key(
        "seed",
        int,
        0,
        "seeds data split, partitions, model init, sampling and minibatches",
        field="seed",
    ),
    Key(
        "test-fraction",
        float,
        0.2,
        "offline tasks: share held out for testing, stratified (the FedFun paper: 0.5)",
        Check("strictly between 0 and 1", lambda v: 0.0 < v < 1.0),
        field="test_fraction",
        when=When("task", ONLINE_TASKS, unless=True),
    ),
    Key(
        "min-nodes",
        int,
        2,
        "the server waits for this many connected nodes before starting",
        at_least(1),
        field="min_nodes",
    ),
    Key(
        "join-timeout",
        float,
        60.0,
        "round 1: while fewer nodes are connected than the partitions the nodes declare and "
        "some partition has no node, the server waits up to this many seconds for late nodes "
        "(a site started after `min-nodes` were there, a SuperNode restarted during round 1) "
        "and admits them; then the run goes on without the missing partitions (its health "
        "line names them); 0 = no wait",
        finite_at_least(0, "seconds"),
        field="join_timeout",
    ),
    Key(
        "leave-after",
        int,
        0,
        "rounds in a row a node of the run may be disconnected before it leaves the run for "
        "good: its partition is released, the family goes on without it, and a node that "
        "connects later for that partition joins as a new node; 0 = never (an absent node "
        "stays in the run, its messages counted as failures)",
        at_least(0),
        field="leave_after",
    ),
    Key(
        "min-replies",
        int,
        0,
        "quorum: if fewer nodes answer a round's training (without an "
        "error, within `reply-timeout`), the run stops cleanly after the last completed round "
        "(results and checkpoint kept; Flower marks the run failed with the reason) so it can "
        "continue with `resume-from`; 0 = no quorum, a round goes on with whoever answered",
        at_least(0, "(0: no quorum)"),
        field="min_replies",
    ),
    Key(
        "output-dir",
        str,
        "",
        "results base folder (absolute path recommended); empty = `~/flower-results`",
        field="output_dir",
    ),
    Key(
        "run-name",
        str,
        "",
        "results sub-folder; empty = `<algorithm>-<task>-<timestamp>`",
        field="run_name",
    ),
    Key(
        "resume-from",
        str,
        "",
        "a results folder: continue that run from its `checkpoint.pb` "
        "after its last completed round; the run config must equal the checkpoint's but for "
        f"{listed(k for k in MAY_CHANGE if k != 'resume-from')} (any other change is refused, "
        "naming the key); give the same `output-dir`/`run-name` to keep writing into it",
        field="resume_from",
    ),
    Key(
        "git-commit",
        str,
        "",
        "recorded in `config.json`; `make run` sets it to the "
        "checkout's commit (Flower's engines run an installed copy of the app, which has no "
        "`.git`); empty = asked from git when the app runs from a checkout (in-process tests, "
        "benchmarks)",
        field="git_commit",
    ),
    Key(
        "central-evaluation",
        bool,
        True,
        "evaluate on the task's test set at the server; "
        "`false` = federated evaluation on the clients' test shards",
        field="central_evaluation",
    ),
    Key(
        "tensorboard",
        bool,
        True,
        "also write the rows as TensorBoard event files in "
        "`<results folder>/tensorboard/` (`tensorboard --logdir <output-dir>` shows every run)",
        field="tensorboard",
    ),
    Key(
        "plots",
        bool,
        True,
        "draw the PNG plots in the results folder when the run ends (about 0.7 s of CPU a "
        "run on 2 cores); `false` for sweeps of many runs (`python -m server_app.compare` "
        "draws runs' metrics.json later)",
        field="plots",
    ),
    Key(
        "central-device",
        str,
        "auto",
        "torch device of the ServerApp's central evaluation: "
        "`auto`, `cpu`, `cuda`, `cuda:N` (see docs/devices.md)",
        lambda key, value: check_device_name(value, key),
        field="central_device",
    ),
    Key(
        "reply-timeout",
        float,
        600.0,
        "seconds each exchange of a round (train, evaluate, the "
        "first `query.node`) waits for replies; a node that has not answered by then counts as "
        "a failure and the round goes on with the others (Flower's own default is an hour)",
        finite_above(0, "seconds"),
        field="reply_timeout",
    ),
    Key(
        "reply-poll-interval",
        float,
        0.1,
        "deployment: seconds between the ServerApp's pulls "
        "of the replies it still waits for (Flower's deployment grid waits a fixed 3 s; the "
        "simulation engine's grid pulls every 0.1 s)",
        within(0.01, 10, "[]"),
        field="reply_poll_interval",
    ),
    Key(
        "node-partitions",
        str,
        "",
        '`"<node id>:<partition id>,..."`: only these nodes may '
        "serve these partitions; any other claim in `query.node` is refused and counted as a "
        "failure (for SuperNodes with authentication, whose node ids `flwr supernode register` "
        "fixes); empty = any node may claim any partition (the first by node id wins a "
        "contested one)",
        lambda key, value: parse_node_partitions(value, key),
        field="node_partitions",
    ),
    Key(
        "fraction-train",
        float,
        1.0,
        "FedAvg, FedProx, projected FedAvg, FFGB family, "
        "fedxgb-bagging: fraction of nodes sampled per round (at least one), seeded, in "
        "partition order",
        within(0, 1, "(]"),
        field="fraction_train",
    ),
    Key(
        "eval-with-train",
        bool,
        True,
        "FedAvg, FedProx, projected FedAvg, FFGB family (with `ffgb.federated-eval`), FedDR "
        "(with `feddr.federated-eval`), FedFW family (with `fedfw.federated-eval`, not with "
        "`fedfw.gap`), `fedxgb-bagging` (with `fedxgb.federated-eval`), `fedxgb-hist` (with "
        "`fedxgb-hist.federated-eval`; on a round's first tree level), FedFun family (with "
        "`fedfun.federated-eval`; each node its own model with its neighbours'): every node "
        "evaluates the global function of round t "
        "when round t + 1's train message brings it, before it trains, and replies with both: "
        "one exchange a round instead of two, the same figures (round t's row gets them with "
        "round t + 1's replies; the last round has an evaluate exchange of its own). `false`: "
        "an evaluate exchange after every round. Only when every node trains every round "
        "(`fraction-train` = 1, `feddr.participation` = 1, `fedfw.participation` = 1; not "
        "`ffgb.one-shot`)",
        field="eval_with_train",
    ),
    Key(
        "secure-aggregation",
        bool,
        False,
        "`fedxgb-hist`, FedAvg, FedProx, projected FedAvg, FedFW family, FedDR: the server "
        "learns only the sum of the nodes' replies (their histograms, their sample-weighted "
        "models and sample counts, or the changes of their x_i or x_hat_i), never one node's: "
        "SecAgg+ with pairwise and self masks and Shamir shares, so nodes may drop "
        "mid-exchange while a majority of each one's neighbours remains; one more exchange a "
        "sum (docs/privacy.md). FedFW, FedDR: a node that lost its state restarts every node "
        "at x-bar",
        field="secure_aggregation",
    ),
    Key(
        "relay-encryption",
        bool,
        False,
        "FedFun family: every node seals its model to its neighbours and itself (X25519 key "
        "agreement, Fernet), so the server stores and forwards ciphertext only and the nodes "
        "validate what they open; a node back with new keys (a restarted SuperNode, a resumed "
        "run) fits its model afresh, as in round 0. FFGB, FFGB.C: the nodes seal their "
        "learners under a group key that one node makes and nodes that hold it wrap to the "
        "others' keys; the server keeps the ensemble sealed, so it needs "
        "`central-evaluation=false` (federated evaluation gives the metrics), and refuses "
        "`ffgb.one-shot` and `ffgb.distill-every`; a resumed run needs a node that kept the key "
        "(docs/privacy.md)",
        field="relay_encryption",
    ),
    Key(
        "secure-aggregation.bound",
        float,
        1024.0,
        "with `secure-aggregation`: the largest magnitude of a value a node sums, before "
        "weighting: a model weight (FedAvg family), a regression label (`fedxgb-hist`, whose "
        "gradients it bounds with the booster's margins), the change of an element of x_hat_i "
        "in a round (FedDR; FedFW's changes are bounded by the nodes' sets); a node holding a "
        "larger one refuses its reply (nothing is clipped); it sets the fixed point's "
        "resolution",
        finite_above(0),
        field="secure_bound",
        when=When("secure-aggregation", (True,)),
    ),
    Key(
        "dp.noise-multiplier",
        float,
        0.0,
        "differential privacy with this Gaussian noise multiplier z (0 = off). FedAvg, "
        "FedProx, projected FedAvg: client level (DP-FedAvg, McMahan et al. 2018): every node "
        "clips its update to `dp.clipping-norm` C, the mean is unweighted and gets noise of "
        "standard deviation z C / m over its m nodes. FedFW family: row level: a node's "
        "gradient is the mean of its b rows' gradients each clipped to C, with noise of "
        "z C / b, before the linear minimisation (its output is post-processing; for the l1 "
        "ball, report-noisy-max with Gaussian noise). `fedxgb-hist` (with "
        "`fedxgb-hist.bins='grid'`, classification): row level: every summed release (the grid "
        "counts, each tree level's histograms) gets noise of z times a row's L2 sensitivity. "
        "The server adds the noise, or with `secure-aggregation` the nodes, each its share, so "
        "the server never sees a noiseless sum; an accountant (Renyi DP, Flower's on "
        "dp-accounting) gives the run's epsilon at `dp.delta` (`dp_epsilon` each round, "
        "config.json, the health line)",
        finite_at_least(0),
        field="dp_noise_multiplier",
    ),
    Key(
        "dp.clipping-norm",
        float,
        1.0,
        "with `dp.noise-multiplier`: the L2 norm C a node's update (its model less the global "
        "one: FedAvg, FedProx, projected FedAvg) or each row's gradient (FedFW family) is "
        "clipped to",
        finite_above(0),
        field="dp_clipping_norm",
        when=When("dp.noise-multiplier", (0.0,), unless=True),
    ),
    Key(
        "dp.delta",
        float,
        1e-5,
        "with `dp.noise-multiplier`: the delta at which the run's epsilon is given",
        within(0, 1, "()"),
        field="dp_delta",
        when=When("dp.noise-multiplier", (0.0,), unless=True),
    ),
    Key("local-epochs", int, 1, "FedAvg/FedProx local epochs", at_least(0), field="local_epochs"),
    Key(
        "local-steps",
        int,
        0,
        "if > 0, this many minibatch steps instead of epochs",
        at_least(0),
        field="local_steps",
    ),
    Key("batch-size", int, 16, "local minibatch size", at_least(1), field="batch_size"),
    Key(
        "learning-rate",
        float,
        0.0,
        "local SGD step size; 0 = the task's: 0.3 for "
        "classification, 0.05 for regression (squared error's gradients grow with the "
        "residual: 0.3 diverges on diabetes)",
        at_least(0, "(0: the task's)"),
        field="learning_rate",
    ),
    Key("fedprox.mu", float, 0.01, "FedProx proximal weight", at_least(0), field="fedprox_mu"),
    Key(
        "synthetic.alpha",
        float,
        1.0,
        "Synthetic(α, β) heterogeneity: α; 0, 0 = iid",
        at_least(0),
        field="synthetic_alpha",
        when=When("task", ("synthetic",)),
    ),
    Key(
        "synthetic.beta",
        float,
        1.0,
        "Synthetic(α, β) heterogeneity: β; 0, 0 = iid",
        at_least(0),
        field="synthetic_beta",
        when=When("task", ("synthetic",)),
    ),
    Key(
        "synthetic.samples",
        int,
        6000,
        "samples generated for `synthetic` (80 % train, 20 % test)",
        at_least(10),
        field="synthetic_samples",
        when=When("task", ("synthetic",)),
    ),
)
_DEFAULT = {key.field: key.default for key in COMMON_KEYS}


@dataclass(frozen=True)
class NodeDP:
    """Client-level differential privacy of the nodes' updates (the ``dp.*`` keys)."""

    noise_multiplier: float
    clipping_norm: float
    delta: float


@dataclass(frozen=True)
class RunSettings:
    """The common run-config keys, validated; ``raw`` keeps every key for the family parsers.
    Every default is the key's in ``COMMON_KEYS``."""

    algorithm: str = _DEFAULT["algorithm"]
    task: str = _DEFAULT["task"]
    model: str = _DEFAULT["model"]
    partitioning: str = _DEFAULT["partitioning"]
    partitioning_s: float = _DEFAULT["partitioning_s"]
    partitioning_alpha: float = _DEFAULT["partitioning_alpha"]
    labels_per_client: int = _DEFAULT["labels_per_client"]
    local_test: float = _DEFAULT["local_test"]  # > 0: each node tests on its own partition
    image_scaling: str = _DEFAULT["image_scaling"]  # "unit" [0, 1] or "centred" [-1, 1]
    data_kind: str = _DEFAULT["data_kind"]  # task="site": classification or regression
    data_label: str = _DEFAULT["data_label"]
    data_features: str = _DEFAULT["data_features"]  # comma-separated, empty: all others
    data_categorical: str = _DEFAULT["data_categorical"]
    data_label_counts: bool = _DEFAULT["data_label_counts"]
    data_strict: bool = _DEFAULT["data_strict"]  # implausible sites refused, not warned of
    data_scale_factor: float = _DEFAULT["data_scale_factor"]
    dataset_path: str = _DEFAULT["dataset_path"]  # template with {partition-id}
    server_test_path: str = _DEFAULT["server_test_path"]
    num_rounds: int = _DEFAULT["num_rounds"]
    seed: int = _DEFAULT["seed"]
    test_fraction: float = _DEFAULT["test_fraction"]  # offline tasks: share held out
    min_nodes: int = _DEFAULT["min_nodes"]
    join_timeout: float = _DEFAULT["join_timeout"]  # seconds round 1 waits for late nodes
    leave_after: int = _DEFAULT["leave_after"]  # rounds away before a node leaves (0: never)
    min_replies: int = _DEFAULT["min_replies"]  # quorum of a round's training (0: none)
    output_dir: str = _DEFAULT["output_dir"]
    run_name: str = _DEFAULT["run_name"]
    resume_from: str = _DEFAULT["resume_from"]  # a results folder whose checkpoint continues
    git_commit: str = _DEFAULT["git_commit"]
    central_evaluation: bool = _DEFAULT["central_evaluation"]
    tensorboard: bool = _DEFAULT["tensorboard"]  # TensorBoard event files beside the rows
    plots: bool = _DEFAULT["plots"]  # PNG plots in the results folder at the run's end
    central_device: str = _DEFAULT["central_device"]  # torch device of central evaluation
    reply_timeout: float = _DEFAULT["reply_timeout"]  # seconds a round waits for replies
    reply_poll_interval: float = _DEFAULT["reply_poll_interval"]  # seconds between pulls
    node_partitions: str = _DEFAULT["node_partitions"]  # "NODE_ID:PARTITION,...": pins
    fraction_train: float = _DEFAULT["fraction_train"]
    eval_with_train: bool = _DEFAULT["eval_with_train"]  # evaluation rides on the next training
    secure_aggregation: bool = _DEFAULT["secure_aggregation"]  # the server learns only sums
    secure_bound: float = _DEFAULT["secure_bound"]  # |value| a node may sum
    relay_encryption: bool = _DEFAULT["relay_encryption"]  # relayed models sealed node to node
    dp_noise_multiplier: float = _DEFAULT["dp_noise_multiplier"]  # 0: no differential privacy
    dp_clipping_norm: float = _DEFAULT["dp_clipping_norm"]
    dp_delta: float = _DEFAULT["dp_delta"]
    local_epochs: int = _DEFAULT["local_epochs"]
    local_steps: int = _DEFAULT["local_steps"]
    batch_size: int = _DEFAULT["batch_size"]
    learning_rate: float = _DEFAULT["learning_rate"]
    fedprox_mu: float = _DEFAULT["fedprox_mu"]
    synthetic_alpha: float = _DEFAULT["synthetic_alpha"]
    synthetic_beta: float = _DEFAULT["synthetic_beta"]
    synthetic_samples: int = _DEFAULT["synthetic_samples"]
    raw: Mapping[str, Scalar] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_run_config(cls, raw: Mapping[str, Any]) -> RunSettings:
        """Parse and validate a Flower run config's common keys (``COMMON_KEYS``: type and
        check of each, then the checks across keys); ConfigError names the bad key."""
        settings = build(cls, read_keys(raw, COMMON_KEYS), COMMON_KEYS, raw=dict(raw))
        settings.validate()
        return settings

    @property
    def data(self) -> DataSpec:
        """What ``tasks`` needs to load the task and partition it."""
        return DataSpec(
            task=self.task,
            seed=self.seed,
            test_fraction=self.test_fraction,
            synthetic_alpha=self.synthetic_alpha,
            synthetic_beta=self.synthetic_beta,
            synthetic_samples=self.synthetic_samples,
            partitioning=self.partitioning,
            partitioning_s=self.partitioning_s,
            partitioning_alpha=self.partitioning_alpha,
            labels_per_client=self.labels_per_client,
            local_test=self.local_test,
            image_scaling=self.image_scaling,
        )

    @property
    def regression(self) -> bool:
        """Whether the label is a number (the square loss): a site table of
        ``data.kind='regression'``, or a bundled regression task."""
        return self.data_kind == REGRESSION if self.sites else self.task in REGRESSION_TASKS

    @property
    def sites(self) -> bool:
        """Whether the nodes train on their own files (``task='site'``)."""
        return self.task == SITE_TASK

    @property
    def site(self) -> SiteSpec:
        """What the ``data.*`` keys say about the sites' files."""

        def names(text: str) -> tuple[str, ...]:
            return tuple(n.strip() for n in text.split(",") if n.strip())

        return SiteSpec(
            self.data_kind,
            self.data_label,
            names(self.data_features),
            names(self.data_categorical),
            self.data_label_counts,
            self.data_strict,
            self.data_scale_factor,
        )

    @property
    def node_dp(self) -> NodeDP | None:
        """The ``dp.*`` keys, or None when ``dp.noise-multiplier`` is 0."""
        if self.dp_noise_multiplier <= 0:
            return None
        return NodeDP(self.dp_noise_multiplier, self.dp_clipping_norm, self.dp_delta)

    @property
    def pinned_partitions(self) -> dict[int, int]:
        """``node-partitions`` as {node id: partition id} (empty: any node may claim any)."""
        return parse_node_partitions(self.node_partitions)

    def validate(self) -> None:
        """The checks across keys (each key's own check is its ``COMMON_KEYS`` entry)."""
        if self.sites:
            require(
                bool(self.data_label.strip()),
                "data.label",
                self.data_label,
                "the label column's name (task='site')",
            )
        require(
            self.local_epochs > 0 or self.local_steps > 0,
            "local-epochs",
            self.local_epochs,
            "> 0 when local-steps is 0",
        )
