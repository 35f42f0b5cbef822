"""What a client procedure receives: the message content, the node's persistent state and data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import torch
from flwr.app import RecordDict

from client_app import work_log
from run_config.common import RunSettings
from tasks.federation import LocalData

if TYPE_CHECKING:
    from client_app.setup import NodeSetup

S = TypeVar("S")  # the family's settings (``run_config.family.Family[S, N]``)
N = TypeVar("N")  # what the node's own node config makes of them


@dataclass
class ClientJob(Generic[S, N]):
    """One message to handle on one node, for a family whose settings are ``S``.

    ``state`` is the node's ``Context.state``: whatever a procedure stores there is
    there again in the next round (per node, in simulation and deployment alike). ``data``,
    ``settings``, ``node_config``, ``device``, ``family`` and ``overrides`` come from the node's
    ``setup``, built once per run and node.
    """

    content: RecordDict
    state: RecordDict
    read_data: Callable[[], LocalData]  # the node's data, from its setup (``data``)
    setup: NodeSetup[S, N]  # the node's setup for the run (``client_app.setup``)

    @cached_property
    def data(self) -> LocalData:
        """The node's data, read on first use: a message that needs none of its rows
        (fedxgb-hist's deeper levels) reads no file where the app process is new (a
        deployment's ClientApp, one process a message). Reading it is not the family's work
        (``client_app.work_log``)."""
        with work_log.aside():
            return self.read_data()

    @property
    def settings(self) -> RunSettings:
        """The run's settings (its common keys)."""
        return self.setup.settings

    @property
    def node_config(self) -> dict[str, Any]:
        return self.setup.node_config

    @property
    def device(self) -> torch.device:
        """The node's torch device (node config ``device``, ``tasks.devices``)."""
        return self.setup.device

    @property
    def family(self) -> S:
        """The run's family settings (``FFGBSettings``, ``FedFWSettings``, ...), parsed once per
        run and node."""
        return self.setup.family

    @property
    def overrides(self) -> N:
        """This node's own values from its node config (FedFW: its D_i; FedFun: its learner
        and hidden widths), built once per run and node."""
        return self.setup.overrides


ClientProcedure = Callable[[ClientJob[Any, Any]], RecordDict]
