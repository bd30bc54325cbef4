"""Shared pieces of the deploy/ tests: paths, YAML loading, free ports and a
real giftd on loopback."""

import contextlib
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
from free_port import free_port  # noqa: E402  (tests/free_port.py)

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S_DIR = DEPLOY / "k8s"
SYSTEMD_DIR = DEPLOY / "systemd"
SLURM_DIR = DEPLOY / "slurm"
CONTAINER_DIR = DEPLOY / "container"


def load_yaml_docs(path):
    with open(path) as f:
        return list(yaml.safe_load_all(f))


def health(giftctl, address, timeout=1):
    return subprocess.run([giftctl, "--address", address, "--timeout",
                           str(timeout), "health"], capture_output=True,
                          text=True).returncode


@contextlib.contextmanager
def running_giftd(giftd, giftctl, extra_args=()):
    """A giftd with its own socket, Control port and no metrics; yields the
    Control address once it is SERVING."""
    with tempfile.TemporaryDirectory(prefix="gift-deploy-") as tmp:
        address = f"127.0.0.1:{free_port()}"
        log = open(os.path.join(tmp, "giftd.log"), "w+")
        proc = subprocess.Popen(
            [giftd, f"--agent-socket={tmp}/agent.sock",
             f"--control-address={address}", "--metrics-address=",
             f"--shm-prefix=/gift-deploy-{os.getpid()}", *extra_args],
            stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while health(giftctl, address) != 0:
                assert proc.poll() is None, "giftd exited: " + read(log)
                assert time.monotonic() < deadline, "giftd never SERVING"
                time.sleep(0.1)
            yield address
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            log.close()


def read(f):
    f.seek(0)
    return f.read()
