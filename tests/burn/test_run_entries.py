"""sim.burn.graph.runs.MemberRuns: entries of a graph's maps held as runs count in the
maps' lengths and, once read, take their places in each map's insertion order."""

from sim.burn.graph.runs import MemberRuns, RunEntries, built


def _maps(steps, nodes):
    runs = MemberRuns()
    a, b = RunEntries(steps, runs), RunEntries(nodes, runs)
    runs.maps = (a, b)
    return runs, a, b


def test_a_run_counts_in_the_lengths_and_is_built_in_its_place():
    runs, steps, nodes = _maps({1: "s1", 2: "s2"}, {1: "n1"})
    made = []

    def build():
        made.append(True)
        for i in (10, 11, 12):
            steps[i] = f"s{i}"
            nodes[i] = f"n{i}"
    runs.add(10, 13, 3, build)
    steps[20], nodes[20] = "s20", "n20"          # registered after the run
    assert len(steps) == 6 and len(nodes) == 5
    assert steps.get(20) == "s20" and 1 in nodes and not made   # other ids: no build
    assert steps[11] == "s11" and made == [True]                # a member: built once
    assert list(steps) == [1, 2, 10, 11, 12, 20]
    assert list(nodes) == [1, 10, 11, 12, 20]
    assert len(steps) == 6 and not runs.runs


def test_iterating_builds_every_run_and_other_keys_leave_them():
    runs, steps, nodes = _maps({}, {})

    def run(lo):
        def build():
            for i in range(lo, lo + 2):
                steps[i] = nodes[i] = i
        return build
    runs.add(0, 2, 2, run(0))
    steps[5] = nodes[5] = 5
    runs.add(6, 8, 2, run(6))
    assert ("run", 0) not in nodes and runs.runs        # a NodeRun's representative
    assert len(built(nodes)) == 5
    assert list(steps) == [0, 1, 5, 6, 7] and list(nodes) == [0, 1, 5, 6, 7]
    assert built({1: 2}) == {1: 2}
