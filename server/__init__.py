"""The tachy language server (server/lsp.py and its features) and the `tachy` command line."""
