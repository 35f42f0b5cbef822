"""The sites agree their data's schema before round 1 (``task='site'``): two exchanges, facts and
sums, never rows.

1. ``query.facts`` to every connected node: each answers its partition id and the facts of its
   own file (``tasks.site_facts.site_facts``). A node whose file cannot be used answers an
   error naming the file and the problem; it is logged and left out, as is a node whose claim
   the roster would refuse (against ``node-partitions``, or a partition another node serves),
   so that no sums are taken from a node that will not train.
2. The server agrees one schema (``tasks.schema_agreement.agree``); a node whose facts conflict is
   refused with the reason, which it is told in the next exchange.
3. ``query.moments`` to every node that answered: the schema to the agreeing ones, which answer
   their training rows' sums, and the reason to the refused ones, which log it. The summed
   moments fix the imputation and scaling (``with_moments``). With ``secure-aggregation`` the
   agreeing nodes' sums are one secure sum (``strategies.secure_sum``): the server checks the
   sum against the sites' facts taken together (``pooled_facts``), never one site's sums.

The nodes that agreed become the run's federation: ``SiteAgreement.question`` is the content of
every ``query.node`` (each node keeps the schema in its state and reads its data under it), and
``SiteAgreement.left_out`` names every other node with its reason, which the roster leaves out.
Sums are added in partition order, so the same files give the same schema on every engine.

A node the agreement did not see (it connected late, during round 1's wait for late nodes, or a
SuperNode came back under a new node id) is vetted before the roster asks it anything else
(``SiteAgreement.vet``): its facts against the agreed schema and the agreed sites' scales, as a
resumed run judges its sites; it is never asked for sums (the agreed moments stay the first
sites').

A resumed run keeps the schema its checkpoint was trained under (``kept``): step 2 then only
checks each node's facts against it (``misfit``), and step 3 sends it, fitted, to the agreeing
nodes, which keep it (the resumed run does not ask its roster's nodes again) and send no sums.
The transform, and with it every round after the resumption, is the uninterrupted run's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from logging import INFO, WARNING
from typing import Any

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from functions.errors import DecodeError
from functions.protocol import (
    PARTITION_ID,
    QUERY_FACTS,
    QUERY_MOMENTS,
    SITE,
    SITE_ARRAYS,
    SITE_FACTS,
    SITE_MOMENTS,
    SITE_REFUSED,
    SITE_SCHEMA,
    SITE_SECURE,
)
from functions.secure_sum import SumField
from run_config.common import RunSettings
from strategies.roster import refuse_unpinned
from strategies.screening import exact_records, screen_replies
from strategies.secure_sum import SecureAggregator
from tasks.datasets import TaskData
from tasks.schema_agreement import Agreement, agree, judged, misfit, plausibility
from tasks.site_data import server_task
from tasks.site_facts import check_facts
from tasks.site_files import SiteDataError
from tasks.site_moments import (
    check_moments,
    moment_bounds,
    moments_of_arrays,
    pooled_facts,
    with_moments,
)
from tasks.site_schema import Schema, SiteSpec

LABEL = "sites"
ROUND = 0  # the exchanges come before round 1
MAX_JSON = 2**22  # characters of facts or moments a node may send


@dataclass
class SiteAgreement:
    """The agreed schema, the server's task under it, and the nodes left out with the reason."""

    schema: Schema
    task: TaskData
    partitions: dict[int, int]  # node id -> partition id of every node that agreed
    settings: RunSettings  # the run's: the sites' spec, the reply timeout
    facts: dict[int, dict]  # node id -> its file's facts, of every node that agreed
    left_out: dict[int, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # implausible but kept (data.strict off)

    def question(self) -> RecordDict:
        """The content of a ``query.node``: the fitted schema."""
        return RecordDict({SITE: ConfigRecord({SITE_SCHEMA: self.schema.to_json()})})

    def vet(self, grid: Grid, node_ids: list[int], server_round: int) -> tuple[dict[int, str], int]:
        """The nodes of ``node_ids`` the agreement has not seen (they connected after it: late
        in round 1, or a SuperNode back under a new node id) asked their facts and judged as a
        resumed run judges its sites: the agreed schema must fit their file (``misfit``), and
        their columns' scales are compared with the agreed sites' (``plausibility``). Returns
        the refused with the reason (kept in ``left_out``) and how many replies count as
        failures (those dropped or refused; errors and silence the grid counts); the others
        join ``partitions``, with their warnings. ``server_round``: the round that asks them
        (the messages' group id and the log's label)."""
        new = [n for n in node_ids if n not in self.partitions and n not in self.left_out]
        if not new:
            return {}, 0
        spec = self.settings.site
        answers, refused, failures = _exchange(
            grid,
            self.settings,
            QUERY_FACTS,
            {n: RecordDict() for n in new},
            _facts_decoder(spec),
            server_round,
        )
        judgement = _under_kept(
            spec, self.schema, {n: answers[n][1] for n in sorted(answers)}, self.facts
        )
        refused.update(judgement.refused)
        failures += len(judgement.refused)
        for node in sorted(refused):
            log(
                WARNING,
                "%s: node %s, which connected after the agreement, is refused: %s",
                LABEL,
                node,
                refused[node],
            )
        for node in sorted(answers):
            if node in refused:
                continue
            self.partitions[node], self.facts[node] = answers[node]
            for doubt in judgement.warnings.get(node, []):
                line = f"node {node} (partition {answers[node][0]}): {doubt}"
                log(WARNING, "%s: %s", LABEL, line)
                self.warnings.append(line)
        self.left_out.update(refused)
        return refused, failures

    def record(self) -> dict[str, Any]:
        """What config.json keeps: the schema, the partitions that took part, who was left out
        and why, and what looked implausible about the sites kept."""
        return {
            "schema": json.loads(self.schema.to_json()),
            "partitions": sorted(set(self.partitions.values())),
            "left-out": {str(node): reason for node, reason in self.left_out.items()},
            "warnings": list(self.warnings),
        }


def _json_field(reply: Message, name: str) -> tuple[ConfigRecord, Any]:
    record = exact_records(reply.content, {SITE: ConfigRecord})[SITE]
    payload = record.get(name)
    if not isinstance(payload, str) or len(payload) > MAX_JSON:
        raise DecodeError(f"{SITE}.{name} must be JSON text of at most {MAX_JSON} characters")
    try:
        return record, json.loads(payload)
    except ValueError as err:
        raise DecodeError(f"{SITE}.{name} is not JSON: {err}") from None


def _exchange(
    grid: Grid,
    settings: RunSettings,
    message_type: str,
    contents: dict[int, RecordDict],
    decode: Callable[[Message], Any],
    server_round: int = ROUND,
) -> tuple[dict[int, Any], dict[int, str], int]:
    """Send each node its content; the decoded answers, the reason of every node whose
    answer was an error, was unusable, or did not come, and how many were unusable (errors
    and silence the metered grid counts itself). ``server_round``: the messages' group id and
    the log's round (the agreement's own exchanges come before round 1)."""
    questions = [
        Message(content, node, message_type, group_id=str(server_round))
        for node, content in contents.items()
    ]
    replies = list(grid.send_and_receive(questions, timeout=settings.reply_timeout))
    screened = screen_replies(LABEL, server_round, replies, decode, set(contents))
    failed = {
        node: f"its {message_type} answer was an error: {screened.reasons[node]}"
        for node in screened.errors
    }
    for node in screened.dropped:
        failed.setdefault(node, f"its {message_type} answer was refused: {screened.reasons[node]}")
    for node in contents:
        if node not in screened.accepted and node not in failed:
            failed[node] = f"no {message_type} answer within reply-timeout"
    return screened.accepted, failed, screened.rejected


def _contested(answers: dict[int, tuple[int, dict]], pinned: dict[int, int]) -> dict[int, str]:
    """The roster's rules, applied before any sums are taken: a claim against
    ``node-partitions`` is refused, and a partition is served by one node (the first by node
    id); the other claimants, with the reason."""
    claims = {n: {PARTITION_ID: answers[n][0]} for n in sorted(answers)}
    refused = refuse_unpinned(LABEL, ROUND, claims, pinned)
    owner: dict[int, int] = {}
    for node, claim in claims.items():
        partition = claim[PARTITION_ID]
        if node in refused:
            continue
        if partition in owner:
            refused[node] = f"partition {partition} is served by node {owner[partition]}"
            log(WARNING, "%s: node %s is left out: %s", LABEL, node, refused[node])
        else:
            owner[partition] = node
    return refused


def _facts_decoder(spec: SiteSpec) -> Callable[[Message], tuple[int, dict]]:
    """The decoder of ``query.facts`` answers: (the partition id, the checked facts)."""

    def facts_of(reply: Message) -> tuple[int, dict]:
        record, payload = _json_field(reply, SITE_FACTS)
        partition = record.get(PARTITION_ID)
        if type(partition) is not int or partition < 0:
            raise DecodeError(f"{PARTITION_ID}={partition!r} is not a non-negative int")
        try:
            return partition, check_facts(payload, spec)
        except SiteDataError as err:
            raise DecodeError(str(err)) from None

    return facts_of


def _under_kept(
    spec: SiteSpec,
    schema: Schema,
    facts: dict[int, dict],
    beside: Mapping[int, dict] | None = None,
) -> Agreement:
    """Nodes' ``facts`` judged under a ``schema`` kept as it is (a resumed run's; the agreed
    one, for nodes the agreement did not see): refused where it does not fit them
    (``misfit``), and those that fit judged for plausibility among themselves and ``beside``
    (the sites already agreed; their own verdicts are not this judgement's)."""
    misfits = {n: reason for n, f in facts.items() if (reason := misfit(schema, f))}
    fitting = {n: f for n, f in facts.items() if n not in misfits}
    strict, warnings = judged(spec, plausibility(spec, {**(beside or {}), **fitting}))
    return Agreement(
        schema,
        {**misfits, **{n: r for n, r in strict.items() if n in fitting}},
        {n: w for n, w in warnings.items() if n in fitting},
    )


def _no_site(what: str, left_out: dict[int, str]) -> SiteDataError:
    """The run's end when no site is left: ``what`` happened, and every node's reason."""
    reasons = "; ".join(f"node {n}: {r}" for n, r in left_out.items())
    return SiteDataError(
        f"{what}" + (f"; {reasons}" if reasons else "") + ("" if left_out else ": no node answered")
    )


def _secure_moments(
    grid: Grid,
    settings: RunSettings,
    schema: Schema,
    contents: dict[int, RecordDict],
    answers: dict[int, tuple[int, dict]],
) -> tuple[dict, dict[int, str]]:
    """The agreeing nodes' moments as one secure sum, checked against their facts pooled
    (``SiteDataError`` when the sum could not come from them: no node can be singled out);
    the nodes not in the sum, with the reason."""
    for content in contents.values():
        content[SITE][SITE_SECURE] = True
    facts = {n: answers[n][1] for n in contents}
    most = max(f["rows"] for f in facts.values())
    fields = [
        SumField(SITE_ARRAYS, name, size, bound, integer=name.startswith(("n/", "c/", "rows")))
        for name, (size, bound) in moment_bounds(schema, pooled_facts(facts.values()), most).items()
    ]
    messages = [
        Message(content, node, QUERY_MOMENTS, group_id=str(ROUND))
        for node, content in contents.items()
    ]
    aggregator = SecureAggregator(LABEL, settings.seed, stream=0)  # before the strategy's
    outcome = aggregator.exchange(grid, ROUND, messages, fields)
    missed = {
        n: f"its {QUERY_MOMENTS} answer is not in the secure sum: {outcome.reasons[n]}"
        for n in contents
        if n not in outcome.contributors
    }
    if outcome.error:
        raise SiteDataError(f"no secure sum of the sites' moments: {outcome.error}")
    summed = {f.name: outcome.sums[f.key] for f in fields}
    payload = moments_of_arrays(summed, schema)
    try:
        return check_moments(
            payload, schema, pooled_facts(facts[n] for n in outcome.contributors)
        ), missed
    except SiteDataError as err:
        raise SiteDataError(f"the sites' summed moments do not fit their facts: {err}") from None


def agree_sites(grid: Grid, settings: RunSettings, kept: Schema | None = None) -> SiteAgreement:
    """Run both exchanges with every connected node (with ``kept``, the schema of the run being
    resumed, under it); ``SiteDataError`` when no node agrees."""
    nodes = sorted(grid.get_node_ids())
    answers, left_out = _described(grid, settings, nodes)
    order = sorted(answers, key=lambda n: (answers[n][0], n))
    agreement = _judged(settings.site, answers, order, kept, left_out)
    left_out.update(agreement.refused)
    contents = _moment_questions(agreement, order)
    warnings = _warning_lines(agreement, answers)
    secure = settings.secure_aggregation and kept is None
    sums, failed = _moments(grid, settings, agreement, contents, answers, kept, secure)
    left_out.update({n: r for n, r in failed.items() if n not in left_out})
    agreed = [n for n in order if n not in left_out]
    if not agreed:
        raise _no_site("no site agreed the schema", left_out)
    fitted = kept or with_moments(
        agreement.schema, {0: sums[0]} if secure else {n: sums[n] for n in agreed}
    )
    largest = max(answers[n][1]["rows"] + answers[n][1].get("test-rows", 0) for n in agreed)
    task = server_task(fitted, largest, settings.server_test_path)
    log(
        INFO,
        "%s: %d of %d nodes agree %s schema of %d feature columns (%d features after one-hot), %s",
        LABEL,
        len(agreed),
        len(nodes),
        "the resumed run's" if kept else "a",
        len(fitted.columns),
        fitted.width,
        f"{fitted.num_classes} classes" if fitted.num_classes else "regression",
    )
    return SiteAgreement(
        fitted,
        task,
        {n: answers[n][0] for n in agreed},
        settings,
        {n: answers[n][1] for n in agreed},
        left_out,
        [line for n in agreed for line in warnings.get(n, [])],
    )


def _described(
    grid: Grid, settings: RunSettings, nodes: list[int]
) -> tuple[dict[int, tuple[int, dict]], dict[int, str]]:
    """Step 1: each node's partition id and facts, less the nodes whose claim the roster would
    refuse; and every node left out, with the reason. ``SiteDataError`` when no node's facts
    are left."""
    answers, left_out, _ = _exchange(
        grid, settings, QUERY_FACTS, {n: RecordDict() for n in nodes}, _facts_decoder(settings.site)
    )
    left_out.update(_contested(answers, settings.pinned_partitions))
    answers = {n: a for n, a in answers.items() if n not in left_out}
    if not answers:
        raise _no_site("no site's data could be described", left_out)
    return answers, left_out


def _judged(
    spec: SiteSpec,
    answers: dict[int, tuple[int, dict]],
    order: list[int],
    kept: Schema | None,
    left_out: dict[int, str],
) -> Agreement:
    """Step 2: the schema the nodes' facts agree (taken in ``order``), or ``kept`` for the nodes
    it fits; each refused node logged with the reason. ``SiteDataError`` when a new agreement
    refuses every node (with their reasons and those of the nodes already ``left_out``)."""
    if kept is None:
        try:
            agreement = agree(spec, {n: answers[n][1] for n in order})
        except SiteDataError as err:  # every describing node refused: its reasons and ours
            raise _no_site(str(err), left_out) from None
    else:  # the kept schema, and what is implausible about the sites that fit it
        agreement = _under_kept(spec, kept, {n: answers[n][1] for n in order})
    for node, reason in agreement.refused.items():
        log(
            WARNING,
            "%s: node %s (partition %d) is refused: %s",
            LABEL,
            node,
            answers[node][0],
            reason,
        )
    return agreement


def _moment_questions(agreement: Agreement, order: list[int]) -> dict[int, RecordDict]:
    """Step 3's contents, in ``order``: the schema to each agreeing node, the reason to each
    refused one."""
    return {
        n: RecordDict(
            {
                SITE: ConfigRecord(
                    {SITE_REFUSED: agreement.refused[n]}
                    if n in agreement.refused
                    else {SITE_SCHEMA: agreement.schema.to_json()}
                )
            }
        )
        for n in order
    }


def _warning_lines(
    agreement: Agreement, answers: dict[int, tuple[int, dict]]
) -> dict[int, list[str]]:
    """What looked implausible about each kept node, as the lines logged here and kept in
    ``SiteAgreement.warnings`` (naming the node and its partition)."""
    warnings = {
        n: [f"node {n} (partition {answers[n][0]}): {doubt}" for doubt in doubts]
        for n, doubts in agreement.warnings.items()
    }
    for lines in warnings.values():
        for line in lines:
            log(WARNING, "%s: %s", LABEL, line)
    return warnings


def _moments(
    grid: Grid,
    settings: RunSettings,
    agreement: Agreement,
    contents: dict[int, RecordDict],
    answers: dict[int, tuple[int, dict]],
    kept: Schema | None,
    secure: bool,
) -> tuple[dict[int, dict | None], dict[int, str]]:
    """Step 3's exchange: the answers by node (``secure``: the agreeing nodes' moments as one
    secure sum under key 0, beside the refused nodes' acknowledgements) and the nodes whose
    answer failed, with the reason."""
    schema = agreement.schema

    def moments_of(reply: Message) -> dict | None:
        node = reply.metadata.src_node_id
        if node in agreement.refused or kept is not None:
            return None  # a refused node, or any in a resumed run, only acknowledges
        try:
            return check_moments(_json_field(reply, SITE_MOMENTS)[1], schema, answers[node][1])
        except SiteDataError as err:
            raise DecodeError(str(err)) from None

    asked = {n: c for n, c in contents.items() if not secure or n in agreement.refused}
    sums, failed, _ = _exchange(grid, settings, QUERY_MOMENTS, asked, moments_of)
    if secure:
        agreeing = {n: c for n, c in contents.items() if n not in agreement.refused}
        summed, missed = _secure_moments(grid, settings, schema, agreeing, answers)
        sums, failed = {**sums, 0: summed}, {**failed, **missed}
    return sums, failed
