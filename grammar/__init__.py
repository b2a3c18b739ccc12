"""The DSL grammars of ustc, as Lark files (shipped as ``ustc.grammar``)."""
