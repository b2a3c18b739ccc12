"""The compiler back end (shipped as ``ustc.codegen``): iteration graph, merge
lattices, loop IR, lowering and per-target emitters."""
