# Several "hosts" on one machine for the multi-host tests: network namespaces joined by veth pairs to a
# bridge in a hub namespace, and a Redis store on host 0 that the other hosts reach through the bridge.
# Needs root (CI runs as root). If namespaces cannot be created the calling test FAILS: it is not skipped.
import contextlib
import os
import subprocess
import time

import pytest


def sh(*args, check=True):
    return subprocess.run(list(args), capture_output=True, text=True, check=check)


@contextlib.contextmanager
def bridged_hosts(prefix, subnet, count=3):
    """Yields {"tag", "hub", "hosts", "ips"}: `count` namespaces with addresses subnet.1, subnet.2, ...
    (subnet is the first three octets, e.g. "10.231.0"); every namespace is deleted on exit."""
    tag = f"{prefix}{os.getpid() % 100000}"
    hub = f"{tag}hub"
    names = [f"{tag}h{i}" for i in range(count)]
    ips = [f"{subnet}.{i + 1}" for i in range(count)]
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
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{ips[i]}/24", "dev", a)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", a, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            sh("ip", "netns", "exec", hub, "ip", "link", "set", b, "master", "br0")
            sh("ip", "netns", "exec", hub, "ip", "link", "set", b, "up")
    except subprocess.CalledProcessError as e:
        for ns in created:
            sh("ip", "netns", "del", ns, check=False)
        pytest.fail(f"cannot build the network namespaces (root and `ip` are required): {e.cmd}: {e.stderr}")
    try:
        yield {"tag": tag, "hub": hub, "hosts": names, "ips": ips}
    finally:
        for ns in created:
            sh("ip", "netns", "del", ns, check=False)


def cut_link(hosts, i):
    """Takes host i's link down at the bridge: no connection breaks, its packets just stop arriving."""
    sh("ip", "netns", "exec", hosts["hub"], "ip", "link", "set", f"{hosts['tag']}v{i}b", "down")


@contextlib.contextmanager
def redis_on_host0(hosts, port):
    """Runs redis-server in host 0 (reachable only inside the test namespaces) until exit; fails the test
    unless host 1 can reach it within 10 s."""
    ns, ip = hosts["hosts"], hosts["ips"][0]
    redis = subprocess.Popen(["ip", "netns", "exec", ns[0], "redis-server", "--bind", ip, "--port", str(port),
                              "--save", "", "--appendonly", "no", "--loglevel", "warning", "--protected-mode", "no"])
    try:
        for _ in range(200):
            if sh("ip", "netns", "exec", ns[1], "redis-cli", "-h", ip, "-p", str(port), "ping",
                  check=False).stdout.strip() == "PONG":
                break
            time.sleep(0.05)
        else:
            pytest.fail("redis-server in host 0 is not reachable from host 1")
        yield f"redis://{ip}:{port}"
    finally:
        redis.terminate()
        redis.wait()
