"""Profiles: the calibrated parameters of one platform, read from ``models/*.toml``.

A profile has these tables; every key is required, typed and documented in the
file itself (unit, meaning, and whether it is derived from a struct layout,
taken from burn/cubecl source, or fitted by ``sim calibrate``):

``[process]``   platform-wide constants (allocator classes, baseline RSS);
``[code]``      resident text of the binary per code path, faulted in on first execution;
``[layout]``    sizes in bytes of burn 0.22.1's bookkeeping structures;
``[time]``      nanoseconds per unit of bookkeeping work;
``[backend.flex]``, ``[backend.metal]``  per inner backend: primitive size,
                compute rates.
``[pytorch]``   costs of the ``pytorch`` reference policy's runtime.
``[sysfs]``     the host's /sys/devices/system/cpu as gemm-common reads it on Linux
                (``sim.platform.gemm_cache``); empty lists where it is not read.

Two more tables describe the profile rather than the platform (:data:`RECORDS`; they
are no parameters): ``[meta]`` (required: ``platform``, ``burn_version``),
``[calibration]`` (optional, written by ``sim calibrate``: ``fitted``, ``points`` and
``fitted_on``, the points each parameter's last fit used) and
``[host]`` (optional: the machine the profile describes, :mod:`sim.platform.host`).

:func:`load_profile` validates everything and raises :class:`ProfileError`
naming the file and the bad key: a missing or unknown table or key, a value of the
wrong type, a negative or non-finite number (TOML's ``inf`` and ``nan``).
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from types import SimpleNamespace

from ..platform.rss import ALLOCATOR_CLASSES
from ..errors import UserError, shown
from ..platform.host import HOST_KEYS
from ..paths import MODELS

__all__ = ["Profile", "ProfileError", "load_profile", "profile_names", "MODELS_DIR", "SCHEMA",
           "RECORDS"]

MODELS_DIR = MODELS

INT, FLOAT, STR, STRS = "int", "float", "str", "list of strings"
#: a list of numbers, and a list of such lists (a measured curve; empty: not measured)
FLOATS, FLOAT_ROWS = "list of numbers", "list of lists of numbers"
#: a table whose every value is a list of strings (optional: a profile may lack the key)
STRS_BY_KEY = "table of lists of strings"
#: keys a profile may leave out, read as empty lists where read (measured where a probe ran: the data
#: TLB's miss curves in the sweep's own order, ``sim calibrate --tlb`` with `order` rows), and
#: ``[calibration] quick_points`` (a record written before it was kept: not known)
OPTIONAL_EMPTY = frozenset({"sweep_tlb_order_reads", "sweep_tlb_order_reach",
                            "sweep_tlb_order_miss", "sweep_tlb_order_spacing", "quick_points"})
#: keys a profile may leave out, read as 0 (a profile written before the probe that measures
#: them existed: the mechanism is not charged, as in a profile that has it at 0)
OPTIONAL_ZERO = frozenset({"clock_read_ns", "report_wake_ns", "lift_ns"})

#: section -> key -> type. Every key is required; no other key is allowed.
SCHEMA = {
    "process": {
        "allocator": STR,            # one of sim.platform.rss.ALLOCATOR_CLASSES
        "baseline_rss_bytes": INT,   # RSS of the process before the workload
        "first_backward_bytes": INT,   # lazy global state created by the first backward
        "first_backward_blocks": INT,
        "l1d_bytes": INT,            # the host core's L1d: size in B (the sweep's cache model,
        "l1d_ways": INT,             #   sim.platform.timing; 0 = not modelled), associativity
        "l2_bytes": INT,             # the host core's L2 (sim.platform.l2_cache): size in B, 0 = not
        "l2_ways": INT,              #   modelled; its associativity
        "l3_bytes": INT,             # the L3 (or system level cache) the core reads through:
        "l3_ways": INT,              #   size in B, 0 = not modelled; associativity
        "dtlb_entries": INT,         # the core's last-level data TLB: 4-KiB page entries
        "dtlb_ways": INT,            #   (the sweep's TLB model; 0 = not modelled), ways
        "malloc_trim_threshold_bytes": INT,   # glibc-arena's mallopt settings (0: glibc's
        "malloc_mmap_threshold_bytes": INT,   #   default, with the dynamic thresholds);
        "malloc_top_pad_bytes": INT,          #   must be 0 for the other allocators
        "tls_dtor_bytes": INT,       # libc's record of a thread-local's destructor
    },
    "code": {                        # resident text per code path (sim.platform.rss.CODE_PATHS)
        "device_bytes": INT,
        "module_bytes": INT,
        "creation_bytes": INT,
        "elementwise_bytes": INT,
        "matmul_bytes": INT,
        "gemv_bytes": INT,         # gemm's matrix-vector kernels (a single-row matmul)
        "reduce_bytes": INT,
        "autodiff_bytes": INT,
        "backward_bytes": INT,
        "optimizer_bytes": INT,
    },
    "layout": {
        "group_width": INT,
        "arc_node_bytes": INT,
        "arc_node_id_bytes": INT,
        "parent_bytes": INT,
        "hash_map_bytes": INT,               # a std HashMap/HashSet struct (RawTable + RandomState)
        "graph_arc_bytes": INT,
        "root_step_bytes": INT,
        "option_node_ref_bytes": INT,
        "shape_bytes": INT,
        "option_node_id_bytes": INT,
        "node_id_bytes": INT,
        "scalar_bytes": INT,
        "action_bytes": INT,
        "dispatch_box_bytes": INT,
        "device_box_bytes": INT,             # an autodiff device's Box<DispatchDevice>
        "param_state_bytes": INT,            # a parameter's Arc<LazyInitState> (burn-core Param)
        "param_init_bytes": INT,             # a lazy parameter's boxed init closure ...
        "param_init_extra_bytes": INT,       # ... and the block it owns, freed at the first val()
        "optimizer_context_slot_bytes": INT,  # ModuleOptimizer.param_context slot
        "sgd_state_bytes": INT,              # the optimizer state's Arc block per parameter
        "adam_state_bytes": INT,
        "lr_group_bytes": INT,               # ModuleLearningRate's Vec<LrGroup> per optimizer step
        "grads_param_box_bytes": INT,        # GradientsParams' box of a gradient (align 64)
        "steps_slot_bytes": INT,
        "actions_slot_bytes": INT,
        "nodes_slot_bytes": INT,
        "leaves_slot_bytes": INT,
        "statuses_slot_bytes": INT,
        "key_set_slot_bytes": INT,
        "device_settings_slot_bytes": INT,        # burn-backend's device settings REGISTRY slot
        "device_settings_arc_bytes": INT,         # ... its Arc<OnceLock<DeviceSettings>> per device
        "device_settings_cache_slot_bytes": INT,  # ... and the thread-local LOCAL_CACHE slot
        "burn_config_arc_bytes": INT,   # burn-std's global Arc<BurnConfig>, loaded lazily
        "n_required_slot_bytes": INT,     # a backward's n_required map slot (and its clone's)
        "grads_slot_bytes": INT,          # the Gradients container's table slot
        "grads_registration_bytes": INT,  # Gradients' boxed DistributedGradientRegistration
        "grads_hook_bytes": INT,          # ... and the boxed on_register closure around it
        "thread_rng_bytes": INT,        # rand's ThreadRng, at a thread's first ParamId
        "block_on_cache_bytes": INT,    # futures-lite block_on's parker, at a thread's first sync read
        "optimizer_groups_bytes": INT,  # ModuleOptimizer's Vec<OptimizerGroup> of one group
        "optimizer_arc_bytes": INT,     # ... and the group's Arc<Sgd | Adam>
        "graphs_leaf_bytes": INT,
        "graphs_internal_bytes": INT,
        "keys_leaf_bytes": INT,
        "keys_internal_bytes": INT,
        "retro_arc_bytes": INT,
    },
    "time": {
        "register_ns": FLOAT,
        "register_parent_ns": FLOAT,
        "operand_node_ns": FLOAT,      # per tensor operand of an autodiff op (its node)
        "new_graph_ns": FLOAT,
        "merge_ns": FLOAT,
        "tape_step_ns": FLOAT,
        "backward_step_ns": FLOAT,     # per step run by a backward (the gradients container)
        "checkpoint_retrieve_ns": FLOAT,  # per saved tensor a backward step reads back
        "free_unavailable_node_ns": FLOAT,
        "drop_release_node_ns": FLOAT,
        "sweep_fixed_ns": FLOAT,
        "sweep_copy_entry_ns": FLOAT,
        "sweep_visit_ns": FLOAT,
        "scan_node_ns": FLOAT,
        "sweep_free_ns": FLOAT,
        "root_check_node_ns": FLOAT,   # per node read by free_unused_roots (no live handle)
        "sweep_l2_read_ns": FLOAT,     # ns more per sweep read that misses the L1d (an L2 hit),
        "sweep_l3_read_ns": FLOAT,     #   the L2 (an L3 hit)
        "sweep_dram_read_ns": FLOAT,   #   and the L3 (DRAM)
        "sweep_tlb_read_ns": FLOAT,    # ns more per sweep read whose page misses the data TLB
        "sweep_tlb_miss_reads": FLOATS,    # the data TLB's measured miss curves (sim.platform.
        "sweep_tlb_miss_reach": FLOAT_ROWS,  #   l2_cache.TlbMissCurve): reads per page of each,
        "sweep_tlb_miss": FLOAT_ROWS,      #   its pages read / entries, fraction of reads missing
        "sweep_tlb_order_reads": FLOATS,   # the same in the orphan sweep's own order and key
        "sweep_tlb_order_reach": FLOAT_ROWS,  # spacing (sweep-scan `order` rows; optional:
        "sweep_tlb_order_miss": FLOAT_ROWS,   #   missing or empty, the curves above)
        "sweep_tlb_order_spacing": FLOATS,  # the key layout (B per key) of each order curve,
                                            #   where measured on several (optional)
        "pop_scan_group_ns": FLOAT,    # PopNodeSet::pop's scan for the first full bucket
        "process_warmup_ns": FLOAT,
        "page_fault_ns": FLOAT,        # per page (platform page size) made resident
        "rehash_item_ns": FLOAT,       # per item a hash table's growth moves (rehashed, copied)
        "heap_page_write_ns": FLOAT,   # per heap page the arena's growth makes resident, beyond
                                       #   its fault: the small blocks carved from it written first
        "trim_cycle_ns": FLOAT,        # per trim of the heap's top: its brk cut and the brk
                                       #   growing the break again (two system calls)
        "trim_page_ns": FLOAT,         # per page a trim gives back (unmapped)
        "linear_call_ns": FLOAT,       # per Linear::forward beyond its ops (module::linear's
                                       #   dispatch, the matmul transform's shape analysis)
        "clock_read_ns": FLOAT,        # per timed window of a probe: one read of its clock
                                       #   (mechanism-cost clock-read; optional, 0)
        "report_wake_ns": FLOAT,       # per timed window after a probe's report: the report's
                                       #   after-effect (mechanism-cost report-wake; optional, 0)
        "lift_ns": FLOAT,              # per plain operand an autodiff op lifts (from_inner),
                                       #   beyond its blocks (mechanism-cost gen-window; optional, 0)
        "text_fault_ns": FLOAT,        # per 64-KiB fault-around window of text made resident
        "sysfs_read_ns": FLOAT,        # per sysfs directory listed or file read (gemm's cache info)
        "autodiff_clone_ns": FLOAT,    # per autodiff handle cloned: node + ref-count Arcs
        "checkpoint_ns": FLOAT,        # per tensor a forward op saves for its backward
        "optimizer_map_ns": FLOAT,   # per parameter an optimizer step maps (burn-optim's
                                       #   ModuleOptimizerMapper::map_float, the update aside)
    },
    "backend.flex": {
        "primitive_bytes": INT,
        "handle_bytes": INT,
        "stride_bytes": INT,             # per dimension: the strides Vec of a cloned primitive
        "bytes_box_bytes": INT,          # per buffer: Bytes' boxed allocation controller
        "bytes_arc_bytes": INT,          # per buffer: FlexTensor's ArcInner<Bytes>
        "grad_entry_bytes": INT,         # per gradient a Gradients container holds: its box
        "matmul_workspace_bytes": INT,   # gemm's thread-local L2 slab, at the first matmul
        "gemm_mr": INT,                  # gemm f32 blocking (sim.burn.backend.gemm_slab_written);
        "gemm_nr": INT,                  #   gemm_mr = 0: slab residency not modelled
        "gemm_kc_max": INT,
        "gemm_mc_max": INT,
        "gflops": FLOAT,
        "gbps": FLOAT,                   # GB/s of elementwise traffic resident in the L2
        "gbps_miss": FLOAT,              # GB/s of elementwise traffic not resident in the L2
        "op_overhead_ns": FLOAT,
        "gemm_call_ns": FLOAT,           # ns more per gemm call (a matmul, forward or backward)
        "gemm_overlap": FLOAT,           # share of a gemm's shorter term (flops or bytes) hidden
                                         #   under the longer (1: the roofline; 0: their sum)
        "operand_ns": FLOAT,             # ns per tensor operand of an op
        "reduce_add_ns": FLOAT,          # ns per element of a full sum or mean (serial adds)
        "clone_ns": FLOAT,               # ns per tensor handle cloned (and later dropped)
        "buffer_ns": FLOAT,              # ns per fresh buffer malloc'd (and later freed)
        "layout_ns": FLOAT,              # ns per new Layout a view builds (reshape)
        "random_element_ns": FLOAT,      # ns per element of a random fill (Tensor::random)
        "read_scalar_ns": FLOAT,         # ns per into_scalar (into_data: TensorData built, read)
    },
    "backend.metal": {
        "primitive_bytes": INT,
        "handle_bytes": INT,
        "alignment": INT,
        "max_page_size": INT,
        "gflops": FLOAT,
        "gbps": FLOAT,
        "op_overhead_ns": FLOAT,
        "device_init_bytes": INT,
        "first_op_bytes": INT,
        "kernel_bytes": INT,
    },
    "pytorch": {
        "node_bytes": INT,
        "gflops": FLOAT,               # sgemm rate (Accelerate/AMX on macOS arm64)
        "gbps": FLOAT,                 # f32 traffic of elementwise kernels and reductions
        "op_overhead_ns": FLOAT,       # per ATen kernel or gemm: dispatcher, TensorIterator
        "py_call_ns": FLOAT,           # per torch call made from Python
        "view_op_ns": FLOAT,           # per view op (t, expand, view, detach)
        "autograd_record_ns": FLOAT,   # per autograd node created in the forward
        "autograd_exec_ns": FLOAT,     # per autograd node run by the engine in backward
        "module_call_ns": FLOAT,       # per nn.Module.__call__
        "backward_call_ns": FLOAT,     # per loss.backward(): Python entry, engine set-up
        "optimizer_step_ns": FLOAT,    # per zero_grad() + step(): Python wrappers
        "optimizer_param_ns": FLOAT,   # per parameter in zero_grad() + step()'s loops
        "first_step_ns": FLOAT,
        "baseline_delta_bytes": INT,
        "rss_growth_per_step_bytes": FLOAT,
    },
    "sysfs": {                         # gemm-common's first CACHE_INFO read (sim.platform.gemm_cache)
        "cpu_entries": STRS,           # /sys/devices/system/cpu, in readdir order
        "cache_entries": STRS,         # cpuN/cache, in readdir order
        "index_files": STRS,           # cpuN/cache/indexK, in readdir order
        "instruction_indexes": STRS,   # the indexK whose type is Instruction
        "opendir_bytes": INT,          # libc's DIR of an opendir (with its entry buffer)
        "file_size_bytes": INT,        # st_size of a sysfs attribute (read_to_string's hint)
    },
}


#: tables that describe a profile, not parameters of the model: table -> (whether the
#: profile must have it, key -> type). A table present has every key and no other.
RECORDS = {
    "meta": (True, {
        "platform": STR,             # e.g. "macos-aarch64": what the profile models
        "burn_version": STR,         # the burn release its layouts and costs are of
    }),
    "calibration": (False, {         # written by `sim calibrate` (sim.commands.calibrate.write_profile)
        "fitted": STRS,              # the parameters fitted, section.key
        "points": STRS,              # the measured points they were fitted on
        # those of them fitted on a probe's --quick run (optional: profiles calibrated
        # before it was recorded lack it)
        "quick_points": STRS,
        # parameter -> the points the `sim calibrate` call that last fitted it was fitted on
        # (optional: profiles calibrated before it was recorded lack it, or some parameters)
        "fitted_on": STRS_BY_KEY,
    }),
    # the machine a Linux profile describes (sim.platform.host: CPU model, caches, page size, glibc,
    # cores), written by `sim host-profile`; run/sweep/compare warn when it is not this one
    # ([host.sources], optional) every parameter `sim host-profile` wrote -> where its value
    # came from: "measured" and what was read, "fitted" and its points, "derived" and the
    # rule, or "base" (a parameter of its fit the points left where it was) and why
    "host": (False, {**{key: {"str": STR, "int": INT}[kind] for key, kind in HOST_KEYS.items()},
                     "sources": STRS_BY_KEY}),
}

#: [process] keys passed to the glibc arena as mallopt settings
MALLOPT_KEYS = ("malloc_trim_threshold_bytes", "malloc_mmap_threshold_bytes",
                "malloc_top_pad_bytes")


def mallopt(process) -> dict:
    """The glibc arena's settings of a profile's ``[process]`` section."""
    return {key[len("malloc_"):-len("_bytes")]: getattr(process, key) for key in MALLOPT_KEYS}


class ProfileError(UserError):
    """A profile file is missing, malformed or incomplete."""


class Profile:
    """A validated profile: sections as attribute namespaces, plus its raw data."""

    def __init__(self, name, path, data):
        self.name = name
        self.path = Path(path)
        self.data = data
        self.process = SimpleNamespace(**data["process"])
        self.layout = SimpleNamespace(**data["layout"])
        self.code = {key[:-len("_bytes")]: value for key, value in data["code"].items()}
        self.time = dict(data["time"])
        self.backends = {kind: dict(data["backend"][kind]) for kind in ("flex", "metal")}
        self.pytorch = dict(data["pytorch"])
        self.sysfs = SimpleNamespace(**data["sysfs"])
        self.fitted = list(data.get("calibration", {}).get("fitted", []))
        self.host = dict(data.get("host", {}))

    def get(self, dotted):
        """Value of ``section.key`` (``backend.flex.gflops`` style)."""
        section, key = dotted.rsplit(".", 1)
        return self._table(section)[key]

    def _table(self, section):
        table = self.data
        for part in section.split("."):
            table = table[part]
        return table

    def parameters(self):
        """Every ``section.key`` of the profile, in schema order."""
        return [f"{section}.{key}" for section, keys in SCHEMA.items() for key in keys]


def profile_names():
    """Names of the profiles shipped in ``models/``."""
    return sorted(p.stem for p in MODELS_DIR.glob("*.toml"))


def load_profile(name_or_path) -> Profile:
    """Load and validate a profile by name (``models/NAME.toml``) or path."""
    candidate = Path(str(name_or_path))
    if candidate.suffix == ".toml" or candidate.exists():
        path = candidate
        name = candidate.stem
    else:
        path = MODELS_DIR / f"{name_or_path}.toml"
        name = str(name_or_path)
        if not path.exists():
            raise ProfileError(
                f"unknown profile '{name_or_path}' (valid: {', '.join(profile_names())})")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read profile: {exc.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ProfileError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: malformed TOML: {exc}") from None
    validate(data, path)
    return Profile(name, path, data)


def validate(data, path) -> None:
    """Raise :class:`ProfileError` naming ``path`` and the first bad table or key: a table
    or key missing or unknown (:data:`SCHEMA`, :data:`RECORDS`), a value of the wrong type,
    a negative or non-finite number, or a value outside its rules (:func:`_check_rules`).
    Numbers of :data:`FLOAT` keys are made ``float`` in place.

    >>> validate({"meta": {"platform": "x", "burn_version": "0.22.1"}}, "p.toml")
    Traceback (most recent call last):
    sim.engine.profile.ProfileError: p.toml: missing table [process]
    """
    _check_table_names(data, path)
    for section, keys in SCHEMA.items():
        _check_keys(_section(data, section, path), section, keys, path)
    for section, (required, keys) in RECORDS.items():
        if required or section in data:
            _check_keys(_section(data, section, path), section, keys, path)
    _check_rules(data, path)


def _check_table_names(data, path) -> None:
    """Every top-level table is one of :data:`SCHEMA`'s or :data:`RECORDS`', and every
    table nested in one (``[backend.flex]``) is one of :data:`SCHEMA`'s."""
    nested = {}
    for section in SCHEMA:
        parent, _, child = section.rpartition(".")
        if parent:
            nested.setdefault(parent, set()).add(child)
    allowed = {section.split(".")[0] for section in SCHEMA} | set(RECORDS)
    for key in data:
        if key not in allowed:
            raise ProfileError(f"{path}: unknown table [{key}]")
    for parent, children in nested.items():
        table = data.get(parent)
        for key in table if isinstance(table, dict) else ():
            if key not in children:
                what = (f"table [{parent}.{key}]" if isinstance(table[key], dict)
                        else f"key {parent}.{key}")
                raise ProfileError(f"{path}: unknown {what}")


def _section(data, section, path) -> dict:
    """The table ``section`` (dotted: ``backend.flex``) of ``data``; missing or not a
    table is a :class:`ProfileError`."""
    table = data
    for part in section.split("."):
        if not isinstance(table, dict) or part not in table:
            raise ProfileError(f"{path}: missing table [{section}]")
        table = table[part]
    if not isinstance(table, dict):
        raise ProfileError(f"{path}: [{section}] is not a table")
    return table


def _check_keys(table, section, keys, path) -> None:
    """``table`` has exactly the keys ``keys`` (key -> type), each value of its type."""
    for key in table:
        if key not in keys:
            raise ProfileError(f"{path}: unknown key {section}.{key}")
    for key, kind in keys.items():
        if key not in table and kind == STRS_BY_KEY:
            continue
        if key not in table and key in OPTIONAL_EMPTY:
            continue
        if key not in table and key in OPTIONAL_ZERO:
            table[key] = 0.0
            continue
        if key not in table:
            raise ProfileError(f"{path}: missing key {section}.{key}")
        table[key] = _checked_value(table[key], kind, f"{section}.{key}", path)


def _checked_value(value, kind, name, path):
    """``value`` of key ``name`` if it is of type ``kind`` (a :data:`FLOAT` made ``float``);
    a number must also be finite and not negative.

    >>> _checked_value(float("inf"), FLOAT, "time.register_ns", "p.toml")
    Traceback (most recent call last):
    sim.engine.profile.ProfileError: p.toml: time.register_ns must be a finite number, got inf
    """
    if kind == STR:
        if not isinstance(value, str):
            raise ProfileError(f"{path}: {name} must be a string, got {shown(value)}")
        return value
    if kind == STRS:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ProfileError(f"{path}: {name} must be a list of strings, got {shown(value)}")
        return value
    if kind == FLOATS:
        if not isinstance(value, list):
            raise ProfileError(f"{path}: {name} must be a list of numbers, got {shown(value)}")
        return [_checked_value(v, FLOAT, f"{name}[{i}]", path) for i, v in enumerate(value)]
    if kind == FLOAT_ROWS:
        if not isinstance(value, list) or not all(isinstance(v, list) for v in value):
            raise ProfileError(f"{path}: {name} must be a list of lists of numbers, "
                               f"got {shown(value)}")
        return [_checked_value(v, FLOATS, f"{name}[{i}]", path) for i, v in enumerate(value)]
    if kind == STRS_BY_KEY:
        if not isinstance(value, dict):
            raise ProfileError(f"{path}: {name} must be a table, got {shown(value)}")
        return {key: _checked_value(v, STRS, f"{name}.{key}", path) for key, v in value.items()}
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProfileError(f"{path}: {name} must be a number, got {shown(value)}")
    if not _finite(value):
        raise ProfileError(f"{path}: {name} must be a finite number, got {shown(value)}")
    if kind == INT and not isinstance(value, int):
        raise ProfileError(f"{path}: {name} must be an integer, got {shown(value)}")
    if value < 0:
        raise ProfileError(f"{path}: {name} must not be negative, got {shown(value)}")
    return float(value) if kind == FLOAT else value


def _finite(number) -> bool:
    """Whether ``number`` is finite: not TOML's ``inf`` or ``nan``, nor an integer beyond
    the range of a float (TOML integers are read unbounded)."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def _check_rules(data, path) -> None:
    """The rules between keys: a known allocator, mallopt settings and trim costs only for
    glibc-arena, positive rates, an L2 miss rate where an L2 is modelled, a hash-table
    group width."""
    allocator = data["process"]["allocator"]
    if allocator not in ALLOCATOR_CLASSES:
        raise ProfileError(f"{path}: process.allocator must be one of "
                           f"{', '.join(sorted(ALLOCATOR_CLASSES))}, got {allocator!r}")
    for key in MALLOPT_KEYS:
        value = data["process"][key]
        if value < 0 or (value and not ALLOCATOR_CLASSES[allocator].get("arena")):
            raise ProfileError(f"{path}: process.{key} must be 0 or more, and 0 unless the "
                               f"allocator is glibc-arena (got {value})")
    for key in ("trim_cycle_ns", "trim_page_ns"):
        value = data["time"][key]
        if value < 0 or (value and not ALLOCATOR_CLASSES[allocator].get("arena")):
            raise ProfileError(f"{path}: time.{key} must be 0 or more, and 0 unless the "
                               f"allocator is glibc-arena: nothing else trims (got {value})")
    for section in ("backend.flex", "backend.metal", "pytorch"):
        table = _section(data, section, path)
        for key in ("gflops", "gbps"):
            if table[key] <= 0:
                raise ProfileError(f"{path}: {section}.{key} must be positive")
    metal = data["backend"]["metal"]
    if metal["alignment"] <= 0 or metal["max_page_size"] < metal["alignment"]:
        raise ProfileError(f"{path}: backend.metal.alignment must be positive and "
                           f"max_page_size at least the alignment")
    if data["process"]["l2_bytes"] > 0 and data["backend"]["flex"]["gbps_miss"] <= 0:
        raise ProfileError(f"{path}: backend.flex.gbps_miss must be positive when "
                           f"process.l2_bytes > 0")
    if data["layout"]["group_width"] not in (8, 16):
        raise ProfileError(f"{path}: layout.group_width must be 8 or 16")
    _check_tlb_curve(data["time"], path)


def _ascending_by_layout(reads, time, name) -> bool:
    """Whether ``reads`` ascend (each once) within each key layout of
    ``sweep_tlb_order_spacing`` (the order curves, where given), else over the whole list."""
    spacing = time.get("sweep_tlb_order_spacing", []) if name == "sweep_tlb_order_reads" else []
    if not spacing or len(spacing) != len(reads):
        return reads == sorted(set(reads))
    blocks = {}
    for s, r in zip(spacing, reads):
        blocks.setdefault(s, []).append(r)
    return all(b == sorted(set(b)) for b in blocks.values())


def _check_tlb_curve(time, path) -> None:
    """The data TLB's miss curves, the random-order ones (``sweep_tlb_miss_*``) and those in
    the sweep's own order (``sweep_tlb_order_*``): one reach row and one miss row per reads
    value (ascending, at least 1), each row's points ascending and as many as its fractions
    (at most 1); all empty where not measured."""
    for names in (("sweep_tlb_miss_reads", "sweep_tlb_miss_reach", "sweep_tlb_miss"),
                  ("sweep_tlb_order_reads", "sweep_tlb_order_reach", "sweep_tlb_order_miss")):
        reads, reach, miss = (time.get(key, []) for key in names)
        r, x, m = names
        bad = None
        if not (len(reads) == len(reach) == len(miss)):
            bad = f"one {x} and one {m} row per {r} value"
        elif any(v < 1.0 for v in reads) or not _ascending_by_layout(reads, time, r):
            bad = f"{r} ascending, each at least 1"
        elif any(not xs or len(xs) != len(ys) or xs != sorted(set(xs))
                 for xs, ys in zip(reach, miss)):
            bad = f"each {x} row ascending, with a {m} value per point"
        elif any(f > 1.0 for ys in miss for f in ys):
            bad = f"{m} fractions at most 1"
        if bad:
            raise ProfileError(f"{path}: time.{r.rsplit('_', 1)[0]}*: expected {bad}")
    spacing, reads = time.get("sweep_tlb_order_spacing", []), time.get("sweep_tlb_order_reads", [])
    if spacing:
        runs = [spacing[0]] + [s for a, s in zip(spacing, spacing[1:]) if s != a]
        if (len(spacing) != len(reads) or any(s <= 0 for s in spacing)
                or runs != sorted(set(runs))):
            raise ProfileError(f"{path}: time.sweep_tlb_order_spacing: expected one positive "
                               "key spacing per sweep_tlb_order_reads value, a layout's values "
                               "one run, the layouts in ascending spacing")
