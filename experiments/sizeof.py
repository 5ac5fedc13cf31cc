"""sizeof: size_of of burn-autodiff 0.22.1's bookkeeping types, as the profile's [layout] implies them.

Counterpart of `burn-probes sizeof` (experiments/probes, src/sizeof.rs), which
prints `size_of` / `align_of` of `burn_autodiff::NodeId` and of stand-ins with
the same field types and order as the private types. This workload simulates
nothing: it derives each size from the profile's ``[layout]`` table as the policy's
mirror classes lay it out (``sim.layout``: ``GraphMemoryManagement.layout_of`` of the
profile's layout, so a fix whose struct has a field more, drop-release's ``children``
map, predicts the larger ``GraphMemoryManagement``, ``AutodiffServer``, ``Graph`` and
``ArcInner<Graph>``: the numbers the structural heap model allocates), so comparing it
with the probe checks the byte model type by type. The probe's stand-ins of burn's
private structs take a patch's fields when built against it (``sim measure --patch``:
burn-probes/build.rs). Types the layout does not name (fat pointers, the std/hashbrown
table headers, ...) are left unpredicted.
"""

EXPERIMENT = "sizeof"
X_UNITS = {"sizeof": ""}
SWEEP = False  # a replica of a Linux probe: run when named, not in the default sweep
VARIANTS = (
    "burn_autodiff::NodeId", "Arc<NodeId>", "ArcInner<NodeId>", "Parent", "Option<ParamId>",
    "ComputingProperty", "Node", "ArcInner<Node>", "Box<dyn Step>", "UntrackedOpsStep<2>",
    "CheckpointerBuilder", "std HashMap<NodeId;StepBoxed>", "std HashSet<NodeId>",
    "hashbrown 0.16 HashSet<NodeId>", "BTreeMap<NodeId;Arc<Graph>>", "GraphMemoryManagement",
    "AutodiffServer", "Graph", "ArcInner<Graph>", "bucket (NodeId;StepBoxed)",
    "bucket (NodeId;CheckpointerBuilder)", "bucket (NodeRefCount;Vec<Parent>)",
    "bucket (NodeId;NodeMemoryStatus)",
)
PARAMS = {}

ARC_COUNTS = 16  # strong + weak counts of an ArcInner
BTREE_CAPACITY = 11
BTREE_LEAF_HEADER = 16  # parent pointer, parent_idx, len (padded)
MUTEX_RAW = 8  # Graph.state's parking_lot RawMutex (one AtomicU8), padded to the server's alignment
SERVER_MAPS = 2  # AutodiffServer's own maps before its memory management: steps, actions_builder


def sizes(layout):
    """type name -> size_of in bytes, from the profile's [layout]."""
    keys_leaf_values = layout.keys_leaf_bytes - BTREE_LEAF_HEADER - BTREE_CAPACITY * layout.node_id_bytes
    return {
        "burn_autodiff::NodeId": layout.node_id_bytes,
        "ArcInner<NodeId>": layout.arc_node_id_bytes,
        "Parent": layout.parent_bytes,
        "Node": layout.arc_node_bytes - ARC_COUNTS,
        "ArcInner<Node>": layout.arc_node_bytes,
        # the boxed step of an untracked binary op: 2 x Option<NodeRef> + 8 (sim.burn.ops)
        "UntrackedOpsStep<2>": 2 * layout.option_node_ref_bytes + 8,
        # Graph { origin, state: Mutex<GraphState { server: AutodiffServer { steps,
        # actions_builder, memory_management } }> }: graph_arc_bytes holds the fields of
        # the policy's GraphMemoryManagement (its layout_of)
        "Graph": layout.graph_arc_bytes - ARC_COUNTS,
        "ArcInner<Graph>": layout.graph_arc_bytes,
        "AutodiffServer": server_bytes(layout),
        "GraphMemoryManagement": server_bytes(layout) - SERVER_MAPS * layout.hash_map_bytes,
        "hashbrown 0.16 HashSet<NodeId>": keys_leaf_values // BTREE_CAPACITY,
        "bucket (NodeId;StepBoxed)": layout.steps_slot_bytes,
        "bucket (NodeId;CheckpointerBuilder)": layout.actions_slot_bytes,
        "bucket (NodeRefCount;Vec<Parent>)": layout.nodes_slot_bytes,
        "bucket (NodeId;NodeMemoryStatus)": layout.statuses_slot_bytes,
    }


def server_bytes(layout):
    """size_of AutodiffServer: the Graph's struct less its origin and the mutex word."""
    return layout.graph_arc_bytes - ARC_COUNTS - layout.node_id_bytes - MUTEX_RAW


def run(sim, variant):
    size = sizes(sim.layout).get(variant)
    if size is not None:  # the other types are not in the byte model: unpredicted
        sim.record(0, "", "size_of", size)
    yield sim.tick()
