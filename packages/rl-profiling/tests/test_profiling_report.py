"""``RunReport`` (the learner-side run report) and ``profiled_methods``."""

from __future__ import annotations

import json
import time

import pytest
import rl_profiling
from rl_profiling import RunReport, profiled_methods

ARMED_SCRIPT = """
import json, sys, time
import torch
from rl_profiling import ProfileConfig, RunReport, profiled_methods

class Base:
    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        profiled_methods(cls, "forward")
    def forward(self):
        return 1

class Child(Base):
    pass

class Override(Base):
    def forward(self):
        return super().forward() + 1

report = RunReport("demo")
with torch.profiler.profile() as prof:
    for batch in [torch.zeros(4, 2), torch.zeros(4, 2)]:
        with report.add_time("collect"):
            pass
        with report.add_time("loss"):
            Child().forward()
            Override().forward()
        report.step(batch.numel())
names = [e.name for e in prof.events()]
counts = {n: names.count(n) for n in sorted(set(names)) if "." in n}
# profile=: a ProfilerHook over the iterations (1 skipped + warm-up, 2 recorded), its trace
traced = RunReport("traced", profile=ProfileConfig(num_rollouts=4, warmup_rollouts=2,
                                                   save_path=sys.argv[1]))
for _ in range(6):
    with traced.add_time("loss"):
        pass
    traced.step(8)
counts["trace"] = traced.trace
counts["traced_loss_blocks"] = traced.traced.count("loss")
counts["traced_section"] = "traced iterations: " in traced.report()
counts["steps"] = sum(1 for e in json.load(open(sys.argv[1]))["traceEvents"]
                      if e.get("name", "").startswith("ProfilerStep#"))
print(json.dumps(counts))
"""


def test_phases_frames_and_the_report() -> None:
    report = RunReport("PPO")
    for batch in ([0] * 8, [0] * 6):
        with report.add_time("loss"):
            time.sleep(0.002)
            with report.add_time("backward"):
                time.sleep(0.001)
        with report.add_time("optimiser"):
            pass
        report.step(len(batch))
    assert report.stop() is None  # no profile asked for
    assert report.frames == 14 and report.iterations == 2 and report.count("loss") == 2
    assert report["loss"] >= 0.006 and report["loss/backward"] >= 0.002
    seconds = report.seconds
    assert seconds >= report["loss"] + report["optimiser"]
    assert report.seconds == seconds  # stopped: frozen
    text = report.report()
    head, *rows = text.splitlines()
    assert head == f"PPO: 14 frames in {seconds:.2f} s, {14 / seconds:,.0f} frames/s"
    assert [r.split()[0] for r in rows] == ["loss", "backward", "optimiser", "outside"]
    assert rows[1].startswith("    backward")  # nested under loss
    assert rows[0].endswith("x2")
    share = float(rows[0].split()[3].rstrip("%")) / 100
    assert share == pytest.approx(report["loss"] / seconds, abs=0.001)
    flat = report.to_dict("timing/")
    assert flat["timing/fps"] == pytest.approx(14 / seconds)
    assert flat["timing/loss/backward"] == report["loss/backward"]
    report.reset()
    assert report.frames == 0 and "loss" not in report


def test_a_bad_profile_argument_is_named() -> None:
    with pytest.raises(TypeError, match=r"RunReport\(profile=...\): expected a trace path"):
        RunReport(profile=3)


def test_unarmed_profiled_methods_leave_the_class_alone() -> None:
    if rl_profiling.ARMED:
        pytest.skip("this process is armed")

    class Base:
        def forward(self) -> int:
            return 1

    plain = Base.forward
    assert profiled_methods(Base, "forward", "missing") is Base and Base.forward is plain


@pytest.mark.timeout(120)
def test_armed_phases_and_subclass_ranges_reach_the_trace(run_py, tmp_path) -> None:
    trace = tmp_path / "run.json"
    out = run_py(["-c", ARMED_SCRIPT, str(trace)], armed=True).stdout
    counts = json.loads(out.strip().splitlines()[-1])
    assert counts["Learner.collect"] == 2 and counts["Learner.loss"] == 2
    assert counts["trace"] == str(trace) and counts["steps"] == 2
    assert counts["traced_loss_blocks"] == 2 and counts["traced_section"]  # the same window
    assert counts["Child.forward"] == 2  # named after the subclass, one range per call
    assert counts["Override.forward"] == 2
    assert "Base.forward" not in counts  # __init_subclass__ wraps subclasses only
