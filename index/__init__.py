"""The semantic codebase index: "where is the code that does X?".

- `ignore`    which files exist for tachy at all (.gitignore, .tachyignore, secrets)
- `chunker`   tree-sitter chunks (functions, classes, methods; cAST split/merge)
- `tokenize`  the code-aware tokenizer of the lexical index
- `lexical`   SQLite FTS5 full-text index over chunks
- `embedder`  the Embedder interface, the choice of model, and the bundled MiniLM
- `static_embedder`  tachy's own static code model (the default embedder)
- `vectors`   the faiss vector store (add/remove by id, flat or IVF, delta + tombstones)
- `scan`      change detection: a Merkle tree of the workspace
- `indexer`   CodeIndex: ties them together, persisted under .tachy/index/
- `search`    hybrid ranking: lexical and dense scores and what a chunk's name means
- `errors`    the index's exceptions (light enough for the agent's tools to import)

`index` imports nothing from `agent` or `server` (DESIGN.md layering), and nothing
heavy (torch, faiss) at import time: those load when dense indexing starts.
"""
