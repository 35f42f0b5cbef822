"""What a client procedure receives: the message content, the node's persistent state and data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from flwr.app import RecordDict

from run_config.common import RunSettings
from tasks.federation import LocalData

if TYPE_CHECKING:
    from client_app.setup import NodeSetup


@dataclass
class ClientJob:
    """One message to handle on one node.

    ``state`` is the node's ``Context.state``: whatever a procedure stores there is
    there again in the next round (per node, in simulation and deployment alike). ``data``,
    ``settings``, ``node_config``, ``device``, ``family`` and ``overrides`` come from the node's
    ``setup``, built once per run and node.
    """

    content: RecordDict
    state: RecordDict
    data: LocalData
    settings: RunSettings
    node_config: dict
    device: torch.device = torch.device("cpu")  # node config ``device`` (tasks.devices)
    setup: NodeSetup | None = None  # the node's setup for the run (``client_app.setup``)

    @property
    def family(self) -> Any:
        """The run's family settings (``FFGBSettings``, ``FedFWSettings``, ...), parsed once per
        run and node."""
        return self.setup.family

    @property
    def overrides(self) -> Any:
        """This node's own overrides from its node config (FedFW: its D_i; FedFun: its learner
        and hidden widths), built once per run and node."""
        return self.setup.overrides


ClientProcedure = Callable[[ClientJob], RecordDict]
