"""``sim host-profile``: a Linux profile for the machine ``sim`` runs on.

1. Reads the host's facts (:mod:`sim.platform.host`): CPU model, cache sizes and ways per level
   (``/sys/devices/system/cpu/cpu0/cache``), page size, glibc version, cores; and the
   shape of ``/sys/devices/system/cpu`` as gemm-common reads it (``[sysfs]``).
2. Puts them into a copy of the base profile (``linux-x86_64``): the ``[host]`` table,
   ``process.l2_bytes``/``l2_ways`` (the L2 model), ``backend.flex.matmul_workspace_bytes``
   (gemm's first-call buffer is the L2's size), gemm's blocking ``gemm_kc_max`` /
   ``gemm_mc_max`` (:func:`gemm_blocking`, from the L1d and L2) and the ``[sysfs]`` lists.
3. Runs the quick probes (``sim measure --quick`` machinery) into a directory it keeps,
   with mechanism-cost's ``leak-replay``, ``report-wake``, ``gen-window`` and
   ``leak-fault`` (run only when named) beside them (:func:`measure_named`), and the
   sweep-scan probe's ``tlb`` rows into its ``tlb/`` (:func:`measure_tlb`): where
   they name the data TLB (cpuid 0x80000006, x86_64) its
   entries, ways and the cost of a read whose page misses go into the profile as ``sim
   calibrate --tlb`` writes them
   (:func:`sim.commands.calibrate.calibrate_tlb`), before the fit; and the train-validate
   probe with ``PROBE_PARTS`` into its ``parts/`` (:func:`measure_parts`): the RSS the
   processes hold before any burn code (``process.baseline_rss_bytes``) and the text their
   first single-row forward adds (``code.gemv_bytes``), as ``sim calibrate
   --process-parts`` writes them (:func:`sim.commands.calibrate.calibrate_parts`).
4. Fits the time parameters of :data:`FIT_PLAN` (each on the quick points that isolate
   it) with ``sim calibrate``'s least squares, stage by stage, wherever the points ask;
   the staged fit is repeated from its own result until it settles (:data:`SETTLED`,
   :data:`MAX_PASSES`). Every other parameter keeps the base's value (the struct layouts,
   the allocator, the resident text of the code paths, the time parameters no quick point
   isolates); :data:`DERIVED` ones are computed from the fitted ones, and a gemm's two
   terms overlap (:data:`GEMM_OVERLAP`).
5. Writes the profile atomically, with a header saying what came from where and a
   ``[host.sources]`` table naming the source of every value written
   (:func:`source_table`).

A progress line on stderr throughout (``host-profile: [k/8] ...``); errors are one line
(:class:`~sim.errors.UserError`); an interrupt leaves an existing ``--out`` untouched.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from ..analysis.compare import known_checker, measured_files, point_id, quick_params
from ..analysis.data import check_output_file, output_target, atomic_write, read_measured
from ..errors import UserError
from ..platform.host import HOST_KEYS, SOURCES, describe, read_host, read_sysfs_shape
from .calibrate import set_host_sources
from .profile_text import KEY, TABLE, quoted, table_span
from .measure import measure
from ..engine.profile import load_profile, validate

__all__ = ["host_profile", "gemm_blocking", "host_text", "FIT_PLAN", "DERIVED", "TAPE_SHARE",
           "fold_text", "derive_text", "fit_points", "measure_tlb", "TLB_DIR", "source_table",
           "measure_parts", "PARTS_DIR", "PARTS_RUNS", "measure_trim", "TRIM_DIR", "TRIM_RUNS",
           "SETTLED", "MAX_PASSES", "GEMM_OVERLAP", "UPPER_BOUNDS", "LEAK_FILE",
           "measure_named", "NAMED_VARIANTS", "WAKE_FILE", "GEN_FILE", "FAULT_FILE"]

#: the time parameters ``sim host-profile`` fits, in stages, each parameter on the quick-probe
#: points that isolate it (selectors of ``sim calibrate --points``; x values are the
#: probes' ``--quick`` loop counts: op-cost 2,000 iterations, backward-cost chains of 200,
#: adleak's op counts / 10, p10-ema 200 steps). A stage is fitted jointly with the earlier
#: stages' values fixed. The split follows experiments/calibration/linux-x86_64.sh, stage 2.
_OPS = ("add", "mul_scalar", "relu", "reshape", "sum")
_ACP = "adleak-count-params"
_MECH = "mechanism-cost"
_ADLEAK = ("flex", "flex.autodiff", "a-tracked", "autodiff-backward-each-round",
           "without_autodiff")
FIT_PLAN = (
    # the resident text of the code paths the adleak-rss loops run, before their loop and
    # after it (/proc/self/smaps of the binary's executable mappings): what the text faults
    # below are charged on. The device's and the module's, the matmul's, the reductions' and
    # the optimizer's text no quick text row separates: kept (creation_bytes takes the
    # device's share before any loop)
    (("code.creation_bytes", [f"adleak-rss/{v}//0/text_rss_delta" for v in _ADLEAK]),
     ("code.elementwise_bytes", ["adleak-rss/flex//10/text_rss_delta",
                                 "adleak-rss/without_autodiff//10/text_rss_delta"]),
     ("code.autodiff_bytes", [f"adleak-rss/{v}//10/text_rss_delta"
                              for v in ("flex.autodiff", "a-tracked")]),
     ("code.backward_bytes", ["adleak-rss/autodiff-backward-each-round//10/text_rss_delta"])),
    # first-touch page faults: a fresh mapped block written one byte per page (no burn code)
    (("time.page_fault_ns", [f"{_MECH}/page-fault/first-touch/4096/ns_per_op"]),),
    # text read faults: the probe's executable mapped and read, one fault per 64-KiB window
    (("time.text_fault_ns", [f"{_MECH}/text-fault/fault-around/64/ns_per_op"]),),
    # a hash table's growth, per item it moves (mechanism-cost rehash: burn's five graph
    # tables, one doubling insert against a twin's insert with room, no page fault; the
    # mean of the five at 256 and 2,048 buckets, where the tables fit in the L2)
    (("time.rehash_item_ns", [f"{_MECH}/rehash/all/{b}/ns_per_op" for b in (256, 2048)]),),
    # what Linear::forward's module path (burn-tensor's module::linear: the dispatch, the
    # matmul transform's shape analysis) costs beyond the ops it issues, on plain Flex
    # (mechanism-cost mlp-sample: train-validate's generation sample run by the module against
    # the same ops through the tensor API, module - ops = two Linear calls)
    (("time.linear_call_ns", [f"{_MECH}/mlp-sample/module-minus-ops/250/ns_per_op"]),),
    # one read of the probes' own clock, which every timed window holds once (mechanism-cost
    # clock-read: an empty window, now() then elapsed(); the clock `sim measure` timed with:
    # a vDSO read of the wall clock, a system call for the thread's CPU clock), before the
    # stages whose windows hold a few ops (op-cost's blocks, train-validate's reports)
    (("time.clock_read_ns", [f"{_MECH}/clock-read/window/1/ns_per_op"]),),
    # what a probe's report (its rows formatted and echoed to stderr between two windows)
    # costs the window after it (mechanism-cost report-wake, run by :func:`measure_named`:
    # train-validate's generation sample in windows of 5, after a report less after
    # nothing; the clock read cancels), before the stages whose windows follow reports
    (("time.report_wake_ns", [f"{_MECH}/report-wake/report-minus-bare/5/ns_per_op"]),),
    # what lifting a plain operand onto autodiff costs an op (burn's dispatch:
    # Autodiff::from_inner, a fresh node id, node and ref count; mechanism-cost gen-window,
    # run by :func:`measure_named`: a matmul on an autodiff input with model.valid()'s plain
    # weight against the same values on autodiff, the handles' clones made equal), before
    # the stages whose ops may lift an operand
    (("time.lift_ns", [f"{_MECH}/gen-window/lift/lift/40/ns_per_op"]),),
    # a new heap page's first writes beyond its fault (mechanism-cost leak-replay, run by
    # :func:`measure_named`: op-cost's untracked add and tracked mul_scalar, their blocks
    # replayed kept against freed, less the kept pages' faults), before the stages whose
    # ops grow the heap (an autodiff op's leak: register_ns is fitted with it charged)
    (("time.heap_page_write_ns", [f"{_MECH}/leak-replay/{case}-beyond-faults/2000/ns_per_op"
                                  for case in ("untracked-add", "tracked-mul_scalar")]),),
    # a small op's cost (op-cost, [1,128] tensors), each stage on the points whose cost the
    # earlier stages do not already explain (fitted jointly on all 13, buffer_ns traded
    # against op_overhead_ns and register_ns against operand_node_ns): the op itself, from
    # the chain, whose operand is moved, not cloned (mul_scalar: the op on one operand;
    # add: on two, and a clone of the constant; reshape: a new Layout, no kernel), plain
    # reshape (a clone and a new Layout, no buffer) and
    # plain unary ops (a clone and a fresh buffer) ...
    # (at all four loop counts, 500-2,000: each is the same op's cost timed again, and
    # the x=2,000 row alone carried one slow run's mean into op_overhead_ns)
    (("backend.flex.op_overhead_ns", ["op-cost/chain/mul_scalar//*/ms_per_step"]),
     ("backend.flex.operand_ns", ["op-cost/chain/add//*/ms_per_step"]),
     ("backend.flex.layout_ns", ["op-cost/chain/reshape//*/ms_per_step"]),
     ("backend.flex.clone_ns", ["op-cost/plain/reshape//*/ms_per_step"]),
     ("backend.flex.buffer_ns", [f"op-cost/plain/{op}//*/ms_per_step"
                                 for op in ("mul_scalar", "relu")])),
    # ... a sum's 128 serial adds ...
    (("backend.flex.reduce_add_ns", ["op-cost/plain/sum//*/ms_per_step"]),),
    # elementwise bandwidth of L2-resident 256-KiB tensors (before the gemm stages: a
    # matrix-vector gemm's time is its matrix's bytes at this rate)
    (("backend.flex.gbps", [f"{_ACP}/untracked/size=65536/after-loop/1000/ns_per_op"]),),
    # the gemm rate: a [64, 512] x [512, 512] gemm (33.5 MFLOP; its clones, output buffer
    # and call cost are ~1 % of it), calls 3 and 4 of a process (call 1 reads the caches
    # from sysfs and makes the L2 slab, call 2 still faults in its output's pages) ...
    (("backend.flex.gflops", [f"{_MECH}/first-gemm/call/{k}/ms_per_step" for k in (3, 4)]),),
    # ... then a gemm call's fixed cost, on [1, 128] x [128, 128] (a matrix-vector gemm:
    # the call's fixed cost and the matrix's bytes), at all four loop counts ...
    (("backend.flex.gemm_call_ns", ["op-cost/plain/matmul//*/ms_per_step"]),),
    # ... and the first gemm of a process: gemm-common's cache info read from sysfs
    (("time.sysfs_read_ns", [f"{_MECH}/first-gemm/call/1/ms_per_step"]),),
    # ... the same ops through burn-autodiff, x requiring grad (add has two operands), at
    # 2,000 iterations only (the tracked rows at 1,000 are 1.4-2.1x the others in each of
    # the three committed EPYC runs; not traced), and
    # a tracked chain's forward (backward-cost, chains of 200 ops; relu saves its input)
    # (with a registration's lookups of tracked parents in other graphs, merge-persistent's
    # ops: fitted apart, the two stages trade register_ns against register_parent_ns pass
    # after pass); with the same ops through burn-autodiff untracked (their operands'
    # nodes read and a step registered with no parent: register_ns and operand_node_ns,
    # no register_parent_ns), which pin the costs every autodiff op pays, so the stage
    # cannot move them into register_parent_ns, which only the tracked ops pay
    # (and mechanism-cost leak-fault's fault-free ops, run by :func:`measure_named`:
    # op-cost's tracked mul_scalar and untracked add with unpatched burn's leak landing on
    # resident pages, so that the fit does not read op-cost's blocks' other costs as the
    # registration's; session 60)
    (("time.register_ns", [f"op-cost/tracked/{op}//2000/ms_per_step" for op in _OPS]
      + [f"{_MECH}/leak-fault/{case}-reused/1000/ns_per_op"
         for case in ("tracked-mul_scalar", "untracked-add")]),
     ("time.operand_node_ns", [f"op-cost/untracked/{op}//2000/ms_per_step" for op in _OPS]),
     ("time.autodiff_clone_ns", ["backward-cost/mul_scalar/forward/3/ms_per_step"]),
     ("time.checkpoint_ns", ["backward-cost/relu/forward/3/ms_per_step"]),
     ("time.register_parent_ns", [f"{_ACP}/merge-persistent/size=16/after-loop/10000/ns_per_op"])),
    # a backward's cost per step and per saved tensor read back
    (("time.backward_step_ns", ["backward-cost/mul_scalar/backward/3/ms_per_step"]),
     ("time.checkpoint_retrieve_ns", ["backward-cost/relu/backward/3/ms_per_step"])),
    # a scalar read back (into_scalar: burn-flex's into_data) beyond dropping the tensor, on
    # plain Flex and on autodiff (mechanism-cost read-scalar: the twins' difference)
    (("backend.flex.read_scalar_ns", [f"{_MECH}/read-scalar/{p}read-minus-drop/250/ns_per_op"
                                      for p in ("", "autodiff-")]),),
    # what an optimizer step costs per parameter it maps beyond the update's ops
    # (mechanism-cost train-step d4: train-validate's training step on Mlp(4, 4, 4) and a
    # [1, 4] input, whose kernels cost next to nothing: its ops, registrations, backward
    # steps and clones are priced by the stages above, and what is left of its time is
    # put on its 4 parameters' ModuleOptimizerMapper::map_float)
    (("time.optimizer_map_ns", [f"{_MECH}/train-step/d4/4/ms_per_step"]),),
    # a random fill's cost per element (a Linear(512, 512)'s weight init), calls 4 and 5:
    # calls 1-3 of every EPYC run are ~0.45 ms slower (their 1-MiB blocks are fresh pages)
    (("backend.flex.random_element_ns", [f"{_MECH}/param-init/call/{k}/ms_per_step"
                                         for k in (4, 5)]),),
    # the sweep freeing N dead single-node graphs beyond visiting N live ones, N within the L2
    (("time.sweep_free_ns", [f"{_MECH}/sweep-free/dead-minus-live/{n}/ns_per_op"
                             for n in (100, 300, 1000)]),),
    # a graph merged into another (two fresh leaves added, against a twin without the merge)
    (("time.merge_ns", [f"{_MECH}/merge/merge-minus-twin/250/ns_per_op"]),),
    # free_unavailable_nodes over a backward's chain of N nodes, and PopNodeSet's scan
    (("time.free_unavailable_node_ns", [
        f"{_ACP}/tracked/size=16/after-backward-through-a/{n}/backward_ms" for n in (1000, 3000)]),
     ("time.pop_scan_group_ns", [
         f"{_ACP}/tracked/size=16/after-backward-through-a/10000/backward_ms"])),
    # free_unused_roots' reads of a dead chain (chain-dead at 300 ops)
    (("time.root_check_node_ns", [f"{_ACP}/chain-dead/size=16/after-unrelated-backward/300/"
                                  f"backward_ms"]),),
    # elementwise traffic the L2 model finds evicted (EMA updates of ema-only)
    (("backend.flex.gbps_miss", ["p10-ema/ema-only//100/ms_per_step"]),),
    # the orphan sweep's reads of the EMA graph's keys (detach at step 200)
    (("time.scan_node_ns", ["p10-ema/detach//200/ms_per_step"]),),
)

#: upper bounds of fitted parameters, applied after their stage's fit: name -> (the parameter
#: bounding it, why). The L2 model charges traffic it finds evicted ``nbytes * (1/gbps_miss
#: - 1/gbps)`` more than L2-resident traffic (sim.platform.timing.Timing.l2_missed): a
#: ``gbps_miss`` above ``gbps`` would make a miss cheaper than a hit, which the mechanism
#: (lines streamed from L3 or DRAM instead of the L2) cannot do; at the bound a miss costs
#: what a hit does and the points that asked for more stay misses
UPPER_BOUNDS = {
    "backend.flex.gbps_miss": ("backend.flex.gbps", "a line streamed from L3 or DRAM is not "
                               "faster than one read from the L2"),
}

#: the share of a backward step's bookkeeping (``tape_step_ns + backward_step_ns``) that
#: building the tape takes: instructions counted by ``valgrind --tool=callgrind`` in
#: ``burn-probes backward-cost --variant mul_scalar`` (3 chains of 2,000 ops, 6,003 steps;
#: experiments/measured/amd-epyc-zen4-mechanism/backward-instructions.txt):
#: ``AutodiffServer::build_tape`` 16,495,029 against ``execute_steps`` 16,135,766, less the
#: backend's ``float_mul_scalar`` it calls (2,886,000; the model charges the inner op apart):
#: 16,495,029 / (16,495,029 + 13,249,766). The same binary on any x86_64 host.
TAPE_SHARE = 16_495_029 / (16_495_029 + 13_249_766)

#: derived time parameters: name -> (its value from the profile's values, the note)
DERIVED = {
    "time.tape_step_ns": (
        lambda get: TAPE_SHARE * (get("time.tape_step_ns") + get("time.backward_step_ns")),
        f"{TAPE_SHARE:.4f} of tape_step_ns + backward_step_ns (callgrind: build_tape's share "
        f"of a backward step's instructions; sim.commands.host_profile.TAPE_SHARE)"),
    "time.backward_step_ns": (
        lambda get: (1 - TAPE_SHARE) * (get("time.tape_step_ns") + get("time.backward_step_ns")),
        f"the rest, {1 - TAPE_SHARE:.4f}, of tape_step_ns + backward_step_ns"),
    "time.drop_release_node_ns": (
        lambda get: get("time.sweep_free_ns"),
        "= sweep_free_ns: a node released on drop goes through the removals the sweep "
        "makes for a dead node (its nodes entry, its locator entries, its graph)"),
}

#: the base's time parameters host-profile does not fit, and why (the README's list)
NOT_FITTED = {
    "time.new_graph_ns": "~0 on the Xeon fit (an untracked op costs no more than a tracked "
                         "one beyond its graph's allocations); kept",
    "time.process_warmup_ns": "~0 on the Xeon fit; kept",
    "time.sweep_l2_read_ns": "the sweep-scan probe's (experiments/calibration/"
                             "sweep-levels.py), not a quick point; kept",
    "time.sweep_l3_read_ns": "the sweep-scan probe's, as sweep_l2_read_ns; kept",
    "time.sweep_dram_read_ns": "the sweep-scan probe's, as sweep_l2_read_ns; kept",
    "time.sweep_fixed_ns": "the sweep-scan probe's, as sweep_l2_read_ns; kept",
    "time.sweep_copy_entry_ns": "the sweep-scan probe's, as sweep_l2_read_ns; kept",
    "time.sweep_visit_ns": "the sweep-scan probe's, as sweep_l2_read_ns; kept",
    "time.sweep_tlb_read_ns": "the sweep-scan probe's `tlb` rows, measured by stage 3 "
                              "(measure_tlb) where the probe names a data TLB, not fitted; "
                              "else kept",
}


def fold_text(text) -> str:
    """``text`` (a profile) with ``tape_step_ns`` folded into ``backward_step_ns`` (their
    sum there, 0 in ``tape_step_ns``): both are charged per backward step, so a fit can
    only move their sum; :func:`derive_text` splits it again by :data:`TAPE_SHARE`."""
    import tomllib
    from .calibrate import _find_key, _substitute
    values = tomllib.loads(text)["time"]
    total = values["tape_step_ns"] + values["backward_step_ns"]
    lines = text.split("\n")
    for key, value in (("tape_step_ns", 0.0), ("backward_step_ns", total)):
        _substitute(lines, _find_key(lines, "time", key), key, round(value, 6))
    return "\n".join(lines)


def derive_text(text, get) -> str:
    """``text`` (a profile) with the :data:`DERIVED` parameters computed from ``get``
    (name -> value: the profile's values before any is derived) and written in place, each
    documented ``[derived]`` with its rule (the source labels of a comment block only it
    has become ``[derived]``)."""
    from .calibrate import LABEL, _comment_block, _find_key, _substitute
    values = {name: rule(get) for name, (rule, _) in DERIVED.items()}
    lines = text.split("\n")
    for name, value in values.items():
        section, key = name.rsplit(".", 1)
        i = _find_key(lines, section, key)
        if i is None:
            raise UserError(f"the profile has no {name}")
        lines[i] = lines[i].partition("#")[0].rstrip()
        _substitute(lines, i, key, round(value, 6))
        lines[i] += f"  # [derived] {DERIVED[name][1]}"
        start, stop, shared = _comment_block(lines, i)
        if not shared:
            lines[start:stop] = [LABEL.sub("[derived]", line) for line in lines[start:stop]]
    return "\n".join(lines)


def fit_points(plan=FIT_PLAN) -> list:
    """Every point selector of ``plan``, in order, once."""
    return list(dict.fromkeys(p for stage in plan for _, points in stage for p in points))


def _echo(message) -> None:
    print(f"host-profile: {message}", file=sys.stderr, flush=True)


# -- gemm's blocking from the caches ------------------------------------------------------

def _next_power_of_two(n) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def gemm_blocking(host, mr=16, nr=6, sizeof=4) -> tuple:
    """``(gemm_kc_max, gemm_mc_max)`` of gemm-common 0.19's f32 blocking on ``host``
    (cache.rs ``kernel_params``, paraphrased): kc is the L1d's ``line x sets`` over the
    lhs micropanel's bytes, times the L1d ways left for it rounded up to a power of two,
    at least 512; mc the lhs rows a share of the L2 ways holds at that kc, a multiple of
    ``mr``, at most ``8 mr``. ``mr``/``nr``: the FMA (AVX2) kernel gemm builds without
    its ``x86-v4`` feature (burn-flex enables none).

    >>> gemm_blocking({"l1d_bytes": 49152, "l1d_ways": 12, "line_bytes": 64,
    ...                "l2_bytes": 2 << 20, "l2_ways": 16})       # the Xeon
    (1024, 128)
    >>> gemm_blocking({"l1d_bytes": 32768, "l1d_ways": 8, "line_bytes": 64,
    ...                "l2_bytes": 1 << 20, "l2_ways": 8})        # AMD EPYC (Zen 4)
    (512, 128)
    """
    from math import gcd
    l1 = max(int(host["l1d_bytes"]), 32 * 1024)
    line = max(int(host["line_bytes"]), 64)
    l1_ways = max(int(host["l1d_ways"]), 2)
    l2, l2_ways = int(host["l2_bytes"]), max(int(host["l2_ways"]), 2)
    sets = l1 // (line * l1_ways)
    g = gcd(mr * sizeof, line * sets)
    kc_0 = line * sets // g
    c_lhs = mr * sizeof // g
    c_rhs = nr * kc_0 * sizeof // (line * sets)
    kc = max(kc_0 * _next_power_of_two(l1_ways // (c_lhs + c_rhs)), 512)
    rhs_ways = -(-(nr * kc * sizeof) // (l2 // l2_ways))
    lhs_ways = max(l2_ways - 1 - rhs_ways, 1)
    mc = (lhs_ways * l2) // (l2_ways * sizeof * kc) // mr * mr
    return kc, min(mc, 8 * mr)


# -- the profile text ---------------------------------------------------------------------

def _toml(value) -> str:
    if isinstance(value, str):
        return quoted(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def _key_span(lines, section, key):
    """``(start, stop)`` of the lines of ``key = ...`` in table ``[section]`` (a multi-line
    array to its closing bracket), or None."""
    current = None
    for i, line in enumerate(lines):
        table = TABLE.match(line)
        if table:
            current = table.group(1).strip()
            continue
        found = KEY.match(line)
        if current == section and found and found.group(1) == key:
            stop = i + 1
            value = line.split("=", 1)[1].split("#", 1)[0].strip()
            if value.startswith("[") and value.count("[") > value.count("]"):
                while stop < len(lines) and "]" not in lines[stop - 1].split("#", 1)[0]:
                    stop += 1
            return i, stop
    return None


def _set(lines, section, key, value, note) -> None:
    span = _key_span(lines, section, key)
    if span is None:
        raise UserError(f"the base profile has no {section}.{key}")
    start, stop = span
    lines[start:stop] = [f"{key} = {_toml(value)}  # [measured] this host: {note}"]


def host_table(host) -> list:
    """The lines of a ``[host]`` table for ``host``, each value with where it was read."""
    lines = ["[host]",
             "# The machine this profile describes, read by `sim host-profile` (sim.platform.host);",
             "# `sim run/sweep/compare` warn when the host they run on differs from it."]
    for key in HOST_KEYS:
        lines.append(f"{key} = {_toml(host[key])}  # {SOURCES[key]}")
    return lines


def host_text(base_text, host, sysfs=None) -> str:
    """``base_text`` (a Linux profile) with ``host``'s facts: the ``[host]`` table (replaced,
    or added after ``[meta]``), the L2 model, gemm's buffer and blocking, and with
    ``sysfs`` (:func:`sim.platform.host.read_sysfs_shape`) the ``[sysfs]`` lists. Every value set
    carries a ``# [measured] this host: ...`` comment naming its source."""
    lines = base_text.rstrip("\n").split("\n")
    kc, mc = gemm_blocking(host)
    l2_dir = "/sys/devices/system/cpu/cpu0/cache (the level-2 index)"
    _set(lines, "process", "l2_bytes", host["l2_bytes"], f"size of {l2_dir}")
    _set(lines, "process", "l2_ways", host["l2_ways"], f"ways_of_associativity of {l2_dir}")
    for level, name in (("l1d", "level-1 Data"), ("l3", "level-3")):
        where = f"/sys/devices/system/cpu/cpu0/cache (the {name} index)"
        _set(lines, "process", f"{level}_bytes", host[f"{level}_bytes"], f"size of {where}")
        _set(lines, "process", f"{level}_ways", host[f"{level}_ways"],
             f"ways_of_associativity of {where}")
    _set(lines, "backend.flex", "matmul_workspace_bytes", host["l2_bytes"],
         "the L2 size (gemm-common's L2_SLAB is a buffer of the core's L2)")
    _set(lines, "backend.flex", "gemm_kc_max", kc,
         f"gemm-common's kc from the L1d ({host['l1d_bytes'] >> 10} KiB, "
         f"{host['l1d_ways']}-way, {host['line_bytes']}-B lines; sim.commands.host_profile.gemm_blocking)")
    _set(lines, "backend.flex", "gemm_mc_max", mc,
         f"gemm-common's mc from the L2 ({host['l2_bytes'] >> 10} KiB, {host['l2_ways']}-way)")
    i = _key_span(lines, "backend.flex", "gemm_overlap")
    if i is None:
        raise UserError("the base profile has no backend.flex.gemm_overlap")
    lines[i[0]:i[1]] = [f"gemm_overlap = {GEMM_OVERLAP}  # [derived] {GEMM_OVERLAP_NOTE}"]
    if sysfs:
        for key in ("cpu_entries", "cache_entries", "index_files", "instruction_indexes"):
            _set(lines, "sysfs", key, list(sysfs[key]), "read off /sys/devices/system/cpu "
                 "in readdir order" if key != "instruction_indexes" else "indexN/type")
    table = host_table(host)
    span = table_span(lines, "host")
    if span is None:
        meta = table_span(lines, "meta")
        if meta is None:
            raise UserError("the base profile has no [meta] table")
        lines[meta[1]:meta[1]] = [""] + table
    else:
        lines[span[0]:span[1]] = table
    return "\n".join(lines) + "\n"


#: ``backend.flex.gemm_overlap`` of a profile ``sim host-profile`` writes: the roofline
GEMM_OVERLAP = 1.0
GEMM_OVERLAP_NOTE = (
    "a gemm costs the longer of its flops at gflops and its bytes at gbps: its kernels load "
    "operands while earlier FMAs run (with their sum, the base's rule, op-cost's [1,128] x "
    "[128,128] matmul stays 14 % over on the AMD EPYC 25/17 with gemm_call_ns fitted to 0)")

#: what ``host_text`` sets from the host's facts: parameter -> the fact it is read from
_FROM_HOST = {
    **{f"process.{level}_{what}": f"cpu0/cache: {what == 'bytes' and 'size' or 'ways'} of the "
       f"{name} cache" for level, name in (("l1d", "level-1 data"), ("l2", "level-2"),
                                          ("l3", "level-3")) for what in ("bytes", "ways")},
    "backend.flex.matmul_workspace_bytes": "the L2's size (gemm-common's L2 slab)",
    "backend.flex.gemm_kc_max": "gemm-common's kc from the L1d's size, ways and line (gemm_blocking)",
    "backend.flex.gemm_mc_max": "gemm-common's mc from the L2's size and ways (gemm_blocking)",
}
#: what ``sim calibrate --tlb`` sets from the sweep-scan probe's ``tlb`` output
_FROM_TLB = {
    "process.dtlb_entries": "cpuid 0x80000006's L2 data TLB entries (sweep-scan tlb)",
    "process.dtlb_ways": "cpuid 0x80000006's L2 data TLB ways (sweep-scan tlb)",
    "time.sweep_tlb_read_ns": "sweep-scan tlb: pages4k less lines4k, median over sizes",
}


def source_table(host, sysfs, stages, rows, fitted, kept, tlb_dir=None,
                 parts_dir=None, trim_dir=None) -> dict:
    """``[host.sources]``: every parameter ``sim host-profile`` wrote (or fitted and left
    where the base had it) -> ``[kind, detail...]``: ``measured`` (read from the host or
    timed by a probe that isolates it, no fit), ``fitted`` and the points, ``derived`` and
    the rule, ``base`` and why the fit left it."""
    from .calibrate import select_points
    table = {name: ["measured", where] for name, where in _FROM_HOST.items()}
    table["backend.flex.gemm_overlap"] = ["derived", GEMM_OVERLAP_NOTE]
    if sysfs:
        for key in ("cpu_entries", "cache_entries", "index_files", "instruction_indexes"):
            table[f"sysfs.{key}"] = ["measured", "/sys/devices/system/cpu as read"]
    if tlb_dir is not None:
        for name, where in _FROM_TLB.items():
            table[name] = ["measured", f"{where}, {Path(tlb_dir) / TLB_DIR}"]
    if parts_dir is not None:
        from ..analysis.parts import GEMV, START
        where = Path(parts_dir) / PARTS_DIR
        table["process.baseline_rss_bytes"] = [
            "measured", f"the train-validate probe's PROBE_PARTS '{START}' RSS, mean over "
                        f"the processes, {where}"]
        table["code.gemv_bytes"] = [
            "measured", f"the train-validate probe's PROBE_PARTS text '{GEMV[1]}' less "
                        f"'{GEMV[0]}', mean over the processes, {where}"]
    for name, part in (("time.trim_cycle_ns", "fixed part"), ("time.trim_page_ns", "slope")):
        table[name] = (
            ["measured", f"mechanism-cost heap-refault brk-per-trim, a line's {part}, "
                         f"{Path(trim_dir) / TRIM_DIR}"] if trim_dir is not None else
            ["base", "not measured (mechanism-cost heap-refault did not run): trims not "
                     "charged"])
    for stage in stages:
        together = [q for _, pts in stage for q in pts]
        for name, selectors in stage:
            if name in fitted:
                table[name] = ["fitted"] + [point_id(m) for m in
                                            select_points(rows, selectors or together)]
            else:
                table[name] = ["base", kept.get(name, "the points do not ask for another "
                                                      "value")]
    for name, (_, note) in DERIVED.items():
        table[name] = ["derived", note]
    for name, why in NOT_FITTED.items():
        table.setdefault(name, ["base", why])
    return table


#: the comment under the ``[host.sources]`` header of a profile ``sim host-profile`` wrote
SOURCES_NOTE = (
    "# where each value `sim host-profile` wrote came from: measured (read from this",
    "# host, or timed by a probe, no fit), fitted (on the points listed), derived (the",
    "# rule), base (a fitted parameter the points left at the base's value, and why)")


def _with_sources(text, table) -> str:
    """``text`` (a profile with a ``[host]`` table) with ``[host.sources]`` after it, holding
    ``table`` alone (:func:`sim.commands.calibrate.set_host_sources`)."""
    lines = text.rstrip("\n").split("\n")
    set_host_sources(lines, table, SOURCES_NOTE, replace=True)
    return "\n".join(lines) + "\n"


def _header(name, base, host, measured_dir, params, n_points, seconds) -> list:
    text = (f"# Profile {name}: written by `sim host-profile` for {describe(host)}, from base "
            f"profile {base}. Host facts ([host], the L2 model, gemm's buffer and blocking, "
            f"[sysfs]) are read from this machine (values marked `[measured] this host`); "
            f"the data TLB (process.dtlb_entries, dtlb_ways, time.sweep_tlb_read_ns) is "
            f"the sweep-scan probe's `tlb` rows in {measured_dir}/{TLB_DIR} where it names "
            f"one (x86_64), else the base's; the process's start RSS and the text of a "
            f"single-row forward (process.baseline_rss_bytes, code.gemv_bytes) are the "
            f"train-validate probe's PROBE_PARTS rows in {measured_dir}/{PARTS_DIR}; "
            f"a trim of the heap's top (time.trim_cycle_ns, trim_page_ns) is "
            f"mechanism-cost heap-refault's rows in {measured_dir}/{TRIM_DIR} (0, not "
            f"charged, where it did not run); "
            f"the parameters {', '.join(params)} are fitted on {n_points} point(s) of "
            f"the quick probes in {measured_dir} (the [calibration] table lists them); "
            f"every other value, and the comments above the values, are the base "
            f"profile's (its host is in its own header below). Probes and fit took "
            f"{seconds:.0f} s.")
    from .calibrate import header_lines
    return header_lines(text)


def _with_header(text, header) -> str:
    from .calibrate import _with_header as replace
    return "\n".join(replace(text.split("\n"), header))


# -- the command ------------------------------------------------------------------------

def check_out(out, force) -> None:
    """Refuse, before any work, an ``out`` that exists (unless ``force``) or cannot be
    written."""
    target, in_place = output_target(out)
    if not in_place and target.is_file() and not force:
        raise UserError(f"--out {out}: the file exists: give --force to overwrite it")
    if Path(out).suffix != ".toml":
        raise UserError(f"--out {out}: a profile is a .toml file (models/NAME.toml)")
    check_output_file(out)


def host_profile(out, base="linux-x86_64", measured_dir=None, force=False, jobs=1,
                 echo=_echo, reuse_measured=False, log=None, cpu_time=False) -> dict:
    """Make a profile for this machine (module docstring); returns a summary dict
    (host, parameters before/after, points, seconds, measured dir)."""
    from .calibrate import point_workload, select_points, write_profile
    import tomllib

    t0 = time.perf_counter()
    check_out(out, force)
    base_profile = load_profile(base)
    if not str(base_profile.data["meta"]["platform"]).startswith("linux"):
        raise UserError(f"--base {base}: not a Linux profile "
                        f"(platform {base_profile.data['meta']['platform']})")
    measured_dir = Path(measured_dir or f"results/host-profile-{Path(out).stem}")
    echo("[1/8] reading the host's facts (/proc/cpuinfo, /sys/devices/system/cpu, "
         "sysconf, confstr)")
    try:
        host = read_host()
        sysfs = read_sysfs_shape()
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read this host's facts: {exc}") from None
    echo(f"      {describe(host)}; L1d {host['l1d_bytes'] >> 10} KiB {host['l1d_ways']}-way, "
         f"L2 {host['l2_ways']}-way, L3 {host['l3_bytes'] >> 20} MiB, page "
         f"{host['page_bytes']} B; gemm kc/mc {gemm_blocking(host)}")
    text = host_text(Path(base_profile.path).read_text(encoding="utf-8"), host, sysfs)
    validate(tomllib.loads(text), out)

    scratch = Path(tempfile.mkdtemp(prefix=".host-profile-", dir=Path(out).parent or "."))
    try:
        step1 = scratch / f"{Path(out).stem}.toml"
        step1.write_text(fold_text(text), encoding="utf-8")
        if reuse_measured and measured_dir.is_dir():
            echo(f"[2/8] quick probes: reusing {measured_dir}")
        else:
            echo(f"[2/8] building and running the quick probes (sim measure --quick "
                 f"--out {measured_dir}; the first build takes minutes)")
            try:
                measure(None, True, measured_dir, cpu_time=cpu_time,
                        echo=lambda m: print(f"host-profile:       {m}", file=sys.stderr,
                                             flush=True))
            except UserError as exc:
                # a probe that failed after the others wrote their CSVs: fit on what there is
                if not (measured_dir / "op-cost.csv").is_file():
                    raise
                echo(f"      warning: {exc}; fitting on the probes that ran")
        for variant, (name, _, _) in NAMED_VARIANTS.items():
            if not (reuse_measured and (measured_dir / name).is_file()):
                measure_named(measured_dir, variant, cpu_time=cpu_time, echo=echo)
        echo(f"[3/8] the data TLB (sweep-scan tlb into {measured_dir / TLB_DIR})")
        folded_path = step1
        step1 = _with_tlb(step1, measured_dir / TLB_DIR, scratch / "tlb.toml",
                          reuse_measured, echo)
        tlb_measured = step1 != folded_path
        echo(f"[4/8] the process's start and a single-row forward's text (train-validate "
             f"PROBE_PARTS into {measured_dir / PARTS_DIR})")
        step1 = _with_parts(step1, measured_dir / PARTS_DIR, scratch / "parts.toml",
                            reuse_measured, echo)
        echo(f"[5/8] a trim of the heap's top (mechanism-cost heap-refault into "
             f"{measured_dir / TRIM_DIR})")
        before_trim = step1
        step1 = _with_trim(step1, measured_dir / TRIM_DIR, scratch / "trim.toml",
                           reuse_measured, cpu_time, echo)
        trim_measured = step1 != before_trim
        echo("[6/8] selecting the fitted points")
        rows = []
        known = known_checker()
        for path in measured_files([str(measured_dir)]):
            rows.extend(read_measured(path, known))
        # a workload whose rows mix a quick run and a full one cannot be compared: said
        # here, before the fit, not when its record is written at the end
        quick = quick_params(rows)
        stages, skipped = plan_stages(rows)
        params = [p for stage in stages for p, _ in stage]
        n_points = len(select_points(rows, [q for stage in stages for _, pts in stage
                                            for q in pts])) if params else 0
        if not params:
            raise UserError(f"{measured_dir}: none of the quick points the fit needs "
                            f"(op-cost, backward-cost, params, p10-ema) was measured")
        for name, why in skipped.items():
            echo(f"      not fitted: {name} ({why})")
        echo(f"      {len(params)} parameters on {n_points} points, in {len(stages)} "
             f"stages")
        sink = open(log, "w", encoding="utf-8") if log else None
        current = step1
        reasons = {}
        used = []       # the points of every stage that moved a parameter
        fitted_at = {}   # stage -> its points' predictions when it was last fitted
        try:
            for n_pass in range(1, MAX_PASSES + 1):
                start = load_profile(str(current))
                refitted = 0
                for i, stage in enumerate(stages, 1):
                    names = [p for p, _ in stage]
                    if n_pass > 1 and not any(_timed(p) for p in names):
                        continue        # resident bytes: no time parameter moves their points
                    if i in fitted_at and _still_fitted(rows, stage, current, fitted_at[i],
                                                        jobs):
                        echo(f"[7/8] pass {n_pass}, stage {i}/{len(stages)} settled (its "
                             f"points' predictions within {SETTLED:.0%} of its fit's): "
                             f"{', '.join(names)}")
                        continue
                    echo(f"[7/8] pass {n_pass}, fitting stage {i}/{len(stages)} "
                         f"({time.perf_counter() - t0:.0f} s so far): {', '.join(names)}")
                    refitted += 1
                    before_stage = Path(current).read_text(encoding="utf-8")
                    # each stage is fitted as a fresh calibration (a staged one would
                    # re-simulate every point fitted before it, the base host's included);
                    # the record is made below from what the stages moved
                    current, fitted_at[i] = _fit_stage(
                        rows, current, stage, scratch / f"pass{n_pass}-stage{i}.toml",
                        fresh=True, jobs=jobs, sink=sink, echo=echo,
                        sources=[str(measured_dir)], reasons=reasons)
                    if Path(current).read_text(encoding="utf-8") != before_stage:
                        used.extend(q for _, pts in stage for q in pts)
                end = load_profile(str(current))
                change = _largest_change([p for p in params if _timed(p)], start.get,
                                         end.get)
                echo(f"      pass {n_pass}: the largest change {change[1]:.1%} "
                     f"({change[0]})")
                if change[1] <= SETTLED or (n_pass > 1 and not refitted):
                    break
            else:
                echo(f"      warning: not settled after {MAX_PASSES} passes (the last moved "
                     f"{change[0]} by {change[1]:.1%})")
        finally:
            if sink:
                sink.close()
        new = load_profile(str(current))
        folded = load_profile(str(step1))
        fitted = [p for p in params if new.get(p) != folded.get(p)]
        # every point a stage that moved a parameter was fitted on is recorded as fitted
        # (a later stage's move of it, which sim calibrate's staged record drops, does not
        # make it a held-out point), so comparisons grade only the others as predicted
        points = ([point_id(m) for m in select_points(rows, list(dict.fromkeys(used)))]
                  if used else [])
        new.data["calibration"] = {"fitted": fitted, "points": points,
                                   "quick_points": [p for p in points
                                                    if point_workload(p) in quick]}
        recorded = scratch / "recorded.toml"
        write_profile(current, new, {}, recorded)
        derived = derive_text(recorded.read_text(encoding="utf-8"), new.get)
        recorded.write_text(derived, encoding="utf-8")
        for name, (_, note) in DERIVED.items():
            echo(f"      derived: {name} = {load_profile(str(recorded)).get(name):.6g} ({note})")
        current = recorded
        n_points = len(points)
        before = {p: float(load_profile(str(step1)).get(p)) for p in params}
        after = {p: float(new.get(p)) for p in params}
        seconds = time.perf_counter() - t0
        echo(f"[8/8] writing {out}")
        table = source_table(host, sysfs, stages, rows, fitted, reasons,
                             measured_dir if tlb_measured else None, measured_dir,
                             measured_dir if trim_measured else None)
        final = _with_header(_with_sources(Path(current).read_text(encoding="utf-8"), table),
                             _header(Path(out).stem, base, host, measured_dir, fitted,
                                     n_points, seconds))
        validate(tomllib.loads(final), out)
        atomic_write(out, final)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for p in params:
        why = reasons.get(p, "the points do not ask for another value")
        echo(f"      {p}: {before[p]:.6g} -> {after[p]:.6g}"
             f"{'' if p in fitted else f' (kept: {why})'}")
    echo(f"done in {seconds:.0f} s: {out} (compare with `sim compare --measured "
         f"{measured_dir} --profile {out}`)")
    return {"host": host, "before": before, "after": after, "points": n_points,
            "fitted": fitted, "kept": reasons, "seconds": seconds, "measured": str(measured_dir)}


#: the subdirectory of the measured dir that holds the sweep-scan probe's ``tlb`` output
TLB_DIR = "tlb"


def _probe_binary(name=None) -> Path:
    """The built probe binary (``burn-probes``, or ``name`` beside it); one error where it
    is missing."""
    from .measure import binary_path

    binary = binary_path() if name is None else binary_path().with_name(name)
    if not binary.is_file():
        raise UserError(f"{binary} is missing (cargo build --release in experiments/probes)")
    return binary


def _run_probe(binary, args, env=None):
    """``binary args`` run to its end, its output captured (``subprocess.CompletedProcess``);
    one error where it cannot be started."""
    import subprocess

    try:
        return subprocess.run([str(binary), *args], capture_output=True, text=True, env=env,
                              check=False)
    except OSError as exc:
        raise UserError(f"cannot run {binary} ({exc.strerror})") from None


def _last_line(stderr) -> str:
    """The last line a failed probe said, for its one error line."""
    return (stderr.strip().splitlines() or ["no output"])[-1]


def _mechanism_csv(binary, args, marker, cpu_time, echo, then=""):
    """``binary mechanism-cost ARGS --out CSV`` (``cpu_time``: the thread's CPU clock) run
    into a temporary file; the CSV's text, or None (saying why in one line, ``then`` after
    it) where the probe failed or its rows lack ``marker`` (a build without the variant)."""
    import os

    env = {**os.environ, **({"PROBE_CPU_TIME": "1"} if cpu_time else {})}
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = Path(tmp) / "rows.csv"
        done = _run_probe(binary, ["mechanism-cost", *args, "--out", str(csv_path)], env)
        text = csv_path.read_text(encoding="utf-8") if csv_path.is_file() else ""
    if done.returncode != 0 or marker not in text:
        echo(f"      mechanism-cost {' '.join(args)} did not run (exit {done.returncode}: "
             f"{_last_line(done.stderr)}){then}")
        return None
    return text


def _this_host() -> str:
    """This host in one phrase (:func:`sim.platform.host.describe`), or "" where it cannot
    be read: the host a probe's rows are written with."""
    try:
        return describe(read_host())
    except (OSError, ValueError):
        return ""


def measure_tlb(directory, echo=_echo) -> bool:
    """Run ``sweep-scan tlb`` (built with the probes, ``experiments/probes/cache-bw``) on this
    host: its CSV rows to ``directory/tlb.csv``, its stderr (the host, cpuid's TLB line) to
    ``directory/tlb.stderr``, both written whole or not at all. Returns whether the probe
    named a data TLB (cpuid 0x80000006: x86_64); takes ~4 minutes of CPU."""
    from ..analysis.tlb import parse_cpuid_line

    done = _run_probe(_probe_binary("sweep-scan"), ["tlb"])
    if done.returncode != 0:
        raise UserError(f"sweep-scan tlb failed (exit {done.returncode}): "
                        f"{_last_line(done.stderr)}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write(directory / "tlb.stderr", done.stderr)
    atomic_write(directory / "tlb.csv", done.stdout)
    return parse_cpuid_line(done.stderr) is not None


def _with_tlb(profile_path, tlb_dir, out_path, reuse, echo):
    """``profile_path`` with the data TLB of the sweep-scan probe's output in ``tlb_dir``
    (:func:`measure_tlb`, run unless ``reuse`` and the output is there), written to
    ``out_path`` (returned); ``profile_path`` as it is where the probe names no TLB."""
    from ..analysis.tlb import parse_cpuid_line
    from .calibrate import calibrate_tlb

    tlb_dir = Path(tlb_dir)
    if reuse and (tlb_dir / "tlb.csv").is_file() and (tlb_dir / "tlb.stderr").is_file():
        echo(f"      reusing {tlb_dir}")
        named = parse_cpuid_line((tlb_dir / "tlb.stderr").read_text(encoding="utf-8")) \
            is not None
    else:
        named = measure_tlb(tlb_dir, echo)
    if not named:
        echo("      no data TLB named (cpuid 0x80000006 is x86_64's): the base's TLB kept")
        return profile_path
    calibrate_tlb(str(profile_path), tlb_dir, out=str(out_path), force=True,
                  echo=lambda m: m.strip() and echo(f"      {m.strip()}"))
    return out_path


#: the subdirectory of the measured dir that holds the train-validate probe's PROBE_PARTS rows
PARTS_DIR = "parts"
#: processes of each train-validate variant :func:`measure_parts` runs
PARTS_RUNS = 10


def measure_parts(directory, runs=PARTS_RUNS, echo=_echo) -> Path:
    """Run the train-validate probe (quick, one training step) ``runs`` times per variant
    with ``PROBE_PARTS=1`` and keep every process's ``PART`` lines as
    ``directory/parts.csv`` (:func:`sim.analysis.parts.parts_csv`, with this host), written
    whole or not at all; returns its path. Each process takes well under a second; nothing
    is timed."""
    import os

    from ..analysis.parts import PARTS_FILE, parse_part_lines, parts_csv

    binary = _probe_binary()
    env = {**os.environ, "PROBE_PARTS": "1"}
    processes = []
    for _ in range(runs):
        for variant in ("plain", "autodiff", "valid-model"):
            done = _run_probe(binary, ["train-validate", "--quick", "--steps", "1",
                                       "--variant", variant, "--child"], env)
            parts = parse_part_lines(done.stderr)
            if done.returncode != 0 or not parts:
                raise UserError(f"train-validate --variant {variant} with PROBE_PARTS failed "
                                f"(exit {done.returncode}): {_last_line(done.stderr)}")
            processes.append((variant, parts))
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write(directory / PARTS_FILE, parts_csv(processes, _this_host()))
    echo(f"      {len(processes)} processes -> {directory / PARTS_FILE}")
    return directory / PARTS_FILE


def _with_parts(profile_path, parts_dir, out_path, reuse, echo):
    """``profile_path`` with the process's start and a single-row forward's text from the
    PROBE_PARTS rows in ``parts_dir`` (:func:`measure_parts`, run unless ``reuse`` and the
    rows are there), written to ``out_path`` (returned)."""
    from ..analysis.parts import PARTS_FILE
    from .calibrate import calibrate_parts

    parts_dir = Path(parts_dir)
    if reuse and (parts_dir / PARTS_FILE).is_file():
        echo(f"      reusing {parts_dir}")
    else:
        measure_parts(parts_dir, echo=echo)
    calibrate_parts(str(profile_path), parts_dir, out=str(out_path), force=True,
                    echo=lambda m: m.strip() and echo(f"      {m.strip()}"))
    return out_path


#: the CSVs of the measured dir that hold mechanism-cost leak-replay's, report-wake's,
#: gen-window's and leak-fault's rows (variants the probe runs only when named, so not
#: among ``sim measure --quick``'s)
LEAK_FILE = "mechanism-cost-leak-replay.csv"
WAKE_FILE = "mechanism-cost-report-wake.csv"
GEN_FILE = "mechanism-cost-gen-window.csv"
FAULT_FILE = "mechanism-cost-leak-fault.csv"
#: variant -> (its CSV in the measured dir, a phase its rows must hold, the parameter its
#: FIT_PLAN stage fits: the base's value is kept where the probe does not run it; leak-fault's
#: rows join the register stage, which its op-cost rows fit without them)
NAMED_VARIANTS = {"leak-replay": (LEAK_FILE, "beyond-faults", "heap_page_write_ns"),
                  "report-wake": (WAKE_FILE, "report-minus-bare", "report_wake_ns"),
                  "gen-window": (GEN_FILE, "lift/lift", "lift_ns"),
                  "leak-fault": (FAULT_FILE, "reused", "register_ns")}


def measure_named(directory, variant, cpu_time=False, echo=_echo) -> bool:
    """Run ``burn-probes mechanism-cost --quick --variant VARIANT`` (one of
    :data:`NAMED_VARIANTS`; each under a second; ``cpu_time``: the thread's CPU clock) into
    its CSV in ``directory``, written whole or not at all, for the fit's stage of its
    parameter. Returns False, writing nothing, where the probe does not run it (a build
    without the variant: the stage is left out and the base's value kept)."""
    name, marker, param = NAMED_VARIANTS[variant]
    # --quick marks the rows as the quick run's (the variants' loop counts are not cut:
    # the plan's x values), as mechanism-cost's others beside them
    text = _mechanism_csv(_probe_binary(), ["--quick", "--variant", variant], marker,
                          cpu_time, echo, then=f": {param} fitted without its rows (the base's value where it has no others)")
    if text is None:
        return False
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write(directory / name, text)
    echo(f"      mechanism-cost {variant} -> {directory / name}")
    return True


#: the subdirectory of the measured dir that holds mechanism-cost heap-refault's rows
TRIM_DIR = "trim"
#: fresh processes of ``mechanism-cost --variant heap-refault`` :func:`measure_trim` runs
TRIM_RUNS = 3


def measure_trim(directory, runs=TRIM_RUNS, cpu_time=False, echo=_echo) -> bool:
    """Run ``burn-probes mechanism-cost --variant heap-refault`` ``runs`` times (a second
    each; ``cpu_time``: the thread's CPU clock) into ``directory/heap-refault-N.csv`` and
    the host into ``directory/host.txt``. Returns False, writing nothing, where the probe
    does not run (a build without the variant)."""
    from .calibrate import HOST_FILE

    binary = _probe_binary()
    outputs = []
    for _ in range(runs):
        text = _mechanism_csv(binary, ["--variant", "heap-refault"], "brk-per-trim",
                              cpu_time, echo)
        if text is None:
            return False
        outputs.append(text)
    host = _this_host()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for k, text in enumerate(outputs, 1):
        atomic_write(directory / f"heap-refault-{k}.csv", text)
    atomic_write(directory / HOST_FILE, host + "\n")
    echo(f"      {runs} processes -> {directory}")
    return True


def _with_trim(profile_path, trim_dir, out_path, reuse, cpu_time, echo):
    """``profile_path`` with the trim's cost from mechanism-cost heap-refault's rows in
    ``trim_dir`` (:func:`measure_trim`, run unless ``reuse`` and the rows are there),
    written to ``out_path`` (returned); ``profile_path`` as it is (the base's, 0: trims not
    charged) where the probe did not run."""
    from .calibrate import calibrate_trim

    trim_dir = Path(trim_dir)
    if reuse and any(trim_dir.glob("*.csv")):
        echo(f"      reusing {trim_dir}")
    elif not measure_trim(trim_dir, cpu_time=cpu_time, echo=echo):
        echo("      the base's trim costs kept (trims not charged)")
        return profile_path
    calibrate_trim(str(profile_path), trim_dir, out=str(out_path), force=True,
                   echo=lambda m: m.strip() and echo(f"      {m.strip()}"))
    return out_path


def plan_stages(rows, plan=FIT_PLAN):
    """The stages of ``plan`` whose points ``rows`` has: ``(stages, skipped)``, each stage
    a list of ``(parameter, selectors)`` (selectors with no measured point left out; a
    parameter with no points of its own is fitted on its stage's points); ``skipped``:
    parameter -> why not fitted (none of its stage's points measured)."""
    stages, skipped = [], {}
    for stage in plan:
        kept = [(param, [p for p in points if _matches(rows, p)]) for param, points in stage]
        if not any(points for _, points in kept):
            for param, _ in stage:
                skipped[param] = "none of its points measured"
            continue
        stages.append(kept)
    return stages, skipped


#: the staged fit is repeated from its own result (a later stage's parameter changes what
#: an earlier stage's points ask for: ``gbps`` the bytes of a matrix-vector gemm, the
#: tracked ops' parameters a backward's forward) until no parameter moves more than
#: :data:`SETTLED` (relative) in a pass, at most :data:`MAX_PASSES` passes
SETTLED = 0.02
MAX_PASSES = 4


def _timed(name) -> bool:
    """Whether ``name`` is a time parameter (``[time]``, or a rate or cost of a
    ``[backend.<kind>]`` table), not a size (``[code]``'s resident text)."""
    return name.startswith(("time.", "backend."))


def _largest_change(params, old, new) -> tuple:
    """``(parameter, relative change)`` of the parameter ``params`` that moved most from
    ``old`` to ``new`` (name -> value; relative to 1 at least: a cost the points want at
    ~0 ns jitters there).

    >>> _largest_change(["a", "b"], {"a": 100.0, "b": 0.0}.get, {"a": 103.0, "b": 0.01}.get)
    ('a', 0.03)
    """
    def rel(p):
        a, b = float(old(p)), float(new(p))
        return abs(b - a) / max(abs(a), 1.0)
    worst = max(params, key=rel, default=None)
    return (worst, round(rel(worst), 12)) if worst else ("nothing", 0.0)


def _fit_stage(rows, base_path, stage, out_path, fresh, jobs, sink, echo, sources,
               reasons=None):
    """Fit one stage's parameters (:func:`sim.commands.calibrate.calibrate`) on their points, from
    the profile at ``base_path``; write the result to ``out_path`` with only the parameters
    the fit moved substituted and recorded (a parameter refused by the fit, or kept where
    it is, stays the base's, with its base label). Returns ``out_path``."""
    from .calibrate import _base_text, _with, calibrate, select_points, write_profile
    params = [p for p, _ in stage]
    selectors = [q for _, pts in stage for q in pts]
    stage_rows = select_points(rows, selectors)
    base = load_profile(str(base_path))
    say = (lambda line: print(line, file=sink, flush=True)) if sink else (lambda line: None)
    after = []
    while params:
        try:
            new, after = calibrate(stage_rows, base, params, selectors, out=None, jobs=jobs,
                                   echo=say, fresh=fresh, max_iterations=4, progress=True,
                                   sources=sources, warn=say,
                                   additive=[p for p in params if p.endswith("_ns")])
        except UserError as exc:
            refused = next((p for p in params if str(exc).startswith(f"--fit {p}:")), None)
            if refused is None:
                raise
            echo(f"      not fitted: {str(exc)[len('--fit '):]}")
            if reasons is not None:
                reasons[refused] = "refused by the fit: " + str(exc).split(": ", 1)[1]
            params.remove(refused)
            continue
        break
    predicted = {e["point"]: (e["predicted"], e["measured"]) for e in after}
    if not params:
        out_path.write_text(_base_text(base), encoding="utf-8")
        return out_path, None
    bounded = {p: new.get(UPPER_BOUNDS[p][0]) for p in params
               if p in UPPER_BOUNDS and new.get(p) > new.get(UPPER_BOUNDS[p][0])}
    for p, bound in bounded.items():
        echo(f"      bounded: {p} {new.get(p):.6g} -> {bound:.6g} (<= {UPPER_BOUNDS[p][0]}: "
             f"{UPPER_BOUNDS[p][1]})")
    if bounded:
        new = _with(new, bounded)
        predicted = None      # the stage's fit is no longer what the profile predicts
    moved = {p: new.get(p) for p in params if new.get(p) != base.get(p)}
    record = new.data["calibration"]
    record["fitted"] = [p for p in record["fitted"] if p not in set(params) - set(moved)]
    write_profile(base.path, new, moved, out_path, base_text=_base_text(base))
    return out_path, predicted


def _still_fitted(rows, stage, profile_path, predicted, jobs) -> bool:
    """Whether the points of ``stage`` are predicted by the profile at ``profile_path``
    within :data:`SETTLED` (of each measured value) of ``predicted`` (point -> (predicted,
    measured) when the stage was last fitted): one simulation of its cells instead of a
    fit (the later stages moved nothing its points see)."""
    from .calibrate import measured_policy, run_cells, select_points
    from ..analysis.compare import cells_for, join, quick_params
    if not predicted:
        return False
    stage_rows = select_points(rows, [q for _, pts in stage for q in pts])
    policy = measured_policy(stage_rows)
    now = join(stage_rows, run_cells(cells_for(stage_rows, policy), load_profile(str(
        profile_path)), jobs, quick_params(stage_rows)), policy=policy)
    for e in now:
        then = predicted.get(e["point"])
        if then is None or not abs(e["predicted"] - then[0]) <= SETTLED * abs(then[1]):
            return False
    return True


def _matches(rows, selector) -> bool:
    from .calibrate import select_points
    try:
        return bool(select_points(rows, [selector]))
    except UserError:
        return False
