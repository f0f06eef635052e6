"""TorchRL's ``torchrl._utils`` helpers: ``timeit``, ``logger``, ``get_available_device``."""

from __future__ import annotations

import time

import pytest
from rl_profiling import get_available_device, logger, timeit


@pytest.fixture(autouse=True)
def _fresh_registry():
    saved = dict(timeit._REG)
    timeit._REG.clear()
    yield
    timeit._REG.clear()
    timeit._REG.update(saved)


def test_context_and_decorator_share_the_registry_with_running_means():
    for seconds in (0.01, 0.03):
        with timeit("step"):
            time.sleep(seconds)

    @timeit("step")
    def once():
        return "ok"

    assert once() == "ok" and once.__name__ == "once"
    mean, total, calls = timeit._REG["step"]
    assert calls == 3
    assert total >= 0.04 and mean == pytest.approx(total / 3)
    assert timeit.todict(prefix="time") == {"time/step": mean}
    assert timeit.todict(percall=False) == {"step": total}


def test_erase_keeps_names_and_mark_end_without_start_is_named():
    timeit.mark_start("load")
    timeit.mark_end("load")
    assert timeit._REG["load"][2] == 1
    timeit.reset()
    assert timeit.todict() == {"load": 0.0}
    with pytest.raises(KeyError, match=r"mark_start\('load'\)"):
        timeit.mark_end("load")
    with pytest.raises(TypeError, match="name must be a str"):
        timeit(3)  # type: ignore[arg-type]


def test_print_and_printevery_log_through_the_logger(capfd):
    with timeit("b"):
        pass
    with timeit("a"):
        pass
    lines = timeit.print(prefix="it 1").splitlines()
    assert [line.split(" -- ")[1].split()[0] for line in lines] == ["a", "b"]
    assert "[rl][INFO] it 1 -- a took" in capfd.readouterr().out
    for _ in range(10):  # 2 prints over 10 calls: calls 0 and 5
        timeit.printevery(2, 10, erase=True)
    assert capfd.readouterr().out.count("a took") == 2
    assert timeit._REG["a"][2] == 0 and not logger.propagate


def test_get_available_device_matches_torch():
    import torch

    device = get_available_device()
    assert isinstance(device, torch.device)
    assert str(device) == get_available_device(return_str=True)
    if not torch.cuda.is_available():
        assert device.type in ("cpu", "mps", "npu")
