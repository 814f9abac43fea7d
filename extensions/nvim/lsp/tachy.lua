-- The tachy language server for vim.lsp.enable("tachy") (Neovim 0.11+).
-- require('tachy').setup{...} overrides cmd and init_options from its options.
local config = require("tachy.config")

---@type vim.lsp.Config
return {
  cmd = config.cmd(),
  -- The folder indexed for a buffer: the nearest directory holding a root marker
  -- (.git), else the file's own directory (never ~ or /); see util.root_dir. Asked
  -- before the server is spawned: without on_dir nothing starts, which is how a
  -- tachy found inside the project is kept from running (config.allowed).
  root_dir = function(bufnr, on_dir)
    local root = require("tachy.util").root_dir(bufnr)
    if config.allowed(root) then
      on_dir(root)
    end
  end,
  init_options = config.init_options(),
  capabilities = {
    -- tachy/review/propose is shown here (inline diffs), not asked with messages.
    experimental = { tachy = { review = true } },
  },
  handlers = require("tachy").handlers(),
}
