# Several hosts on one machine: network namespaces joined by veth pairs to a bridge, Redis on host 0,
# one rank per host started by `lmcore launch --nnodes 3 --node-rank i --store redis://...`. While the
# ranks loop over all_reduce, host 2's link is cut (`ip link set ... down`). The two survivors must
# get a DistError naming rank 2 within timeout + 2 s, shrink to two ranks and compute correctly.
#
# Needs root (CI runs as root). If namespaces cannot be created the test FAILS: it is not skipped.
import os
import re
import shutil
import subprocess
import textwrap
import time

import pytest

from conftest import BUILD

LMCORE = BUILD / "lmcore"
PY = "/usr/bin/python3"
TIMEOUT_S = 3.0

WORKER = f"""
import os, sys, time
sys.path.insert(0, {str(BUILD / 'python')!r})
import torch
import lmcore
pg = lmcore.dist.ProcessGroup(timeout={TIMEOUT_S})
r, n = pg.rank, pg.world_size
assert n == 3
x = torch.full((1 << 18,), float(r + 1))
pg.all_reduce(x)
assert torch.all(x == 6)
print("looping", flush=True)
i = 0
while True:
    x = torch.full((1 << 18,), float(r + 1))
    t0 = time.monotonic()
    try:
        pg.all_reduce(x)
    except lmcore.dist.DistError as e:
        ms = (time.monotonic() - t0) * 1000
        print(f"detected after {{ms:.0f}} ms kind={{e.kind}} op={{e.op}} seq={{e.seq}} missing={{e.missing_ranks}}", flush=True)
        break
    assert torch.all(x == 6)
    i += 1
    time.sleep(0.02)
if r == 2:
    print("cut host gave up", flush=True)
    sys.exit(0)
small = pg.shrink(window=2.0)
y = torch.full((1000,), float(small.rank + 1))
small.all_reduce(y)
assert small.world_size == 2 and torch.all(y == 3), (small.world_size, y[:4])
print("shrunk ok", small.rank, small.world_size, flush=True)
"""


def sh(*args, check=True):
    return subprocess.run(list(args), capture_output=True, text=True, check=check)


@pytest.fixture
def hosts(tmp_path):
    tag = f"l{os.getpid() % 100000}"
    hub = f"{tag}hub"
    names = [f"{tag}h{i}" for i in range(3)]
    created = []
    try:
        sh("ip", "netns", "add", hub)
        created.append(hub)
        sh("ip", "netns", "exec", hub, "ip", "link", "add", "br0", "type", "bridge")
        sh("ip", "netns", "exec", hub, "ip", "link", "set", "br0", "up")
        for i, ns in enumerate(names):
            sh("ip", "netns", "add", ns)
            created.append(ns)
            a, b = f"{tag}v{i}a", f"{tag}v{i}b"
            sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
            sh("ip", "link", "set", a, "netns", ns)
            sh("ip", "link", "set", b, "netns", hub)
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"10.231.0.{i + 1}/24", "dev", a)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", a, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            sh("ip", "netns", "exec", hub, "ip", "link", "set", b, "master", "br0")
            sh("ip", "netns", "exec", hub, "ip", "link", "set", b, "up")
    except subprocess.CalledProcessError as e:
        for ns in created:
            sh("ip", "netns", "del", ns, check=False)
        pytest.fail(f"cannot build the network namespaces (root and `ip` are required): {e.cmd}: {e.stderr}")
    yield {"tag": tag, "hub": hub, "hosts": names}
    for ns in created:
        sh("ip", "netns", "del", ns, check=False)


def test_cut_link_of_one_host_survivors_error_in_bound_and_shrink(hosts, tmp_path):
    assert shutil.which("redis-server"), "redis-server is required"
    ns = hosts["hosts"]
    port = 6300 + os.getpid() % 500
    redis = subprocess.Popen(["ip", "netns", "exec", ns[0], "redis-server", "--bind", "10.231.0.1", "--port", str(port),
                              "--save", "", "--appendonly", "no", "--loglevel", "warning",
                              "--protected-mode", "no"])  # reachable only inside the test namespaces
    procs = []
    try:
        # Host 1 can reach Redis on host 0 through the bridge.
        for _ in range(200):
            if sh("ip", "netns", "exec", ns[1], "redis-cli", "-h", "10.231.0.1", "-p", str(port), "ping",
                  check=False).stdout.strip() == "PONG":
                break
            time.sleep(0.05)
        else:
            pytest.fail("redis-server in host 0 is not reachable from host 1")
        script = tmp_path / "worker.py"
        script.write_text(WORKER)
        logs = []
        for i in range(3):
            log = open(tmp_path / f"host{i}.log", "w+")
            logs.append(log)
            procs.append(subprocess.Popen(
                ["ip", "netns", "exec", ns[i], str(LMCORE), "launch", "--nproc", "1", "--nnodes", "3", "--node-rank",
                 str(i), "--store", f"redis://10.231.0.1:{port}", "--", PY, str(script)],
                stdout=log, stderr=subprocess.STDOUT))
        deadline = time.time() + 60
        while time.time() < deadline:
            if all("looping" in open(tmp_path / f"host{i}.log").read() for i in range(3)):
                break
            time.sleep(0.1)
        else:
            pytest.fail("ranks did not start: " + " | ".join(open(tmp_path / f"host{i}.log").read() for i in range(3)))
        time.sleep(0.5)
        sh("ip", "netns", "exec", hosts["hub"], "ip", "link", "set", f"{hosts['tag']}v2b", "down")
        for i in (0, 1):
            procs[i].wait(timeout=60)
        procs[2].wait(timeout=60)
        out = [open(tmp_path / f"host{i}.log").read() for i in range(3)]
        for i in (0, 1):
            assert procs[i].returncode == 0, out[i]
            m = re.search(r"detected after (\d+) ms kind=(\w+) op=all_reduce seq=\d+ missing=\[2\]", out[i])
            assert m, out[i]
            print(f"host {i}: failure of host 2 detected after {m.group(1)} ms ({m.group(2)}), timeout {TIMEOUT_S} s")
            assert int(m.group(1)) < (TIMEOUT_S + 2) * 1000
            assert f"shrunk ok {i} 2" in out[i], out[i]
        assert "detected after" in out[2], out[2]  # the cut host errors too instead of hanging
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        redis.terminate()
        redis.wait()
