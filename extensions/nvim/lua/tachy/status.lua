-- State for the statusline: the index (from tachy/index/status and $/progress) and
-- agent runs (from tachy.chat). require('tachy').statusline() renders it.
local util = require("tachy.util")

local M = {}

M.index = nil -- last tachy/index/status result
M.progress = {} -- progress token -> "title: message" while the server reports work

local function redraw()
  vim.schedule(function()
    pcall(vim.cmd, "redrawstatus")
  end)
end

function M.changed()
  redraw()
end

local asked, applied = 0, 0
local polling = false
local TRANSIENT = { starting = true, indexing = true }

--- Ask the server for the index state (asynchronously). Answers may come back out
--- of order: only the newest is kept. While the index is still being built, ask
--- again every second (servers do not report progress to every client).
function M.refresh(client)
  client = client or util.client()
  if not client then
    return
  end
  asked = asked + 1
  local mine = asked
  util.request(client, "index/status", {}, function(err, result)
    if err or not result or mine < applied then
      return
    end
    applied = mine
    M.index = result
    redraw()
    if TRANSIENT[result.state] and not polling then
      polling = true
      vim.defer_fn(function()
        polling = false
        if not client:is_stopped() then
          M.refresh(client)
        end
      end, 1000)
    end
  end)
end

local announced = {}

--- Say once per server what was started and where it came from (in :messages too),
--- so a user always knows which program runs outside the agent's sandbox.
function M.announce(client)
  if announced[client.id] then
    return
  end
  announced[client.id] = true
  M.started = require("tachy.config").describe(client.config.cmd)
  util.notify(("started %s for %s"):format(M.started, client.root_dir or "no folder"))
end

--- LspProgress autocmd: ev.data = { client_id, params = { token, value } }.
function M.on_progress(ev)
  local data = ev.data or {}
  local client = data.client_id and vim.lsp.get_client_by_id(data.client_id)
  if not client or client.name ~= util.name or type(data.params) ~= "table" then
    return
  end
  local token, value = data.params.token, data.params.value
  if type(value) ~= "table" then
    return
  end
  local key = tostring(token)
  if value.kind == "end" then
    local title = M.progress[key] and M.progress[key].title or ""
    M.progress[key] = nil
    if title:find("index") then
      M.refresh(client)
    end
  else
    local current = M.progress[key] or {}
    current.title = value.title or current.title or ""
    current.message = value.message or current.message
    M.progress[key] = current
  end
  redraw()
end

--- "tachy: agent (grep) · 1 edit to review · index ready", or "" without a client.
function M.statusline()
  if #util.clients() == 0 then
    return ""
  end
  local parts = {}
  local chat = require("tachy.chat")
  local running = chat.running_count()
  if running > 0 then
    local s = chat.current_running()
    local tool = s and s.last_tool and (" (" .. s.last_tool .. ")") or ""
    table.insert(parts, (running > 1 and ("%d agents"):format(running) or "agent") .. tool)
  end
  local pending = #require("tachy.review").pending()
  if pending > 0 then
    table.insert(parts, ("%d edit%s to review"):format(pending, pending == 1 and "" or "s"))
  end
  local indexing
  for _, p in pairs(M.progress) do
    if p.title and p.title:find("index") then
      indexing = p.message or "…"
    end
  end
  if indexing then
    table.insert(parts, "indexing " .. indexing)
  elseif M.index then
    table.insert(parts, "index " .. M.index.state)
  end
  return "tachy: " .. (#parts > 0 and table.concat(parts, " · ") or "idle")
end

return M
