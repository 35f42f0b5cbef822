"""``benchmarks.common``'s wire meter: a job run with ``wire=True`` records every delivered
message's size (it once hooked a grid method that no longer existed and recorded nothing, so
``benchmarks.fedfw_wire`` failed on an empty list)."""

from __future__ import annotations

import logging

from benchmarks.common import _run_in_this_process


def test_a_wire_job_records_each_message_and_its_reply(tmp_path):
    overrides = {"algorithm": "fedfw", "task": "synthetic", "num-server-rounds": 2}
    job = {"name": "wire", "num_nodes": 3, "overrides": overrides, "wire": True}
    try:
        result = _run_in_this_process(job, str(tmp_path))
    finally:
        logging.disable(logging.NOTSET)  # the runner silences logging for its worker process
    train = [w for w in result["wire"] if w["type"] == "train"]
    assert len(train) == 2 * 3  # two rounds, three nodes
    for entry in train:
        assert entry["down_message"] > entry["down_content"] > 0
        assert entry["up_message"] > entry["up_content"] > 0
