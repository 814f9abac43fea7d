-- The tachy language server for vim.lsp.enable("tachy") (Neovim 0.11+).
-- require('tachy').setup{...} overrides cmd and init_options from its options.
local config = require("tachy.config")

---@type vim.lsp.Config
return {
  cmd = config.cmd(),
  -- The folder indexed for a buffer: the nearest directory holding a root marker
  -- (.git), else the file's own directory (never ~ or /); see util.root_dir.
  root_dir = function(bufnr, on_dir)
    on_dir(require("tachy.util").root_dir(bufnr))
  end,
  init_options = config.init_options(),
  capabilities = {
    -- tachy/review/propose is shown here (inline diffs), not asked with messages.
    experimental = { tachy = { review = true } },
  },
  handlers = require("tachy").handlers(),
}
