"""deploy/slurm/gift-srun under a simulated allocation: fake `srun`, `squeue` and
`scontrol` on PATH run every step locally, once per node of FAKE_NODES (with
that node's SLURMD_NODENAME) or once per rank. Checks that one giftd starts
per node (the first node leads, one 0600 token), that health is waited for on
every node before the command runs, that the command runs on every rank with
the agent socket, that the daemons stop afterwards, and that the command's
exit status comes back. One case runs the real giftd and giftctl."""

import os
import pathlib
import stat
import subprocess
import tempfile
import textwrap
import time

import pytest

from deploy_testutil import SLURM_DIR, free_port, health

GIFT_SRUN = SLURM_DIR / "gift-srun"

# srun: options up to the command; --ntasks-per-node=1 steps run once per
# node, others once per rank (FAKE_TASKS_PER_NODE per node). Tasks run in the
# background with the node's environment; TERM/INT are forwarded to them.
FAKE_SRUN = r"""#!/usr/bin/env bash
per_node=""
args=("$@")
while (($# > 0)); do
  case "$1" in
    --ntasks-per-node=1) per_node=1; shift ;;
    --*=*|--overlap|--kill-on-bad-exit) shift ;;
    --*) shift 2 ;;
    *) break ;;
  esac
done
echo "srun ${args[*]}" >>"$FAKE_LOG"
read -r -a nodes <<<"$FAKE_NODES"
tasks=${FAKE_TASKS_PER_NODE:-2}
[[ -n "$per_node" ]] && tasks=1
pids=()
rank=0
for i in "${!nodes[@]}"; do
  for ((t = 0; t < tasks; t++)); do
    SLURMD_NODENAME=${nodes[$i]} SLURM_NODEID=$i SLURM_PROCID=$rank \
      SLURM_LOCALID=$t "$@" &
    pids+=($!)
    rank=$((rank + 1))
  done
done
trap 'kill -TERM "${pids[@]}" 2>/dev/null' TERM INT
status=0
for p in "${pids[@]}"; do
  while true; do
    wait "$p"; s=$?
    # wait returns >128 when a trapped signal interrupts it: wait again.
    kill -0 "$p" 2>/dev/null || break
  done
  ((s > status)) && status=$s
done
exit "$status"
"""

# squeue / scancel: gift-srun asks Slurm to signal the daemon step; these
# know no steps, so it falls back to signalling srun, which the fake srun
# forwards to its tasks (the real Slurm path: test_gift_srun_slurm.py).
FAKE_SQUEUE = r"""#!/usr/bin/env bash
echo "squeue $*" >>"$FAKE_LOG"
exit 1
"""

FAKE_SCONTROL = r"""#!/usr/bin/env bash
[[ "$1 $2" == "show hostnames" ]] || exit 1
echo "scontrol $*" >>"$FAKE_LOG"
tr ' ' '\n' <<<"$FAKE_NODES"
"""

# giftd: logs its flags and the token file's mode, becomes "healthy" after
# FAKE_READY_AFTER_MS (a marker file per node), stops on TERM.
FAKE_GIFTD = r"""#!/usr/bin/env bash
node=$SLURMD_NODENAME
echo "giftd-start $node $*" >>"$FAKE_LOG"
for a in "$@"; do
  case "$a" in
    --job-token-file=*) f=${a#*=}
      echo "token $node $(stat -c %a "$f") $(wc -c <"$f")" >>"$FAKE_LOG" ;;
  esac
done
[[ -n "$FAKE_GIFTD_FAIL" ]] && { echo "giftd-fail $node" >>"$FAKE_LOG"; exit 1; }
trap 'echo "giftd-stop $node" >>"$FAKE_LOG"; rm -f "$FAKE_DIR/ready.$node"; exit 0' TERM
# Short sleeps: bash runs the TERM trap only between commands.
ready_at=$(($(date +%s%N) / 1000000 + ${FAKE_READY_AFTER_MS:-500}))
while (($(date +%s%N) / 1000000 < ready_at)); do sleep 0.05; done
touch "$FAKE_DIR/ready.$node"
while true; do sleep 0.1; done
"""

FAKE_GIFTCTL = r"""#!/usr/bin/env bash
node=$SLURMD_NODENAME
if [[ -e "$FAKE_DIR/ready.$node" ]]; then
  echo "health $node SERVING $*" >>"$FAKE_LOG"; exit 0
fi
echo "health $node down" >>"$FAKE_LOG"; exit 1
"""

# The user's command: records the rank's view, exits FAKE_EXIT.
USER_COMMAND = ["bash", "-c",
                'echo "rank $SLURM_PROCID $SLURMD_NODENAME $GIFT_AGENT_SOCKET '
                '$GIFT_JOB_ID" >>"$FAKE_LOG"; exit ${FAKE_EXIT:-0}']


def write_exec(path, text):
    path.write_text(text)
    path.chmod(0o755)


@pytest.fixture
def sim():
    with tempfile.TemporaryDirectory(prefix="gift-srun-") as tmp:
        d = pathlib.Path(tmp)
        (d / "bin").mkdir()
        write_exec(d / "bin" / "srun", FAKE_SRUN)
        write_exec(d / "bin" / "scontrol", FAKE_SCONTROL)
        write_exec(d / "bin" / "squeue", FAKE_SQUEUE)
        write_exec(d / "bin" / "scancel", FAKE_SQUEUE)
        write_exec(d / "giftd", FAKE_GIFTD)
        write_exec(d / "giftctl", FAKE_GIFTCTL)
        yield d


def run(sim, args, nodes="node-a node-b", timeout=60, **env):
    e = dict(os.environ)
    e.update(PATH=f"{sim}/bin:{os.environ['PATH']}", FAKE_LOG=f"{sim}/log",
             FAKE_DIR=str(sim), FAKE_NODES=nodes, SLURM_JOB_ID="4242",
             SLURM_JOB_NODELIST="node-[a-b]", HOME=str(sim / "home"),
             TMPDIR=str(sim / "tmp"))
    for k in ("GIFT_GIFTD", "GIFT_GIFTCTL", "GIFT_JOB_ID", "GIFT_RUN_DIR"):
        e.pop(k, None)
    e.update(env)
    (sim / "tmp").mkdir(exist_ok=True)
    (sim / "log").touch()
    r = subprocess.run([str(GIFT_SRUN), *args], env=e, capture_output=True,
                       text=True, timeout=timeout)
    return r, (sim / "log").read_text().splitlines()


def fake_args(sim, *extra):
    return ["--giftd", str(sim / "giftd"), "--giftctl", str(sim / "giftctl"),
            "--stop-timeout", "5", *extra, "--"]


def index(log, prefix):
    for i, line in enumerate(log):
        if line.startswith(prefix):
            return i
    raise AssertionError(f"no {prefix!r} in log:\n" + "\n".join(log))


def test_two_nodes_start_wait_run_stop_and_propagate(sim):
    r, log = run(sim, fake_args(sim, "--ready-timeout", "20") + USER_COMMAND,
                 FAKE_EXIT="7", FAKE_READY_AFTER_MS="1000")
    assert r.returncode == 7, r.stderr
    # One daemon per node, from one per-node step with --overlap.
    steps = [l for l in log if l.startswith("srun ")]
    assert "--ntasks-per-node=1" in steps[0] and "--overlap" in steps[0]
    starts = {l.split()[1]: l for l in log if l.startswith("giftd-start")}
    assert set(starts) == {"node-a", "node-b"}
    run_dir = f"{sim}/tmp/gift-4242"
    for node, line in starts.items():
        assert f"--node={node}" in line
        assert f"--agent-socket={run_dir}/agent.sock" in line
        assert "--job-id=slurm-4242" in line
        assert "--leader-address=node-a:50152" in line  # the first node
        assert f"--peer-advertise-address={node}:50152" in line
        assert "--control-address=127.0.0.1:50151" in line
    # One token, 0600, read by both daemons, removed at the end.
    tokens = [l.split() for l in log if l.startswith("token ")]
    assert len(tokens) == 2 and all(t[2] == "600" and t[3] == "64"
                                    for t in tokens)
    assert not list((sim / "home" / ".gift" / "jobs").iterdir())
    # Health was waited for (down first: ready after 1 s) on every node,
    # and the command ran only once both were SERVING.
    for node in ("node-a", "node-b"):
        assert index(log, f"health {node} down") < index(
            log, f"health {node} SERVING")
    first_rank = index(log, "rank ")
    assert max(index(log, "health node-a SERVING"),
               index(log, "health node-b SERVING")) < first_rank
    ranks = sorted(l for l in log if l.startswith("rank "))
    assert ranks == [
        f"rank {i} {n} {run_dir}/agent.sock slurm-4242"
        for i, n in enumerate(["node-a", "node-a", "node-b", "node-b"])]
    # Both daemons stopped, after the command.
    for node in ("node-a", "node-b"):
        assert index(log, f"giftd-stop {node}") > first_rank
    assert "command exited with status 7" in r.stderr


def test_exit_status_zero_and_srun_options_pass_through(sim):
    r, log = run(sim, fake_args(sim) + ["--ntasks-per-node=2"] + USER_COMMAND,
                 FAKE_EXIT="0")
    assert r.returncode == 0, r.stderr
    user_step = [l for l in log if l.startswith("srun ")][-1]
    assert user_step.startswith("srun --ntasks-per-node=2 bash -c")
    assert sum(l.startswith("giftd-stop") for l in log) == 2


def test_one_node_runs_a_plain_giftd(sim):
    r, log = run(sim, fake_args(sim) + USER_COMMAND, nodes="solo",
                 SLURM_JOB_NODELIST="solo")
    assert r.returncode == 0, r.stderr
    start = [l for l in log if l.startswith("giftd-start")]
    assert len(start) == 1 and "--peer-address" not in start[0]
    assert "--job-token-file" not in start[0]


def test_unhealthy_daemons_stop_and_skip_the_command(sim):
    start = time.monotonic()
    r, log = run(sim, fake_args(sim, "--ready-timeout", "2") + USER_COMMAND,
                 FAKE_READY_AFTER_MS="60000")
    assert r.returncode == 3, r.stderr
    assert time.monotonic() - start < 30
    assert not any(l.startswith("rank ") for l in log)
    assert "not SERVING after 2s" in r.stderr
    assert sum(l.startswith("giftd-stop") for l in log) == 2


def test_daemons_that_die_fail_fast(sim):
    start = time.monotonic()
    r, log = run(sim, fake_args(sim, "--ready-timeout", "60") + USER_COMMAND,
                 FAKE_GIFTD_FAIL="1")
    assert r.returncode == 3, r.stderr
    assert time.monotonic() - start < 20, "waited out the ready timeout"
    assert not any(l.startswith("rank ") for l in log)


def test_usage_errors(sim):
    r, _ = run(sim, fake_args(sim))  # no command
    assert r.returncode == 2 and "missing command" in r.stderr
    r, _ = run(sim, ["--bogus", "--", "true"])
    assert r.returncode == 2 and "unknown option '--bogus'" in r.stderr
    r, _ = run(sim, fake_args(sim) + ["true"], SLURM_JOB_ID="")
    assert r.returncode == 2 and "not inside a Slurm allocation" in r.stderr
    r, _ = run(sim, ["--giftd", "/nonexistent", "--", "true"])
    assert r.returncode == 2 and "giftd not found" in r.stderr


def test_real_giftd_and_giftctl_on_one_node(sim):
    giftd, giftctl = os.environ.get("GIFTD"), os.environ.get("GIFTCTL")
    if not (giftd and giftctl):
        pytest.skip("GIFTD / GIFTCTL not set")
    port = free_port()
    # The ranks' check: the socket exists and giftd answers health.
    check = ["bash", "-c",
             f'test -S "$GIFT_AGENT_SOCKET" && "{giftctl}" --address '
             f'127.0.0.1:{port} health && echo "rank-ok $SLURM_PROCID" '
             '>>"$FAKE_LOG"']
    r, log = run(sim, ["--giftd", giftd, "--giftctl", giftctl,
                       "--control-port", str(port), "--metrics-address", "",
                       "--ready-timeout", "30", "--"] + check,
                 nodes="solo", SLURM_JOB_NODELIST="solo",
                 FAKE_TASKS_PER_NODE="2")
    assert r.returncode == 0, r.stderr + "\n".join(log)
    assert sorted(l for l in log if l.startswith("rank-ok")) == [
        "rank-ok 0", "rank-ok 1"]
    # giftd stopped: nothing answers, the socket is gone.
    assert health(giftctl, f"127.0.0.1:{port}") == 1
    assert not os.path.exists(f"{sim}/tmp/gift-4242/agent.sock")
    assert "giftd on solo SERVING" in r.stderr
