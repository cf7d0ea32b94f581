"""The Ray placement check: what cannot fit is refused before Ray is asked."""

from __future__ import annotations

import pytest

from fastppo.actor_learner.placement import check_placement, node_cpus, placement_problem

TWO_SMALL = [("127.0.0.2", 1.0), ("127.0.0.3", 1.0)]


@pytest.mark.parametrize(
    ("n", "cpu", "strategy", "cpus", "fits"),
    [
        (2, 1.0, "SPREAD", TWO_SMALL, True),
        (3, 1.0, "SPREAD", TWO_SMALL, False),  # 3 actors on 2 CPUs
        (2, 1.0, "STRICT_SPREAD", TWO_SMALL, True),
        (4, 0.5, "STRICT_SPREAD", TWO_SMALL, False),  # 4 nodes needed, 2 exist
        (2, 0.5, "STRICT_PACK", TWO_SMALL, True),
        (2, 1.0, "STRICT_PACK", TWO_SMALL, False),  # no node holds 2 CPUs
        (3, 0.75, "PACK", TWO_SMALL, False),  # 0.75 + 0.75 does not fit in 1 CPU
        (2, 0.75, "none", TWO_SMALL, True),
        (5, 0.0, "SPREAD", TWO_SMALL, True),  # actors that reserve no CPU always fit
        (1, 1.0, "SPREAD", [], False),
    ],
)
def test_placement_problem(n, cpu, strategy, cpus, fits):
    assert (placement_problem(n, cpu, strategy, cpus) is None) == fits


def test_check_placement_names_the_request_and_the_cluster():
    nodes = [
        {"NodeManagerAddress": "127.0.0.2", "Resources": {"CPU": 1.0}, "Alive": True},
        {"NodeManagerAddress": "127.0.0.3", "Resources": {"CPU": 1.0}, "Alive": True},
        {"NodeManagerAddress": "127.0.0.4", "Resources": {"CPU": 8.0}, "Alive": False},
    ]
    assert node_cpus(nodes) == TWO_SMALL  # dead nodes do not count
    check_placement(2, 1.0, "STRICT_SPREAD", nodes)
    with pytest.raises(ValueError) as e:
        check_placement(3, 1.0, "STRICT_SPREAD", nodes)
    msg = str(e.value)
    assert msg.startswith("run: 3 Ray actors x 1 CPU with placement 'STRICT_SPREAD'")
    assert "STRICT_SPREAD needs 3 nodes" in msg
    assert "2 alive node(s) (127.0.0.2: 1 CPU, 127.0.0.3: 1 CPU)" in msg
