//! sizeof: sizes and alignments of the bookkeeping types, read directly where burn
//! makes them public (NodeId) and otherwise from stand-ins with the same field types
//! and order ("reconstructed"), plus the allocation sizes of the containers that
//! burn-autodiff uses, measured with the allocator's trace mode: first-insert and
//! growth allocations of std HashMap/HashSet (RandomState) and hashbrown 0.16
//! HashSet (default hasher, the locator's `keys` values), and BTreeMap node sizes for
//! ascending NodeId keys (the locator's `graphs` and `keys` maps).
//!
//! Rows: experiment=sizeof, variant=<type>, metric=size_of|align_of (B) for layouts;
//! experiment=sizeof-alloc, variant=<container>, x=<len after the insert>,
//! metric=alloc_bytes|free_bytes for every allocation event during growth, and
//! metric=allocs_total (blocks live) at the end.

use crate::Opts;
use burn_autodiff::NodeId;
use burn_probes::alloc::{self, EventKind};
use burn_probes::csv::Sink;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Debug;
use std::hint::black_box;
use std::mem::{align_of, size_of};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize};

// ---- reconstructed stand-ins (same field types and order as burn-autodiff 0.22.1) ----

/// alloc::sync::ArcInner<T> (repr(C): strong, weak, data).
#[allow(dead_code)]
#[repr(C)]
struct ArcInner<T> {
    strong: AtomicUsize,
    weak: AtomicUsize,
    data: T,
}

/// graph::Parent { id: NodeId, is_leaf: bool }
#[allow(dead_code)]
#[derive(Clone)]
struct Parent {
    id: NodeId,
    is_leaf: bool,
}

#[allow(dead_code)]
enum Requirement {
    Grad,
    GradInBackward,
    None,
}

#[allow(dead_code)]
enum ComputingProperty {
    ComputeBound,
    MemoryBound { retro_forward: Arc<dyn Debug + Send + Sync> },
    Ambiguous,
}

/// graph::Node (client: GraphMutexClient is a ZST; distributed_params: Option<DistributedParams { param_id: ParamId }>)
#[allow(dead_code)]
struct Node {
    parents: Vec<Parent>,
    order: usize,
    id: NodeId,
    requirement: Requirement,
    properties: ComputingProperty,
    client: (),
    distributed_params: Option<burn::module::ParamId>,
}

/// ops::base::Ops<(), 2> inside UntrackedOpsStep<2>: [Option<NodeRef>; 2], NodeRef, ()
#[allow(dead_code)]
struct UntrackedOpsStep2 {
    parents: [Option<Arc<Node>>; 2],
    node: Arc<Node>,
    state: (),
}

/// checkpoint::builder::CheckpointerBuilder { explicit_actions: Vec<_>, backup_actions: Vec<_> }
#[allow(dead_code)]
struct CheckpointerBuilder {
    explicit_actions: Vec<[usize; 3]>,
    backup_actions: Vec<[usize; 3]>,
}

#[allow(dead_code)]
enum NodeMemoryStatus {
    Useful,
    Unavailable,
    Unknown,
}

/// runtime::memory_management::GraphMemoryManagement (with the field the drop-release
/// patch adds when the probes are built against it: build.rs, `cfg(burn_patch)`)
#[allow(dead_code)]
struct GraphMemoryManagement {
    nodes: HashMap<Arc<NodeId>, Vec<Parent>>,
    leaves: HashSet<NodeId>,
    statuses: HashMap<NodeId, NodeMemoryStatus>,
    #[cfg(burn_patch = "drop-release")]
    children: HashMap<NodeId, usize>,
}

/// The note of the stand-ins that hold GraphMemoryManagement: which fields it has.
#[cfg(not(burn_patch = "drop-release"))]
const GMM_FIELDS: &str = "3 std hash tables";
#[cfg(burn_patch = "drop-release")]
const GMM_FIELDS: &str = "3 std hash tables + drop-release's children map";

/// runtime::server::AutodiffServer
#[allow(dead_code)]
struct AutodiffServer {
    steps: HashMap<NodeId, Box<dyn Debug + Send>>,
    actions_builder: HashMap<NodeId, CheckpointerBuilder>,
    memory_management: GraphMemoryManagement,
}

/// runtime::graph::Graph { origin, state: parking_lot::Mutex<GraphState { server }> };
/// parking_lot::RawMutex is one AtomicU8.
#[allow(dead_code)]
struct PlMutex<T> {
    raw: AtomicU8,
    data: core::cell::UnsafeCell<T>,
}
#[allow(dead_code)]
struct Graph {
    origin: NodeId,
    state: PlMutex<AutodiffServer>,
}

pub fn run(_opts: &Opts, sink: &mut Sink) {
    let mut lay = |name: &str, size: usize, align: usize, note: &str| {
        sink.row("sizeof", name, "", 0, "", "size_of", size, "B", note);
        sink.row("sizeof", name, "", 0, "", "align_of", align, "B", "");
    };
    macro_rules! l {
        ($t:ty, $name:expr, $note:expr) => {
            lay($name, size_of::<$t>(), align_of::<$t>(), $note)
        };
    }
    l!(NodeId, "burn_autodiff::NodeId", "public type, read directly");
    l!(Arc<NodeId>, "Arc<NodeId>", "handle (NodeRefCount)");
    l!(ArcInner<NodeId>, "ArcInner<NodeId>", "heap block of Arc<NodeId> (NodeRefCount): strong+weak+data");
    l!(Parent, "Parent", "reconstructed: { id: NodeId, is_leaf: bool }");
    l!(Option<burn::module::ParamId>, "Option<ParamId>", "Node.distributed_params stand-in (DistributedParams { param_id: ParamId })");
    l!(ComputingProperty, "ComputingProperty", "reconstructed enum with Arc<dyn RetroForward>");
    l!(Node, "Node", "reconstructed graph::Node");
    l!(ArcInner<Node>, "ArcInner<Node>", "reconstructed: heap block of NodeRef = Arc<Node>");
    l!(Box<dyn Debug + Send>, "Box<dyn Step>", "StepBoxed handle (fat pointer)");
    l!(UntrackedOpsStep2, "UntrackedOpsStep<2>", "reconstructed: boxed step of an untracked binary op (heap block size)");
    l!(CheckpointerBuilder, "CheckpointerBuilder", "reconstructed: two Vecs (no heap while empty)");
    l!(HashMap<NodeId, Box<dyn Debug + Send>>, "std HashMap<NodeId;StepBoxed>", "RandomState hasher; AutodiffServer.steps");
    l!(HashSet<NodeId>, "std HashSet<NodeId>", "RandomState; GraphMemoryManagement.leaves");
    l!(hashbrown::HashSet<NodeId>, "hashbrown 0.16 HashSet<NodeId>", "default hasher (foldhash); GraphLocator.keys values");
    l!(BTreeMap<NodeId, Arc<Graph>>, "BTreeMap<NodeId;Arc<Graph>>", "GraphLocator.graphs (root pointer + len)");
    l!(GraphMemoryManagement, "GraphMemoryManagement", &format!("reconstructed: {GMM_FIELDS}"));
    l!(AutodiffServer, "AutodiffServer",
        &format!("reconstructed: 2 std hash tables + GraphMemoryManagement ({GMM_FIELDS})"));
    l!(Graph, "Graph",
        &format!("reconstructed: origin + parking_lot Mutex<GraphState{{server}}> (GraphMemoryManagement: {GMM_FIELDS})"));
    l!(ArcInner<Graph>, "ArcInner<Graph>", &format!("reconstructed: heap block of Arc<Graph> ({GMM_FIELDS})"));
    l!((NodeId, Box<dyn Debug + Send>), "bucket (NodeId;StepBoxed)", "hash-table slot of steps");
    l!((NodeId, CheckpointerBuilder), "bucket (NodeId;CheckpointerBuilder)", "hash-table slot of actions_builder");
    l!((Arc<NodeId>, Vec<Parent>), "bucket (NodeRefCount;Vec<Parent>)", "hash-table slot of nodes");
    l!((NodeId, NodeMemoryStatus), "bucket (NodeId;NodeMemoryStatus)", "hash-table slot of statuses");

    // ---- container allocation sizes, measured ----
    let mut grow = |name: &str, note: &str, n: usize, f: &mut dyn FnMut(usize)| {
        // f(i) performs the i-th insert (1-based) on a container created before.
        let mut first = true;
        let mut live_blocks = 0i64;
        for i in 1..=n {
            let (_, ev, _) = alloc::trace(|| f(i));
            for e in ev {
                let (metric, v, extra) = match e.kind {
                    EventKind::Alloc => {
                        live_blocks += 1;
                        ("alloc_bytes", e.size, String::new())
                    }
                    EventKind::Free => {
                        live_blocks -= 1;
                        ("free_bytes", e.size, String::new())
                    }
                    EventKind::Realloc => ("alloc_bytes", e.size, format!("realloc from {}", e.old_size)),
                };
                let mut nn = if first { note.to_string() } else { String::new() };
                if e.align != 8 {
                    if !nn.is_empty() {
                        nn.push_str("; ");
                    }
                    nn.push_str(&format!("align={}", e.align));
                }
                if !extra.is_empty() {
                    if !nn.is_empty() {
                        nn.push_str("; ");
                    }
                    nn.push_str(&extra);
                }
                first = false;
                sink.row("sizeof-alloc", name, "", i, "len", metric, v, "B", &nn);
            }
        }
        sink.row("sizeof-alloc", name, "end", n, "len", "live_blocks", live_blocks, "blocks",
            "blocks this container holds after the inserts (allocs - frees during them)");
    };

    let mut m1: HashMap<NodeId, Box<dyn Debug + Send>> = HashMap::new();
    grow("std HashMap<NodeId;StepBoxed>", "AutodiffServer.steps: insert (NodeId(i), Box<24 B step>); the box alloc (24 B) is part of each insert", 120,
        &mut |i| { m1.insert(NodeId { value: i as u64 }, Box::new([0usize; 3])); });
    black_box(&m1);
    let mut m2: HashMap<NodeId, CheckpointerBuilder> = HashMap::new();
    grow("std HashMap<NodeId;CheckpointerBuilder>", "AutodiffServer.actions_builder (empty builders: no heap of their own)", 120,
        &mut |i| { m2.insert(NodeId { value: i as u64 }, CheckpointerBuilder { explicit_actions: Vec::new(), backup_actions: Vec::new() }); });
    black_box(&m2);
    let mut m3: HashMap<Arc<NodeId>, Vec<Parent>> = HashMap::new();
    grow("std HashMap<NodeRefCount;Vec<Parent>>", "GraphMemoryManagement.nodes with empty parent vecs (an untracked op); each insert also allocates its Arc<NodeId> key (24 B) inside the trace", 120,
        &mut |i| {
            m3.insert(Arc::new(NodeId { value: i as u64 }), Vec::new());
        });
    black_box(&m3);
    let mut m4: HashSet<NodeId> = HashSet::new();
    grow("std HashSet<NodeId>", "GraphMemoryManagement.leaves", 120, &mut |i| { m4.insert(NodeId { value: i as u64 }); });
    black_box(&m4);
    let mut m5: HashMap<NodeId, NodeMemoryStatus> = HashMap::new();
    grow("std HashMap<NodeId;NodeMemoryStatus>", "GraphMemoryManagement.statuses", 120, &mut |i| { m5.insert(NodeId { value: i as u64 }, NodeMemoryStatus::Useful); });
    black_box(&m5);
    let mut m6: hashbrown::HashSet<NodeId> = hashbrown::HashSet::new();
    grow("hashbrown 0.16 HashSet<NodeId>", "GraphLocator.keys values (default hasher)", 120, &mut |i| { m6.insert(NodeId { value: i as u64 }); });
    black_box(&m6);
    // BTreeMaps with ascending keys, as the locator sees them (NodeIds only grow).
    let g = Arc::new(());
    let mut b1: BTreeMap<NodeId, Arc<()>> = BTreeMap::new();
    grow("BTreeMap<NodeId;Arc<Graph>>", "GraphLocator.graphs, ascending keys; value is a thin Arc pointer like Arc<Graph>", 400,
        &mut |i| { b1.insert(NodeId { value: i as u64 }, g.clone()); });
    black_box(&b1);
    let mut b2: BTreeMap<NodeId, hashbrown::HashSet<NodeId>> = BTreeMap::new();
    grow("BTreeMap<NodeId;hashbrown HashSet<NodeId>>", "GraphLocator.keys, ascending keys, empty sets (new_graph inserts HashSet::new(): no heap)", 400,
        &mut |i| { b2.insert(NodeId { value: i as u64 }, hashbrown::HashSet::new()); });
    black_box(&b2);
}
