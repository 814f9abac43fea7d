-- Forward the diagnostics of the editor's other sources (language servers,
-- linters) to tachy with tachy/diagnostics, so the agent's read_lints sees what the
-- user sees. Debounced per buffer; tachy's own diagnostics are not sent back.
local util = require("tachy.util")
local config = require("tachy.config")

local M = {}

local dirty = {} -- bufnr -> true, waiting for the timer
local timer = nil
local sent = {} -- uri -> true once something non-empty was sent

--- Namespaces that are tachy's own (its clients' LSP diagnostics).
local function own_namespaces()
  local own = {}
  for _, client in ipairs(util.clients()) do
    own[vim.lsp.diagnostic.get_namespace(client.id, false)] = true
    own[vim.lsp.diagnostic.get_namespace(client.id, true)] = true
  end
  return own
end

local function position(buf, row, col, encoding)
  local line = vim.api.nvim_buf_get_lines(buf, row, row + 1, false)[1]
  if line and encoding ~= "utf-8" and col > 0 then
    local ok, idx = pcall(vim.str_utfindex, line, encoding, math.min(col, #line), false)
    if ok and idx then
      col = idx
    end
  end
  return { line = row, character = col }
end

--- The LspDiagnostic list (tachy.protocol) for a buffer.
function M.collect(buf, encoding)
  local own = own_namespaces()
  local out = {}
  for _, d in ipairs(vim.diagnostic.get(buf)) do
    if not own[d.namespace] and d.source ~= "tachy" then
      local code = d.code
      if code == nil and d.user_data and d.user_data.lsp then
        code = d.user_data.lsp.code
      end
      if type(code) ~= "string" and type(code) ~= "number" then
        code = nil
      elseif type(code) == "number" and code ~= math.floor(code) then
        code = tostring(code)
      end
      table.insert(out, {
        range = {
          start = position(buf, d.lnum, d.col or 0, encoding),
          ["end"] = position(buf, d.end_lnum or d.lnum, d.end_col or d.col or 0, encoding),
        },
        message = d.message,
        severity = d.severity,
        code = code,
        source = d.source,
      })
    end
  end
  return out
end

local function flush()
  local bufs = dirty
  dirty = {}
  local clients = util.clients()
  if #clients == 0 then
    return
  end
  for buf in pairs(bufs) do
    if vim.api.nvim_buf_is_valid(buf) and vim.bo[buf].buftype == "" then
      local name = vim.api.nvim_buf_get_name(buf)
      if name ~= "" then
        local uri = vim.uri_from_bufnr(buf)
        for _, client in ipairs(clients) do
          local diagnostics = M.collect(buf, client.offset_encoding or "utf-16")
          if #diagnostics > 0 or sent[uri] then
            util.send(client, "diagnostics", { uri = uri, diagnostics = diagnostics })
            sent[uri] = #diagnostics > 0 or nil
          end
        end
      end
    end
  end
end

--- Note that a buffer's diagnostics changed; they are sent after a short pause.
function M.changed(buf)
  if not config.options.diagnostics.forward then
    return
  end
  dirty[buf] = true
  if not timer then
    timer = vim.uv.new_timer()
  end
  timer:stop()
  timer:start(config.options.diagnostics.debounce_ms, 0, vim.schedule_wrap(flush))
end

--- Send every buffer's diagnostics (a tachy client just attached).
function M.all()
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) and #vim.diagnostic.get(buf) > 0 then
      M.changed(buf)
    end
  end
end

--- True while changes wait to be sent.
function M.pending()
  return next(dirty) ~= nil
end

return M
