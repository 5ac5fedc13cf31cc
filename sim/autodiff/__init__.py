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
                          ``ops/activation.rs`` (OpsPrep, finish)
``checkpoint``            ``checkpoint/strategy.rs``, ``checkpoint/builder.rs``
========================  =================================================
"""
