"""Every duration the module takes (wait's `timeout` and `interval`) refuses NaN, infinities,
negatives and out-of-range values with `rtapi.Error` naming the argument — never a Rust panic
(`pyo3_runtime.PanicException` derives from BaseException: `except Exception` would not catch it,
and neither does `pytest.raises(rtapi.Error)`). Issue 41, finding 6."""

import math

import pytest

import rtapi

BAD = [math.nan, math.inf, -math.inf, -1.0, 1e19, 1e300]


@pytest.mark.parametrize("value", BAD, ids=repr)
def test_wait_refuses_a_bad_timeout(instance, value):
    h = rtapi.Instance(instance.name)
    # Before the name is looked up or a value read: the call itself is wrong.
    for name in ("not.0.out", "no.such.pin"):
        with pytest.raises(rtapi.Error, match=r"^timeout must be a finite number of seconds") as e:
            h.wait(name, True, timeout=value)
        assert type(e.value) is rtapi.Error
        assert "from 0 to" in str(e.value)


@pytest.mark.parametrize("value", BAD, ids=repr)
def test_wait_refuses_a_bad_interval(instance, value):
    h = rtapi.Instance(instance.name)
    for name in ("not.0.out", "no.such.pin"):
        with pytest.raises(rtapi.Error, match=r"^interval must be a finite number of seconds") as e:
            h.wait(name, True, timeout=1, interval=value)
        assert type(e.value) is rtapi.Error
        assert "from 0 to" in str(e.value)


def test_wait_accepts_the_edges(instance):
    h = rtapi.Instance(instance.name)
    assert h.wait("not.0.out", True, timeout=5) is True
    # timeout 0: one look, then Timeout; interval 0 and intervals past a second are kept in range
    # (polled every 0.1 ms at the most often, every second at the least).
    assert h.wait("not.0.out", True, timeout=0) is True
    with pytest.raises(rtapi.Timeout):
        h.wait("not.0.out", False, timeout=0)
    with pytest.raises(rtapi.Timeout):
        h.wait("not.0.out", False, timeout=0.05, interval=0)
    with pytest.raises(rtapi.Timeout):
        h.wait("not.0.out", False, timeout=0.05, interval=1e9)
    # The largest timeout accepted does not overflow the deadline (the value is reached at once).
    assert h.wait("not.0.out", True, timeout=1e9, interval=1e9) is True
