"""What a client procedure receives: the message content, the node's persistent state and data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from flwr.app import RecordDict

from run_config.common import RunSettings
from tasks.federation import LocalData


@dataclass
class ClientJob:
    """One message to handle on one node.

    ``state`` is the node's ``Context.state``: whatever a procedure stores there is
    there again in the next round (per node, in simulation and deployment alike).
    """

    content: RecordDict
    state: RecordDict
    data: LocalData
    settings: RunSettings
    node_config: dict
    device: torch.device = torch.device("cpu")  # node config ``device`` (tasks.devices)


ClientProcedure = Callable[[ClientJob], RecordDict]
