-- The plugin's options (require('tachy').setup{...}) and what they become for the
-- language server: the command line and initializationOptions.
local M = {}

M.defaults = {
  -- The tachy executable (a string) or the whole command ({ "tachy", "serve" }).
  -- Default: vim.g.tachy_cmd, else `tachy` on PATH.
  cmd = nil,
  -- Server settings (README "Settings"); nil leaves the server's default.
  policy = nil,
  approval = nil, -- "review" | "auto"
  sandbox = nil, -- "auto" | "bubblewrap" | "none"
  allowSecrets = nil,
  maxTurns = nil,
  index = nil, -- { enabled = true, dense = true, embedder = "static", cacheDir = nil }
  -- A buffer's workspace folder: the nearest directory above it holding one of these;
  -- without one, the file's own directory.
  root_markers = { ".git" },
  -- Buffer-local keys while an edit proposal is shown in a buffer; false: none.
  keymaps = { accept = "ga", reject = "gr", next = "]p", prev = "[p" },
  chat = {
    open = "botright vsplit", -- an Ex command opening a window for the chat buffer
    focus = false, -- move the cursor into the chat window when a run starts
    max_result_lines = 30, -- a tool result longer than this is cut in the chat
    max_arg_lines = 20,
  },
  search = {
    limit = 20,
    picker = "select", -- "select": vim.ui.select to jump | "quickfix": :copen
  },
  diagnostics = {
    forward = true, -- send other servers' diagnostics to the agent's read_lints
    debounce_ms = 300,
  },
}

M.options = vim.deepcopy(M.defaults)

-- Setup keys that are server settings, with their wire names.
local SETTINGS = {
  policy = "policy",
  approval = "approval",
  sandbox = "sandbox",
  allowSecrets = "allowSecrets",
  allow_secrets = "allowSecrets",
  maxTurns = "maxTurns",
  max_turns = "maxTurns",
  index = "index",
}

function M.set(opts)
  opts = opts or {}
  if opts.keymaps == false then
    M.options = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), opts)
    M.options.keymaps = false
  else
    M.options = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), opts)
  end
  return M.options
end

--- initializationOptions for the server: the settings given to setup().
function M.init_options()
  local out = {}
  for key, wire in pairs(SETTINGS) do
    local value = M.options[key]
    if value ~= nil then
      if wire == "index" and type(value) == "table" then
        local index = {}
        for k, v in pairs(value) do
          index[k == "cache_dir" and "cacheDir" or k] = v
        end
        value = index
      end
      out[wire] = value
    end
  end
  return next(out) and out or vim.empty_dict()
end

--- The executable (first word of the command).
function M.executable()
  return M.cmd()[1]
end

--- The server's command line.
function M.cmd()
  local cmd = M.options.cmd or vim.g.tachy_cmd or "tachy"
  if type(cmd) == "table" then
    return vim.deepcopy(cmd)
  end
  return { cmd, "serve" }
end

return M
