"""The one state codec: every field type survives records and Flower's serialisation exactly, and
every malformed record is a DecodeError that names the field (issue 20 item 2)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict

from client_app.app import app as client_app
from functions.errors import DecodeError
from functions.networks import NetworkSpec, build
from functions.node_models import ModelLimits, NodeModel, encode_node_model
from functions.params import ParamLayout, Params, record_to_arrays
from functions.protocol import REPLY_PREFIX
from oracles.graphs import make_graph
from run_config.common import RunSettings
from server_app.checkpoint import Checkpoint
from strategies.node_book import NodeSlot
from strategies.registry import strategy_for
from strategies.relay import LIMITS, RelayBook, RelayState
from strategies.state_codec import (
    LAYOUT,
    POSITIONS,
    checks,
    decode_rows,
    decode_state,
    encode_rows,
    encode_state,
    restore_rng,
    rng_record,
)
from testing.inprocess_grid import LocalGrid, run_config

LAYOUT_ = ParamLayout(("w", "b"), ((2, 3), (3,)))
CONTEXT = {LAYOUT: LAYOUT_, POSITIONS: 2, "width": 4}


def params(seed: int) -> Params:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s) for s in LAYOUT_.shapes]


@dataclass(frozen=True)
class Counter:
    """A domain object with its own wire form (a ``state_codec.Wire``)."""

    RECORDS: ClassVar[dict[str, type]] = {"": ConfigRecord, "arrays": ArrayRecord}
    count: int

    def to_records(self) -> dict[str, ConfigRecord | ArrayRecord]:
        return {
            "": ConfigRecord({"count": self.count}),
            "arrays": ArrayRecord({"ones": Array(np.ones(self.count))}),
        }

    @classmethod
    def from_records(cls, records: Mapping[str, Any], context: Mapping[str, Any]) -> Counter:
        count = records[""]["count"]
        if type(count) is not int or record_to_arrays(records["arrays"])["ones"].shape != (count,):
            raise DecodeError("count and ones disagree")
        return cls(count)


@dataclass
class Inner:
    flag: bool
    label: str | None
    values: np.ndarray = field(metadata=checks("int64", shape=(None, 2)))


@dataclass
class State:
    """Every field type the codec supports."""

    rounds: int
    rate: float
    name: str
    on: bool
    maybe: int | None
    nothing: float | None
    ids: tuple[int, ...]
    words: list[str]
    shares: tuple[float, ...]
    box: np.ndarray = field(metadata=checks(shape=("width",)))
    loose: np.ndarray = field(metadata=checks(finite=False))
    absent: np.ndarray | None
    model: Params
    by_position: dict[int, Params]
    inner: Inner
    no_inner: Inner | None
    counter: Counter
    wild: float = field(default=0.0, metadata=checks(finite=False))


def example() -> State:
    return State(
        rounds=3,
        rate=0.25,
        name="x",
        on=True,
        maybe=7,
        nothing=None,
        ids=(1, 2),
        words=[],
        shares=(0.5, 1.5),
        box=np.arange(4.0),
        loose=np.array([np.inf, 1.0]),
        absent=None,
        model=params(0),
        by_position={0: params(1), 1: params(2)},
        inner=Inner(False, None, np.arange(6, dtype=np.int64).reshape(3, 2)),
        no_inner=None,
        counter=Counter(3),
        wild=float("nan"),
    )


def through_flower(records: Mapping[str, Any]) -> RecordDict:
    """Records as a checkpoint reads them back: through Flower's protobuf serialisation."""
    return recorddict_from_proto(recorddict_to_proto(RecordDict(dict(records))))


def assert_equal(a: object, b: object) -> None:
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b)
    elif isinstance(a, list | tuple):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_equal(x, y)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_equal(a[k], b[k])
    elif hasattr(a, "__dataclass_fields__") and not isinstance(a, Counter):
        assert type(a) is type(b)
        for name in a.__dataclass_fields__:
            assert_equal(getattr(a, name), getattr(b, name))
    else:
        assert a == b and type(a) is type(b)


def test_every_field_type_survives_records_and_flowers_serialisation():
    state = example()
    records = encode_state(state, CONTEXT)
    assert set(records) == {
        "state",
        "arrays",
        "model",
        "by-position",
        "inner",
        "inner-arrays",
        "counter",
        "counter-arrays",
    }  # no_inner is None: no records
    assert_equal(decode_state(State, through_flower(records), CONTEXT), state)


def test_optional_fields_hold_values_too():
    state = example()
    state.nothing, state.absent, state.no_inner = (
        2.5,
        np.zeros(1),
        Inner(True, "y", np.zeros((0, 2), np.int64)),
    )
    assert_equal(decode_state(State, through_flower(encode_state(state, CONTEXT)), CONTEXT), state)


@dataclass
class Unknown:
    values: set[int]


@dataclass
class Sum:
    sum: Params


@dataclass
class Colliding:
    mirror: Sum
    mirror_sum: Params


def test_numpy_scalars_are_written_as_python_scalars():
    state = example()
    state.rounds, state.rate, state.on, state.shares = (
        np.int64(3),
        np.float32(0.5),
        np.True_,
        (np.float64(1.5),),
    )
    again = decode_state(State, through_flower(encode_state(state, CONTEXT)), CONTEXT)
    assert (again.rounds, again.rate, again.on, again.shares) == (3, 0.5, True, (1.5,))
    assert [type(v) for v in (again.rounds, again.rate, again.on)] == [int, float, bool]


def test_types_the_codec_does_not_know_and_colliding_records_are_refused_when_encoding():
    with pytest.raises(TypeError, match="values"):
        encode_state(Unknown({1}))
    with pytest.raises(TypeError, match="mirror-sum"):
        encode_state(Colliding(Sum(params(0)), params(1)), CONTEXT)
    for field_name, value in (
        ("rounds", True),
        ("on", 1),
        ("ids", (1, True)),
        ("name", 3),
        ("box", np.arange(4, dtype=np.float32)),
    ):
        state = example()
        setattr(state, field_name, value)
        with pytest.raises(TypeError, match=field_name):
            encode_state(state, CONTEXT)


# -- one DecodeError per kind of malformation, naming the field ---------------------------------
def records_of(state: State | None = None) -> dict[str, Any]:
    return dict(through_flower(encode_state(state or example(), CONTEXT)))


def refused(records: Mapping[str, Any], *names: str) -> str:
    with pytest.raises(DecodeError) as err:
        decode_state(State, records, CONTEXT)
    for name in names:
        assert name in str(err.value)
    return str(err.value)


def config_with(records: dict[str, Any], key: str, **changes: Any) -> dict[str, Any]:
    config = {**dict(records[key]), **changes}
    records[key] = ConfigRecord({k: v for k, v in config.items() if v is not None})
    return records


def arrays_with(records: dict[str, Any], key: str, **changes: np.ndarray | None) -> dict[str, Any]:
    arrays = {k: a.numpy() for k, a in records[key].items()}
    arrays.update(changes)
    records[key] = ArrayRecord({k: Array(v) for k, v in arrays.items() if v is not None})
    return records


def test_a_missing_record_names_its_field():
    records = records_of()
    del records["by-position"]
    refused(records, "by_position", "missing")
    records = records_of()
    del records["inner-arrays"]
    refused(records, "inner", "missing")


def test_a_missing_key_names_its_field():
    refused(config_with(records_of(), "state", rounds=None), "rounds", "missing")
    refused(config_with(records_of(), "inner", flag=None), "inner.flag", "missing")
    refused(arrays_with(records_of(), "arrays", box=None), "box", "missing")


@pytest.mark.parametrize(
    "key, value, name",
    [
        ("rounds", 3.0, "rounds"),
        ("rounds", True, "rounds"),
        ("on", 1, "on"),
        ("rate", "0.2", "rate"),
        ("name", 1, "name"),
        ("ids", 3, "ids"),
        ("ids", [1.5], "ids"),
        ("shares", ["a"], "shares"),
        ("maybe", "7", "maybe"),
    ],
)
def test_a_value_of_another_type_names_its_field(key, value, name):
    refused(config_with(records_of(), "state", **{key: value}), name, "expected")


def test_a_record_of_another_kind_names_its_field():
    records = records_of()
    records["model"] = ConfigRecord({"w": 1})
    refused(records, "model", "ConfigRecord")


def test_a_wrong_dtype_names_its_field():
    refused(
        arrays_with(records_of(), "arrays", box=np.arange(4, dtype=np.float32)), "box", "float32"
    )
    refused(
        arrays_with(records_of(), "inner-arrays", values=np.zeros((3, 2))),
        "inner.values",
        "float64",
    )
    refused(arrays_with(records_of(), "model", w=np.zeros((2, 3), np.float32)), "model", "float32")


def test_a_wrong_shape_names_its_field():
    refused(arrays_with(records_of(), "arrays", box=np.arange(5.0)), "box", "shape")
    refused(
        arrays_with(records_of(), "inner-arrays", values=np.zeros(4, np.int64)),
        "inner.values",
        "shape",
    )
    refused(arrays_with(records_of(), "model", b=np.zeros(2)), "model", "shape")


def test_nan_where_finite_values_are_required_names_its_field():
    refused(config_with(records_of(), "state", rate=float("nan")), "rate", "finite")
    refused(config_with(records_of(), "state", shares=[1.0, float("inf")]), "shares", "finite")
    refused(arrays_with(records_of(), "arrays", box=np.array([0, np.nan, 0, 0])), "box", "NaN")
    refused(
        arrays_with(records_of(), "by-position", **{"1/b": np.full(3, np.inf)}),
        "by_position[1]",
        "NaN",
    )


def test_unknown_records_keys_and_arrays_are_refused():
    records = records_of()
    records["stray"] = ConfigRecord()
    refused(records, "unknown records", "stray")
    refused(config_with(records_of(), "inner", extra=1), "inner", "extra")
    refused(arrays_with(records_of(), "arrays", extra=np.zeros(1)), "unknown arrays", "extra")
    refused(arrays_with(records_of(), "model", extra=np.zeros(1)), "model")


def test_positions_must_be_the_rosters():
    refused(
        arrays_with(records_of(), "by-position", **{"2/w": np.zeros((2, 3))}),
        "by_position",
        "'2/w'",
    )
    refused(arrays_with(records_of(), "by-position", **{"1/b": None}), "by_position[1]")


def test_a_position_without_arrays_is_a_released_one():
    """A node that left for good keeps its place in the order but no vector (``Roster``)."""
    records = arrays_with(records_of(), "by-position", **{"1/w": None, "1/b": None})
    decoded = decode_state(State, records, CONTEXT)
    assert list(decoded.by_position) == [0]


def test_none_markers_must_be_bools_and_none_means_no_value():
    refused(config_with(records_of(), "state", **{"nothing:none": "yes"}), "nothing", ":none")
    refused(config_with(records_of(), "state", nothing=1.0), "nothing")  # None, and a value
    records = records_of()
    records["no-inner"] = ConfigRecord({"flag": True})
    refused(records, "no-inner")


def test_a_wire_objects_own_refusal_names_its_field():
    refused(arrays_with(records_of(), "counter-arrays", ones=np.ones(2)), "counter", "disagree")


def test_decoding_needs_the_context_it_names():
    with pytest.raises(KeyError, match="width"):
        decode_state(State, records_of(), {LAYOUT: LAYOUT_, POSITIONS: 2})


# -- a Wire object of the project: the relay's models, read back as replies are ------------------
def relay_records() -> tuple[RelayBook, dict[str, Any], dict[str, Any]]:
    torch.manual_seed(0)
    relay = RelayBook(make_graph("complete", 3, 0))
    config, arrays = encode_node_model(NodeModel(build(NetworkSpec((3, 4, 2)))), REPLY_PREFIX)
    relay.store(2, config, arrays, REPLY_PREFIX, 5)
    relay.mark_delivered(0, [2], everything=True)
    context = {LIMITS: ModelLimits(3, 2)}
    return relay, dict(through_flower(encode_state(relay.state(), context))), context


def test_the_relays_models_round_trip_and_are_checked_as_replies_are():
    relay, records, context = relay_records()
    assert set(records) == {"models", "models-arrays", "arrays"}
    again = RelayBook.restore(relay.graph, decode_state(RelayState, records, context))
    assert again.delivered == relay.delivered == {0: {2: 5}, 1: {}, 2: {}}
    ((vertex, stored),) = again.latest.items()
    assert (vertex, stored.version, stored.config) == (2, 5, relay.latest[2].config)
    assert all(np.array_equal(stored.arrays[k], a) for k, a in relay.latest[2].arrays.items())
    for changes, message in [
        ({"v2/kind": "forest"}, "kind"),
        ({"versions": [-1]}, "versions"),
        ({"v7/kind": "mlp"}, "v7/kind"),
    ]:
        _, bad, _ = relay_records()
        with pytest.raises(DecodeError, match=message) as err:
            decode_state(RelayState, config_with(bad, "models", **changes), context)
        assert "models" in str(err.value)
    with pytest.raises(DecodeError, match="outside the graph"):
        RelayBook.restore(make_graph("complete", 2, 0), decode_state(RelayState, records, context))


# -- a family's state through the base ---------------------------------------------------------
@pytest.mark.parametrize(
    "algorithm, field_name, key",
    [("feddr", "x_hats", "x-hats"), ("fedfw", "mirror_sum", "mirror-sum")],
)
def test_a_familys_state_round_trips_through_the_base_and_a_missing_part_is_named(
    algorithm, field_name, key
):
    config = run_config(algorithm=algorithm, task="synthetic", **{"central-evaluation": False})
    settings = RunSettings.from_run_config(config)
    strategy = strategy_for(settings)
    grid = LocalGrid(client_app, config, 3)
    strategy.aggregate_train(
        1,
        grid.send_and_receive(
            strategy.configure_train(1, strategy.initial_arrays(), ConfigRecord(), grid)
        ),
    )
    state = through_flower(strategy.state_record())
    again = strategy_for(settings)
    again.load_state_record(state)
    assert_equal(again.family_state(), strategy.family_state())
    del state[key]
    with pytest.raises(DecodeError, match=field_name):
        strategy_for(settings).load_state_record(state)
    del state["roster"]
    with pytest.raises(DecodeError, match="without a roster"):
        strategy_for(settings).load_state_record(state)


# -- rows (the node book's slots) and the generator ---------------------------------------------
@dataclass
class Slot(NodeSlot):
    version: int | None = None
    share: float = 0.0


def test_rows_round_trip_with_nones_and_refuse_what_does_not_fit():
    rows = [Slot(), Slot(3, False, 2, 0.5)]
    record = encode_rows(Slot, rows)
    assert record["version:none"] == [True, False] and record["needs-sync"] == [True, False]
    decoded = decode_rows(Slot, dict(through_flower({"r": ConfigRecord(record)})["r"]), 2, "book")
    assert [Slot(**values) for values in decoded] == rows
    for key, value, message in [
        ("share", [0.0, "x"], "share='x'"),
        ("last-accepted", [0], "'last-accepted' is not a list of 2"),
        ("version:none", [1, 0], "version:none=1"),
        ("stray", [1, 2], "stray"),
    ]:
        with pytest.raises(DecodeError, match=message):
            decode_rows(Slot, {**record, key: value}, 2, "book")


def test_the_generator_continues_exactly_and_garbage_is_refused():
    rng = np.random.default_rng(5)
    rng.random(3)
    again = restore_rng(through_flower({"rng": rng_record(rng)})["rng"])
    assert np.array_equal(again.random(4), rng.random(4))
    for garbage in (
        None,
        ConfigRecord({"state": "{"}),
        ConfigRecord({"state": "[]"}),
        ConfigRecord({"state": '{"bit_generator": "PCG64"}'}),
        ConfigRecord(),
    ):
        with pytest.raises(DecodeError, match="rng"):
            restore_rng(garbage)


def test_a_checkpoint_of_the_format_before_the_codec_is_refused():
    data = Checkpoint("fedfw", 1, ArrayRecord(), [], RecordDict(), {}).to_bytes()
    content = recorddict_from_proto(ProtoRecordDict.FromString(data))
    content["checkpoint"]["format"] = 2
    with pytest.raises(DecodeError, match="checkpoint format 2, expected 4"):
        Checkpoint.from_bytes(recorddict_to_proto(content).SerializeToString())
