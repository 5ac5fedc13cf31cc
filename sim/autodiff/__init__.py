"""Mirror of burn-autodiff 0.22.1's bookkeeping, one module per Rust file.

========================  =================================================
module                    burn-autodiff 0.22.1
========================  =================================================
``locator``               ``runtime/graph.rs`` (GraphLocator, Graph,
                          GraphMutexClient, GraphCleaner)
``server``                ``runtime/server.rs`` (AutodiffServer)
``memory``                ``runtime/memory_management.rs``
                          (GraphMemoryManagement)
``traversal``             ``graph/traversal.rs`` (collect_steps)
``node``                  ``graph/node.rs``, ``graph/requirement.rs``,
                          ``tensor.rs`` (Node, NodeRefCount)
``step``                  ``graph/base.rs``, ``ops/base.rs`` (steps)
``ops``                   ``ops/base.rs``, ``ops/tensor.rs``,
                          ``ops/activation.rs`` (float_op: prepare, finish)
``checkpoint``            ``checkpoint/strategy.rs``, ``checkpoint/builder.rs``
``op_facts``              one table of per-op facts (burn-autodiff's Backward
                          impls, burn-flex, PyTorch's ATen ops): every user
                          reads it
========================  =================================================

Not burn, and kept out of the mirrored bodies: ``runs`` (the compressed runs of
identical dead nodes fast-forward and compaction keep) and ``pass_blocks`` (the heap
blocks of ``free_unavailable_nodes``' passes, walked or counted as the allocator
needs). The mirror modules never ask which allocator runs: that is behind the heap's
interface (:class:`sim.costs.heap.Heap`) and those two modules.
"""
