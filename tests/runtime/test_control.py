"""The controller -> agent channel: the newest command of each action is kept, so one action's command
never replaces another's (a profiling update sent between pause and resume), and a reader gets each once."""

from __future__ import annotations

from shipyard.runtime.control import ControlChannel


def test_each_action_keeps_its_newest_command_and_is_read_once(tmp_path):
    controller, agent = ControlChannel(tmp_path / "control.json"), ControlChannel(tmp_path / "control.json")
    assert agent.poll("pause") is None   # nothing sent yet
    controller.send("pause")
    controller.send("profiler", settings={"interval_millis": 100})
    controller.send("resume", master_port=29501)
    controller.send("profiler", settings=None)
    assert agent.poll("pause")["action"] == "pause"
    assert agent.poll("pause") is None
    assert agent.poll("profiler")["settings"] is None    # the newest of its action
    assert agent.poll("resume")["master_port"] == 29501
    assert agent.poll("profiler") is None
    controller.send("pause")
    assert agent.poll("pause") is not None   # a later command of an action already read
