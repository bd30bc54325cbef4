"""deploy/systemd: the unit passes `systemd-analyze verify` without a single
warning (skipped, with the reason, where systemd-analyze is missing), carries
the hardening and readiness the deployment relies on, and its readiness
command really waits for a live giftd and gives up within its bound; the
config file documents giftd's defaults and giftd accepts it; the env file
parses."""

import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest
import yaml

from deploy_testutil import SYSTEMD_DIR, running_giftd

UNIT = SYSTEMD_DIR / "giftd.service"


def unit_entries():
    """[(section, key, value)] in file order (repeated keys kept)."""
    entries, section = [], None
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        m = re.fullmatch(r"\[(\w+)\]", line)
        if m:
            section = m.group(1)
            continue
        key, sep, value = line.partition("=")
        assert sep and section, f"not a unit line: {line!r}"
        entries.append((section, key.strip(), value.strip()))
    return entries


def service(key):
    values = [v for s, k, v in unit_entries() if s == "Service" and k == key]
    assert values, f"[Service] has no {key}="
    return values


def test_unit_parses_with_the_required_settings():
    sections = {s for s, _, _ in unit_entries()}
    assert sections == {"Unit", "Service", "Install"}
    assert service("Type") == ["simple"]  # giftd does not speak sd_notify
    assert service("ExecStart")[0].startswith(
        "/usr/local/bin/giftd --config /etc/gift/giftd.yaml")
    assert service("EnvironmentFile") == ["-/etc/gift/giftd.env"]
    assert service("Restart") == ["on-failure"]
    assert service("RuntimeDirectory") == ["gift"]
    for key, value in [("ProtectSystem", "strict"), ("ProtectHome", "yes"),
                       ("PrivateTmp", "yes"), ("NoNewPrivileges", "yes")]:
        assert service(key) == [value], key
    families = set(service("RestrictAddressFamilies")[0].split())
    assert families == {"AF_UNIX", "AF_INET", "AF_INET6"}
    assert "/dev/shm" in service("ReadWritePaths")[0].split()
    # A dedicated user: the ranks must share giftd's uid (0600 socket, shm).
    assert service("User") == ["gift"]
    assert "DynamicUser" not in {k for _, k, _ in unit_entries()}
    assert service("TimeoutStartSec")
    post = service("ExecStartPost")
    assert len(post) == 1 and "giftctl --timeout 1 health" in post[0]


def test_systemd_analyze_verify_is_clean():
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not installed: unit not verified")
    giftd = os.environ.get("GIFTD") or shutil.which("true")
    giftctl = os.environ.get("GIFTCTL") or shutil.which("true")
    with tempfile.TemporaryDirectory() as tmp:
        # verify checks that the binaries exist: point it at the build's.
        text = (UNIT.read_text()
                .replace("/usr/local/bin/giftd", giftd)
                .replace("/usr/local/bin/giftctl", giftctl))
        path = os.path.join(tmp, "giftd.service")
        with open(path, "w") as f:
            f.write(text)
        r = subprocess.run([analyze, "verify", path], capture_output=True,
                           text=True, timeout=60)
        # verify exits 0 on unknown keys and only warns: any output fails.
        assert r.returncode == 0, r.stdout + r.stderr
        assert (r.stdout + r.stderr).strip() == "", r.stdout + r.stderr


def readiness_command(giftctl, sleep="0.2"):
    """ExecStartPost as systemd would run it ($$ -> $), with the build's
    giftctl and, optionally, a shorter pause between checks."""
    cmd = service("ExecStartPost")[0]
    m = re.fullmatch(r"/bin/sh -c '(.*)'", cmd)
    assert m, cmd
    script = m.group(1).replace("$$", "$")
    script = script.replace("/usr/local/bin/giftctl", giftctl)
    return ["/bin/sh", "-c", script.replace("sleep 0.2", f"sleep {sleep}")]


def test_readiness_check_passes_on_a_live_giftd():
    giftd, giftctl = os.environ.get("GIFTD"), os.environ.get("GIFTCTL")
    if not (giftd and giftctl):
        pytest.skip("GIFTD / GIFTCTL not set")
    with running_giftd(giftd, giftctl) as address:
        env = dict(os.environ, GIFT_CONTROL_ADDRESS=address)
        r = subprocess.run(readiness_command(giftctl), env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr


def test_readiness_check_gives_up_within_its_bound():
    giftctl = os.environ.get("GIFTCTL")
    if not giftctl:
        pytest.skip("GIFTCTL not set")
    with tempfile.TemporaryDirectory() as tmp:
        # Nothing listens there.
        env = dict(os.environ, GIFT_CONTROL_ADDRESS="127.0.0.1:1")
        start = time.monotonic()
        r = subprocess.run(readiness_command(giftctl, sleep="0.01"), env=env,
                           capture_output=True, text=True, timeout=120,
                           cwd=tmp)
        assert r.returncode == 1
        assert "not SERVING after 100 health checks" in r.stderr
        assert time.monotonic() - start < 100


def test_env_file_parses():
    values = {}
    for line in (SYSTEMD_DIR / "giftd.env").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Z_][A-Z0-9_]*", key), line
        values[key] = value
    assert set(values) == {"GIFTD_OPTS", "GIFT_CONTROL_ADDRESS"}
    # The readiness check must look where giftd.yaml puts Control.
    config = yaml.safe_load((SYSTEMD_DIR / "giftd.yaml").read_text())
    assert values["GIFT_CONTROL_ADDRESS"] == config["control_address"]


def test_sysusers_file_declares_the_unit_user():
    lines = [l.split() for l in
             (SYSTEMD_DIR / "gift.sysusers.conf").read_text().splitlines()
             if l.strip() and not l.startswith("#")]
    assert lines and lines[0][:2] == ["u", service("User")[0]]


def test_config_documents_the_defaults_and_giftd_accepts_it():
    path = SYSTEMD_DIR / "giftd.yaml"
    config = yaml.safe_load(path.read_text())
    assert config["agent_socket"] == "/run/gift/agent.sock"  # RuntimeDirectory
    giftd = os.environ.get("GIFTD")
    if not giftd:
        pytest.skip("GIFTD not set: defaults not compared")
    defaults = yaml.safe_load(subprocess.run(
        [giftd, "--print-config"], check=True, capture_output=True,
        text=True, timeout=30).stdout)
    loaded = yaml.safe_load(subprocess.run(
        [giftd, "--config", str(path), "--print-config"], check=True,
        capture_output=True, text=True, timeout=30).stdout)
    # Every option giftd has is in the file (commented or not: the key
    # appears), and every value set equals giftd's default but the socket.
    text = path.read_text()
    for key in defaults:
        if key == "node":
            continue  # the host name: left to giftd
        assert re.search(rf"^#? ?{key}:", text, re.M), f"{key} undocumented"
    for key, value in config.items():
        if key == "agent_socket":
            continue
        assert value == defaults[key], f"{key}: {value} != {defaults[key]}"
    assert loaded["agent_socket"] == "/run/gift/agent.sock"
