-- The plugin's options (require('tachy').setup{...}) and what they become for the
-- language server: the command line and initializationOptions.
--
-- Only the user's own configuration counts. The server runs outside the agent's
-- sandbox and the agent's commands can write anything in the project, so nothing
-- the project holds (a .venv/bin/tachy, a config file, a `.` on PATH) picks the
-- command or a setting: the command is setup{cmd}, else g:tachy_cmd, else `tachy`
-- on PATH outside the project; the settings are setup()'s.
local M = {}

M.defaults = {
  -- The tachy executable (a string) or the whole command ({ "tachy", "serve" }):
  -- an absolute path (~ expands), or a name looked up on PATH. Default:
  -- vim.g.tachy_cmd, else `tachy` on PATH. See M.server for what is never used.
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

local function is_absolute(path)
  return path:sub(1, 1) == "/" or path:match("^%a:[/\\]") ~= nil or path:match("^[/\\][/\\]") ~= nil
end

--- `name` in the absolute directories of PATH. An empty or relative entry (".")
--- means the working directory, the project: it is not searched (an executable
--- given by name would otherwise be spawned from there).
function M.on_path(name)
  local win = vim.fn.has("win32") == 1
  for dir in vim.gsplit(vim.env.PATH or "", win and ";" or ":", { plain = true }) do
    if dir ~= "" and is_absolute(dir) then
      for _, candidate in ipairs(win and { name .. ".exe", name } or { name }) do
        local file = vim.fs.joinpath(dir, candidate)
        if vim.fn.executable(file) == 1 and vim.fn.isdirectory(file) == 0 then
          return vim.fs.normalize(file)
        end
      end
    end
  end
  return nil
end

-- Absolute path -> whether the latest resolution that gave it was a PATH lookup (the
-- guard in M.allowed applies to those), for the command vim.lsp.config holds.
local via_path = {}

--- Where the server comes from: { argv, path (absolute; nil when not found),
--- source ("setup({ cmd })", "g:tachy_cmd" or "PATH"), from_path (found by a PATH
--- lookup), error (why it cannot start) }.
function M.server()
  local given, source = M.options.cmd, "setup({ cmd })"
  if given == nil then
    given, source = vim.g.tachy_cmd, "g:tachy_cmd"
  end
  local argv
  if given == nil then
    argv, source = { "tachy", "serve" }, "PATH"
  elseif type(given) == "table" then
    argv = vim.deepcopy(given)
  else
    argv = { given, "serve" }
  end
  local name = argv[1]
  local found = { argv = argv, source = source }
  if type(name) ~= "string" or name == "" then
    found.error = "the tachy command is empty (" .. source .. ")"
  elseif not name:find("[/\\]") and not name:match("^~") then
    found.from_path = true
    if source ~= "PATH" then
      found.source = source .. " on PATH"
    end
    found.path = M.on_path(name)
    if found.path then
      argv[1] = found.path
    else
      found.error = name .. " not found on PATH"
    end
  else
    local file = vim.fs.normalize(name) -- expands ~
    if not is_absolute(file) then
      found.error = ("%s (%s) is a relative path, found from the working directory: the project; give an absolute path"):format(
        name,
        source
      )
    elseif vim.fn.executable(file) ~= 1 then
      argv[1] = file
      found.error = file .. " not found (" .. source .. ")"
    else
      argv[1] = file
      found.path = file
    end
  end
  if found.path then
    via_path[found.path] = found.from_path == true
  end
  return found
end

--- The executable (first word of the command).
function M.executable()
  return M.cmd()[1]
end

--- The server's command line, its executable resolved (see M.server).
function M.cmd()
  return M.server().argv
end

--- Whether `file` lies in `dir`, as written or with symlinks resolved.
function M.inside(file, dir)
  local function forms(path)
    local normal = vim.fs.normalize(path)
    return { normal, vim.uv.fs_realpath(normal) or normal }
  end
  for _, f in ipairs(forms(file)) do
    for _, d in ipairs(forms(dir)) do
      if f == d or f:sub(1, #d + 1) == d:gsub("/$", "") .. "/" then
        return true
      end
    end
  end
  return false
end

local told = {}
local function refuse(message)
  if not told[message] then
    told[message] = true
    vim.notify("tachy: " .. message, vim.log.levels.WARN)
  end
  return false, message
end

--- Whether the server may start for a buffer whose workspace folder is `root` (nil:
--- none); lsp/tachy.lua's root_dir asks before anything is spawned. It checks the
--- command that will run (vim.lsp.config's, which may be older than the options):
--- not when it cannot be found or is not an absolute path (the spawn would look it
--- up from the working directory, the project), nor when a PATH lookup led into the
--- project or the working directory (a shell with the project's venv activated).
--- Each refusal is said once; nothing is run. A path the user named is theirs.
--- Returns ok, and why not.
function M.allowed(root)
  local server = M.server()
  local configured = vim.tbl_get(vim.lsp.config, "tachy", "cmd")
  if type(configured) == "function" then
    return true -- the user's own RPC client (vim.lsp.config)
  end
  local exe = type(configured) == "table" and configured[1] or server.argv[1]
  if exe == server.argv[1] and server.error then
    return refuse(server.error .. "; the server is not started (:checkhealth tachy)")
  end
  if type(exe) ~= "string" or not is_absolute(exe) then
    return refuse(
      ("the command %s is not an absolute path: it would be looked up from the working directory, the project; give setup{ cmd = '/path/to/tachy' }"):format(
        vim.inspect(exe)
      )
    )
  end
  if vim.fn.executable(exe) ~= 1 then
    return refuse(exe .. " not found; the server is not started (:checkhealth tachy)")
  end
  if via_path[exe] then
    local dirs = { vim.fn.getcwd() } -- (ipairs would stop at a nil root)
    if root then
      table.insert(dirs, 1, root)
    end
    for _, dir in ipairs(dirs) do
      if M.inside(exe, dir) then
        return refuse(
          ("found %s on PATH inside the project %s; not started automatically: give cmd = %q to setup() to use it"):format(
            exe,
            dir,
            exe
          )
        )
      end
    end
  end
  return true
end

--- "/usr/bin/tachy serve (from PATH)": what a client runs, and where that came from.
function M.describe(cmd)
  if type(cmd) ~= "table" then
    return tostring(cmd) .. " (from vim.lsp.config)"
  end
  local server = M.server()
  local source = cmd[1] == server.argv[1] and server.source or "vim.lsp.config"
  return ("%s (from %s)"):format(table.concat(cmd, " "), source)
end

return M
