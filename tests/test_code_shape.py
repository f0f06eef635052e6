"""The code's shape (issue 24): one class per idea, small constructors, public contracts."""

from __future__ import annotations

import rl_collectors
import rl_collectors.exceptions
import rl_envs


def test_one_worker_error_for_envs_and_collectors() -> None:
    assert rl_collectors.WorkerError is rl_envs.WorkerError
    assert rl_collectors.exceptions.WorkerError is rl_envs.WorkerError
