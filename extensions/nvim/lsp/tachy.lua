-- The tachy language server for vim.lsp.enable("tachy") (Neovim 0.11+).
-- require('tachy').setup{...} overrides cmd and init_options from its options.
local config = require("tachy.config")

---@type vim.lsp.Config
return {
  cmd = config.cmd(),
  root_markers = { ".git" },
  init_options = config.init_options(),
  capabilities = {
    -- tachy/review/propose is shown here (inline diffs), not asked with messages.
    experimental = { tachy = { review = true } },
  },
  handlers = require("tachy").handlers(),
}
