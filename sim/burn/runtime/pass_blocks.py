"""The heap blocks of burn's three passes of ``free_unavailable_nodes`` (the cost of
:meth:`~sim.burn.runtime.memory_management.GraphMemoryManagement.free_unavailable_nodes`, not its
outcome, which the set passes of :mod:`sim.burn.runtime.memory_management` decide).

Where the allocator places blocks one by one (a glibc arena:
:attr:`~sim.platform.heap.Heap.orders_frees`) the passes are walked block by block as burn's
functions allocate and free them (:class:`_BlockPasses`); elsewhere their blocks are
counted and the tables grown to what the walk would leave (:func:`charge_passes`).
"""

from __future__ import annotations

import heapq

import numpy as np

from ...platform.vec import RustVec

__all__ = ["charge_passes", "members_in_order", "WALK_OBSERVER", "UsefulTape"]

#: called as ``WALK_OBSERVER(statuses, useful)`` after each block-by-block walk of burn's
#: passes (:func:`_passes_block_by_block`), when set (tests)
WALK_OBSERVER = None


def members_in_order(runs, on_free_member) -> bool:
    """Whether ``free_unavailable_nodes`` frees a run's members one by one in burn's
    order (each followed by ``on_free_member``, which takes its id out of the locator's
    BTreeMap): wherever the caller can forget a member on its own. The map's merges
    depend on the order of its removals on every allocator, and the heap's placement on
    the order of frees where it places blocks one by one (a size-class allocator's frees
    by size cost a few counters each); without ``on_free_member`` a run goes after the
    nodes."""
    return bool(runs) and on_free_member is not None


def charge_passes(memory, leaves, runs, reached, useful, deletables, new_leaves, members):
    """The blocks and table growth of burn's three passes: where glibc's arena places
    every block, walked block by block (a run's members as the leaves they are;
    returns the ``deletables`` Vec and the old leaves' table, which burn frees at the
    end), else counted (returns None)."""
    if memory.statuses_table is None:
        memory.statuses_table = memory.server.sim.tables.statuses()
    heap = memory.server.sim.heap
    if heap.orders_frees and (members or not runs):
        return _passes_block_by_block(memory, leaves, useful, runs.values())
    # the unavailable pass inserts every reached id once; the useful pass inserts the
    # ids it pops again (from every leaf on), and an insert into a full table grows it
    statuses = len(reached) - len(runs) + memory.run_nodes
    memory.statuses_table.grow_to(statuses)
    if leaves or runs:
        memory.statuses_table.reinsert(statuses)
    # the dead leaves (a run's members, the leaves deleted): the three passes walk each
    # as :func:`_passes_block_by_block` does, whose transient blocks (made, then freed
    # before the function returns) are not placed here, only counted: the leaf's
    # parents Vec cloned once per pass (if it has parents) and its walk's ``to_visit``
    # stack and ``visited`` set
    nodes = memory.nodes
    heap.allocs += sum(run.count * (2 + 3 * bool(run.parents)) for run in runs.values())
    heap.allocs += sum(2 + 3 * bool(nodes[leaf][1]) for leaf in leaves
                       if leaf in deletables and leaf in nodes)
    memory.leaves_table.drop()
    memory.leaves_table.grow_to(len(new_leaves))
    return None


def _passes_block_by_block(memory, leaves, useful, runs=()):
    """The blocks burn's ``free_unavailable_nodes`` allocates and frees before it
    removes anything, in its order, where the heap places blocks one by one (a glibc
    arena): :class:`_BlockPasses`. Sets up the new leaves' table in
    ``memory.leaves_table`` and returns ``(deletables Vec, the old leaves' table)``: the
    caller frees them where burn's function ends."""
    passes = _BlockPasses(memory, leaves, useful, runs)
    first = memory.leaves_table.clone()            # let leaves = self.leaves.clone()
    second = memory.leaves_table.clone()           # for leaf in leaves.clone()
    for leaf in passes.leaves:
        passes.unavailable_propagation(leaf)
    second.drop()
    passes.useful_propagation(memory.leaves_table.clone())
    new_leaves = _TrackedSet(memory.server.sim.tables.leaves())
    deletables = RustVec(passes.heap, memory.server.sim.layout.node_id_bytes)
    for leaf in passes.leaves:
        passes.identify_leaves_and_deletables(leaf, new_leaves, deletables)
    first.drop()
    old = memory.leaves_table
    memory.leaves_table = new_leaves.table
    if WALK_OBSERVER is not None:
        WALK_OBSERVER(passes.statuses(), useful)
    return deletables, old


class _DeadHandle:
    """The ref count of a run's member: no tensor handle left."""

    strong = 1


_DEAD = _DeadHandle()


class _TrackedSet:
    """A ``HashSet<NodeId>`` of burn's passes: the ids (popped in ascending order here,
    burn's hash order being random per process) and its table's blocks."""

    __slots__ = ("items", "table", "_order")

    def __init__(self, table, items=()):
        self.items = set(items)
        self.table = table
        self._order = list(self.items)       # a heap of the ids, for pop's ascending order
        heapq.heapify(self._order)

    def __contains__(self, node_id) -> bool:
        return node_id in self.items

    def __bool__(self) -> bool:
        return bool(self.items)

    def insert(self, node_id) -> None:
        if node_id not in self.items:
            heapq.heappush(self._order, node_id)
        _set_insert(self.items, self.table, node_id)

    def pop(self):
        """The smallest id (the set is not empty)."""
        order = self._order
        node_id = heapq.heappop(order)
        while node_id not in self.items:      # popped before, inserted again since
            node_id = heapq.heappop(order)
        self.items.discard(node_id)
        return node_id


class Tape:
    """The heap events of burn's ``unavailable_propagation`` from ``leaf``, recorded by
    one backward's walk for the next one's (:meth:`_BlockPasses._replayed`): ``events``
    holds each allocation's bytes (> 0) and each free as the distance back to its
    allocation (< 0), so a tape replays wherever it starts; ``nodes`` the ids the
    recursion gave a status, all available. Not part of burn: the recursion from a settled
    node whose reach holds no status yet allocates and frees the same blocks in the same
    nesting every backward, so only the nodes outside it are walked."""

    __slots__ = ("leaf", "events", "nodes", "checked", "unchecked", "statuses")

    def __init__(self, leaf, events, nodes, unchecked=None, statuses=None):
        self.leaf = leaf
        self.events = events
        self.nodes = nodes
        #: ``nodes`` each with its status (available), as a dict the replay copies (a
        #: dict's copy clones its table; a dict built from the ids hashes each)
        self.statuses = statuses
        self.checked = False
        #: the nodes still to check against the settled index (None: all of them); a
        #: tape recorded over the replay of a checked one need not check its nodes again
        #: (the index's ids only grow while it holds)
        self.unchecked = unchecked


class _BlockPasses:
    """burn's three passes of ``free_unavailable_nodes`` walked for their blocks, where
    the heap places blocks one by one (a glibc arena); the outcome is the set passes'
    (``useful``). Each method is the burn function of its name: ``statuses`` inserts (a
    full table grows even on a present key), each node's parents ``Vec`` cloned wherever
    burn reads it (``unavailable_propagation`` and both closures), ``useful_propagation``'s
    four sets, each walk's ``visited`` set and ``to_visit`` stack, the new leaves' set and
    the ``deletables`` ``Vec``; the caller makes the three clones of ``leaves`` (hashbrown
    clones keep the bucket count). The members of ``runs`` (dead childless leaves of this
    graph, each with its run's parents) are walked among the leaves in id order, as exact
    mode walks its nodes. ``status`` maps node id -> 0 unknown, 1 unavailable, 2 useful
    (:data:`WALK_OBSERVER` receives it)."""

    UNKNOWN, UNAVAILABLE, USEFUL = 0, 1, 2

    def __init__(self, memory, leaves, useful, runs=()):
        sim = memory.server.sim
        self.heap = sim.heap
        self.tables = sim.tables
        self.parent_bytes = sim.layout.parent_bytes
        self.useful = useful
        nodes = memory.nodes
        if runs:
            members = {member: (_DEAD, run.parents) for run in runs for member in run.ids}
            nodes = {**nodes, **members}
            leaves = sorted([*leaves, *members])
        self.nodes = nodes
        self.leaves = leaves
        self.statuses_table = memory.statuses_table
        self.status = {}
        # the index of settled nodes, which keeps the tape of the last walk's recursion
        # (none with runs: their members are walked among the leaves)
        self.settled = memory.settled if not runs else None
        #: the heap events of ``unavailable_propagation`` so far, as a :class:`Tape` keeps them
        self.events = []
        #: the tape replayed, and how many nodes had a status before its nodes got theirs
        self.replayed = None
        #: the ids of the useful tapes replayed (:func:`_replay_useful`): useful, though
        #: ``status`` still holds what the unavailable pass gave them (:meth:`value`)
        self.tagged_runs = []

    def value(self, node_id) -> int:
        """``statuses.get(node_id)`` during the useful pass: a node a replayed useful tape
        tagged is useful (its entry in :attr:`status` is not rewritten: :func:`_replay_useful`)."""
        value = self.status[node_id]
        if value == self.UNKNOWN:
            for ids in self.tagged_runs:
                if node_id in ids:
                    return self.USEFUL
        return value

    def statuses(self) -> dict:
        """:attr:`status` with the replayed useful tapes' nodes useful, as burn's
        ``statuses`` map ends."""
        for ids in self.tagged_runs:
            self.status.update(dict.fromkeys(ids, self.USEFUL))
        self.tagged_runs = []
        return self.status

    def set_status(self, node_id, value) -> None:
        status = self.status
        if node_id in status:
            self.statuses_table.reinsert(len(status))
        else:
            status[node_id] = value
            self.statuses_table.fit(len(status))
        status[node_id] = value

    def cloned_parents(self, node_id):
        """``nodes.get(id).cloned()``: (the parents, their clone's block)."""
        entry = self.nodes.get(node_id)
        parents = entry[1] if entry is not None else ()
        nbytes = self.parent_bytes * len(parents)
        return parents, (nbytes, self.heap.alloc(nbytes) if nbytes else None)

    def drop_clone(self, block) -> None:
        if block[0]:
            self.heap.free(*block)

    def kept(self, parents) -> list:
        """The closure's filter: a leaf parent only while it is in ``nodes``."""
        nodes = self.nodes
        return [pid for pid, is_leaf in parents if not is_leaf or pid in nodes]

    def _enter(self, node_id, frames):
        """Enter ``unavailable_propagation(node_id)``: its status if known (an absent
        node: unavailable), else None with a frame pushed to walk its parents (its
        clone's bytes, block and place in :attr:`events`)."""
        if node_id in self.status:
            return self.status[node_id]
        if node_id not in self.nodes:
            self.set_status(node_id, self.UNAVAILABLE)
            return self.UNAVAILABLE
        parents, (nbytes, handle) = self.cloned_parents(node_id)
        frames.append([node_id, parents, 0, self.UNKNOWN, (nbytes, handle, len(self.events))])
        if nbytes:
            self.events.append(nbytes)
        return None

    def _replayed(self, tape) -> bool:
        """Where ``tape`` (the recursion from a settled node, recorded by an earlier
        backward) is what the recursion would do now, make its heap events and give its
        nodes their status (available); returns whether it did. It is when every node of
        it is still settled (in ``nodes``, its parents unchanged: the index holds), none
        has a status yet, and the statuses table takes them all without growing."""
        status, nodes = self.status, tape.nodes
        if len(status) + len(nodes) > self.statuses_table.cap:
            return False
        ids = self.settled.ids
        if not tape.checked:
            if not ids.issuperset(nodes if tape.unchecked is None else tape.unchecked):
                self.settled.tape = None
                return False
            tape.checked = True
        # its nodes are settled: a status given to no settled node meets none of them
        if (len(status) >= len(nodes) or any(n in ids for n in status)) \
                and not status.keys().isdisjoint(nodes):
            return False
        self.heap.nested(tape.events)
        self.events.extend(tape.events)
        if tape.statuses is None:
            self.replayed = tape, len(status)
            status.update(dict.fromkeys(nodes, self.UNKNOWN))
            return True
        # the tape's nodes first, the few statuses set before them after (the map's
        # order is not burn's, only which nodes have a status and what it is; the
        # tape's nodes stay one slice of it: ``replayed``)
        before = status.copy()
        status.clear()
        status.update(tape.statuses)
        status.update(before)
        self.replayed = tape, 0
        return True

    def unavailable_propagation(self, leaf) -> None:
        """burn's recursion from ``leaf`` (:meth:`_recurse`), or the tape of it that the
        backward before kept (:meth:`_replayed`); the recursion from the first leaf is
        kept as the next backward's tape."""
        settled, status, events = self.settled, self.status, self.events
        tape = settled.tape if settled is not None else None
        first, start = not status, len(events)
        if tape is None or leaf != tape.leaf or not self._replayed(tape):
            self._recurse(leaf, tape)
        if first and settled is not None and status.get(leaf) == self.UNKNOWN:
            # the recursion from the first leaf met no status set before it: the next
            # backward may replay it from there, once the leaf is settled
            nodes = tuple(status)
            unchecked = None
            if self.replayed is not None:
                # the replayed tape's nodes got their status together, none had one
                base, at = self.replayed
                unchecked = nodes[:at] + nodes[at + len(base.nodes):]
            settled.tape = Tape(leaf, events[start:], nodes, unchecked, status.copy())

    def _recurse(self, leaf, tape) -> None:
        """burn's recursion, with an explicit stack of frames (:meth:`_enter`,
        :meth:`cloned_parents`, :meth:`drop_clone` and :meth:`set_status` written out: the
        walk visits every node its leaves reach, on every backward, but for the settled
        nodes of ``tape``, replayed where they are met)."""
        nodes, status, events = self.nodes, self.status, self.events
        heap_alloc, heap_free = self.heap.alloc, self.heap.free
        table, parent_bytes = self.statuses_table, self.parent_bytes
        unknown, unavailable = self.UNKNOWN, self.UNAVAILABLE
        taped = tape.leaf if tape is not None else None
        frames = []
        result = self._enter(leaf, frames)
        while frames:
            frame = frames[-1]
            node_id, parents, at, value, block = frame
            if result == unavailable:
                frame[3] = value = unavailable
            if at < len(parents):
                frame[2] = at + 1
                pid, is_leaf = parents[at]
                result = None
                if pid not in nodes:
                    if not is_leaf:              # (a leaf absent from nodes is skipped)
                        result = status.get(pid)
                        if result is None:       # an absent parent: unavailable
                            status[pid] = result = unavailable
                            if len(status) > table.cap:
                                table.fit(len(status))
                    continue
                if pid in status:
                    result = status[pid]
                    continue
                if pid == taped and self._replayed(tape):
                    result = unknown
                    continue
                grand = nodes[pid][1]
                nbytes = parent_bytes * len(grand)
                if nbytes:
                    frames.append([pid, grand, 0, unknown,
                                   (nbytes, heap_alloc(nbytes), len(events))])
                    events.append(nbytes)
                else:
                    frames.append([pid, grand, 0, unknown, (0, None, 0)])
                continue
            frames.pop()
            if block[0]:
                heap_free(block[0], block[1])
                events.append(block[2] - len(events))
            if node_id in status:
                if len(status) >= table.cap:
                    table.reinsert(len(status))
            else:
                status[node_id] = value
                if len(status) > table.cap:
                    table.fit(len(status))
            status[node_id] = value
            result = value

    def useful_propagation(self, leaves_clone) -> None:
        """``to_explore`` is a clone of the leaves set; ``to_tag_useful`` is popped first
        (the sets' inserts, the clones and :meth:`set_status` written out)."""
        tables = self.tables
        explored, tagged, to_tag = (_TrackedSet(tables.key_set()) for _ in range(3))
        to_explore = _TrackedSet(leaves_clone, self.leaves)
        nodes, status = self.nodes, self.status
        heap_alloc, heap_free = self.heap.alloc, self.heap.free
        table, parent_bytes = self.statuses_table, self.parent_bytes
        useful = self.USEFUL
        heappush = heapq.heappush
        taping = _UsefulTaping(self, tagged, to_tag)
        while True:
            if to_tag.items:
                node_id, value = to_tag.pop(), useful
                if taping.replayed(node_id):
                    continue
            elif to_explore.items:
                node_id, value = taping.explored(to_explore.pop())
            else:
                break
            seen, queue = (tagged, to_tag) if value == useful else (explored, to_explore)
            seen_items, seen_table = seen.items, seen.table
            if node_id in seen_items:
                if len(seen_items) >= seen_table.cap:
                    seen_table.reinsert(len(seen_items))
            else:
                heappush(seen._order, node_id)
                seen_items.add(node_id)
                if len(seen_items) > seen_table.cap:
                    seen_table.fit(len(seen_items))
            entry = nodes.get(node_id)
            parents = entry[1] if entry is not None else ()
            nbytes = parent_bytes * len(parents)
            block = heap_alloc(nbytes) if nbytes else None
            queue_items, queue_table, queue_order = queue.items, queue.table, queue._order
            pushed = len(queue_items)
            for pid, is_leaf in parents:
                if (is_leaf and pid not in nodes) or pid in seen_items or pid in queue_items:
                    continue
                heappush(queue_order, pid)
                queue_items.add(pid)
                if len(queue_items) > queue_table.cap:
                    queue_table.fit(len(queue_items))
            if nbytes:
                heap_free(nbytes, block)
            if taping.visits is not None:
                taping.visit(node_id, nbytes, len(queue_items) - pushed, node_id in status)
            if node_id in status:
                if len(status) >= table.cap:
                    table.reinsert(len(status))
            else:
                status[node_id] = value
                if len(status) > table.cap:
                    table.fit(len(status))
            status[node_id] = value
        taping.close()
        for pass_set in (to_explore, to_tag, tagged, explored):
            pass_set.table.drop()

    def identify_leaves_and_deletables(self, leaf, new_leaves, deletables) -> None:
        """One leaf's walk: stop at a useful node (a new leaf), else list it for deletion
        and push its parents."""
        visited = _TrackedSet(self.tables.key_set())
        to_visit = RustVec(self.heap, deletables.elem, capacity=1)
        stack = [leaf]
        while stack:
            node_id = stack.pop()
            to_visit.len = len(stack)
            visited.insert(node_id)
            if node_id in self.useful:
                new_leaves.insert(node_id)
                continue
            deletables.push()
            parents, block = self.cloned_parents(node_id)
            for pid in self.kept(parents):
                if pid not in visited:
                    stack.append(pid)
                    to_visit.push()
            self.drop_clone(block)
        to_visit.drop()
        visited.table.drop()


def _set_insert(items, table, node_id) -> None:
    """``HashSet::insert``: a new id grows a full table; a present one too (the insert
    reserves a slot before it looks the key up: :meth:`RawTable.reinsert`)."""
    if node_id in items:
        table.reinsert(len(items))
    else:
        items.add(node_id)
        table.fit(len(items))


class UsefulTape:
    """The useful pass's walk from ``root``, a useful node the pass met with nothing
    tagged or queued to tag: every node it tagged (``root``'s ancestors through kept
    parents) in its order, each visit's parents clone (``nbytes``, 0: none) and how many
    ids it queued (``pushed``), recorded by one backward for the next one's
    (:meth:`_UsefulTaping.replayed`). Not part of burn, as :class:`Tape`: ``to_tag``
    pops its smallest id first, so from a settled node whose ancestors none of the
    pass's sets holds yet, while every other id queued is larger than all of them, the
    walk tags the same nodes in the same order and queues the same ids, every backward;
    only the sets' sizes (where their tables grow) differ. Kept only where every node of
    it is settled (:mod:`sim.burn.graph.settled`: none can lose or change a parent
    while the index holds)."""

    __slots__ = ("root", "ids", "idset", "top", "nbytes", "pushed")

    def __init__(self, root, ids, nbytes, pushed, tapes=(), walked=None):
        self.root = root
        self.ids = ids
        if tapes and walked:
            # the tapes replayed in it and the visits walked (their sets' union, their
            # largest id: one pass over the walked visits, not over every id)
            first = tapes[0]
            self.idset = first.idset.union(*(t.idset for t in tapes[1:]),
                                           (v[0] for v in walked))
            self.top = max(max(t.top for t in tapes), max(v[0] for v in walked))
        else:
            self.idset = frozenset(ids)
            self.top = max(ids)
        self.nbytes = nbytes
        self.pushed = pushed


class _UsefulTaping:
    """One useful pass's :class:`UsefulTape` s: the walk from a useful node met with
    ``to_tag`` and ``tagged`` empty recorded until ``to_tag`` is empty again (:meth:`open`,
    :meth:`visit`, :meth:`close`: kept in the settled index), and the index's tape replayed
    where its root is popped again (:meth:`replayed`). Only where a glibc arena places
    the blocks and the graph's settled index holds."""

    def __init__(self, passes, tagged, to_tag):
        self.passes = passes
        self.tagged, self.to_tag = tagged, to_tag
        settled = passes.settled
        self.settled = settled
        self.tape = settled.useful if settled is not None else None
        #: the tape being recorded: (root, its pieces: lists of walked visits ``(id,
        #: nbytes, pushed)`` and the tapes replayed among them, [every node had a status])
        self.visits = None

    def explored(self, node_id) -> tuple:
        """``(node_id, its value)`` for the useful pass, ``node_id`` just popped from
        ``to_explore`` (``to_tag`` is empty): a useful one opens a tape where nothing is
        tagged yet."""
        self.close()
        passes = self.passes
        value = passes.value(node_id)
        if value == passes.UNKNOWN and passes.nodes[node_id][0].strong > 1:
            value = passes.USEFUL
            if self.settled is not None and not self.tagged.items:
                self.visits = (node_id, [], [True])
        return node_id, value

    def visit(self, node_id, nbytes, pushed, known) -> None:
        """One walked visit of the tape being recorded."""
        walked = self.visits[1]
        if not walked or walked[-1] is None:
            walked.append([])
        walked[-1].append((node_id, nbytes, pushed))
        if not known:
            self.visits[2][0] = False

    def close(self) -> None:
        """The tape being recorded is complete (``to_tag`` is empty): kept where every
        node of it has a status and is settled (none can change while the index holds;
        a replayed part's were when it was recorded)."""
        if self.visits is None:
            return
        root, pieces, all_known = self.visits
        self.visits = None
        walked = [v for piece in pieces if type(piece) is list for v in piece]
        if (not all_known[0] or not pieces or type(pieces[0]) is not list
                or pieces[0][0][0] != root
                or not self.settled.ids.issuperset(v[0] for v in walked)):
            return
        ids, sizes, pushes, tapes = [], [], [], []
        for piece in pieces:
            if type(piece) is list:
                ids.extend(v[0] for v in piece)
                sizes.append(np.array([v[1] for v in piece], dtype=np.int64))
                pushes.append(np.array([v[2] for v in piece], dtype=np.int64))
            elif piece is not None:
                ids.extend(piece.ids)
                sizes.append(piece.nbytes)
                pushes.append(piece.pushed)
                tapes.append(piece)
        self.settled.useful = UsefulTape(root, tuple(ids), np.concatenate(sizes),
                                         np.concatenate(pushes), tapes, walked)

    def replayed(self, node_id) -> bool:
        """Where the index's tape starts at ``node_id`` (just popped from ``to_tag``) and
        holds now, its walk made (:func:`_replay_useful`); returns whether it was."""
        tape = self.tape
        if tape is None or node_id != tape.root:
            return False
        passes = self.passes
        if passes.heap._arena is None:
            return False
        queued = self.to_tag.items
        if (not tape.idset.isdisjoint(self.tagged.items)
                or (queued and min(queued) <= tape.top)
                or not passes.status.keys() >= tape.idset):
            return False
        _replay_useful(passes, tape, self.tagged, self.to_tag)
        if self.visits is not None:
            self.visits[1].append(tape)
            self.visits[1].append(None)     # the visits walked after it: a new piece
        return True


def _replay_useful(passes, tape, tagged, to_tag) -> None:
    """The heap events and table growths of ``tape``'s walk (its root popped from
    ``to_tag``), in the walk's order: each visit's ``tagged`` insert, parents clone,
    ``to_tag`` pushes, and ``statuses`` reinsert (every node has a status: the first
    visit's grows a full table); the clones between two growths as one
    :meth:`~sim.platform.heap.Heap.pairs`. Then the sets as the walk leaves them; its
    nodes' statuses are useful through :meth:`_BlockPasses.value` (no entry rewritten)."""
    heap, status = passes.heap, passes.status
    sizes, pushed = tape.nbytes, tape.pushed
    seen, queue, statuses = tagged.table, to_tag.table, passes.statuses_table
    t0, n = len(tagged.items), len(sizes)
    # the queue's length before each visit's pushes (each visit but the first pops one)
    before = len(to_tag.items) + np.concatenate(([0], np.cumsum(pushed - 1)[:-1]))
    # the queue's longest so far after each visit: the first visit it outgrows a capacity
    # at (none before ``done`` outgrew the capacity the visit before it left)
    longest = np.maximum.accumulate(before + pushed)
    done = 0
    while True:
        grows = [max(done, seen.cap - t0), n]      # the tagged set's next insert past cap
        past = int(np.searchsorted(longest, queue.cap, side="right"))
        if past < n:
            grows.append(max(done, past))
        if done == 0 and len(status) >= statuses.cap:
            grows.append(0)
        at = min(grows)
        if at >= n:
            break
        heap.pairs(sizes[done:at])
        _grown_visit(passes, at, int(sizes[at]), int(before[at]), int(pushed[at]), t0,
                     seen, queue)
        done = at + 1
    heap.pairs(sizes[done:])
    ids = tape.ids
    passes.tagged_runs.append(tape.idset)      # useful: :meth:`_BlockPasses.value`
    tagged.items.update(tape.idset)     # (a set's table: no id hashed again)
    tagged._order.extend(ids)      # (a seen set: never popped, its order never read)


def _grown_visit(passes, at, nbytes, queued, count, t0, seen, queue) -> None:
    """Visit ``at`` of a replayed :class:`UsefulTape`, where a table grows: its events
    one by one (``queued``: ``to_tag``'s length before its ``count`` pushes)."""
    heap = passes.heap
    if t0 + at + 1 > seen.cap:
        seen.fit(t0 + at + 1)
    block = heap.alloc(nbytes) if nbytes else None
    for length in range(queued + 1, queued + count + 1):
        if length > queue.cap:
            queue.fit(length)
    if nbytes:
        heap.free(nbytes, block)
    status, statuses = passes.status, passes.statuses_table
    if at == 0 and len(status) >= statuses.cap:
        statuses.reinsert(len(status))
