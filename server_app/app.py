"""ServerApp: run config -> registered strategy -> rounds; results folder, log line and checkpoint
per round.

It knows no model: the strategy supplies its start state (``initial_arrays``) and its central
evaluation (``evaluate_global``), so adding an algorithm never touches this package.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from logging import ERROR, INFO
from pathlib import Path
from typing import Any

import torch
from flwr.app import ArrayRecord, Context
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from functions.errors import DecodeError
from run_config.common import RunSettings
from run_config.families import family_of, validate_tables
from run_config.family import Algorithm
from server_app.checkpoint import Checkpoint
from server_app.event_log import EventLog
from server_app.metered_grid import MeteredGrid, own_pull_interval
from server_app.outcome import outcome
from server_app.packed_grid import PackedGrid
from server_app.recording import BelowQuorum, RecordedStrategy, RoundRecorder
from server_app.results import ResultsWriter, summarise, write_atomic
from server_app.resume import checked_checkpoint, restore
from server_app.run_info import flower_app, results_directory, run_config_record
from strategies.base import Diverged, FederatedStrategy
from strategies.registry import strategy_for
from strategies.site_agreement import SiteAgreement, agree_sites
from tasks.devices import device_facts, resolve_device
from tasks.errors import ConfigError
from tasks.federation import check_partitioning, task_for
from tasks.site_files import SiteDataError
from tasks.site_schema import REGRESSION, Schema

# Small models on few cores: one intra-op thread per process is ~50x faster than
# oversubscribing (measured 0.6 ms vs 30 ms per MLP step on 2 busy cores).
torch.set_num_threads(int(os.environ.get("FL_TORCH_THREADS", "1")))

app = ServerApp()


class InvalidRunConfig(Exception):
    """The run config cannot be honoured; raised before training so Flower marks the run failed."""


@dataclass
class RunPlan:
    """A validated run: settings, the algorithm and its strategy, built before any node is asked."""

    settings: RunSettings
    algorithm: Algorithm
    strategy: FederatedStrategy
    sites: SiteAgreement | None = None  # task='site': the schema the nodes agreed

    @property
    def label_scale(self) -> float:
        """A standardised regression label's standard deviation in its own units (1: the
        label is in its own units, or there is none)."""
        task = self.sites.task if self.sites is not None else task_for(self.settings.data)
        return task.target_scale if task.kind == REGRESSION else 1.0


def check_settings(run_config: Mapping[str, Any]) -> RunSettings:
    """The common keys, the algorithm and its own keys; ConfigError naming the key."""
    settings = RunSettings.from_run_config(run_config)
    validate_tables(settings)  # the algorithm's family first (ConfigError for an unknown one)
    return settings


def plan_run(settings: RunSettings, sites: SiteAgreement | None = None) -> RunPlan:
    """Validate everything that needs no node (with ``sites``, after the agreement) beyond the
    keys (``check_settings``): the task and the model (the strategy factory checks them);
    ConfigError names the key."""
    if sites is not None and not settings.server_test_path:
        settings = replace(settings, central_evaluation=False)  # no test rows at the server
    algorithm = family_of(settings.algorithm).algorithm(settings.algorithm)
    strategy = strategy_for(settings, None if sites is None else sites.task)
    strategy.pin_partitions(settings.pinned_partitions, settings.join_timeout, settings.leave_after)
    if sites is not None:
        strategy.admit_sites(sites.question, sites.left_out, sites.vet)
    return RunPlan(settings, algorithm, strategy, sites)


def kept_schema(checkpoint: Checkpoint | None) -> Schema | None:
    """The sites' schema a resumed run keeps (its checkpoint's), or None for a new run."""
    if checkpoint is None:
        return None
    if not checkpoint.site_schema:
        raise ConfigError("resume-from: the checkpoint holds no sites' schema (task='site')")
    return Schema.from_json(checkpoint.site_schema)


def wait_for_nodes(grid: Grid, minimum: int) -> int:
    """Block until ``minimum`` nodes are connected; return how many are."""
    while len(nodes := list(grid.get_node_ids())) < minimum:
        log(INFO, "Waiting for nodes: %d connected, %d required", len(nodes), minimum)
        time.sleep(1)
    return len(nodes)


def prepare(
    settings: RunSettings, grid: Grid, checkpoint: Checkpoint | None = None
) -> tuple[RunPlan, int]:
    """The validated plan and the number of nodes; ConfigError before the first message (with
    sites' own data, before the first message after the schema agreement, which a resumed run
    makes under its ``checkpoint``'s schema)."""
    if not settings.sites:
        plan = plan_run(settings)
    num_nodes = wait_for_nodes(grid, settings.min_nodes)
    if settings.sites:
        plan = plan_run(settings, agree_sites(grid, settings, kept_schema(checkpoint)))
    else:
        check_partitioning(settings.data, num_nodes)
    plan.strategy.check_federation(num_nodes)
    return plan, num_nodes


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run one federated job and write its results folder."""
    run(grid, context)


def run(grid: Grid, context: Context, resume_from: Path | None = None) -> None:
    """Run the job of ``context.run_config``; with ``resume_from`` (or the run-config key
    ``resume-from``), continue the run whose checkpoint that is (same run config but for
    ``server_app.resume.MAY_CHANGE``) after its last completed round."""
    job = start_job(grid, context, resume_from)
    writer = open_results(job, grid, context)
    stopped, cause = run_rounds(job, writer, context)
    finish(job, writer, stopped, cause)


@dataclass
class Job:
    """A validated job about to run: its plan, the metered grid, its nodes, where its results
    go and what it continues from (round ``done``'s global arrays and rows)."""

    plan: RunPlan
    metered: MeteredGrid
    num_nodes: int
    out_dir: Path
    done: int
    arrays: ArrayRecord
    rows: list[dict]

    @property
    def settings(self) -> RunSettings:
        return self.plan.settings

    @property
    def strategy(self) -> FederatedStrategy:
        return self.plan.strategy


def start_job(grid: Grid, context: Context, resume_from: Path | None) -> Job:
    """The checked settings, the checkpoint it resumes, the plan after the nodes are there;
    ``InvalidRunConfig`` in one sentence before the first round."""
    try:
        settings = check_settings(context.run_config)
        if resume_from is None and settings.resume_from:
            resume_from = Path(settings.resume_from)
        checkpoint = None
        if resume_from is not None:
            checkpoint = checked_checkpoint(resume_from, settings.algorithm, context.run_config)
        metered = MeteredGrid(
            PackedGrid(grid),
            settings.reply_timeout,  # round 0 counts the agreement
            own_pull_interval(grid, settings.reply_poll_interval),
        )
        plan, num_nodes = prepare(settings, metered, checkpoint)
        if checkpoint is not None:
            restore(plan.strategy, checkpoint)
    except (ConfigError, DecodeError, SiteDataError, OSError) as err:
        log(ERROR, "Invalid run config: %s", err)
        raise InvalidRunConfig(str(err)) from None
    out_dir = results_directory(plan.settings)
    if checkpoint is None:
        return Job(plan, metered, num_nodes, out_dir, 0, plan.strategy.initial_arrays(), [])
    log(INFO, "Resuming after round %d of %d", checkpoint.server_round, settings.num_rounds)
    done, arrays, rows = checkpoint.server_round, checkpoint.arrays, checkpoint.rows
    return Job(plan, metered, num_nodes, out_dir, done, arrays, rows)


def open_results(job: Job, grid: Grid, context: Context) -> ResultsWriter:
    """The results folder's writer, its config.json written (TensorBoard's events with it)."""
    settings, plan = job.settings, job.plan
    config = run_config_record(
        settings,
        job.num_nodes,
        job.strategy.description(),
        None if plan.sites is None else plan.sites.record(),
        context.run_id,
        flower_app(grid),
    )
    events = EventLog(job.out_dir, settings.raw, job.rows) if settings.tensorboard else None
    log(
        INFO,
        "Running %s (%s) on task %s with %d nodes; results -> %s",
        plan.algorithm.name,
        plan.algorithm.summary,
        settings.task,
        job.num_nodes,
        job.out_dir,
    )
    title = plot_title(settings, job.num_nodes)
    return ResultsWriter(job.out_dir, config, job.rows, title, events, settings.plots)


def run_rounds(job: Job, writer: ResultsWriter, context: Context) -> tuple[Exception | None, str]:
    """Flower's round loop over the rounds left, every round recorded as it ends; why the run
    stopped early (None) and the cause in one sentence ("" when it completed)."""
    settings, plan = job.settings, job.plan
    recorded = RecordedStrategy(job.strategy, job.done, settings.min_replies)
    recorder = RoundRecorder(
        recorded,
        job.metered,
        writer,
        settings.num_rounds,
        plan.algorithm.name,
        context.run_config,
        "" if plan.sites is None else plan.sites.schema.to_json(),
        plan.label_scale,
    )
    if settings.num_rounds <= job.done:
        return None, ""
    try:
        recorded.start(
            grid=job.metered,
            initial_arrays=job.arrays,
            num_rounds=settings.num_rounds - job.done,
            timeout=settings.reply_timeout,
            evaluate_fn=recorder,
        )
    except BelowQuorum as err:
        log(
            ERROR,
            "The run stops: %s. Completed rounds are saved; continue with "
            "resume-from='%s' once enough nodes are back",
            err,
            job.out_dir,
        )
        return err, f"quorum lost at {err}"
    except Diverged as err:  # said once, by the health line
        stopped = RunDiverged(f"{err} ({tried(settings)})")
        return stopped, str(stopped)
    except ConfigError as err:  # what only the nodes' answers show (fedxgb-hist's bins)
        log(ERROR, "Invalid run config: %s", err)
        return InvalidRunConfig(str(err)), f"refused once the nodes answered: {err}"
    return None, ""


def finish(job: Job, writer: ResultsWriter, stopped: Exception | None, cause: str) -> None:
    """The summary, the outcome and the health line, the plots and exports; ``stopped``
    raised last, so Flower records the run as failed with its reason."""
    settings, strategy, plan = job.settings, job.strategy, job.plan
    summary = summarise(writer.rounds)
    sites = None if plan.sites is None else plan.sites.record()  # with the late sites
    ended = outcome(
        writer.rounds,
        settings.num_rounds,
        job.num_nodes if strategy.roster is None else len(strategy.roster.active),
        cause,
        isinstance(stopped, RunDiverged),
        sites,
        strategy.left_out(),
        strategy.vacant_partitions(),
        strategy.privacy(),
        strategy.raised,
    )
    devices = {
        "server": device_facts(resolve_device(settings.central_device, "central-device")),
        "nodes": strategy.node_devices(),
    }
    plots = writer.finish(summary, ended.record(), devices, sites, ended.nodes)
    out_dir = job.out_dir
    exported = [write_atomic(out_dir / name, raw) for name, raw in strategy.exports().items()]
    log(INFO, "Final: %s", ", ".join(f"{k}={v}" for k, v in summary.items()))
    log(
        INFO,
        "Results written to %s (%s)",
        out_dir,
        ", ".join(
            ["config.json", "metrics.json", "metrics.csv", "checkpoint.pb"]
            + [p.name for p in plots]
            + [p.name for p in exported]
            + (["tensorboard/"] if settings.tensorboard else [])
        ),
    )
    log(ERROR if stopped else INFO, "%s", ended.line())
    if stopped is not None:
        raise stopped


class RunDiverged(RuntimeError):
    """The run diverged: its one sentence, with what it tried, which Flower records as the
    failed run's details."""


def tried(settings: RunSettings) -> str:
    """What a diverged run tried: the algorithm, the task and its family's step sizes."""
    steps = ", ".join(
        f"{key}={settings.raw[key]!r}"
        for key in family_of(settings.algorithm).steps
        if key in settings.raw
    )
    return f"{settings.algorithm} on {settings.task}" + (
        f"; step sizes {steps}: a smaller one may help" if steps else ""
    )


def plot_title(settings: RunSettings, num_nodes: int) -> str:
    """Algorithm, task, partitioning and number of nodes, for the plots."""
    if settings.sites:
        return (
            f"{settings.algorithm} on the sites' own files ({settings.data_label}), "
            f"{num_nodes} nodes"
        )
    return f"{settings.algorithm} on {settings.task}, {settings.partitioning}, {num_nodes} nodes"
