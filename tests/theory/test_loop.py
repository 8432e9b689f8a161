"""The theory models' one training loop: what it records, when it updates, what it reports."""
from attnlab.theory.loop import run_steps


def test_records_the_state_after_t_updates_and_reports_updates_done():
    events = []
    run_steps(3, lambda t: events.append(("update", t)), lambda t: events.append(("record", t)), [0, 2, 3, 9],
              lambda k: events.append(("done", k)))
    assert events == [("record", 0), ("update", 0), ("done", 1), ("update", 1), ("done", 2), ("record", 2),
                      ("update", 2), ("done", 3), ("record", 3)]


def test_zero_steps_only_records_the_start():
    events = []
    run_steps(0, lambda t: events.append(("update", t)), lambda t: events.append(("record", t)), range(5))
    assert events == [("record", 0)]
