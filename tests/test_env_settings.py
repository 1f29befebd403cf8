"""fuser's environment settings read one way everywhere (`fuser/dump.py`): switches take
1/true/on/yes and 0/false/off/no, counts a positive integer, and anything else is warned about
once and read as the default; a malformed collective timeout is named as such."""
import copy
import os
import pickle
import subprocess
import sys

import pytest
import torch

from fuser import DataType, FusionDefinition, FusionDefinitionError
from fuser.dump import dump_flags, env_choice, env_int, env_switch
from fuser.multidevice.communicator import CollectiveError, _timeout

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("raw, default, expected", [
    ("1", False, True), ("TRUE", False, True), ("on", False, True), ("yes", False, True),
    ("0", True, False), ("false", True, False), ("Off", True, False), ("no", True, False),
    ("", True, True), ("", False, False)])
def test_a_switch_reads_the_usual_spellings(monkeypatch, raw, default, expected):
    # FUSER_PHASE_TIMES=false turned the timer on; FUSER_AUTOTUNE=off left autotuning on
    monkeypatch.setenv("FUSER_TEST_SWITCH", raw)
    assert env_switch("FUSER_TEST_SWITCH", default) is expected


def test_a_malformed_setting_warns_once_and_keeps_the_default(monkeypatch):
    monkeypatch.setenv("FUSER_TEST_SWITCH", "maybe")
    with pytest.warns(UserWarning, match=r"FUSER_TEST_SWITCH='maybe' is not one of 1/true/on/yes"):
        assert env_switch("FUSER_TEST_SWITCH", True) is True
    for raw in ("abc", "4.0", "0", "-3", "\u00b2"):  # ("²": a digit to isdigit, which int() refuses)
        monkeypatch.setenv("FUSER_TEST_COUNT", raw)
        with pytest.warns(UserWarning, match="is not a positive integer; read as 8"):
            assert env_int("FUSER_TEST_COUNT", 8) == 8
    monkeypatch.setenv("FUSER_TEST_COUNT", "3")
    assert env_int("FUSER_TEST_COUNT", 8) == 3
    monkeypatch.setenv("FUSER_TEST_CHOICE", "ATEN")
    assert env_choice("FUSER_TEST_CHOICE", "interpreter", ("interpreter", "aten")) == "aten"
    monkeypatch.setenv("FUSER_TEST_CHOICE", "atne")
    with pytest.warns(UserWarning, match="is not one of interpreter, aten"):
        assert env_choice("FUSER_TEST_CHOICE", "interpreter", ("interpreter", "aten")) == "interpreter"


def test_an_unknown_dump_name_is_warned_about(monkeypatch):
    monkeypatch.setenv("FUSER_DUMP", "segments,fusion-ir-test")
    with pytest.warns(UserWarning, match="prints nothing for fusion-ir-test; it takes .*propagate_shardings"):
        assert dump_flags() == {"segments", "fusion-ir-test"}


def test_a_malformed_max_streams_does_not_break_the_import():
    # int("abc") raised at `import fuser`, on any machine
    env = dict(os.environ, FUSER_MAX_STREAMS="abc", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-W", "always", "-c",
                          "from fuser.hostir.streams import MAX_STREAMS; print(MAX_STREAMS)"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "8" and "FUSER_MAX_STREAMS='abc'" in out.stderr


@pytest.mark.parametrize("raw", ["abc", "-5", "0", "inf", "1e308", "1e-9", "1e10"])
def test_a_malformed_collective_timeout_is_named(monkeypatch, raw):
    # (1e308: timedelta's raw OverflowError; under a millisecond: torch's 0 ms, a failed
    # rendezvous at once; 1e10: torch's deadline overflows)
    # a failed rendezvous ("could not convert string to float") or a socket timeout of -5000 ms
    monkeypatch.setenv("FUSER_COLLECTIVE_TIMEOUT", raw)
    with pytest.raises(CollectiveError, match=f"FUSER_COLLECTIVE_TIMEOUT='{raw}': expected a positive number"):
        _timeout()
    monkeypatch.setenv("FUSER_COLLECTIVE_TIMEOUT", "")
    assert _timeout().total_seconds() == 600


class _HoldsADefinition(torch.nn.Module):
    def __init__(self):
        super().__init__()
        with FusionDefinition() as fd:
            x = fd.define_tensor([-1], contiguity=True, dtype=DataType.Float)
            fd.add_output(fd.ops.relu(x))
        self.fd = fd

    def forward(self, x):
        return self.fd.execute([x])[0]


def test_a_module_holding_a_definition_deep_copies():
    # an EMA model's copy failed: "cannot pickle '_thread.lock' object"
    m = _HoldsADefinition()
    x = torch.randn(5)
    m(x)
    twin = copy.deepcopy(m)
    assert twin.fd is m.fd and torch.equal(twin(x), x.relu())
    with pytest.raises(FusionDefinitionError, match="cannot be pickled; pickle repr"):
        pickle.dumps(m.fd)


def test_the_compile_counts_are_read_as_the_other_counts(monkeypatch):
    """FUSER_COMPILE_WORKERS (0 turns the worker off) and FUSER_COMPILE_THREADS were read apart
    from the other settings, a malformed value silently taken as the default."""
    from fuser.codegen import compile_pool, parallel_compile

    monkeypatch.setenv("FUSER_COMPILE_WORKERS", "0")
    assert compile_pool.worker_count() == 0
    monkeypatch.setenv("FUSER_COMPILE_WORKERS", "four")
    with pytest.warns(UserWarning, match="FUSER_COMPILE_WORKERS='four' is not an integer of at least 0"):
        compile_pool.worker_count()
    monkeypatch.setenv("FUSER_COMPILE_THREADS", "3")
    assert parallel_compile._workers() == 3
    monkeypatch.setenv("FUSER_COMPILE_THREADS", "0")
    with pytest.warns(UserWarning, match="FUSER_COMPILE_THREADS='0' is not a positive integer"):
        parallel_compile._workers()
