-- tachy for Neovim 0.11+: the language server's agent, search and edit review.
--
--   require('tachy').setup{ cmd = '/path/to/tachy', policy = 'openai:http://localhost:8000/v1#MODEL' }
--
-- See :help tachy.
local M = {}

--- Configure and enable the tachy language server (vim.lsp.config + vim.lsp.enable).
--- opts: cmd, policy, approval, sandbox, allowSecrets, maxTurns, index (server
--- settings), keymaps, chat, search, diagnostics (plugin options; :help tachy-setup),
--- enable (false: configure only). These options are the only place the command and
--- the settings come from: nothing in a project is read (:help tachy-trust).
function M.setup(opts)
  opts = opts or {}
  local config = require("tachy.config")
  config.set(opts)
  vim.lsp.config("tachy", {
    cmd = config.cmd(),
    init_options = config.init_options(),
  })
  if opts.enable ~= false then
    vim.lsp.enable("tachy")
  end
end

--- The handlers of tachy's server-to-client notifications (used by lsp/tachy.lua).
function M.handlers()
  local util = require("tachy.util")
  return {
    [util.method("agent/event")] = util.main(function(...)
      require("tachy.chat").on_event(...)
    end),
    [util.method("review/propose")] = util.main(function(...)
      require("tachy.review").on_propose(...)
    end),
  }
end

--- For the statusline: "tachy: agent (grep) · 1 edit to review · index ready".
--- vim.o.statusline = "%f %m%=%{v:lua.require'tachy'.statusline()} %l:%c"
function M.statusline()
  return require("tachy.status").statusline()
end

-- The commands' work, callable from Lua.
function M.search(query, opts)
  return require("tachy.search").run(query, opts)
end

function M.agent(prompt, opts)
  return require("tachy.chat").start(prompt, opts)
end

function M.cancel(session_id)
  return require("tachy.chat").cancel(session_id)
end

function M.accept(id)
  return require("tachy.review").command(true, id, false)
end

function M.reject(id)
  return require("tachy.review").command(false, id, false)
end

return M
