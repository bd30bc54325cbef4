"""bench/python/format_study.py's argument handling and report code, on
made-up runs (seconds; the study itself trains for hours and is not part of
make test): the configurations and presets, the paired differences against
FP32 and the seed-noise rule, the protected layers' figures and the table."""

import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "bench", "python"))
import format_study as fs  # noqa: E402


def test_arguments():
    a = fs.parse_args([])
    assert a.configs == list(fs.CONFIGS) and a.seeds == [0, 1, 2]
    assert len(fs.CONFIGS) == 10
    assert (a.dim, a.layers, a.heads, a.ffn) == fs.SIZES["demo"]
    a = fs.parse_args(["--model-size", "large", "--dim", "320", "--configs",
                       "fp32, gift-mxfp4", "--seeds", "4,2,4"])
    assert (a.dim, a.layers, a.ffn) == (320, 8, 704)
    assert a.configs == ["fp32", "gift-mxfp4"] and a.seeds == [2, 4]
    for bad in (["--configs", "euclid-int4-ef-on"], ["--seeds", "a"],
                ["--configs", ","], ["--steps", "0"]):
        with pytest.raises(SystemExit):
            fs.parse_args(bad)


def test_train_arguments_follow_the_configuration():
    a = fs.parse_args([])
    mode, extra = fs.train_args(a, "fp32", 3)
    assert mode == "ddp" and "--format" not in extra and "3" in extra
    mode, extra = fs.train_args(a, "euclid-nvfp4-ef-off", 1)
    assert mode == "euclid"
    assert extra[extra.index("--format") + 1] == "nvfp4"
    assert extra[extra.index("--error-feedback") + 1] == "off"
    mode, extra = fs.train_args(a, "gift-mxfp4", 1)
    assert mode == "gift" and "--error-feedback" not in extra


def test_every_argument_keys_the_cache(tmp_path):
    (tmp_path / "gift").mkdir()
    keys = set()
    for argv in ([], ["--batch", "2"], ["--dim", "64"], ["--steps", "9"]):
        a = fs.parse_args(argv)
        a.pkg = str(tmp_path)
        for config, seed in (("fp32", 0), ("fp32", 1),
                             ("euclid-nvfp4-ef-off", 0)):
            keys.add(fs.cache_key(a, config, seed))
    assert len(keys) == 12


def _run(val, rel=None, gift_path=False):
    audit = {} if rel is None else {10: {"fc": {
        "path": "gift" if gift_path else "euclid", "rel_l2": rel,
        "norm": 1.0, "numel": 4}}}
    return {"val_loss": val, "train_loss_last25": val, "bytes_per_step": 10,
            "bytes_vs_fp32": 0.14, "seconds": 1.0, "seconds_per_step": 0.1,
            "format_fallbacks": [], "formats": "nvfp4 x1", "audit": audit,
            "rel_model": rel, "drift_model": None,
            "drift_layers": {"fc": 0.5} if rel else {},
            "window_drift_model": None}


def test_paired_differences_and_the_noise_rule():
    runs = {}
    for s, base in enumerate((3.0, 3.3, 2.9)):  # seed noise 0.2, paired 0.01
        runs[("fp32", s)] = _run(base)
        runs[("euclid-nvfp4-ef-off", s)] = _run(base + 0.05 + 0.01 * s,
                                                rel=0.2)
        runs[("euclid-nvfp4-ef-on", s)] = _run(base + (0.01, -0.01, 0)[s],
                                               rel=0.1)
        runs[("gift-nvfp4", s)] = _run(base, rel=0.05, gift_path=True)
    t = fs.aggregate(runs, [0, 1, 2])
    d = t["euclid-nvfp4-ef-off"]["diff_vs_fp32"]
    assert math.isclose(d["mean"], 0.06) and math.isclose(d["sd"], 0.01)
    assert d["significant"] is True and d["n"] == 3
    assert t["euclid-nvfp4-ef-on"]["diff_vs_fp32"]["significant"] is False
    assert t["fp32"]["diff_vs_fp32"]["significant"] is None
    # Unpaired, the same loss would be inside the seed noise (sd 0.2).
    assert t["fp32"]["val_loss"][1] > 0.2
    # Protected: the layer GIFT had on its path, on those audit steps.
    assert t["euclid-nvfp4-ef-off"]["rel_protected"][0] == pytest.approx(0.2)
    assert t["gift-nvfp4"]["rel_protected"][0] == pytest.approx(0.05)
    assert t["gift-nvfp4"]["drift_protected"][0] == pytest.approx(0.5)
    assert fs.significant(0.1, None, 1) is None
    assert fs.mean_sd([1.0, float("nan"), None]) == (1.0, None, 1)


def test_table_states_the_rule():
    a = fs.parse_args(["--configs", "fp32,euclid-nvfp4-ef-off"])
    runs = {("fp32", s): _run(3.0 + s) for s in (0, 1)}
    runs.update({("euclid-nvfp4-ef-off", s): _run(3.1 + s) for s in (0, 1)})
    md = fs.markdown(a, fs.aggregate(runs, [0, 1]))
    assert fs.RULE in md
    assert "| euclid-nvfp4-ef-off | 3.6000 ± 0.7071 | +0.1000 ± 0.0000 |" \
        in md


def _study(path, args, val_by_config, **changed):
    settings = {k: getattr(args, k) for k in fs.POOL_SETTINGS}
    settings.update(changed)
    configs = {c: {"val_loss_by_seed": {str(s): v for s, v in seeds.items()}}
               for c, seeds in val_by_config.items()}
    path.write_text(fs.json.dumps({"settings": settings,
                                   "configs": configs}))
    return str(path)


def test_pooled_seeds_join_the_paired_comparisons(tmp_path):
    a = fs.parse_args(["--configs", "fp32,euclid-nvfp4-ef-on,gift-nvfp4"])
    runs = {}
    for s, base in ((5, 3.0), (6, 3.4)):
        runs[("fp32", s)] = _run(base)
        runs[("euclid-nvfp4-ef-on", s)] = _run(base + 0.02)
        runs[("gift-nvfp4", s)] = _run(base + 0.01)
    earlier = _study(tmp_path / "a.json", a, {
        "fp32": {0: 2.9, 5: 3.0001},  # seed 5 again: an overlap
        "euclid-nvfp4-ef-on": {0: 2.93}, "gift-nvfp4": {0: 2.90},
        "euclid-nvfp4-ef-off": {0: 3.2}})
    a.pool = [earlier]
    table = fs.aggregate(runs, [5, 6])
    val, overlaps = fs.pooled_losses(table, fs.load_pool(a))
    assert val["fp32"] == {0: 2.9, 5: 3.0, 6: 3.4}  # this study's 5 wins
    assert overlaps == [("fp32", 5, 3.0, 3.0001)]
    rows = {(r["a"], r["b"]): r for r in fs.comparisons(val)}
    g = rows[("gift-nvfp4", "euclid-nvfp4-ef-on")]
    assert g["seeds"] == [0, 5, 6] and g["n"] == 3
    assert g["mean"] == pytest.approx(-0.05 / 3) and g["significant"]
    assert rows[("euclid-nvfp4-ef-off", "fp32")]["n"] == 1
    assert rows[("euclid-nvfp4-ef-off", "fp32")]["significant"] is None
    assert ("euclid-nvfp4-ef-on", "euclid-nvfp4-ef-off") in rows
    assert ("gift-mxfp4", "euclid-mxfp4-ef-on") not in rows
    md = "\n".join(fs.comparisons_markdown(fs.comparisons(val), a.pool, val))
    assert "| gift-nvfp4 − euclid-nvfp4-ef-on | 3 | -0.0167 ± 0.0115 |" in md
    assert "fp32 3.1000 ± 0.2646 (3)" in md


def test_a_study_of_another_setting_is_not_pooled(tmp_path):
    a = fs.parse_args([])
    a.pool = [_study(tmp_path / "b.json", a, {"fp32": {0: 1.0}}, steps=500)]
    with pytest.raises(SystemExit, match="another setting: steps 500"):
        fs.load_pool(a)
    bad = tmp_path / "c.json"
    bad.write_text("{\"settings\": 3}")
    a.pool = [str(bad)]
    with pytest.raises(SystemExit, match="not a format_study.json"):
        fs.load_pool(a)
    with pytest.raises(SystemExit):
        fs.parse_args(["--pool", str(tmp_path / "missing.json")])
