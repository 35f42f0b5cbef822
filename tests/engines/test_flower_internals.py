"""Every part of Flower the project imports beyond its public API, named once with why, and
each present in the installed flwr: a Flower release that moves one fails here, by name, not
somewhere in a run. The supported releases are ``deploy.supernode.SUPPORTED`` (pyproject's pin
allows the same); CI tests the default install's, and docs/testing.md says how to run the
tests on the other."""

from __future__ import annotations

import abc
import ast
import importlib
import inspect
from pathlib import Path

import flwr
import flwr.serverapp.strategy as flwr_strategies
import pytest

from deploy.supernode import SUPPORTED

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("benchmarks", "client_app", "deploy", "functions", "oracles", "run_config")
SOURCES += ("server_app", "strategies", "tasks", "testing", "tests")
PUBLIC = ("flwr.app", "flwr.clientapp", "flwr.serverapp", "flwr_datasets")

# module -> (the names imported from it; None: the module itself), why
INTERNALS: dict[str, tuple[frozenset[str | None], str]] = {
    "flwr": (frozenset({None}), "its __version__: the SuperNode's and the results' version"),
    "flwr.app.message.message": (frozenset({"make_message"}), "a message with a given id"),
    "flwr.cli": (frozenset({"install"}), "the warm SuperExec installs a FAB once"),
    "flwr.cli.build": (
        frozenset({"build_fab_from_disk", "build_fab_from_files"}),
        "the FAB `flwr run` would ship (tests, fab_build)",
    ),
    "flwr.cli.config_utils": (frozenset({"load_and_validate"}), "pyproject as flwr reads it"),
    "flwr.common.config": (
        frozenset({"flatten_dict", "get_flwr_home", "get_fused_config_from_dir"})
        | {"parse_config_args"},
        "run config as Flower fuses and parses it",
    ),
    "flwr.common.constant": (
        frozenset({"APP_DIR", "ErrorCode", "FAB_HASH_TRUNCATION"}),
        "error codes of replies, where an installed FAB lives",
    ),
    "flwr.common.logger": (frozenset({"log"}), "Flower's log, which every runtime shows"),
    "flwr.common.secure_aggregation.crypto.symmetric_encryption": (
        frozenset({"encrypt", "decrypt"}),
        "Flower's SecAgg+ symmetric primitives (relays)",
    ),
    "flwr.common.serde": (
        frozenset({"config_record_to_proto", "message_from_proto", "message_to_proto"})
        | {"recorddict_from_proto", "recorddict_to_proto"},
        "records as Flower serialises them (checkpoints, wire bytes)",
    ),
    "flwr.proto.recorddict_pb2": (frozenset({"Array", "RecordDict"}), "the same, as protobuf"),
    "flwr.server.superlink.linkstate.utils": (
        frozenset({"create_message_error_unavailable_res_message"}),
        "the in-process engine answers for a node that left as the SuperLink does",
    ),
    "flwr.supercore.cli.flower_superexec": (frozenset({"_parse_args"}), "compose's commands"),
    "flwr.supercore.constant": (
        frozenset({"MAX_PROTOBUF_STREAM_MESSAGE_LENGTH", "TASK_TYPE_TO_APPIO_API_ADDRESS_ARG"})
        | {"TASK_TYPE_TO_COMMAND"},
        "how a SuperExec starts an app process (warm SuperExec)",
    ),
    "flwr.supercore.differential_privacy": (
        frozenset({"compute_clip_model_update"}),
        "Flower's clipping of a model update (FedAvg with DP)",
    ),
    "flwr.supercore.inflatable": (frozenset({"inflatable_utils"}), "object retries (warm)"),
    "flwr.supercore.inflatable.inflatable_object": (
        frozenset({"get_all_nested_objects", "no_object_id_recompute"}),
        "messages deflated as Flower's grid pushes them (in-process engine)",
    ),
    "flwr.supercore.inflatable.inflatable_utils": (
        frozenset({"inflate_object_from_contents"}),
        "and inflated as a receiver does",
    ),
    "flwr.supercore.privacy_accounting": (
        frozenset({"GaussianPrivacyEvent", "NeighboringRelation", "PrivacyConfig"})
        | {"SamplingMethod"},
        "Flower's privacy accountant (dp.*)",
    ),
    "flwr.supercore.privacy_accounting.rdp_accountant": (frozenset({"RdpAccountant"}), "same"),
    "flwr.supercore.superexec.executor.types": (frozenset({"LaunchResult"}), "warm SuperExec"),
    "flwr.supercore.task_identity": (frozenset({"TaskIdentity"}), "in-process engine's ids"),
    "flwr.superlink.cli.flower_superlink": (
        frozenset({"_parse_args_run_superlink"}),
        "compose's commands",
    ),
    "flwr.superlink.grid.http_grid": (frozenset({"HttpGrid"}), "its 3 s reply poll, replaced"),
    "flwr.superlink.grid.inmemory_grid": (frozenset({"InMemoryGrid"}), "the simulation's grid"),
    "flwr.supernode": (frozenset({"start_client_internal"}), "deploy.supernode's prompt waits"),
    "flwr.supernode.cli": (frozenset({"flower_supernode"}), "the SuperNode's entry point"),
    "flwr.supernode.cli.flower_supernode": (
        frozenset({"_parse_args_run_supernode"}),
        "compose's commands",
    ),
    "flwr.supernode.fleet_http_client": (frozenset({None}), "the perimeter's allowed routes"),
}


def project_imports() -> dict[str, set[str | None]]:
    """Each flwr module the project's Python files import, with the names they import."""
    found: dict[str, set[str | None]] = {}
    for folder in SOURCES:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flwr"):
                    found.setdefault(node.module, set()).update(a.name for a in node.names)
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.name.split(".")[0] == "flwr":
                            found.setdefault(alias.name, set()).add(None)
    return found


def _public(module: str) -> bool:
    return module.startswith(PUBLIC) and not module.startswith("flwr.app.message.")


def test_every_internal_the_project_imports_is_named_here_and_no_other():
    used = {m: names for m, names in project_imports().items() if not _public(m)}
    assert {m: set(names) for m, (names, _) in INTERNALS.items()} == used


@pytest.mark.parametrize("module", sorted(INTERNALS))
def test_each_internal_is_in_the_installed_flower(module):
    imported = importlib.import_module(module)
    for name in INTERNALS[module][0] - {None}:
        assert hasattr(imported, name), f"flwr {flwr.__version__}: {module}.{name} is gone"


def test_the_installed_flower_is_a_supported_release():
    assert flwr.__version__.startswith(SUPPORTED), (flwr.__version__, SUPPORTED)


def flower_private_methods() -> set[str]:
    """Every ``_name`` (not dunder) that Flower's public strategies or their bases define."""
    names: set[str] = set()
    for value in vars(flwr_strategies).values():
        if inspect.isclass(value):
            for base in value.__mro__:
                if base.__module__.startswith("flwr") and base is not abc.ABC:
                    names |= {n for n in vars(base) if n.startswith("_") and n[1] != "_"}
    return names - {"_abc_impl"}


def _named(node: ast.AST) -> str | None:
    """The attribute an expression reads, or the function a definition names."""
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.name if isinstance(node, ast.FunctionDef) else None


def test_no_private_method_of_flowers_strategies_is_called_or_overridden():
    """A family uses Flower's strategies through their public API only (``flower`` parts,
    ``aggregate_train``, ``summary``): none of their private methods, by any name."""
    private = flower_private_methods()
    assert "_construct_messages" in private  # what the families once called
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {name}"
        for folder in SOURCES
        for path in (ROOT / folder).rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if (name := _named(node)) in private
    ]
    assert found == []
