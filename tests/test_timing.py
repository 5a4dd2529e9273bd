import time

import pytest

from machinery.timing import timed


def test_off_timer_records_nothing_and_lets_errors_through():
    with timed(None, "x"):
        pass
    with pytest.raises(KeyError), timed(None, "x"):
        raise KeyError


def test_sections_add_up_and_nest():
    t = {}
    for _ in range(2):
        with timed(t, "outer"):
            with timed(t, "inner"):
                time.sleep(0.01)
    assert set(t) == {"outer", "inner"}
    assert 0.02 <= t["inner"] <= t["outer"]


def test_a_failing_section_is_still_counted():
    t = {}
    with pytest.raises(ValueError), timed(t, "x"):
        raise ValueError
    assert t["x"] >= 0
