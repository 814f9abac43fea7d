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
  local exe = config.executable()
  local path = vim.fn.exepath(exe)
  if path == "" then
    health.error(("%s not found"):format(exe), {
      "Install tachy (scripts/setup puts it in .venv/bin/tachy)",
      "or point the plugin at it: require('tachy').setup{ cmd = '/path/to/tachy' } or vim.g.tachy_cmd",
    })
  else
    health.ok("executable: " .. path)
    local ok, done = pcall(function()
      return vim.system({ path, "--help" }, { text = true }):wait(15000)
    end)
    if ok and done.code == 0 then
      health.ok("`" .. exe .. " --help` runs")
    else
      local why = ok and (done.stderr ~= "" and done.stderr or ("exit code " .. tostring(done.code))) or tostring(done)
      health.error("`" .. exe .. " --help` failed: " .. vim.trim(why))
    end
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
