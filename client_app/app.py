"""ClientApp: dispatches each message to the run's algorithm's client procedure.

A message the node cannot answer gets an error reply whose reason is one sentence (the file, the
column, the problem), never a traceback, whichever engine runs the node: Flower's runtimes would
otherwise send the exception with its traceback (the simulation engine's wrapped in Ray's, with
colour codes). A fault of the data, the configuration or a received record is logged as one
warning line; any other exception is a fault of ours, and the node's log keeps its traceback.
"""

from __future__ import annotations

import os
from functools import partial
from logging import ERROR, WARNING

import torch
from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.common.logger import log

from client_app import group_key, work_log
from client_app.job import ClientJob
from client_app.node_state import LostStateError
from client_app.registry import handlers_for, message_types
from client_app.secure_sum import HANDLERS as SECURE_SUM_HANDLERS
from client_app.secure_sum import masked_reply
from client_app.setup import node_setup
from client_app.site_data import SITE_HANDLERS, agreed_schema
from functions.errors import DecodeError, one_sentence
from functions.packed_records import pack_content, unpack_content
from functions.secure_sum import GROUP, SECAGG
from tasks.errors import ConfigError
from tasks.site_errors import SiteDataError

# Small models on few cores: one intra-op thread per process is ~50x faster than
# oversubscribing (measured 0.6 ms vs 30 ms per MLP step on 2 busy cores).
torch.set_num_threads(int(os.environ.get("FL_TORCH_THREADS", "1")))

app = ClientApp()
STAGE_HANDLERS = {**SECURE_SUM_HANDLERS, GROUP: group_key.answer}  # whatever the family

# what the node's data, the run config or a received record can be faulted for
EXPECTED_FAILURES = (SiteDataError, ConfigError, DecodeError, LostStateError)


def handle(message: Message, context: Context) -> Message:
    """``answer``, or the error reply of one sentence when it raises (see the module
    docstring). Arrays travel packed both ways (``functions.packed_records``)."""
    message_type = message.metadata.message_type
    try:
        with work_log.logged(message, context):
            message.content = unpack_content(message.content)
            reply = answer(message, context)
            reply.content = pack_content(reply.content)
        return reply
    except EXPECTED_FAILURES as err:
        reason = one_sentence(err)
        log(WARNING, "%s: this node cannot answer: %s", message_type, reason)
    except Exception as err:  # a fault of ours: traceback here, one line sent
        reason = one_sentence(f"{type(err).__name__}: {err}")
        log(ERROR, "%s: this node failed: %s", message_type, reason, exc_info=True)
    return Message(
        Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=message
    )


def answer(message: Message, context: Context) -> Message:
    """Run the procedure that the run's algorithm registered for this message type, on the
    node's setup (built on the run's first message to this node, then reused). The stages of a
    secure sum are answered by ``client_app.secure_sum`` (a relay's group key by
    ``client_app.group_key``), whatever the family, and a family's
    message that carries a ``secagg`` record has its reply masked there."""
    message_type = message.metadata.message_type
    if message_type in STAGE_HANDLERS:
        handler = STAGE_HANDLERS[message_type]
        return Message(handler(message.content, context.state), reply_to=message)
    if SECAGG in message.content:
        reply = masked_reply(
            message.content,
            context.state,
            lambda content: _family_reply(message_type, content, context),
        )
        return Message(reply, reply_to=message)
    return Message(_family_reply(message_type, message.content, context), reply_to=message)


def _family_reply(message_type: str, content: RecordDict, context: Context) -> RecordDict:
    """The reply content of the run's family (or of the sites' agreement) to ``content``."""
    setup = node_setup(context)
    settings = setup.settings
    if settings.sites and message_type in SITE_HANDLERS:
        return SITE_HANDLERS[message_type](setup, content, context.state)
    procedure = handlers_for(settings.algorithm).get(message_type)
    if procedure is None:
        raise ConfigError(
            f"algorithm {settings.algorithm!r} does not handle {message_type!r} messages"
        )
    read_data = (
        partial(setup.site_data, agreed_schema(content, context.state))
        if settings.sites
        else lambda: setup.data
    )
    setup.device  # resolved for every message: a device this machine lacks fails them all
    with work_log.work():
        return procedure(ClientJob(content, context.state, read_data, setup))


def _register(message_type: str) -> None:
    """Register ``handle`` for "category" or "category.action" with Flower's ClientApp."""
    category, _, action = message_type.partition(".")
    decorator = getattr(app, category)
    (decorator(action) if action else decorator())(handle)


for _message_type in (*message_types(), *SITE_HANDLERS, *STAGE_HANDLERS):
    _register(_message_type)
