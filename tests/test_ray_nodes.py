"""The SLURM batch script's choice of the Ray head's address (recipes/launch/ray_nodes.py `head_address`) on a node's
interfaces as psutil lists them: RAY_HEAD_IP (one of the node's own), RAY_HEAD_INTERFACE, else the first non-loopback
address with the others said; each refusal one line. The script under SLURM: tests/test_slurm_batch.py."""

import pytest

from recipes.launch.ray_nodes import AddressError, head_address

pytestmark = pytest.mark.unit
MULTI_NIC = {"lo": ["127.0.0.1"], "docker0": ["172.17.0.1"], "ib0": ["10.2.0.5"], "eth0": ["192.168.1.5"]}


def test_the_first_address_is_taken_and_the_others_named_with_the_knobs_that_choose():
    assert head_address(found=MULTI_NIC) == (
        "172.17.0.1", "the first address of this node, on docker0; also 10.2.0.5 (ib0), 192.168.1.5 (eth0): "
                      "RAY_HEAD_INTERFACE or RAY_HEAD_IP choose another")
    assert head_address(found={"lo": ["127.0.0.1"], "eth0": ["10.0.0.7"]}) == (
        "10.0.0.7", "the first address of this node, on eth0")


def test_an_interface_or_an_address_of_this_node_is_taken_as_asked():
    assert head_address(interface="ib0", found=MULTI_NIC) == ("10.2.0.5", "RAY_HEAD_INTERFACE=ib0")
    assert head_address(ip="192.168.1.5", interface="ib0", found=MULTI_NIC) == ("192.168.1.5", "RAY_HEAD_IP")


@pytest.mark.parametrize("asked, said", [
    ({"ip": "10.9.9.9"}, "RAY_HEAD_IP=10.9.9.9 is not an address of this node (lo 127.0.0.1; docker0 172.17.0.1; "
                         "ib0 10.2.0.5; eth0 192.168.1.5)"),
    ({"interface": "ib1"}, "RAY_HEAD_INTERFACE=ib1: no IPv4 address on it (lo 127.0.0.1; docker0"),
    ({"found": {"lo": ["127.0.0.1"]}}, "this node has no IPv4 address but loopback (lo 127.0.0.1): set RAY_HEAD_IP"),
])
def test_an_address_that_cannot_be_the_heads_is_refused_in_one_line(asked, said):
    with pytest.raises(AddressError) as refused:
        head_address(**{"found": MULTI_NIC, **asked})
    assert str(refused.value).startswith(said) and "\n" not in str(refused.value)
