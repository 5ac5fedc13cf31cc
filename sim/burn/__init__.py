"""Mirror of burn 0.22.1: burn-autodiff's bookkeeping, one module per Rust file, and the
burn API workloads are written against.

==============================  =====================================================
module                          burn 0.22.1
==============================  =====================================================
``runtime.graph``               burn-autodiff ``runtime/graph.rs`` (GraphLocator, Graph,
                                GraphMutexClient, GraphCleaner)
``runtime.server``              ``runtime/server.rs`` (AutodiffServer), ``grads.rs``
``runtime.memory_management``   ``runtime/memory_management.rs`` (GraphMemoryManagement)
``graph.node``                  ``graph/node.rs``, ``graph/requirement.rs``, ``tensor.rs``
                                (Node, NodeRefCount)
``graph.step``                  ``graph/base.rs``, ``ops/base.rs`` (steps)
``graph.traversal``             ``graph/traversal.rs`` (collect_steps)
``graph.runs``                  runs of identical dead nodes (fast-forward's compression)
``graph.settled``               the nodes a graph's last backward found useful (an index
                                that spares the next backward's passes the walk)
``ops``                         ``ops/base.rs``, ``ops/tensor.rs``, ``ops/activation.rs``
                                (OpsPrep, finish)
``checkpoint``                  ``checkpoint/strategy.rs``, ``checkpoint/builder.rs``
``tensor``                      burn-tensor, burn-dispatch: the API workloads use
``nn``, ``optim``               burn-nn ``Linear``/``Relu``, burn-optim ``Sgd``/``Adam``
``backend``                     burn-flex's buffers, cubecl's pools, burn-backend's
                                device settings, gemm's per-call blocks
==============================  =====================================================

Imports nothing from the layers above it (policies, engine, analysis, output, commands).
"""
