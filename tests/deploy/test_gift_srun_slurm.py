"""deploy/slurm/gift-srun under a real Slurm (issue 14.3): the test starts a
one-host cluster of its own — munged with a fresh key, slurmctld and slurmd
with a generated slurm.conf, every file under a temporary folder, ports
picked free — submits batch jobs with `sbatch --wait`, and stops the daemons
at the end. In the job, gift-srun starts the real giftd once on the node,
waits for it, runs 2 tasks of examples/train_tiny_llama.py in `gift` mode for
a few steps (torchrun-style variables from Slurm's), stops giftd and exits
with the command's status, which `sbatch --wait` hands back.

The simulated multi-node allocation (two nodes, the leader, the token) stays
in test_gift_srun.py: one host runs one slurmd. Skipped, with the reason,
where Slurm is not installed (scripts/install-deps.sh installs slurm-wlm and
munge) or its daemons cannot start (they must run as root)."""

import contextlib
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import textwrap
import time

import pytest

from deploy_testutil import ROOT, SLURM_DIR, free_port

GIFT_SRUN = SLURM_DIR / "gift-srun"
TRAIN = ROOT / "examples" / "train_tiny_llama.py"
TOOLS = ("munged", "munge", "slurmctld", "slurmd", "sbatch", "srun", "sinfo",
         "scancel")


def _tool(name):
    for d in ("/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        p = pathlib.Path(d) / name
        if p.exists():
            return str(p)
    return shutil.which(name)


def _kill_pidfile(path):
    try:
        pid = int(pathlib.Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _logs(d):
    out = []
    for f in sorted((d / "log").glob("*.log")):
        lines = f.read_text(errors="replace").splitlines()[-15:]
        out.append(f"--- {f.name}\n" + "\n".join(lines))
    return "\n".join(out)


class Cluster:
    def __init__(self, d, env):
        self.dir, self.env = d, env

    def sbatch(self, script, timeout=420):
        """Submits `script` (its text) with --wait; (returncode, output)."""
        job = self.dir / f"job{time.monotonic_ns()}.sh"
        out = job.with_suffix(".out")
        job.write_text(script)
        job.chmod(0o755)
        r = subprocess.run(
            [_tool("sbatch"), "--wait", "--nodes=1", "--ntasks=2",
             f"--output={out}", "--job-name=gift-srun-test", str(job)],
            env=self.env, capture_output=True, text=True, timeout=timeout)
        text = out.read_text(errors="replace") if out.exists() else ""
        return r.returncode, r.stdout + r.stderr + text


@pytest.fixture(scope="module")
def slurm():
    missing = [t for t in TOOLS if _tool(t) is None]
    if missing:
        pytest.skip("Slurm is not installed (missing " + ", ".join(missing) +
                    "; scripts/install-deps.sh installs slurm-wlm and munge)")
    if os.geteuid() != 0:
        pytest.skip("slurmd must run as root to launch tasks; this test runs "
                    f"as uid {os.geteuid()}")
    with tempfile.TemporaryDirectory(prefix="gift-slurm-") as tmp:
        d = pathlib.Path(tmp)
        for sub in ("run", "log", "state", "spool", "home"):
            (d / sub).mkdir()
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = d / "run" / "munge.sock"
        host = socket.gethostname().split(".")[0]
        ctld_port, d_port = free_port(), free_port()
        conf = d / "slurm.conf"
        conf.write_text(textwrap.dedent(f"""\
            ClusterName=gifttest
            SlurmctldHost={host}(127.0.0.1)
            SlurmctldPort={ctld_port}
            SlurmdPort={d_port}
            SlurmUser=root
            SlurmdUser=root
            AuthType=auth/munge
            AuthInfo=socket={sock}
            CredType=cred/munge
            StateSaveLocation={d}/state
            SlurmdSpoolDir={d}/spool
            SlurmctldPidFile={d}/run/slurmctld.pid
            SlurmdPidFile={d}/run/slurmd.pid
            SlurmctldLogFile={d}/log/slurmctld.log
            SlurmdLogFile={d}/log/slurmd.log
            ProctrackType=proctrack/linuxproc
            TaskPlugin=task/none
            JobAcctGatherType=jobacct_gather/none
            AccountingStorageType=accounting_storage/none
            SelectType=select/cons_tres
            SelectTypeParameters=CR_CPU
            MpiDefault=none
            ReturnToService=2
            NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} State=UNKNOWN
            PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
            """))
        env = dict(os.environ, SLURM_CONF=str(conf), HOME=str(d / "home"))
        for k in list(env):
            if k.startswith(("SLURM_", "GIFT_")) and k != "SLURM_CONF":
                del env[k]
        started = []
        try:
            subprocess.run(
                [_tool("munged"), "--force", f"--socket={sock}",
                 f"--key-file={key}", f"--log-file={d}/log/munged.log",
                 f"--pid-file={d}/run/munged.pid",
                 f"--seed-file={d}/run/munged.seed"],
                check=True, capture_output=True, timeout=30)
            started.append(d / "run" / "munged.pid")
            for daemon in ("slurmctld", "slurmd"):
                subprocess.run([_tool(daemon), "-f", str(conf)], env=env,
                               check=True, capture_output=True, timeout=30)
                started.append(d / "run" / f"{daemon}.pid")
            deadline = time.monotonic() + 60
            state = ""
            while time.monotonic() < deadline:
                r = subprocess.run([_tool("sinfo"), "-h", "-o", "%t"],
                                   env=env, capture_output=True, text=True)
                state = r.stdout.strip()
                if state in ("idle", "mix", "alloc"):
                    break
                time.sleep(0.5)
            else:
                pytest.skip(f"the Slurm daemons did not come up (node state "
                            f"'{state}'):\n{_logs(d)}")
        except (subprocess.CalledProcessError,
                subprocess.TimeoutExpired) as e:
            for p in reversed(started):
                _kill_pidfile(p)
            err = getattr(e, "stderr", b"") or b""
            pytest.skip(f"the Slurm daemons cannot start here ({e}; "
                        f"{err.decode(errors='replace').strip()}):\n{_logs(d)}")
        try:
            yield Cluster(d, env)
        finally:
            subprocess.run([_tool("scancel"), "--full", "--quiet",
                            "--partition=test"], env=env, capture_output=True)
            for p in reversed(started):
                _kill_pidfile(p)


def job_script(cluster, command, *, steps=3):
    """A batch script: gift-srun with the real giftd on free ports, the
    command on 2 tasks with torchrun-style variables."""
    build_python = pathlib.Path(os.environ["GIFTD"]).parents[1] / "python"
    d = cluster.dir
    return textwrap.dedent(f"""\
        #!/usr/bin/env bash
        set -euo pipefail
        export PYTHONPATH={build_python}
        export MASTER_ADDR=127.0.0.1 MASTER_PORT={free_port()}
        export WORLD_SIZE=$SLURM_NTASKS
        export GIFT_STEPS={steps} GIFT_SUMMARY={d}/summary-$SLURM_JOB_ID.json
        exec {GIFT_SRUN} --giftd {os.environ["GIFTD"]} \\
          --giftctl {os.environ["GIFTCTL"]} \\
          --run-dir {d}/run/gift-$SLURM_JOB_ID --token-dir {d}/tokens \\
          --control-port {free_port()} \\
          --metrics-address 127.0.0.1:{free_port()} \\
          --ready-timeout 60 --stop-timeout 10 -- \\
          --kill-on-bad-exit=1 {command}
        """)


TRAIN_COMMAND = (
    "bash -c 'RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID exec "
    f"/usr/bin/python3 {TRAIN} --mode gift --steps $GIFT_STEPS --batch 2 "
    "--eval-every 1000 --progress lines --job-id \"$GIFT_JOB_ID\" "
    "--summary \"$GIFT_SUMMARY\"'")


def giftd_processes(run_dir):
    out = subprocess.run(["pgrep", "-f", f"--agent-socket={run_dir}"],
                         capture_output=True, text=True).stdout.split()
    return [p for p in out if p != str(os.getpid())]


def test_a_batch_job_trains_with_one_giftd_on_the_node(slurm):
    rc, out = slurm.sbatch(job_script(slurm, TRAIN_COMMAND))
    assert rc == 0, out
    # giftd came up on the node before the ranks ran, and stopped after.
    assert "giftd on " in out and "SERVING" in out, out
    summaries = list(slurm.dir.glob("summary-*.json"))
    assert len(summaries) == 1, out
    summary = json.loads(summaries[0].read_text())
    assert summary["mode"] == "gift" and summary["world_size"] == 2, summary
    assert summary["steps"] == 3, summary
    # The ranks used the node's giftd (the socket gift-srun exported).
    attachment = (summary["gift"] or {}).get("attachment") or {}
    assert attachment.get("attached") is True, summary["gift"]
    run_dirs = list((slurm.dir / "run").glob("gift-*"))
    assert len(run_dirs) == 1, out
    logs = list(run_dirs[0].glob("giftd.*.log"))
    assert len(logs) == 1, out  # one giftd on the one node
    log = logs[0].read_text(errors="replace")
    assert "registered rank 0/2" in log and "registered rank 1/2" in log, log
    assert "stopped" in log, log + out  # SIGTERM drained it
    assert giftd_processes(run_dirs[0]) == [], out


def test_the_commands_exit_status_comes_back_through_sbatch(slurm):
    rc, out = slurm.sbatch(job_script(
        slurm, "bash -c 'test -S \"$GIFT_AGENT_SOCKET\" && exit 7'"))
    assert rc == 7, out
    assert "command exited with status 7" in out, out
