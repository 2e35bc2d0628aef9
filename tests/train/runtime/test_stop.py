"""``bestk.train.runtime.stop``: the stop request of a run (Ctrl-C / SIGTERM, or passed on by
``bestk compare``) and the exit status it gives."""

from __future__ import annotations

import os
import signal

from bestk.train.runtime.stop import STOP_SIGNALS, StopRequest


def test_a_signal_is_a_request_honoured_at_the_next_safe_point(capfd):
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    with StopRequest() as stop:
        assert not stop.should_stop()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.should_stop() and stop.exit_status == 128 + signal.SIGTERM
    assert "SIGTERM: stopping at the next" in capfd.readouterr().err
    assert {s: signal.getsignal(s) for s in STOP_SIGNALS} == before  # handlers restored


def test_a_request_passed_on_keeps_the_first_signal():
    stop = StopRequest()
    assert stop.exit_status == 130  # no signal: as Ctrl-C
    stop.request(signal.SIGTERM)
    stop.request(signal.SIGINT)  # a stop already requested is kept
    assert stop.should_stop() and stop.exit_status == 143
    plain = StopRequest()
    plain.request()
    assert plain.should_stop() and plain.exit_status == 130
