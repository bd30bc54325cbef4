"""The package's parts on their own, in one process (no process group):
init's keyword-only options and their checks, the read-only state, the
typed messages, the wire formats (names, layers that cannot take one), the
pieces a run of layers is cut into, the saved buckets a
resumed step is split by, the statistics' totals, and close()."""

import dataclasses
import inspect
import threading
import warnings

import pytest
import torch
from torch import nn

import gift
from gift import _checkpoint, _gift, _layout, _messages, _stats

NOSOCK = "/nonexistent/agent"


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_init_takes_options_by_keyword_only(tmp_path):
    sig = inspect.signature(gift.init)
    names = list(sig.parameters)
    assert names[:2] == ["model", "process_group"]
    assert all(sig.parameters[n].kind == inspect.Parameter.KEYWORD_ONLY
               for n in names[2:])
    assert names[2:] == [f.name for f in dataclasses.fields(gift.Options)]
    with pytest.raises(TypeError):
        gift.init(_model(), None, "euclid")  # noqa: the mode by position
    with pytest.raises(TypeError):
        gift.init(_model(), mode="euclid", no_such_option=1)
    with pytest.raises(ValueError, match=r"unknown mode 'fp4'"):
        gift.init(_model(), mode="fp4")
    with pytest.raises(ValueError, match=r"backend 'mpi'"):
        gift.init(_model(), backend="mpi")


def test_state_is_read_only_and_closes(tmp_path):
    state = gift.init(_model(), mode="euclid", agent_socket=NOSOCK,
                      store_dir=str(tmp_path), job_id="pkg-test")
    assert (state.rank, state.world_size, state.mode) == (0, 1, "euclid")
    assert state.rendezvous == "folder" and state.job_id == "pkg-test"
    assert state.layer_names == ("0", "0.bias", "2", "2.bias")
    assert state.options.mode == "euclid" and state.last_telemetry is None
    for name in ("rank", "mode", "session", "last_telemetry", "job_id"):
        with pytest.raises(AttributeError):
            setattr(state, name, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.options.mode = "fp32"
    assert state.close() is True
    assert state.session is None and state.close() is True
    assert state.stats()["steps"] == 0


def test_messages_are_typed():
    for cls in (_messages.Forward, _messages.PieceReady,
                _messages.BucketReady, _messages.GradSource, _messages.Stop):
        assert issubclass(cls, tuple) and hasattr(cls, "_fields")
    assert _messages.BucketReady._fields == (
        "view", "split", "buffer", "future", "event", "last", "error")


def test_pieces_are_whole_layers_of_at_most_piece_mb():
    layout = _layout.Layout.of(_model())  # sizes 32, 8, 16, 2
    assert [layout.size(i) for i in range(4)] == [32, 8, 16, 2]
    pieces = _layout.Pieces(layout, piece_elements=40)
    cut = pieces.of((3, 2, 1, 0))
    assert [(p.layers, p.offsets, p.elements) for p in cut] == [
        ([3, 2, 1], [0, 2, 18], 26), ([0], [0], 32)]
    whole = _layout.Pieces(layout, piece_elements=0)
    assert not whole.enabled
    assert [p.layers for p in whole.of((3, 2, 1, 0))] == [[3, 2, 1, 0]]
    plan = pieces.plan((((3, 2, 1, 0), (0, 2, 18, 26), 58),))
    assert plan.where == {3: (0, 0), 2: (0, 2), 1: (0, 18), 0: (1, 0)}


def test_saved_buckets_split_a_first_iteration_bucket():
    layout = _layout.Layout.of(_model())
    saved = {"buckets": [[(3, 2), (0, 2), 18], [(1, 0), (0, 8), 40]]}
    pinned = _checkpoint.PinnedBuckets.of(saved)
    assert pinned.layouts() == (((3, 2), (0, 2), 18), ((1, 0), (0, 8), 40))
    assert pinned.saved_layouts() == list(pinned.layouts())
    ddp_bucket = _layout.Bucket(None, [3, 2, 1, 0], [0, 2, 18, 26], 58)
    parts = pinned.split(ddp_bucket, layout.size)
    assert [(g.layers, copies) for g, copies in parts] == [
        ([3, 2], [(0, 0, 2), (2, 2, 16)]), ([1, 0], [(18, 0, 8), (26, 8, 32)])]
    # DDP's own buckets are the saved ones: reduced as they are.
    assert pinned.split(_layout.Bucket(None, [3, 2], [0, 2], 18),
                        layout.size) is None
    # A bucket that cuts a saved one: the saved buckets are forgotten.
    assert pinned.split(_layout.Bucket(None, [3], [0], 2), layout.size) is None
    assert pinned.layouts() is None


def test_stats_total_whole_steps_under_a_lock():
    stats = _stats.StepStats()
    t = {"bytes_euclid": 10, "bytes_gift": 20, "bytes_control": 3,
         "bytes_audit": 1, "audit_seconds": 0.5, "transform_seconds": 0.25,
         "seconds": 1.0, "audit_step": True}
    threads = [threading.Thread(target=stats.record, args=(t,))
               for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    s = stats.summary("euclid", 2, 100, {"extra": 1})
    assert s["steps"] == 8 and s["audit_steps"] == 8
    assert s["bytes_sent"] == 8 * 34 and s["bytes_fp32_equivalent"] == 8 * 400
    assert s["transform_seconds"] == 8 * 0.25
    assert list(s)[-2:] == ["extra", "last"] and s["last"] is t


def test_unknown_format_or_error_feedback_is_a_value_error(tmp_path):
    kw = dict(agent_socket=NOSOCK, store_dir=str(tmp_path), job_id="fmt")
    with pytest.raises(ValueError, match=r"unknown format 'fp4' \(e4m3, "
                       r"e5m2, nvfp4, mxfp4\)"):
        gift.init(_model(), mode="euclid", format="fp4", **kw)
    with pytest.raises(ValueError, match=r"error_feedback 'on'"):
        gift.init(_model(), mode="euclid", error_feedback="on", **kw)
    for mode in ("fp32", "bf16"):
        with pytest.raises(ValueError, match=r"for modes euclid and gift"):
            gift.init(_model(), mode=mode, format="nvfp4", **kw)
        with pytest.raises(ValueError, match=r"for modes euclid and gift"):
            gift.init(_model(), mode=mode, error_feedback=True, **kw)
    assert gift.Options(format="NVFP4").format == "nvfp4"
    # libgift checks the names too (a caller of the extension itself).
    layers = [("0", [8, 4], 0)]
    for key, value, names in (("format", "int4", "e4m3, e5m2, nvfp4 or "
                               "mxfp4"), ("error_feedback", "yes",
                                          "auto, off, on")):
        opts = {"mode": "euclid", "rank": 0, "world_size": 1,
                "store_dir": str(tmp_path / key), key: value}
        with pytest.raises(gift.GiftError, match=names) as e:
            _gift.NativeRank(opts, layers, 32)
        assert e.value.code == "INVALID_ARGUMENT"


def test_owner_release_cap_is_checked(tmp_path):
    assert gift.Options().owner_release_cap == 0.25
    assert gift.Options(owner_release_cap=0).owner_release_cap == 0
    for bad in (-0.1, float("nan"), float("inf"), "0.25", True):
        with pytest.raises(ValueError, match=r"owner_release_cap"):
            gift.Options(owner_release_cap=bad)
    # libgift checks it too (a caller of the extension itself).
    opts = {"mode": "euclid", "rank": 0, "world_size": 1,
            "store_dir": str(tmp_path), "owner_release_cap": -1.0}
    with pytest.raises(gift.GiftError, match=r"owner_release_cap") as e:
        _gift.NativeRank(opts, [("0", [8, 4], 0)], 32)
    assert e.value.code == "INVALID_ARGUMENT"


def test_layers_that_cannot_take_the_format_keep_e4m3(tmp_path):
    torch.manual_seed(0)
    # d_in 24: no whole 16- or 32-element blocks along a row; 1-D biases and
    # d_in 32 fit both.
    model = nn.Sequential(nn.Linear(24, 32), nn.ReLU(), nn.Linear(32, 8))
    for fmt, fits in (("nvfp4", "nvfp4"), ("mxfp4", "mxfp4"),
                      ("e5m2", "e5m2")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            state = gift.init(model, mode="euclid", agent_socket=NOSOCK,
                              store_dir=str(tmp_path / fmt), job_id="fmt",
                              format=fmt)
        st = state.stats()
        messages = [str(w.message) for w in caught]
        if fmt == "e5m2":
            assert st["format_fallbacks"] == () and not messages
            assert {w["format"] for w in st["layer_wire"].values()} == {fmt}
        else:
            assert st["format_fallbacks"] == ("0",), st["format_fallbacks"]
            assert len(messages) == 1 and "keep e4m3" in messages[0] and (
                messages[0].endswith(": 0")), messages
            assert st["layer_wire"]["0"] == {"format": "e4m3",
                                             "wire_bytes": 24 * 32 + 4}
            for name in ("0.bias", "2", "2.bias"):
                assert st["layer_wire"][name]["format"] == fits
        assert st["format"] == fmt and st["error_feedback"] == "auto"
        state.close()
