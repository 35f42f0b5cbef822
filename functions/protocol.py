"""Message types and record keys that the server and client halves of each family share.

Both halves import their names from here, so neither imports the other (strategies/ never imports
client_app/). Values are what travels on Flower's wire; changing one changes the protocol.
"""

# -- message types ---------------------------------------------------------------------------
TRAIN = "train"
EVALUATE = "evaluate"
QUERY_NODE = "query.node"  # once per run: who is this node (partition id, family extras)

QUERY_FACTS = "query.facts"  # task='site', before round 1: the node's facts about its file
QUERY_MOMENTS = "query.moments"  # ... then its sums under the agreed schema (or its refusal)

# -- sites' own data (strategies.site_agreement; client_app.site_data) ------------------------
SITE = "site"  # ConfigRecord of the site exchanges, and of query.node with task='site'
SITE_FACTS = "facts"  # JSON (tasks.site_facts.site_facts)
SITE_MOMENTS = "moments"  # JSON (tasks.site_moments.site_moments)
SITE_SCHEMA = "schema"  # JSON (tasks.site_schema.Schema)
SITE_REFUSED = "refused"  # why the server leaves the node out
SITE_SECURE = "secure"  # query.moments: the sums go into a secure sum, as arrays
SITE_ARRAYS = "site-moments"  # ArrayRecord: a node's moments as arrays (tasks.site_schema)

# -- every instruction ----------------------------------------------------------------------
CONFIG = "config"  # the ConfigRecord of an instruction
SERVER_ROUND = "server-round"

# -- query.node reply ------------------------------------------------------------------------
NODE = "node"  # the ConfigRecord describing the node
PARTITION_ID = "partition-id"
NUM_PARTITIONS = "num-partitions"

# -- stateful nodes (NodeBook on the server, PendingStore on the node) ----------------------
LAST_ACCEPTED = "last-accepted"  # the last round whose step the server accepted from this node
SYNC = "sync"  # where a node without state restarts: SYNC_NONE, SYNC_FROM_XBAR or a record key
SYNC_NONE = "none"
SYNC_FROM_XBAR = "xbar"
XBAR = "xbar"  # the consensus point, dense float32

# -- evaluation sums (every family that evaluates a model on the nodes' data) ----------------
METRICS = "metrics"
NUM_EXAMPLES = "num-examples"  # test examples of the node (Flower's weighting key)
TEST_LOSS_SUM = "test-loss-sum"
TEST_CORRECT_SUM = "test-correct-sum"
TRAIN_LOSS_SUM = "train-loss-sum"
TRAIN_EXAMPLES = "train-examples"
EVALUATE_FIRST = "evaluate-first"  # train config (True): the node evaluates the function it gets
EVALUATION = "evaluation"  # ... before it trains: its train reply's MetricRecord of the sums

# -- FedAvg, FedProx, projected FedAvg (Flower's FedAvg keys) --------------------------------
ARRAYS = "arrays"
PROXIMAL_MU = "proximal-mu"
DP_NOISE_STD = "dp-noise-std"  # train config: the Gaussian noise a node adds to its update
LOCAL_TRAIN_LOSS = "local_train_loss"  # mean loss over the local SGD steps of a round

# -- FedFW family ----------------------------------------------------------------------------
FW_POINT = "point"  # s_i, compact
FW_RESTART = "xi"  # a re-sent x_i (also the sync value)
FW_GRAD = "grad"  # grad f_i(x-bar) for the FW gap
FW_GAP = "fw-gap"  # evaluation config: send the gradient
NUM_CLIENTS = "num-clients"
CONSTRAINT = "constraint"  # query.node extras: the node's D_i
RADIUS = "radius"
LOCAL_STEPS = "fw-local-steps"  # query.node extra: FW steps per round (FedFW's local pass)

# -- FedDR -----------------------------------------------------------------------------------
DR_XHAT = "xhat"  # x_hat_i (also the sync value of a re-sent one)

# -- FedFW and FedDR with secure aggregation ---------------------------------------------------
HELD_CHANGE = "held-change"  # the round's change of what a node holds (x_i, x_hat_i), summed

# -- FFGB family -----------------------------------------------------------------------------
DELTA = "delta"  # ConfigRecord: an ensemble delta's header and learner specs (functions.ensembles)
DELTA_ARRAYS = "delta-arrays"  # ArrayRecord: its packed arrays
ORACLE_ERROR = "oracle-error"  # train reply metric: RMS of target - fit at the last local step
DISTILL_ERROR = "distill-error"  # train reply metric: RMS of target - distilled learner
STUDENT = "student"  # distillation rounds: the student network as a lone-learner delta header
STUDENT_ARRAYS = "student-arrays"  # ... and its packed arrays (instruction and reply)
# FedFW's compact downlink (functions.fedfw_downlink)
UPDATES = "fedfw.updates"  # ConfigRecord: the rounds' headers since the node's version
UPDATE_ARRAYS = "fedfw.update-arrays"  # ArrayRecord: their compact points
REPLICA = "fedfw.replica"  # ConfigRecord: version and the roster's D_i (first contact or re-sync)
REPLICA_ARRAYS = "fedfw.replica-arrays"  # ArrayRecord: every x_i and the sum (re-sync only)

# -- FedFun family (strategies.fedfun relays; functions.node_models encodes) -----------------
QUERY_BOUNDS = "query.bounds"  # once per run: per feature a power-of-two range, sample count
QUERY_SKETCH = "query.sketch"  # fedxgb-hist, once per run: the node's quantiles per column
SKETCH = "sketch"  # its ArrayRecord: "points" (d, size), "counts" (d,), "rows" (1,); or, asked
# with GRID_CELLS in its config, "cells" (d * GRID_CELLS,) and "rows" (1,): its grid counts
GRID_CELLS = "grid-cells"
LAYOUT = "layout"  # fedxgb-hist: the agreed bin edges, "edges" (flat) and "sizes" (d,)
TREES_HELD = "trees-held"  # fedxgb-hist root config: the booster sent is the trees after the first
# h, which the node holds (the whole booster when absent)
TREES_DIGEST = (
    "trees-digest"  # ... and those h trees' digest (functions.xgboost_trees.trees_digest)
)
GROWING = "growing"  # fedxgb-hist: the trees being grown and the open leaves
HISTOGRAMS = "histograms"  # fedxgb-hist's reply: "grad", "hess", "count", (open leaves, slots)
DENSE_HISTOGRAMS = "dense-histograms"  # train config: every slot, for a secure sum
BOUNDS = "fedfun.bounds"  # ArrayRecord: "lower", "upper" (float64, features) - reply and setup
SETUP = "fedfun.setup"  # ConfigRecord: the run's agreed facts a node keeps (total samples)
INITIAL = "initial"  # train config: round 0, local training only
NEIGHBOURS = "fedfun.neighbours"  # ConfigRecord: "ids", "versions" of every neighbour model
MODELS = "fedfun.models"  # ConfigRecord: specs of the models sent, under "p<id>/" or "own/"
MODEL_ARRAYS = "fedfun.model-arrays"  # ArrayRecord: their arrays, same prefixes
OWN_PREFIX = "own/"  # the node's own last accepted model (sync only)
CONSENSUS = "consensus-distance-sum"  # evaluate reply: sum over neighbours of ||h_i - h_j||^2
NEIGHBOUR_COUNT = "neighbour-count"
TEST_ACCURACY = "test-accuracy"
TRAIN_ACCURACY = "train-accuracy"  # on the union of the training sets (the paper's rule)
LOCAL_ACCURACY = "local-accuracy"  # on the node's own partition
LOSS = "loss"  # train reply: the local objective at the end of the round


def neighbour_prefix(partition_id: int) -> str:
    """Where neighbour ``partition_id``'s model travels in MODELS / MODEL_ARRAYS."""
    return f"p{partition_id}/"


REPLY_PREFIX = "self/"  # where a node puts its new model in a train reply
RELAY_KEYS = "relay-keys"  # train config: the vertices a node seals its model to, their keys
