-- :checkhealth tachy
local M = {}

function M.check()
  local health = vim.health
  local config = require("tachy.config")
  local util = require("tachy.util")

  health.start("tachy: editor")
  local v = vim.version()
  local version = ("%d.%d.%d"):format(v.major, v.minor, v.patch)
  if vim.fn.has("nvim-0.11") == 1 then
    health.ok("Neovim " .. version)
  else
    health.error("Neovim " .. version .. ": tachy needs Neovim 0.11 or newer")
  end

  health.start("tachy: server executable")
  local server = config.server()
  local path = server.path
  if server.error then
    health.error(server.error, {
      "Install tachy (scripts/setup puts it in .venv/bin/tachy)",
      "and point the plugin at it with an absolute path: require('tachy').setup{ cmd = '/path/to/tachy' } or vim.g.tachy_cmd",
    })
  else
    local allowed, why = config.allowed(util.root_dir(vim.api.nvim_get_current_buf()))
    if not allowed then
      -- Not run here either, not even with --help.
      health.error(("%s (from %s) is not started: %s"):format(path, server.source, why), {
        "the agent's commands can write the project: give the path of the tachy you mean to setup{ cmd = ... }",
      })
      path = nil
    else
      health.ok(("executable: %s (from %s)"):format(path, server.source))
    end
  end
  if path then
    local ok, done = pcall(function()
      return vim.system({ path, "--help" }, { text = true }):wait(15000)
    end)
    if ok and done.code == 0 then
      health.ok("`" .. path .. " --help` runs")
    else
      local why = ok and (done.stderr ~= "" and done.stderr or ("exit code " .. tostring(done.code))) or tostring(done)
      health.error("`" .. path .. " --help` failed: " .. vim.trim(why))
    end
  end

  health.start("tachy: what is trusted")
  health.ok(
    "the command and the settings come only from your own config (setup(), g:tachy_cmd, PATH outside the project); no file in the project is read"
  )
  local settings = config.init_options()
  local function shown(key, default)
    local value = settings[key]
    return ("%s=%s"):format(key, value == nil and (default .. " (server default)") or tostring(value))
  end
  health.info(
    "settings from setup(): "
      .. table.concat({ shown("approval", "review"), shown("sandbox", "auto"), shown("allowSecrets", "false") }, ", ")
  )
  if vim.o.exrc then
    health.warn("'exrc' is on: a project's .nvim.lua or .exrc, once you :trust it, runs as your own config", {
      "it can change tachy's command and settings like any of your config; trust only projects you would run code from",
    })
  end

  health.start("tachy: language server")
  local clients = util.clients()
  if #clients == 0 then
    health.warn("no tachy client is running", {
      "call require('tachy').setup{} (or vim.lsp.enable('tachy')) and open a file",
    })
    return
  end
  for _, client in ipairs(clients) do
    local bufs = vim.tbl_keys(client.attached_buffers or {})
    health.ok(("client %d attached to %d buffer(s), root %s"):format(client.id, #bufs, client.root_dir or "(none)"))
    health.ok(("client %d runs %s"):format(client.id, config.describe(client.config.cmd)))
    local review = vim.tbl_get(client.capabilities or {}, "experimental", "tachy", "review")
    if review then
      health.ok("edit review in Neovim (experimental capability tachy.review)")
    else
      health.warn("the client does not declare tachy.review: edits are asked about with plain messages")
    end
    local reply = client:request_sync(util.method("index/status"), {}, 5000)
    if not reply then
      health.warn("index status: no answer within 5 s")
    elseif reply.err then
      health.error("index status: " .. (reply.err.message or vim.inspect(reply.err)))
    else
      local r = reply.result
      local line = ("index %s: %d files, %d chunks, %d embedded"):format(r.state, r.files, r.chunks, r.embedded)
      if r.state == "failed" then
        local errors = {}
        for _, f in ipairs(r.folders or {}) do
          if f.error and f.error ~= "" then
            table.insert(errors, f.uri .. ": " .. f.error)
          end
        end
        health.error(line, errors)
      elseif r.state == "ready" or r.state == "lexical" or r.state == "disabled" then
        health.ok(line)
      else
        health.info(line)
      end
    end
  end
end

return M
