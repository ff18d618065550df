"""scripts/local_ray_cluster.py gives every port of a cluster once: Ray refuses to start a raylet whose single port
falls in a worker range (CI failed once on `worker_ports is trying to use a port number 36175`)."""

import re
import socket

import pytest

import local_ray_cluster as cluster

pytestmark = pytest.mark.integration


def _flags(flags: list[str]) -> dict[str, int]:
    return {m[1]: int(m[2]) for flag in flags if (m := re.fullmatch(r"--([a-z-]+)=(\d+)", flag))}


def test_no_single_port_of_any_node_falls_in_any_worker_range():
    ports = cluster.Ports()
    singles, ranges = [ports.single(), ports.single()], []
    for node in range(12):
        flags = _flags(cluster.node_ports(ports, head=node == 0))
        ranges.append(range(flags.pop("min-worker-port"), flags.pop("max-worker-port") + 1))
        singles.extend(flags.values())
    assert all(len(r) == cluster.Ports.WORKERS for r in ranges)
    assert len(set(singles)) == len(singles)
    workers = [port for r in ranges for port in r]
    assert len(set(workers)) == len(workers), "two nodes share worker ports"
    assert not set(singles) & set(workers)


def test_a_worker_block_skips_a_port_someone_holds():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 20050))
        ports = cluster.Ports()
        draws = iter([20000, 25000])
        ports._random.randrange = lambda *_: next(draws)  # the first block holds 20050
        assert ports.worker_block() == 25000
